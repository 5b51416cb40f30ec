/* Offsets the broker no longer has: a partition whose stored offset lies
 * below the broker's log start (retention), or above its log end (the
 * topic was recreated, or an embedded broker restarted). Either way some
 * usage was never read. The meter never jumps over it silently: it checks
 * each partition's watermarks when the partition is assigned (in the poll
 * loop, while the partition is paused: consumer_group.c) and whenever
 * librdkafka reports an offset reset (auto.offset.reset=error), logs the
 * partition and the missing range, and stops, unless the operator named the
 * partition with --accept-gap (or gave --accept-gaps): then the gap is
 * recorded in the ledger (offset_gaps, state accepted) and the partition
 * goes on from the log start. A gap it stops at is recorded too (state
 * open, the offset unmoved), so `tally serve`'s /metrics shows both. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meter_int.h"
#include "tally/event.h"
#include "tally/log.h"

#define WATERMARK_MS 5000 /* one watermark query, at assignment or after a reset */

/* Whether the operator accepted gaps on this partition: --accept-gaps, or
 * "TOPIC/PARTITION" in the comma-separated --accept-gap list. */
static bool gap_accepted(const tally_consumer *c, int32_t partition)
{
    if (c->o.accept_gaps)
        return true;
    const char *s = c->o.accept_gap;
    while (s && *s) {
        const char *end = strchr(s, ',');
        size_t n = end ? (size_t)(end - s) : strlen(s);
        const char *slash = memchr(s, '/', n);
        if (slash && (size_t)(slash - s) == c->topic_len &&
            memcmp(s, c->topic, c->topic_len) == 0) {
            char num[16];
            size_t k = n - (size_t)(slash + 1 - s);
            if (k > 0 && k < sizeof num) {
                memcpy(num, slash + 1, k);
                num[k] = '\0';
                char *e = NULL;
                long v = strtol(num, &e, 10);
                if (*e == '\0' && v == partition)
                    return true;
            }
        }
        s = end ? end + 1 : NULL;
    }
    return false;
}

/* Records an accepted gap in the partition's ledger and moves its offset. */
static tally_err record_gap(tally_consumer *c, const tally_offset_gap *g)
{
    tally_ledger *l = shard_ledger_of(c, g->partition);
    tally_err e = tally_ledger_gap_accept(l, g);
    if (e) {
        tally_log(TALLY_LOG_ERR, "meter", "%s/%d: cannot record the gap: %s", c->topic,
                  (int)g->partition, tally_ledger_errmsg(l));
        return e;
    }
    tally_log(TALLY_LOG_WARNING, "meter",
              "%s/%d: gap accepted: offsets %lld..%lld were never read (%s); recorded in "
              "offset_gaps, going on from offset %lld",
              c->topic, (int)g->partition, (long long)g->from, (long long)g->to - 1, g->kind,
              (long long)g->log_start);
    c->st.gaps_accepted++;
    return TALLY_OK;
}

/* Records a gap the partition stops at (state open) without moving its
 * offset, so /metrics shows it; a failure is logged and changes nothing
 * else (the partition stops either way). */
static void record_open(tally_consumer *c, const tally_offset_gap *g)
{
    tally_ledger *l = shard_ledger_of(c, g->partition);
    bool recorded = false;
    if (tally_ledger_gap_open(l, g, &recorded) != TALLY_OK) {
        tally_log(TALLY_LOG_ERR, "meter", "%s/%d: cannot record the open gap: %s", c->topic,
                  (int)g->partition, tally_ledger_errmsg(l));
        return;
    }
    if (recorded)
        tally_log(TALLY_LOG_ERR, "meter", "%s/%d: recorded in offset_gaps as open", c->topic,
                  (int)g->partition);
}

/* Logs a gap found on g->partition and counts it; returns 0 if the operator
 * accepted it and it is recorded (the ledger now holds g->log_start), -1 if
 * the partition stops. */
static int report_gap(tally_consumer *c, const tally_offset_gap *g)
{
    bool retention = strcmp(g->kind, "retention") == 0;
    bool accept = gap_accepted(c, g->partition);
    tally_log(accept ? TALLY_LOG_WARNING : TALLY_LOG_ERR, "meter",
              "%s/%d: offset gap: the ledger's next offset is %lld but the broker holds "
              "%lld..%lld; missing offsets %lld..%lld (%s)",
              c->topic, (int)g->partition, (long long)g->stored_next, (long long)g->log_start,
              (long long)g->log_end - 1, (long long)g->from, (long long)g->to - 1,
              retention ? "retention moved the log start past it"
                        : "the log restarted: these offsets were never read");
    c->st.gap_partition = g->partition;
    c->st.gap_from = g->from;
    c->st.gap_to = g->to;
    if (!accept) {
        tally_log(TALLY_LOG_ERR, "meter",
                  "%s/%d: stopping this partition; `tally meter --accept-gap %s/%d` records "
                  "the gap in the ledger and goes on from offset %lld",
                  c->topic, (int)g->partition, c->topic, (int)g->partition,
                  (long long)g->log_start);
        record_open(c, g);
    }
    if (!accept || record_gap(c, g) != TALLY_OK) {
        c->st.gaps++;
        return -1;
    }
    return 0;
}

static bool watermarks(tally_consumer *c, int32_t partition, int64_t *lo, int64_t *hi)
{
    rd_kafka_resp_err_t err =
        rd_kafka_query_watermark_offsets(c->rk, c->topic, partition, lo, hi, WATERMARK_MS);
    if (err)
        tally_log(TALLY_LOG_WARNING, "meter", "%s/%d: cannot read the watermarks: %s", c->topic,
                  (int)partition, rd_kafka_err2str(err));
    return err == RD_KAFKA_RESP_ERR_NO_ERROR;
}

int gap_check(tally_consumer *c, int32_t partition, int64_t *next, int64_t *log_start)
{
    int64_t lo = -1, hi = -1;
    *log_start = -1;
    if (*next < 0)
        return 0; /* nothing stored: the partition starts at its beginning */
    /* Unknown watermarks (a broker fault) are no gap: the partition starts
     * at its stored offset, and if the broker no longer has it, librdkafka
     * reports an offset reset (auto.offset.reset=error) and it is checked
     * again then. */
    if (!watermarks(c, partition, &lo, &hi))
        return 0;
    *log_start = lo;
    tally_offset_gap g = {.topic = c->topic,
                          .partition = partition,
                          .stored_next = *next,
                          .log_start = lo,
                          .log_end = hi};
    if (*next < lo) {
        g.kind = "retention";
        g.from = *next;
        g.to = lo;
    } else if (*next > hi) {
        g.kind = "restarted";
        g.from = lo;
        g.to = hi;
    } else {
        return 0;
    }
    if (report_gap(c, &g) != 0)
        return -1;
    *next = lo;
    return 0;
}

int64_t message_mark(const void *key, size_t key_len, const void *val, size_t len)
{
    uint64_t h[2];
    tally_hash128(key ? key : "", key ? key_len : 0, 0x6b61666b61ull, h);
    tally_hash128(val ? val : "", val ? len : 0, h[0] ^ (val ? 0 : 1), h);
    return (int64_t)(h[0] & INT64_MAX);
}

/* The message at the ledger's last offset is not the one the ledger read:
 * the log restarted, and offsets [log start, stored next) of the new log
 * were skipped. */
static void log_restarted(tally_consumer *c, part *p, int32_t partition)
{
    int64_t lo = -1, hi = -1;
    pipeline_seal(c, true); /* nothing may be in flight while the ledger is read */
    if (c->fatal)
        return;
    if (!watermarks(c, partition, &lo, &hi)) {
        c->fatal = TALLY_KAFKA;
        return;
    }
    tally_offset_gap g = {.topic = c->topic,
                          .partition = partition,
                          .kind = "restarted",
                          .from = lo,
                          .to = p->next,
                          .stored_next = p->next,
                          .log_start = lo,
                          .log_end = hi};
    if (report_gap(c, &g) != 0) {
        /* Stop: the open batches of the other partitions are committed on
         * the way out. */
        p->assigned = false;
        c->fatal = TALLY_KAFKA;
        return;
    }
    group_reassign(c);
}

bool gap_verify(tally_consumer *c, part *p, const rd_kafka_message_t *m)
{
    int64_t at = p->verify_at;
    p->verify_at = -1;
    if (m->offset != at)
        return false; /* that message is gone: the watermarks were checked */
    if (message_mark(m->key, m->key_len, m->payload, m->len) == p->mark)
        return true; /* the ledger's own last message: already stored */
    tally_log(TALLY_LOG_WARNING, "meter",
              "%s/%d: the message at offset %lld is not the one the ledger stored there", c->topic,
              (int)m->partition, (long long)at);
    log_restarted(c, p, m->partition);
    return true;
}

void gap_on_reset(tally_consumer *c, const rd_kafka_message_t *m)
{
    tally_log(TALLY_LOG_WARNING, "meter", "%s/%d: the broker has no offset %lld: %s", c->topic,
              (int)m->partition, (long long)m->offset, rd_kafka_message_errstr(m));
    /* Everything decoded is committed first; then every assigned partition
     * restarts from the ledger, which checks the watermarks again. */
    pipeline_seal(c, true);
    if (!c->fatal)
        group_reassign(c);
}
