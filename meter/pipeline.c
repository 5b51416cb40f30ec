/* The ingest pipeline (include/tally/pipeline.h): the one place where a
 * message becomes an event or a reject and is queued for the ledger. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tally/pipeline.h"

bool tally_pipeline_decode(const char *raw, size_t len, int64_t now_s, tally_decoded *out)
{
    /* The reject goes through a local: decoding writes into the event while
     * it works, and the two share storage in out. */
    tally_reject rej;
    out->is_event = tally_event_decode(raw, len, now_s, &out->u.ev, &rej) == TALLY_OK;
    if (!out->is_event)
        out->u.rej = rej;
    return out->is_event;
}

/* Which of tally_batch_add_event*: what the batch keeps of the caller's. */
typedef tally_err (*add_fn)(tally_batch *b, const tally_event *ev, const char *raw, size_t len,
                            const char *origin);

static tally_err queue(tally_batch *b, const tally_decoded *d, const char *raw, size_t len,
                       const char *origin, add_fn add)
{
    if (!d->is_event)
        return tally_batch_add_reject(b, &d->u.rej, raw, len, origin);
    tally_err e = add(b, &d->u.ev, raw, len, origin);
    /* The decoder only returns events the batch takes (event.h); if that
     * ever broke, the message is still kept, in quarantine. */
    if (e == TALLY_INVAL) {
        tally_reject rej = {.reason = "bad_event",
                            .detail = "the decoded event breaks the ledger's limits"};
        e = tally_batch_add_reject(b, &rej, raw, len, origin);
    }
    return e;
}

tally_err tally_pipeline_queue(tally_batch *b, const tally_decoded *d, const char *raw, size_t len,
                               const char *origin)
{
    return queue(b, d, raw, len, origin, tally_batch_add_event);
}

tally_err tally_pipeline_queue_ref(tally_batch *b, const tally_decoded *d, const char *raw,
                                   size_t len, const char *origin)
{
    return queue(b, d, raw, len, origin, tally_batch_add_event_ref);
}

struct tally_pipeline {
    tally_batch *b;
    size_t batch_max;
    tally_batch_stats total;
};

void tally_pipeline_set_key_id(tally_pipeline *p, int64_t key_id)
{
    tally_batch_set_key_id(p->b, key_id);
}

tally_err tally_pipeline_create(tally_ledger *l, size_t batch_max, tally_pipeline **out)
{
    *out = NULL;
    tally_pipeline *p = calloc(1, sizeof *p);
    if (!p)
        return TALLY_NOMEM;
    tally_err e = tally_batch_create(l, &p->b);
    if (e != TALLY_OK) {
        free(p);
        return e;
    }
    p->batch_max = batch_max;
    *out = p;
    return TALLY_OK;
}

void tally_pipeline_destroy(tally_pipeline *p)
{
    if (!p)
        return;
    tally_batch_destroy(p->b);
    free(p);
}

tally_err tally_pipeline_add(tally_pipeline *p, const char *raw, size_t len, const char *origin,
                             int64_t now_s, tally_decoded *d)
{
    tally_decoded scratch;
    if (!d)
        d = &scratch;
    (void)tally_pipeline_decode(raw, len, now_s, d);
    return tally_pipeline_queue(p->b, d, raw, len, origin);
}

tally_err tally_pipeline_add_line(tally_pipeline *p, const char *raw, size_t len,
                                  const char *origin_prefix, int64_t now_s)
{
    tally_batch_set_origin_hash(p->b, true);
    tally_err e = tally_pipeline_add(p, raw, len, origin_prefix, now_s, NULL);
    tally_batch_set_origin_hash(p->b, false);
    return e;
}

tally_err tally_pipeline_add_line_ref(tally_pipeline *p, const char *raw, size_t len,
                                      const char *origin_prefix, int64_t now_s)
{
    tally_decoded d;
    (void)tally_pipeline_decode(raw, len, now_s, &d);
    tally_batch_set_origin_hash(p->b, true);
    tally_err e = queue(p->b, &d, raw, len, origin_prefix, tally_batch_add_event_raw_ref);
    tally_batch_set_origin_hash(p->b, false);
    return e;
}

tally_err tally_pipeline_add_decoded(tally_pipeline *p, const tally_decoded *d, const char *raw,
                                     size_t len, const char *origin)
{
    return tally_pipeline_queue(p->b, d, raw, len, origin);
}

tally_err tally_pipeline_add_cut(tally_pipeline *p, const char *raw, size_t len, size_t whole_size,
                                 const char whole_sha256[65], const char *origin)
{
    tally_reject rej = {.reason = "too_large"};
    snprintf(rej.detail, sizeof rej.detail, "the message has %zu bytes; at most %d are allowed",
             whole_size, TALLY_EVENT_MAX_BYTES);
    return tally_batch_add_reject_cut(p->b, &rej, raw, len, whole_size, whole_sha256, origin);
}

size_t tally_pipeline_pending(const tally_pipeline *p)
{
    return tally_batch_count(p->b);
}

bool tally_pipeline_full(const tally_pipeline *p)
{
    return (p->batch_max > 0 && tally_batch_count(p->b) >= p->batch_max) ||
           tally_batch_bytes(p->b) >= TALLY_PIPELINE_FULL_BYTES;
}

tally_err tally_pipeline_commit(tally_pipeline *p, tally_event_result *results)
{
    tally_batch_stats st = {0};
    tally_err e = tally_batch_commit(p->b, &st, results);
    p->total.accepted += st.accepted;
    p->total.duplicates += st.duplicates;
    p->total.conflicts += st.conflicts;
    p->total.quarantined += st.quarantined;
    return e;
}

void tally_pipeline_totals(const tally_pipeline *p, tally_batch_stats *out)
{
    *out = p->total;
}
