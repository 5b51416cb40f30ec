/* Dead-letter copies of quarantined messages, delivered at least once.
 *
 * The ledger's quarantine table is the record; the dead-letter topic gets a
 * copy of each quarantined message with headers tally-reason and
 * tally-origin ("kafka:<topic>/<partition>@<offset>", unique per message, so
 * a reader can drop repeats). Copies are produced after the ledger commit
 * that quarantined them (only then is the reason known for every kind:
 * unknown_sku, no_price and conflict are found at commit) and flushed before
 * the chunk's offsets are committed to Kafka. So a partition's committed
 * Kafka offset is also the point up to which its copies were delivered: on
 * assignment, quarantine rows from there to the ledger's offset are copied
 * again (without the original key, which the ledger does not keep). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meter_int.h"
#include "tally/log.h"

#define DLQ_RETRIES  50 /* x 100 ms while the producer's queue is full */
#define DLQ_FLUSH_MS 10000
#define REASON_MAX   sizeof(((tally_reject *)0)->reason)

static bool produce(tally_consumer *c, const void *key, size_t key_len, const void *raw, size_t len,
                    const char *reason, const char *origin)
{
    for (int tries = 0; tries < DLQ_RETRIES; tries++) {
        rd_kafka_resp_err_t err = rd_kafka_producev(
            c->dlq, RD_KAFKA_V_TOPIC(c->dlq_topic), RD_KAFKA_V_KEY(key, key_len),
            RD_KAFKA_V_VALUE((void *)raw, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_HEADER("tally-reason", reason, -1),
            RD_KAFKA_V_HEADER("tally-origin", origin, -1), RD_KAFKA_V_END);
        if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
            return true;
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            tally_log(TALLY_LOG_ERR, "meter", "dead-letter copy of %s failed: %s", origin,
                      rd_kafka_err2str(err));
            return false;
        }
        rd_kafka_poll(c->dlq, 100);
    }
    tally_log(TALLY_LOG_ERR, "meter", "dead-letter copy of %s failed: queue full", origin);
    return false;
}

static bool flush(tally_consumer *c)
{
    if (rd_kafka_flush(c->dlq, DLQ_FLUSH_MS) == RD_KAFKA_RESP_ERR_NO_ERROR && c->dlq_failures == 0)
        return true;
    tally_log(TALLY_LOG_WARNING, "meter",
              "dead-letter copies not confirmed; they will be sent again");
    c->dlq_failures = 0;
    return false;
}

/* Delivery reports (served by rd_kafka_flush on the committing thread). */
static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    tally_consumer *c = opaque;
    (void)rk;
    if (m->err)
        c->dlq_failures++;
}

void dlq_configure(rd_kafka_conf_t *conf, tally_consumer *c)
{
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_opaque(conf, c);
}

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

void dlq_chunk(tally_consumer *c, chunk *k)
{
    char origin[ORIGIN_MAX], reason[REASON_MAX];
    bool ok = true, any = false;
    for (size_t i = 0; i < k->n; i++) {
        tally_event_result r = k->results[i];
        if (r != TALLY_RESULT_QUARANTINED && r != TALLY_RESULT_CONFLICT)
            continue;
        const item *it = &k->items[i];
        origin_format(c, it->partition, it->offset, origin);
        if (r == TALLY_RESULT_CONFLICT)
            snprintf(reason, sizeof reason, "conflict");
        else if (!it->d.is_event)
            snprintf(reason, sizeof reason, "%s", it->d.u.rej.reason);
        else
            stored_reason(c, it->partition, origin, reason);
        any = true;
        if (produce(c, k->arena + it->key_off, it->key_len, k->arena + it->raw_off, it->raw_len,
                    reason, origin))
            k->dlq++;
        else
            ok = false;
    }
    if (any && !flush(c))
        ok = false;
    k->dlq_failed = !ok;
}

/* ---- Replay after a crash ------------------------------------------------------ */

typedef struct replay {
    tally_consumer *c;
    int64_t from, to;
    int64_t sent;
    bool ok;
} replay;

static tally_err replay_row(void *ctx, const tally_quarantine_row *q)
{
    replay *r = ctx;
    const char *at = strrchr(q->origin, '@');
    if (!at)
        return TALLY_OK;
    char *end = NULL;
    long long off = strtoll(at + 1, &end, 10);
    if (*end || off < r->from || off >= r->to)
        return TALLY_OK;
    if (produce(r->c, NULL, 0, q->raw, q->raw_len, q->reason, q->origin))
        r->sent++;
    else
        r->ok = false;
    return TALLY_OK;
}

bool dlq_replay(tally_consumer *c, int32_t partition, int64_t from, int64_t to)
{
    char prefix[ORIGIN_MAX];
    snprintf(prefix, sizeof prefix, "kafka:%s/%d@", c->topic, (int)partition);
    replay r = {.c = c, .from = from, .to = to, .ok = true};
    tally_ledger *l = shard_ledger_of(c, partition);
    tally_err e = tally_ledger_quarantine_each(l, prefix, replay_row, &r);
    if (e) {
        tally_log(TALLY_LOG_ERR, "meter", "cannot read quarantine for dead-letter replay: %s",
                  tally_ledger_errmsg(l));
        return false;
    }
    c->st.dlq += r.sent;
    return (r.sent == 0 || flush(c)) && r.ok;
}
