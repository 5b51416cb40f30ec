/* POST /v1/events: a JSON array of up to 1,000 CloudEvents.
 *
 * Each element goes through the ingest pipeline on its own
 * (include/tally/pipeline.h: the same decoding, validation and reasons as
 * `tally ingest` and the Kafka meter). Only ingest and admin keys get here
 * (an account key is 403 for the whole request, before anything is read). An
 * ingest key may only send events whose source starts with one of its
 * prefixes; others are answered "forbidden" (reason "source_not_allowed")
 * and are neither stored, produced nor quarantined. Elements that do not
 * decode are quarantined in the ledger with their reason (origin
 * "http:<request-id>:<index>"), in one transaction.
 *   - Without brokers, the decoded events go into that same transaction and
 *     each is answered accepted, duplicate, conflict or quarantined.
 *   - With brokers, the decoded events are produced to the topic keyed by
 *     account (idempotent producer) after the quarantine commit, and the
 *     request is answered when every delivery is reported: "produced", or
 *     "failed" (then the status is 503 and the client retries; dedupe by
 *     (source, id) makes a retry safe).
 * A bad element never costs the others: it is answered "quarantined" with
 * its reason and the rest are stored. The whole request fails (400/413)
 * only when the body is not one JSON array of at most 1,000 elements; then
 * nothing is stored. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_int.h"
#include "tally/pipeline.h"

static const char *const status_names[] = {
    [SRV_EV_ACCEPTED] = "accepted", [SRV_EV_DUPLICATE] = "duplicate",
    [SRV_EV_CONFLICT] = "conflict", [SRV_EV_QUARANTINED] = "quarantined",
    [SRV_EV_PRODUCED] = "produced", [SRV_EV_FORBIDDEN] = "forbidden",
    [SRV_EV_FAILED] = "failed",     [SRV_EV_PENDING] = "pending",
};

const char *srv_event_status_name(srv_event_status s)
{
    return (size_t)s < sizeof status_names / sizeof *status_names ? status_names[s] : "?";
}

static const srv_event_status from_ledger[] = {
    [TALLY_RESULT_ACCEPTED] = SRV_EV_ACCEPTED,
    [TALLY_RESULT_DUPLICATE] = SRV_EV_DUPLICATE,
    [TALLY_RESULT_CONFLICT] = SRV_EV_CONFLICT,
    [TALLY_RESULT_QUARANTINED] = SRV_EV_QUARANTINED,
};

static void events_free(srv_events_call *ec)
{
    free(ec->results);
    free(ec->deliveries);
    free(ec);
}

static tally_err result_json(tally_buf *b, size_t i, const srv_event_result *r)
{
    tally_err e = tally_buf_printf(b, "%s{\"index\":%zu", i ? "," : "", i);
    if (!e && r->id[0] && !(e = tally_buf_puts(b, ",\"id\":")))
        e = tally_buf_json_str(b, r->id);
    if (!e)
        e = tally_buf_printf(b, ",\"status\":\"%s\"", srv_event_status_name(r->status));
    if (!e && r->reason[0] && !(e = tally_buf_puts(b, ",\"reason\":")))
        e = tally_buf_json_str(b, r->reason);
    if (!e)
        e = tally_buf_puts(b, "}");
    return e;
}

void srv_events_answer(srv_events_call *ec)
{
    srv_call *c = ec->call;
    tally_buf *b = &c->resp.body;
    bool failed = false;
    tally_err e = tally_buf_printf(b, "{\"request_id\":\"%s\",\"results\":[", c->resp.request_id);
    for (size_t i = 0; i < ec->n && !e; i++) {
        failed |= ec->results[i].status == SRV_EV_FAILED;
        c->srv->metrics.events[ec->results[i].status]++;
        e = result_json(b, i, &ec->results[i]);
    }
    if (!e)
        e = tally_buf_puts(b, "]}\n");
    if (e)
        srv_fail_nomem(c);
    else
        srv_ok(c, failed ? 503 : 200, srv_type_json);
    events_free(ec);
    srv_finish(c);
}

static void origin_of(const srv_call *c, size_t i, char *out, size_t cap)
{
    snprintf(out, cap, "http:%s:%zu", c->resp.request_id, i);
}

/* Decodes element i and queues it (or its rejection) in p. Events are queued
 * only when direct; queued[*nq] records which element each queued item is. */
static tally_err decode_one(srv_call *c, const char *raw, size_t len, size_t i, int64_t now_s,
                            bool direct, tally_pipeline *p, srv_event_result *r, size_t *queued,
                            size_t *nq)
{
    tally_decoded d;
    char origin[96];
    origin_of(c, i, origin, sizeof origin);
    if (!tally_pipeline_decode(raw, len, now_s, &d)) {
        r->status = SRV_EV_QUARANTINED;
        snprintf(r->reason, sizeof r->reason, "%s", d.u.rej.reason);
        queued[(*nq)++] = i;
        return tally_pipeline_add_decoded(p, &d, raw, len, origin);
    }
    const tally_event *ev = &d.u.ev;
    snprintf(r->id, sizeof r->id, "%s", ev->id);
    snprintf(r->account, sizeof r->account, "%s", ev->account);
    /* The router lets only ingest and admin keys here (SRV_USAGE). */
    if (!c->who.admin &&
        !tally_apikey_source_allowed(c->who.sources, c->who.n_sources, ev->source)) {
        r->status = SRV_EV_FORBIDDEN;
        snprintf(r->reason, sizeof r->reason, "source_not_allowed");
        return TALLY_OK;
    }
    r->status = SRV_EV_PENDING;
    if (!direct)
        return TALLY_OK;
    queued[(*nq)++] = i;
    return tally_pipeline_add_decoded(p, &d, raw, len, origin);
}

/* Commits the pipeline's batch and turns the ledger's results into answers. */
static tally_err commit(srv_call *c, tally_pipeline *p, srv_events_call *ec, const size_t *queued,
                        size_t nq)
{
    tally_event_result *res = calloc(nq ? nq : 1, sizeof *res);
    if (!res)
        return TALLY_NOMEM;
    int64_t t0 = srv_now_us();
    tally_err e = tally_pipeline_commit(p, res);
    if (e == TALLY_OK)
        srv_histogram_observe(&c->srv->metrics.commit, srv_now_us() - t0);
    for (size_t k = 0; k < nq && e == TALLY_OK; k++) {
        srv_event_result *r = &ec->results[queued[k]];
        bool had_reason = r->reason[0] != '\0';
        r->status = from_ledger[res[k]];
        if (r->status == SRV_EV_CONFLICT)
            snprintf(r->reason, sizeof r->reason, "conflict");
        if (r->status == SRV_EV_QUARANTINED && !had_reason) { /* unknown_sku, no_price */
            char origin[96];
            origin_of(c, queued[k], origin, sizeof origin);
            e = tally_ledger_quarantine_reason(c->srv->ledger, origin, r->reason, sizeof r->reason);
            if (e == TALLY_NOT_FOUND)
                e = TALLY_OK;
        }
    }
    free(res);
    return e;
}

/* With brokers: produces every pending event; false if nothing is in flight. */
static bool produce_all(srv_call *c, srv_events_call *ec, const char *body, const srv_span *sp)
{
    for (size_t i = 0; i < ec->n; i++) {
        srv_event_result *r = &ec->results[i];
        if (r->status != SRV_EV_PENDING)
            continue;
        ec->deliveries[i] = (srv_delivery){ec, i};
        ec->pending++;
        if (srv_kafka_produce(c->srv->kafka, c->srv->topic, r->account, body + sp[i].off, sp[i].len,
                              &ec->deliveries[i]) != TALLY_OK) {
            ec->pending--;
            r->status = SRV_EV_FAILED;
            snprintf(r->reason, sizeof r->reason, "producer queue refused the event");
        }
    }
    return ec->pending > 0;
}

static srv_events_call *events_call_new(srv_call *c, size_t n)
{
    srv_events_call *ec = calloc(1, sizeof *ec);
    if (!ec)
        return NULL;
    ec->call = c;
    ec->n = n;
    ec->results = calloc(n ? n : 1, sizeof *ec->results);
    ec->deliveries = c->srv->kafka ? calloc(n ? n : 1, sizeof *ec->deliveries) : NULL;
    if (!ec->results || (c->srv->kafka && !ec->deliveries)) {
        events_free(ec);
        return NULL;
    }
    return ec;
}

/* Decodes, quarantines (and, direct, ingests) in one transaction. */
static tally_err ingest(srv_call *c, srv_events_call *ec, const srv_span *sp, size_t *queued)
{
    tally_pipeline *p = NULL;
    size_t nq = 0;
    bool direct = c->srv->kafka == NULL;
    int64_t now_s = tally_now_s();
    tally_err e = tally_pipeline_create(c->srv->ledger, 0, &p);
    if (e == TALLY_OK)
        tally_pipeline_set_key_id(p, c->who.key_id); /* quarantined rows say who sent them */
    for (size_t i = 0; i < ec->n && e == TALLY_OK; i++)
        e = decode_one(c, c->req->body + sp[i].off, sp[i].len, i, now_s, direct, p, &ec->results[i],
                       queued, &nq);
    if (e == TALLY_OK && nq > 0)
        e = commit(c, p, ec, queued, nq);
    tally_pipeline_destroy(p);
    return e;
}

srv_outcome srv_h_events(srv_call *c)
{
    const char *why = "";
    size_t n = 0;
    if (c->query && srv_query_parse(c->query, c->query_len, NULL, 0, &why) != TALLY_OK)
        return srv_fail(c, 400, "bad_query", "%s", why);
    srv_span *sp = malloc(TALLY_HTTP_MAX_EVENTS * sizeof *sp);
    size_t *queued = malloc(TALLY_HTTP_MAX_EVENTS * sizeof *queued);
    srv_events_call *ec = NULL;
    tally_err e = sp && queued ? TALLY_OK : TALLY_NOMEM;
    if (!e)
        e = srv_json_array_split(c->req->body ? c->req->body : "", c->req->body_len, sp,
                                 TALLY_HTTP_MAX_EVENTS, &n, &why);
    if (e == TALLY_PARSE || e == TALLY_TOO_LARGE) {
        srv_fail(c, e == TALLY_PARSE ? 400 : 413, e == TALLY_PARSE ? "bad_json" : "too_many_events",
                 "%s (want a JSON array of at most %d CloudEvents)", why, TALLY_HTTP_MAX_EVENTS);
        goto out;
    }
    int64_t wait_s =
        e ? 0 : srv_ratelimit_take(&c->srv->ingest_limit, c->who.key_id, (int64_t)n, srv_now_us());
    if (wait_s > 0) {
        c->srv->metrics.rate_limited++;
        c->resp.retry_after_s = wait_s;
        srv_fail(c, 429, "rate_limited",
                 "this key may send %lld events a second (bursts of %lld); retry in %lld s",
                 (long long)c->srv->ingest_limit.rate, (long long)c->srv->ingest_limit.burst,
                 (long long)wait_s);
        goto out;
    }
    if (!e && !(ec = events_call_new(c, n)))
        e = TALLY_NOMEM;
    if (!e)
        e = ingest(c, ec, sp, queued);
    if (e) {
        srv_fail_err(c, e, "storing the events");
        goto out;
    }
    if (c->srv->kafka && produce_all(c, ec, c->req->body, sp)) {
        free(sp);
        free(queued);
        return SRV_DEFERRED; /* the last delivery report answers */
    }
    srv_events_answer(ec); /* answers and frees c */
    free(sp);
    free(queued);
    return SRV_DEFERRED;
out:
    if (ec)
        events_free(ec);
    free(sp);
    free(queued);
    return SRV_ANSWERED;
}
