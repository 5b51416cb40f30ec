/* The publisher (include/tally/publish.h): drains the ledger's outbox into
 * Kafka with an idempotent producer.
 *
 * One thread does everything: it lists pending events after a cursor (the
 * last id produced in this round), produces them, and serves delivery
 * reports in rd_kafka_poll(). The report callback only records the id; the
 * ids acknowledged by one poll are stamped sent in one transaction right
 * after it, so an event is never stamped before its acknowledgement.
 *
 * At most WINDOW events are in flight or acknowledged but not stamped. When a
 * delivery fails, nothing new is produced until every report of the round is
 * in and every acknowledged id is stamped; then the cursor goes back to the
 * start, so the failed events (still pending) are produced again, oldest
 * first, after a backoff. Because only stamped events leave the pending set,
 * starting over never re-sends an event this process knows was delivered. */
#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tally/balance.h"
#include "tally/buf.h"
#include "tally/kafka_conf.h"
#include "tally/log.h"
#include "tally/outbox.h"
#include "tally/publish.h"

#define DEFAULT_MESSAGE_TIMEOUT_MS 10000
#define DEFAULT_BACKOFF_MAX_MS     10000
#define BACKOFF_MIN_MS             250
/* Events in flight or acknowledged but not yet stamped. It bounds what a
 * crash can make the next run send again, and lets stamps keep pace with a
 * long drain; at loopback round trips it still moves thousands a second. */
#define WINDOW          128
#define POLL_MS         100
#define PROGRESS_MS     1000
#define FINISH_GRACE_MS 1000
#define SWEEP_MS        5000 /* balances due a refresh by the clock alone */
#define CONTENT_TYPE    "application/cloudevents+json"

_Static_assert(sizeof(intptr_t) >= sizeof(int64_t), "event ids travel in the message opaque");

struct tally_publisher {
    tally_ledger *l;
    tally_publish_opts o;
    char brokers[1024];
    char topic[256];
    rd_kafka_t *rk;
    int64_t acked[WINDOW]; /* acknowledged, not yet stamped */
    size_t n_acked;
    int64_t cursor;    /* the last id produced in this round */
    bool round_failed; /* start over once nothing is in flight */
    bool fatal;        /* the producer must be recreated */
    int64_t retry_at_ms, backoff_ms;
    tally_publish_stats st;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- librdkafka callbacks (served inside rd_kafka_poll/flush) --------------- */

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    tally_publisher *p = opaque;
    int64_t id = (int64_t)(intptr_t)m->_private;
    p->st.in_flight--;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR && p->n_acked < WINDOW) {
        p->acked[p->n_acked++] = id;
        p->backoff_ms = 0;
        return;
    }
    /* Not acknowledged (or, impossibly, no room to remember it): the event
     * stays pending and goes out again. */
    p->st.failures++;
    p->round_failed = true;
    snprintf(p->st.last_error, sizeof p->st.last_error, "event %lld: %s", (long long)id,
             rd_kafka_err2str(m->err));
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    tally_publisher *p = opaque;
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char why[200];
        rd_kafka_fatal_error(rk, why, sizeof why);
        p->fatal = true;
        snprintf(p->st.last_error, sizeof p->st.last_error, "fatal: %s", why);
        return;
    }
    snprintf(p->st.last_error, sizeof p->st.last_error, "%s", reason);
}

/* Connection chatter while a broker is down would flood stderr; failures
 * reach the caller through the stats and return values. */
static void quiet_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk, (void)level, (void)fac, (void)buf;
}

/* ---- Set-up ------------------------------------------------------------------ */

static tally_err make_producer(tally_publisher *p, char *why, size_t cap)
{
    char errstr[256];
    rd_kafka_conf_t *conf = NULL;
    tally_producer_conf_opts co = {.brokers = p->brokers,
                                   .client_id = "tally-publish",
                                   .kind = TALLY_PRODUCER_EXACT,
                                   .message_timeout_ms = p->o.message_timeout_ms};
    tally_err e = tally_kafka_producer_conf(&co, &conf, why, cap);
    if (e)
        return e;
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_error_cb(conf, on_error);
    rd_kafka_conf_set_log_cb(conf, quiet_log);
    rd_kafka_conf_set_opaque(conf, p);
    p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (!p->rk) {
        rd_kafka_conf_destroy(conf);
        snprintf(why, cap, "%s", errstr);
        return TALLY_KAFKA;
    }
    return TALLY_OK;
}

/* Kafka's topic names: 1..249 of [A-Za-z0-9._-]. */
static bool topic_ok(const char *t)
{
    size_t n = strnlen(t, 250);
    if (n == 0 || n > 249)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", t[i]))
            return false;
    return true;
}

static tally_err check_opts(tally_publisher *p, const tally_publish_opts *o, char *why, size_t cap)
{
    p->o = *o;
    const char *topic = o->topic ? o->topic : TALLY_PUBLISH_TOPIC;
    if (!o->brokers || !*o->brokers || strlen(o->brokers) >= sizeof p->brokers) {
        snprintf(why, cap, "brokers are required (at most %zu bytes)", sizeof p->brokers - 1);
        return TALLY_INVAL;
    }
    if (!topic_ok(topic)) {
        snprintf(why, cap, "topic must be 1..249 characters of A-Z a-z 0-9 . _ -");
        return TALLY_INVAL;
    }
    if (!p->o.message_timeout_ms)
        p->o.message_timeout_ms = DEFAULT_MESSAGE_TIMEOUT_MS;
    if (!p->o.backoff_max_ms)
        p->o.backoff_max_ms = DEFAULT_BACKOFF_MAX_MS;
    if (o->until_idle_ms < 0 || o->deadline_ms < 0 || p->o.message_timeout_ms < 100 ||
        p->o.message_timeout_ms > 3600000 || p->o.backoff_max_ms < BACKOFF_MIN_MS ||
        p->o.backoff_max_ms > 3600000) {
        snprintf(why, cap, "idle time, deadline, message timeout or backoff out of range");
        return TALLY_INVAL;
    }
    if (tally_fmt(p->brokers, sizeof p->brokers, "%s", o->brokers) != TALLY_OK ||
        tally_fmt(p->topic, sizeof p->topic, "%s", topic) != TALLY_OK) {
        snprintf(why, cap, "broker list or topic name too long");
        return TALLY_INVAL;
    }
    p->o.brokers = p->brokers;
    p->o.topic = p->topic;
    return TALLY_OK;
}

tally_err tally_publisher_create(tally_ledger *l, const tally_publish_opts *opts,
                                 tally_publisher **out, char *why, size_t cap)
{
    *out = NULL;
    if (!l || !opts) {
        snprintf(why, cap, "no ledger or options");
        return TALLY_INVAL;
    }
    tally_publisher *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(why, cap, "out of memory");
        return TALLY_NOMEM;
    }
    p->l = l;
    p->st.pending = -1;
    tally_err e = check_opts(p, opts, why, cap);
    if (!e && (e = tally_outbox_counts(l, &p->st.pending, NULL)) != TALLY_OK)
        snprintf(why, cap, "outbox: %s", tally_ledger_errmsg(l));
    if (!e)
        e = make_producer(p, why, cap);
    if (e) {
        tally_publisher_destroy(p);
        return e;
    }
    *out = p;
    return TALLY_OK;
}

void tally_publisher_destroy(tally_publisher *p)
{
    if (!p)
        return;
    if (p->rk) {
        rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_destroy(p->rk);
    }
    free(p);
}

void tally_publisher_stats_get(const tally_publisher *p, tally_publish_stats *out)
{
    *out = p->st;
}

/* ---- One turn of the loop ----------------------------------------------------- */

/* Stamps what was acknowledged. A busy ledger keeps the ids for the next turn. */
static tally_err stamp(tally_publisher *p)
{
    if (p->n_acked == 0)
        return TALLY_OK;
    tally_err e = tally_outbox_mark_sent_batch(p->l, p->acked, p->n_acked, tally_now_s());
    if (e == TALLY_BUSY)
        return TALLY_OK;
    if (e)
        return e;
    p->st.published += (int64_t)p->n_acked;
    p->n_acked = 0;
    return TALLY_OK;
}

static tally_err produce_one(void *ctx, const tally_outbox_event *ev)
{
    tally_publisher *p = ctx;
    rd_kafka_resp_err_t err = rd_kafka_producev(
        p->rk, RD_KAFKA_V_TOPIC(p->topic), RD_KAFKA_V_KEY(ev->subject, strlen(ev->subject)),
        RD_KAFKA_V_VALUE((void *)ev->payload, ev->len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_HEADER("content-type", CONTENT_TYPE, -1),
        RD_KAFKA_V_OPAQUE((void *)(intptr_t)ev->id), RD_KAFKA_V_END);
    if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL)
        return TALLY_BUSY; /* the cursor stays: produced on a later turn */
    p->cursor = ev->id;
    p->st.produced++;
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        p->st.in_flight++;
        return TALLY_OK;
    }
    /* Refused before sending (e.g. larger than message.max.bytes): pending,
     * retried with the next round. */
    p->st.failures++;
    p->round_failed = true;
    snprintf(p->st.last_error, sizeof p->st.last_error, "event %s: %s", ev->event_id,
             rd_kafka_err2str(err));
    return TALLY_OK;
}

/* Produces pending events after the cursor while there is room. */
static tally_err fill(tally_publisher *p, bool *produced)
{
    int64_t used = (int64_t)p->n_acked + p->st.in_flight;
    int64_t before = p->st.produced;
    *produced = false;
    if (used >= WINDOW)
        return TALLY_OK;
    tally_err e = tally_outbox_pending(p->l, p->cursor, (size_t)(WINDOW - used), produce_one, p);
    *produced = p->st.produced != before;
    return e == TALLY_BUSY ? TALLY_OK : e;
}

/* After a failed round, once every report is in and stamped: start over from
 * the oldest pending event after a backoff. */
static void maybe_restart(tally_publisher *p, int64_t now)
{
    if (!p->round_failed || p->st.in_flight > 0 || p->n_acked > 0)
        return;
    p->round_failed = false;
    p->cursor = 0;
    p->backoff_ms = p->backoff_ms ? p->backoff_ms * 2 : BACKOFF_MIN_MS;
    if (p->backoff_ms > p->o.backoff_max_ms)
        p->backoff_ms = p->o.backoff_max_ms;
    p->retry_at_ms = now + p->backoff_ms;
    p->st.retries++;
}

/* A fatal producer error (idempotence state lost): drop what is queued and in
 * flight (it stays pending) and start a fresh producer. */
static tally_err recreate(tally_publisher *p)
{
    char why[256];
    rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_poll(p->rk, 0);
    tally_err e = stamp(p);
    rd_kafka_destroy(p->rk);
    p->rk = NULL;
    p->st.in_flight = 0;
    p->n_acked = 0; /* unstamped acknowledgements are re-sent: same bytes, same id */
    p->round_failed = true;
    p->fatal = false;
    if (e)
        return e;
    e = make_producer(p, why, sizeof why);
    if (e)
        snprintf(p->st.last_error, sizeof p->st.last_error, "%s", why);
    return e ? TALLY_KAFKA : TALLY_OK;
}

/* Produces, waits for reports (up to POLL_MS) and stamps; *idle when
 * nothing was pending, in flight or waiting for a retry. */
static tally_err turn(tally_publisher *p, int64_t now, bool *idle)
{
    tally_err e = p->fatal ? recreate(p) : TALLY_OK;
    bool produced = false;
    *idle = false;
    if (!e)
        e = stamp(p);
    if (e)
        return e;
    maybe_restart(p, now);
    bool waiting = p->round_failed || now < p->retry_at_ms;
    if (!waiting && (e = fill(p, &produced)) != TALLY_OK)
        return e;
    *idle = !waiting && !produced && p->st.in_flight == 0 && p->n_acked == 0;
    rd_kafka_poll(p->rk, produced ? 0 : POLL_MS);
    return stamp(p);
}

/* On stop: produce nothing new, wait for what is in flight, stamp it. */
static tally_err finish(tally_publisher *p)
{
    if (p->st.in_flight > 0 && p->rk)
        (void)rd_kafka_flush(p->rk, (int)(p->o.message_timeout_ms + FINISH_GRACE_MS));
    tally_err e = stamp(p);
    if (!e && p->n_acked > 0) /* still busy: one more try, after the busy timeout */
        e = tally_outbox_mark_sent_batch(p->l, p->acked, p->n_acked, tally_now_s());
    if (!e && p->n_acked > 0) {
        p->st.published += (int64_t)p->n_acked;
        p->n_acked = 0;
    }
    if (tally_outbox_counts(p->l, &p->st.pending, NULL) != TALLY_OK)
        p->st.pending = -1;
    return e;
}

/* What changes with the clock alone (a grant expiring, the release grace of
 * an exhausted account ending) writes its events now, so that this
 * publisher announces them (include/tally/balance.h). A failure is logged:
 * announcing what is already pending goes on. */
static void sweep(tally_publisher *p, int64_t now, int64_t *next)
{
    if (now < *next)
        return;
    *next = now + SWEEP_MS;
    int64_t n = 0;
    tally_err e = tally_balance_sweep(p->l, tally_now_s(), &n);
    if (e)
        tally_log(TALLY_LOG_WARNING, "publish", "balance sweep: %s (%s)", tally_err_str(e),
                  tally_ledger_errmsg(p->l));
}

tally_err tally_publisher_run(tally_publisher *p, volatile sig_atomic_t *stop,
                              tally_publish_progress_fn progress, void *ctx)
{
    int64_t start = now_ms(), next_progress = start + PROGRESS_MS, idle_since = -1;
    int64_t next_sweep = start;
    bool deadline = false;
    tally_err e = TALLY_OK;
    while (!e && !(stop && *stop)) {
        int64_t now = now_ms();
        sweep(p, now, &next_sweep);
        if (p->o.deadline_ms > 0 && now - start >= p->o.deadline_ms) {
            deadline = true;
            break;
        }
        bool idle;
        e = turn(p, now, &idle);
        if (!idle)
            idle_since = -1;
        else if (idle_since < 0)
            idle_since = now;
        else if (p->o.until_idle_ms > 0 && now - idle_since >= p->o.until_idle_ms)
            break;
        if (progress && now >= next_progress) {
            if (tally_outbox_counts(p->l, &p->st.pending, NULL) != TALLY_OK)
                p->st.pending = -1;
            progress(ctx, &p->st, now - start);
            next_progress = now + PROGRESS_MS;
        }
    }
    tally_err fe = finish(p);
    if (!e)
        e = fe;
    if (!e && deadline && p->st.pending != 0)
        e = TALLY_KAFKA;
    return e;
}

tally_err tally_publish_drain(tally_ledger *l, const char *brokers, const char *topic,
                              int timeout_ms, size_t *published)
{
    if (published)
        *published = 0;
    if (!l || !brokers || timeout_ms <= 0)
        return TALLY_INVAL;
    int64_t msg_timeout = timeout_ms < DEFAULT_MESSAGE_TIMEOUT_MS ? timeout_ms : 0;
    tally_publish_opts o = {
        .brokers = brokers,
        .topic = topic,
        .until_idle_ms = 1,
        .deadline_ms = timeout_ms,
        .message_timeout_ms = msg_timeout < 100 && msg_timeout ? 100 : msg_timeout,
    };
    tally_publisher *p;
    char why[256];
    tally_err e = tally_publisher_create(l, &o, &p, why, sizeof why);
    if (e)
        return e;
    volatile sig_atomic_t never = 0;
    e = tally_publisher_run(p, &never, NULL, NULL);
    if (published)
        *published = (size_t)p->st.published;
    tally_publisher_destroy(p);
    return e;
}
