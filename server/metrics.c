/* GET /healthz and GET /metrics (Prometheus text format 0.0.4).
 *
 * Both are public: they carry no tenant data (no account ids, only totals,
 * quarantine reasons, accounts per balance state, outbox events per type
 * and Kafka offset gaps by topic and partition). Quarantine and outbox
 * counts come from the ledger, counted incrementally by row id so a scrape
 * reads only rows added since the last one (and, for the outbox, the
 * pending rows). Times are integer microseconds written as decimal seconds;
 * nothing here uses floating point. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server_int.h"
#include "tally/balance.h"
#include "tally/outbox.h"

static const char type_prometheus[] = "text/plain; version=0.0.4; charset=utf-8";

/* Upper bounds of the latency buckets in microseconds; the last is +Inf. */
static const int64_t bucket_us[SRV_LATENCY_BUCKETS] = {500,     1000,    2500,    5000,     10000,
                                                       25000,   50000,   100000,  250000,   500000,
                                                       1000000, 2500000, 5000000, INT64_MAX};

#define MAX_REASONS        256
#define GAP_PARTITIONS_MAX 1024 /* partitions whose gaps are listed one by one */

/* The outbox types that get a label of their own; any other is "other", so
 * the series stay bounded whatever the table holds. */
static const char *const outbox_types[SRV_OUTBOX_TYPES - 1] = {
    TALLY_EVENT_INVOICE_FINALIZED, TALLY_EVENT_INVOICE_VOIDED,  TALLY_EVENT_CREDITNOTE_ISSUED,
    TALLY_EVENT_LEDGER_HEAD,       TALLY_EVENT_BALANCE_LOW,     TALLY_EVENT_BALANCE_EXHAUSTED,
    TALLY_EVENT_BALANCE_RECOVERED, TALLY_EVENT_ACCOUNT_SUSPEND, TALLY_EVENT_ACCOUNT_RESUME,
    TALLY_EVENT_VOLUME_RELEASE,
};

int64_t srv_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void srv_histogram_observe(srv_histogram *h, int64_t us)
{
    size_t i = 0;
    while (i + 1 < SRV_LATENCY_BUCKETS && us > bucket_us[i])
        i++;
    h->count[i]++;
    h->n++;
    h->sum_us += us;
}

void srv_metrics_release(srv_metrics *m)
{
    free(m->reasons);
    *m = (srv_metrics){0};
}

/* "0.0025" for 2500 us: seconds with trailing zeros dropped. */
static void seconds_text(int64_t us, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%lld.%06lld", (long long)(us / 1000000), (long long)(us % 1000000));
    while (n > 2 && out[n - 1] == '0' && out[n - 2] != '.')
        out[--n] = '\0';
}

/* The slot counting reason; past MAX_REASONS - 1 distinct reasons the rest
 * share one slot named "other". NULL when out of memory. */
static srv_reason_count *reason_slot(srv_metrics *m, const char *reason)
{
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < m->n_reasons; i++)
            if (strcmp(m->reasons[i].reason, reason) == 0)
                return &m->reasons[i];
        if (m->n_reasons < MAX_REASONS - 1 || pass == 1)
            break;
        reason = "other";
    }
    srv_reason_count *v = realloc(m->reasons, (m->n_reasons + 1) * sizeof *v);
    if (!v)
        return NULL;
    m->reasons = v;
    v += m->n_reasons++;
    snprintf(v->reason, sizeof v->reason, "%s", reason);
    v->n = 0;
    return v;
}

static tally_err reason_row(void *ctx, const char *reason, int64_t n)
{
    srv_reason_count *slot = reason_slot(ctx, reason);
    if (!slot)
        return TALLY_NOMEM;
    slot->n += n;
    return TALLY_OK;
}

static tally_err refresh_reasons(tally_server *s)
{
    srv_metrics *m = &s->metrics;
    return tally_ledger_quarantine_counts(s->ledger, m->reasons_after_id, reason_row, m,
                                          &m->reasons_after_id);
}

/* A Prometheus label value: backslash, quote and newline escaped. */
static tally_err label(tally_buf *b, const char *v)
{
    tally_err e = TALLY_OK;
    for (; *v && !e; v++)
        e = *v == '\\'   ? tally_buf_puts(b, "\\\\")
            : *v == '"'  ? tally_buf_puts(b, "\\\"")
            : *v == '\n' ? tally_buf_puts(b, "\\n")
                         : tally_buf_append(b, v, 1);
    return e;
}

static tally_err write_http(tally_buf *b, const srv_metrics *m)
{
    tally_err e = tally_buf_puts(b, "# HELP tally_http_responses_total HTTP responses sent, by "
                                    "status class.\n# TYPE tally_http_responses_total counter\n");
    for (int cls = 1; cls <= 5 && !e; cls++)
        e = tally_buf_printf(b, "tally_http_responses_total{class=\"%dxx\"} %lld\n", cls,
                             (long long)m->responses[cls]);
    if (!e)
        e = tally_buf_puts(b, "# HELP tally_http_events_total Events received over HTTP, by "
                              "result.\n# TYPE tally_http_events_total counter\n");
    for (int st = 0; st < SRV_EV_PENDING && !e; st++)
        e = tally_buf_printf(b, "tally_http_events_total{result=\"%s\"} %lld\n",
                             srv_event_status_name((srv_event_status)st), (long long)m->events[st]);
    if (!e)
        e = tally_buf_printf(b,
                             "# HELP tally_http_rate_limited_total Event ingest requests answered "
                             "429 (a key over its rate).\n# TYPE tally_http_rate_limited_total "
                             "counter\ntally_http_rate_limited_total %lld\n",
                             (long long)m->rate_limited);
    return e;
}

static tally_err write_histogram(tally_buf *b, const srv_histogram *h)
{
    char le[32];
    int64_t cum = 0;
    tally_err e = tally_buf_puts(b, "# HELP tally_batch_commit_seconds Latency of this server's "
                                    "ingest commits.\n# TYPE tally_batch_commit_seconds "
                                    "histogram\n");
    for (size_t i = 0; i < SRV_LATENCY_BUCKETS && !e; i++) {
        cum += h->count[i];
        if (bucket_us[i] == INT64_MAX)
            snprintf(le, sizeof le, "+Inf");
        else
            seconds_text(bucket_us[i], le, sizeof le);
        e = tally_buf_printf(b, "tally_batch_commit_seconds_bucket{le=\"%s\"} %lld\n", le,
                             (long long)cum);
    }
    seconds_text(h->sum_us, le, sizeof le);
    if (!e)
        e = tally_buf_printf(b,
                             "tally_batch_commit_seconds_sum %s\n"
                             "tally_batch_commit_seconds_count %lld\n",
                             le, (long long)h->n);
    return e;
}

static tally_err write_ledger(tally_buf *b, tally_server *s)
{
    tally_ledger_counts counts;
    tally_err e = tally_ledger_counts_get(s->ledger, &counts);
    if (!e)
        e = refresh_reasons(s);
    if (!e)
        e = tally_buf_printf(b,
                             "# HELP tally_ledger_events Distinct events stored in the ledger "
                             "(all inputs).\n# TYPE tally_ledger_events gauge\n"
                             "tally_ledger_events %lld\n"
                             "# HELP tally_ledger_quarantined_total Quarantined messages in the "
                             "ledger, by reason.\n# TYPE tally_ledger_quarantined_total counter\n",
                             (long long)counts.dedupe_keys);
    for (size_t i = 0; i < s->metrics.n_reasons && !e; i++) {
        e = tally_buf_puts(b, "tally_ledger_quarantined_total{reason=\"");
        if (!e)
            e = label(b, s->metrics.reasons[i].reason);
        if (!e)
            e = tally_buf_printf(b, "\"} %lld\n", (long long)s->metrics.reasons[i].n);
    }
    return e;
}

/* ---- Balances and the outbox ---------------------------------------------- */

static tally_err write_accounts(tally_buf *b, tally_ledger *l)
{
    int64_t n[TALLY_BALANCE_STATE_COUNT];
    tally_err e = tally_balance_state_counts(l, n);
    if (!e)
        e = tally_buf_puts(b, "# HELP tally_accounts Accounts whose balance the ledger keeps, by "
                              "spend-control state.\n# TYPE tally_accounts gauge\n");
    for (int i = 0; i < TALLY_BALANCE_STATE_COUNT && !e; i++)
        e = tally_buf_printf(b, "tally_accounts{state=\"%s\"} %lld\n",
                             tally_balance_state_name((tally_balance_state)i), (long long)n[i]);
    return e;
}

/* One scrape's outbox counts per slot, before they are added to the totals. */
typedef struct outbox_scan {
    int64_t added[SRV_OUTBOX_TYPES], pending[SRV_OUTBOX_TYPES];
} outbox_scan;

static size_t outbox_slot(const char *type)
{
    size_t i = 0;
    while (i < SRV_OUTBOX_TYPES - 1 && strcmp(type, outbox_types[i]) != 0)
        i++;
    return i;
}

static tally_err outbox_row(void *ctx, const char *type, int64_t added, int64_t pending)
{
    outbox_scan *scan = ctx;
    size_t i = outbox_slot(type);
    scan->added[i] += added;
    scan->pending[i] += pending;
    return TALLY_OK;
}

static const char *outbox_label(size_t i)
{
    return i < SRV_OUTBOX_TYPES - 1 ? outbox_types[i] : "other";
}

/* tally_outbox_events_total{type} counts every event written (rows are
 * never deleted: it only grows) and tally_outbox_events_pending{type} those
 * tally publish has not sent yet (it falls as they are sent, so it is a
 * gauge, not a status label of the counter). */
static tally_err write_outbox(tally_buf *b, tally_server *s)
{
    srv_metrics *m = &s->metrics;
    outbox_scan scan = {{0}, {0}};
    int64_t through = m->outbox_after_id;
    tally_err e =
        tally_outbox_type_counts(s->ledger, m->outbox_after_id, outbox_row, &scan, &through);
    if (e)
        return e;
    for (size_t i = 0; i < SRV_OUTBOX_TYPES; i++)
        m->outbox_total[i] += scan.added[i];
    m->outbox_after_id = through;
    e = tally_buf_puts(b, "# HELP tally_outbox_events_total Events written to the ledger's "
                          "outbox (announcements for tally publish), by type.\n"
                          "# TYPE tally_outbox_events_total counter\n");
    for (size_t i = 0; i < SRV_OUTBOX_TYPES && !e; i++)
        e = tally_buf_printf(b, "tally_outbox_events_total{type=\"%s\"} %lld\n", outbox_label(i),
                             (long long)m->outbox_total[i]);
    if (!e)
        e = tally_buf_puts(b, "# HELP tally_outbox_events_pending Outbox events not yet sent by "
                              "tally publish, by type.\n"
                              "# TYPE tally_outbox_events_pending gauge\n");
    for (size_t i = 0; i < SRV_OUTBOX_TYPES && !e; i++)
        e = tally_buf_printf(b, "tally_outbox_events_pending{type=\"%s\"} %lld\n", outbox_label(i),
                             (long long)scan.pending[i]);
    return e;
}

/* Offset gaps (tally_ledger_gap_stats): per partition, two series of each
 * family (open, accepted) for at most GAP_PARTITIONS_MAX partitions, then
 * totals over every partition, so a topic of many partitions cannot grow
 * a scrape without bound. */
static const char *const gap_states[] = {"open", "accepted"};

static tally_err gap_series(tally_buf *b, const char *name, const tally_gap_stats *g,
                            const int64_t v[2])
{
    tally_err e = TALLY_OK;
    for (int i = 0; i < 2 && !e; i++) {
        e = tally_buf_printf(b, "%s{topic=\"", name);
        if (!e)
            e = label(b, g->topic);
        if (!e)
            e = tally_buf_printf(b, "\",partition=\"%d\",state=\"%s\"} %lld\n", (int)g->partition,
                                 gap_states[i], (long long)v[i]);
    }
    return e;
}

static tally_err gap_family(tally_buf *b, const char *name, const char *help,
                            const tally_gap_stats *g, size_t n, bool messages)
{
    tally_err e = tally_buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
    for (size_t i = 0; i < n && i < GAP_PARTITIONS_MAX && !e; i++) {
        int64_t v[2] = {messages ? g[i].open_messages : g[i].open,
                        messages ? g[i].accepted_messages : g[i].accepted};
        e = gap_series(b, name, &g[i], v);
    }
    return e;
}

static tally_err write_gaps(tally_buf *b, tally_server *s)
{
    tally_gap_stats *g = NULL;
    size_t n = 0;
    int64_t all[4] = {0};
    tally_err e = tally_ledger_gap_stats(s->ledger, &g, &n);
    for (size_t i = 0; i < n && !e; i++) {
        all[0] += g[i].open;
        all[1] += g[i].accepted;
        all[2] += g[i].open_messages;
        all[3] += g[i].accepted_messages;
    }
    if (!e)
        e = gap_family(b, "tally_kafka_offset_gaps",
                       "Kafka offset gaps per partition: open (the meter stopped the partition "
                       "there) or accepted (recorded with --accept-gap and gone past).",
                       g, n, false);
    if (!e)
        e = gap_family(b, "tally_kafka_offset_gap_messages",
                       "Offsets never read, per partition, in its open or accepted gaps.", g, n,
                       true);
    if (!e)
        e = tally_buf_printf(
            b,
            "# HELP tally_kafka_offset_gaps_all Kafka offset gaps over every partition.\n"
            "# TYPE tally_kafka_offset_gaps_all gauge\n"
            "tally_kafka_offset_gaps_all{state=\"open\"} %lld\n"
            "tally_kafka_offset_gaps_all{state=\"accepted\"} %lld\n"
            "# HELP tally_kafka_offset_gap_messages_all Offsets never read over every "
            "partition.\n# TYPE tally_kafka_offset_gap_messages_all gauge\n"
            "tally_kafka_offset_gap_messages_all{state=\"open\"} %lld\n"
            "tally_kafka_offset_gap_messages_all{state=\"accepted\"} %lld\n"
            "# HELP tally_kafka_offset_gap_partitions_omitted Partitions with gaps past the %d "
            "listed per partition (counted in the _all totals only).\n"
            "# TYPE tally_kafka_offset_gap_partitions_omitted gauge\n"
            "tally_kafka_offset_gap_partitions_omitted %lld\n",
            (long long)all[0], (long long)all[1], (long long)all[2], (long long)all[3],
            GAP_PARTITIONS_MAX, (long long)(n > GAP_PARTITIONS_MAX ? n - GAP_PARTITIONS_MAX : 0));
    free(g);
    return e;
}

srv_outcome srv_h_metrics(srv_call *c)
{
    tally_buf *b = &c->resp.body;
    tally_server *s = c->srv;
    tally_err e = write_http(b, &s->metrics);
    if (!e)
        e = write_histogram(b, &s->metrics.commit);
    if (!e)
        e = write_ledger(b, s);
    if (!e)
        e = write_accounts(b, s->ledger);
    if (!e)
        e = write_outbox(b, s);
    if (!e)
        e = write_gaps(b, s);
    if (!e && s->kafka)
        e = srv_kafka_lag(s->kafka, s->ledger, s->topic, b);
    else if (!e)
        e = tally_buf_puts(b, "# tally_consumer_lag: not reported; this server was started "
                              "without --brokers\n");
    if (e != TALLY_OK)
        return srv_fail_err(c, e, "metrics");
    return srv_ok(c, 200, type_prometheus);
}

srv_outcome srv_h_healthz(srv_call *c)
{
    if (tally_ledger_ping(c->srv->ledger) != TALLY_OK)
        return srv_fail(c, 503, "unavailable", "the ledger does not answer");
    if (tally_buf_puts(&c->resp.body, "{\"status\":\"ok\"}\n") != TALLY_OK)
        return srv_fail_nomem(c);
    return srv_ok(c, 200, srv_type_json);
}
