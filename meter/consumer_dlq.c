/* Dead-letter copies of quarantined messages, each sent once.
 *
 * The ledger's quarantine table is the record; the dead-letter topic gets a
 * copy of each quarantined message with headers tally-reason, tally-origin
 * ("kafka:<topic>/<partition>@<offset>", unique per message, so a reader can
 * drop repeats), tally-size and tally-sha256 (the original's length and
 * hash). A copy holds at most the first DLQ_VALUE_MAX bytes of the original
 * (with tally-truncated: true when cut), so an oversized poison message
 * cannot fail its copy on every start; a tombstone's copy is a tombstone.
 *
 * Copies are produced after the ledger commit that quarantined them (only
 * then is the reason known for every kind: unknown_sku, no_price and
 * conflict are found at commit). Once the broker acknowledges a copy, its
 * origin is recorded in the ledger's dlq_sent table; on assignment, the
 * partition's quarantine rows without that record are copied again (from
 * the ledger's bounded prefix, without the original key). A copy is
 * therefore sent again only if the meter dies between the acknowledgement
 * and that record, and a failed copy never holds back the Kafka offset. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meter_int.h"
#include "tally/log.h"
#include "tally/sign.h"

#define DLQ_RETRIES   50 /* x 100 ms while the producer's queue is full */
#define DLQ_FLUSH_MS  10000
#define DLQ_VALUE_MAX ((size_t)64 << 10) /* as much as a quarantine row keeps */
#define REASON_MAX    sizeof(((tally_reject *)0)->reason)

/* One copy to send: the original (or the ledger's prefix of it) and what
 * the headers say about the original. */
typedef struct dlq_copy {
    const void *key;
    size_t key_len;
    const void *raw; /* NULL: a tombstone */
    size_t len;      /* bytes at raw (at most the original's size) */
    size_t size;     /* the original's size */
    const char *sha256;
    const char *reason, *origin;
    void *slot; /* the delivery report's opaque (sent_slot) */
} dlq_copy;

static rd_kafka_resp_err_t produce_once(tally_consumer *c, const dlq_copy *d)
{
    char size[24];
    snprintf(size, sizeof size, "%zu", d->size);
    size_t len = d->len > DLQ_VALUE_MAX ? DLQ_VALUE_MAX : d->len;
    bool cut = len < d->size;
    return rd_kafka_producev(
        c->dlq, RD_KAFKA_V_TOPIC(c->dlq_topic), RD_KAFKA_V_KEY(d->key, d->key_len),
        RD_KAFKA_V_VALUE((void *)d->raw, d->raw ? len : 0),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_OPAQUE(d->slot),
        RD_KAFKA_V_HEADER("tally-reason", d->reason, -1),
        RD_KAFKA_V_HEADER("tally-origin", d->origin, -1), RD_KAFKA_V_HEADER("tally-size", size, -1),
        RD_KAFKA_V_HEADER("tally-sha256", d->sha256, -1),
        RD_KAFKA_V_HEADER("tally-truncated", cut ? "true" : "false", -1), RD_KAFKA_V_END);
}

static bool produce(tally_consumer *c, const dlq_copy *d)
{
    for (int tries = 0; tries < DLQ_RETRIES; tries++) {
        rd_kafka_resp_err_t err = produce_once(c, d);
        if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
            return true;
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            tally_log(TALLY_LOG_ERR, "meter", "dead-letter copy of %s failed: %s", d->origin,
                      rd_kafka_err2str(err));
            return false;
        }
        rd_kafka_poll(c->dlq, 100);
    }
    tally_log(TALLY_LOG_ERR, "meter", "dead-letter copy of %s failed: queue full", d->origin);
    return false;
}

/* Waits for every copy's delivery report. Copies still unconfirmed after
 * DLQ_FLUSH_MS are purged (reported as failed), so they stay unrecorded
 * and are sent again on the next assignment. */
static bool flush(tally_consumer *c)
{
    if (rd_kafka_flush(c->dlq, DLQ_FLUSH_MS) == RD_KAFKA_RESP_ERR_NO_ERROR && c->dlq_failures == 0)
        return true;
    (void)rd_kafka_purge(c->dlq, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    for (int i = 0; i < DLQ_RETRIES && rd_kafka_outq_len(c->dlq) > 0; i++)
        rd_kafka_poll(c->dlq, 100);
    tally_log(TALLY_LOG_WARNING, "meter",
              "dead-letter copies not confirmed; they will be sent on the next assignment");
    c->dlq_failures = 0;
    return false;
}

/* Delivery reports (served by rd_kafka_flush on the sending thread). */
static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    tally_consumer *c = opaque;
    (void)rk;
    uint64_t slot = (uint64_t)(uintptr_t)m->_private;
    if (m->err)
        c->dlq_failures++;
    else if ((uint32_t)(slot >> 32) == c->dlq_round && (slot & 0xffffffffu) < c->dlq_ok_cap)
        c->dlq_ok[slot & 0xffffffffu] = true; /* a report of an earlier round is ignored */
}

void dlq_configure(rd_kafka_conf_t *conf, tally_consumer *c)
{
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_opaque(conf, c);
}

/* ---- Recording deliveries --------------------------------------------------- */

/* Origins of copies in flight, recorded once delivered. Which were
 * delivered is kept by the consumer (c->dlq_ok, one round of copies at a
 * time), so a late delivery report never writes into freed memory. */
typedef struct sent_log {
    char (*origins)[ORIGIN_MAX];
    bool *delivered; /* c->dlq_ok, borrowed */
    int32_t *partition;
    size_t n, cap;
} sent_log;

static bool sent_reserve(tally_consumer *c, sent_log *s, size_t n)
{
    if (n > 0xffffffffu)
        return false;
    if (n > c->dlq_ok_cap) {
        bool *ok = realloc(c->dlq_ok, n * sizeof *ok);
        if (!ok)
            return false;
        c->dlq_ok = ok;
        c->dlq_ok_cap = n;
    }
    if (c->dlq_ok)
        memset(c->dlq_ok, 0, c->dlq_ok_cap * sizeof *c->dlq_ok);
    c->dlq_round++;
    s->origins = calloc(n ? n : 1, sizeof *s->origins);
    s->partition = calloc(n ? n : 1, sizeof *s->partition);
    s->delivered = c->dlq_ok;
    s->cap = n;
    return s->origins && s->partition;
}

/* The opaque of the copy at index i of the current round. */
static void *sent_slot(const tally_consumer *c, size_t i)
{
    return (void *)(uintptr_t)(((uint64_t)c->dlq_round << 32) | (uint64_t)i);
}

static void sent_free(sent_log *s)
{
    free(s->origins);
    free(s->partition);
    memset(s, 0, sizeof *s);
}

/* Records in the partition's ledger the delivered copies of that partition. */
static bool sent_record(tally_consumer *c, sent_log *s, int32_t partition)
{
    const char **list = calloc(s->n ? s->n : 1, sizeof *list);
    size_t n = 0;
    if (!list)
        return false;
    for (size_t i = 0; i < s->n; i++)
        if (s->delivered[i] && s->partition[i] == partition)
            list[n++] = s->origins[i];
    tally_ledger *l = shard_ledger_of(c, partition);
    tally_err e = tally_ledger_dlq_mark_sent(l, list, n);
    free(list);
    if (e)
        tally_log(TALLY_LOG_ERR, "meter",
                  "cannot record dead-letter deliveries (%s); they may be sent again",
                  tally_ledger_errmsg(l));
    return e == TALLY_OK;
}

/* Records every partition's delivered copies (each in its own ledger). */
static void sent_record_all(tally_consumer *c, sent_log *s)
{
    for (size_t i = 0; i < s->n; i++) {
        bool first = true;
        for (size_t j = 0; j < i && first; j++)
            first = s->partition[j] != s->partition[i];
        if (first)
            (void)sent_record(c, s, s->partition[i]);
    }
}

/* ---- Copies of a committed chunk ------------------------------------------------ */

/* The stored reason of a message quarantined at commit (unknown_sku,
 * no_price, ...), which only the ledger knows. */
static void stored_reason(tally_consumer *c, int32_t partition, const char *origin, char *reason)
{
    snprintf(reason, REASON_MAX, "quarantined");
    tally_ledger *l = shard_ledger_of(c, partition);
    tally_err e = tally_ledger_quarantine_reason(l, origin, reason, REASON_MAX);
    if (e == TALLY_NOT_FOUND)
        snprintf(reason, REASON_MAX, "quarantined");
    else if (e)
        tally_log(TALLY_LOG_ERR, "meter", "cannot read the quarantine reason of %s: %s", origin,
                  tally_ledger_errmsg(l));
}

static void item_reason(tally_consumer *c, const item *it, tally_event_result r, const char *origin,
                        char *reason)
{
    if (r == TALLY_RESULT_CONFLICT)
        snprintf(reason, REASON_MAX, "conflict");
    else if (!it->d.is_event)
        snprintf(reason, REASON_MAX, "%s", it->d.u.rej.reason);
    else
        stored_reason(c, it->partition, origin, reason);
}

static bool quarantined(tally_event_result r)
{
    return r == TALLY_RESULT_QUARANTINED || r == TALLY_RESULT_CONFLICT;
}

void dlq_chunk(tally_consumer *c, chunk *k)
{
    char reason[REASON_MAX], sha[65];
    bool ok = true;
    size_t n = 0;
    for (size_t i = 0; i < k->n; i++)
        n += quarantined(k->results[i]);
    sent_log s = {0};
    if (n == 0 || !sent_reserve(c, &s, n)) {
        sent_free(&s);
        k->dlq_failed = n > 0;
        return;
    }
    for (size_t i = 0; i < k->n; i++) {
        if (!quarantined(k->results[i]))
            continue;
        const item *it = &k->items[i];
        char *origin = s.origins[s.n];
        snprintf(origin, ORIGIN_MAX, "%s", k->arena + it->origin_off); /* as the batch had it */
        item_reason(c, it, k->results[i], origin, reason);
        const char *raw = k->arena + it->raw_off;
        tally_sha256_hex(raw, it->raw_len, sha);
        dlq_copy d = {.key = k->arena + it->key_off,
                      .key_len = it->key_len,
                      .raw = it->tombstone ? NULL : raw,
                      .len = it->raw_len,
                      .size = it->raw_len,
                      .sha256 = sha,
                      .reason = reason,
                      .origin = origin,
                      .slot = sent_slot(c, s.n)};
        s.partition[s.n++] = it->partition;
        if (produce(c, &d))
            k->dlq++;
        else
            ok = false;
    }
    if (!flush(c))
        ok = false;
    sent_record_all(c, &s);
    sent_free(&s);
    k->dlq_failed = !ok;
}

/* ---- Copies not recorded as delivered ------------------------------------------ */

typedef struct replay {
    tally_consumer *c;
    sent_log s;
    int64_t sent;
    bool ok;
} replay;

static tally_err replay_count(void *ctx, const tally_quarantine_row *q)
{
    (void)q;
    ((replay *)ctx)->s.cap++;
    return TALLY_OK;
}

static tally_err replay_row(void *ctx, const tally_quarantine_row *q)
{
    replay *r = ctx;
    if (r->s.n == r->s.cap) /* rows quarantined since the count: next time */
        return TALLY_OK;
    char *origin = r->s.origins[r->s.n];
    snprintf(origin, ORIGIN_MAX, "%s", q->origin);
    bool tomb = strcmp(q->reason, "tombstone") == 0;
    dlq_copy d = {.raw = tomb ? NULL : q->raw,
                  .len = q->raw_len,
                  .size = q->raw_size,
                  .sha256 = q->raw_sha256,
                  .reason = q->reason,
                  .origin = origin,
                  .slot = sent_slot(r->c, r->s.n)};
    r->s.n++;
    if (produce(r->c, &d))
        r->sent++;
    else
        r->ok = false;
    return TALLY_OK;
}

bool dlq_replay(tally_consumer *c, int32_t partition)
{
    char prefix[ORIGIN_MAX];
    snprintf(prefix, sizeof prefix, "kafka:%s/%d@", c->topic, (int)partition);
    replay r = {.c = c, .ok = true};
    tally_ledger *l = shard_ledger_of(c, partition);
    tally_err e = tally_ledger_dlq_unsent_each(l, prefix, replay_count, &r);
    size_t want = r.s.cap;
    if (!e && want > 0 && !sent_reserve(c, &r.s, want))
        e = TALLY_NOMEM;
    if (!e && want > 0)
        e = tally_ledger_dlq_unsent_each(l, prefix, replay_row, &r);
    if (e) {
        tally_log(TALLY_LOG_ERR, "meter", "cannot read quarantine for dead-letter replay: %s",
                  tally_ledger_errmsg(l));
        sent_free(&r.s);
        return false;
    }
    if (r.s.n > 0 && !flush(c))
        r.ok = false;
    for (size_t i = 0; i < r.s.n; i++)
        r.s.partition[i] = partition;
    if (r.s.n > 0)
        (void)sent_record(c, &r.s, partition);
    sent_free(&r.s);
    c->st.dlq += r.sent;
    return r.ok;
}
