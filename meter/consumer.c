/* The meter: a consumer-group member that writes usage into the ledger
 * exactly once (include/tally/meter.h; the design is in consumer_int.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "meter_int.h"
#include "tally/log.h"
#include "tally/partition.h"

#define DEFAULT_GROUP        "tally-meter"
#define DEFAULT_BATCH_EVENTS 10000
#define DEFAULT_BATCH_MS     100
#define DEFAULT_SESSION_MS   10000
#define MAX_BATCH_EVENTS     1000000
#define CONSUME_MAX          2000 /* messages per burst of polls */
#define POLL_MS              100  /* longest wait for messages */
#define PROGRESS_MS          1000
#define PROGRESS_IDLE_MS     10000
#define ERROR_REPORT_MS      1000
#define DLQ_FLUSH_MS         5000

int64_t cons_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- Set-up ------------------------------------------------------------------ */

static tally_err set_conf(rd_kafka_conf_t *conf, const char *const (*kv)[2], size_t n, char *why,
                          size_t cap)
{
    char errstr[256];
    for (size_t i = 0; i < n; i++)
        if (rd_kafka_conf_set(conf, kv[i][0], kv[i][1], errstr, sizeof errstr) !=
            RD_KAFKA_CONF_OK) {
            snprintf(why, cap, "%s=%s: %s", kv[i][0], kv[i][1], errstr);
            return TALLY_INVAL;
        }
    return TALLY_OK;
}

static tally_err make_consumer(tally_consumer *c, char *why, size_t cap)
{
    char session[24], heartbeat[24], errstr[256];
    snprintf(session, sizeof session, "%lld", (long long)c->o.session_timeout_ms);
    snprintf(heartbeat, sizeof heartbeat, "%lld", (long long)(c->o.session_timeout_ms / 3));
    const char *const kv[][2] = {
        {"bootstrap.servers", c->o.brokers},
        {"group.id", c->group},
        {"client.id", "tally-meter"},
        {"enable.auto.commit", "false"},
        {"enable.auto.offset.store", "false"},
        /* Never jump over offsets the broker lost: report them (consumer_gap.c). */
        {"auto.offset.reset", "error"},
        {"enable.partition.eof", "false"},
        {"session.timeout.ms", session},
        {"heartbeat.interval.ms", heartbeat},
        {"fetch.wait.max.ms", "100"},
        /* Bounded prefetch: at most 16 MB per fetch response and 64 MB
         * queued, however many partitions are assigned. librdkafka 2.0.2
         * stops fetching for a whole second (it has no
         * fetch.queue.backoff.ms yet) once the queue passes either
         * queued.min.messages (default 100,000) or this size, which a
         * meter waiting on a commit reached within one chunk: the queue
         * then ran dry and reads stalled for 0.3-0.6 s several times per
         * million events. So the message count is left to the size bound,
         * and the size holds about half a second of commits. 128 MB ran
         * no faster over 5M events and took the meter's RSS to ~1 GB
         * (bench/RESULTS.md); over 1M events it was slower (seventh pass).
         * Waking the broker threads early instead (a ListOffsets request
         * every 20-50 ms while lag exceeds the queue) shortened the stalls
         * but not the run: the commit thread sets the pace. */
        {"fetch.max.bytes", "16777216"},
        {"queued.max.messages.kbytes", "65536"},
        {"queued.min.messages", "1000000"},
        {"log.connection.close", "false"},
    };
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    tally_err e = set_conf(conf, kv, sizeof kv / sizeof *kv, why, cap);
    if (e) {
        rd_kafka_conf_destroy(conf);
        return e;
    }
    rd_kafka_conf_set_rebalance_cb(conf, group_rebalance_cb);
    rd_kafka_conf_set_opaque(conf, c);
    c->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    if (!c->rk) {
        rd_kafka_conf_destroy(conf);
        snprintf(why, cap, "%s", errstr);
        return TALLY_KAFKA;
    }
    rd_kafka_poll_set_consumer(c->rk);
    return TALLY_OK;
}

static tally_err make_dlq(tally_consumer *c, char *why, size_t cap)
{
    char errstr[256];
    rd_kafka_conf_t *conf = NULL;
    /* Copies keep their key, so they land on their original's partition. */
    tally_producer_conf_opts co = {
        .brokers = c->o.brokers, .client_id = "tally-meter-dlq", .kind = TALLY_PRODUCER_COPIES};
    tally_err e = tally_kafka_producer_conf(&co, &conf, why, cap);
    if (e)
        return e;
    dlq_configure(conf, c);
    c->dlq = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (!c->dlq) {
        rd_kafka_conf_destroy(conf);
        snprintf(why, cap, "%s", errstr);
        return TALLY_KAFKA;
    }
    return TALLY_OK;
}

static tally_err copy_name(char *dst, size_t cap, const char *src, const char *what, char *why,
                           size_t why_cap)
{
    size_t n = strlen(src);
    if (n == 0 || n >= cap || (cap == 256 && n > 249)) {
        snprintf(why, why_cap, "%s must be 1..249 characters", what);
        return TALLY_INVAL;
    }
    memcpy(dst, src, n + 1);
    return TALLY_OK;
}

static tally_err check_opts(tally_consumer *c, const tally_consumer_opts *o, char *why, size_t cap)
{
    c->o = *o;
    if (!o->brokers || !*o->brokers || !o->topic) {
        snprintf(why, cap, "brokers and topic are required");
        return TALLY_INVAL;
    }
    if (!c->o.batch_events)
        c->o.batch_events = DEFAULT_BATCH_EVENTS;
    if (!c->o.batch_ms)
        c->o.batch_ms = DEFAULT_BATCH_MS;
    if (!c->o.session_timeout_ms)
        c->o.session_timeout_ms = DEFAULT_SESSION_MS;
    if (c->o.batch_events < 1 || c->o.batch_events > MAX_BATCH_EVENTS || c->o.batch_ms < 1 ||
        c->o.until_idle_ms < 0 || c->o.session_timeout_ms < 3000) {
        snprintf(why, cap, "batch size, batch time, idle time or session timeout out of range");
        return TALLY_INVAL;
    }
    tally_err e = copy_name(c->topic, sizeof c->topic, o->topic, "topic", why, cap);
    c->topic_len = strlen(c->topic);
    if (!e)
        e = copy_name(c->group, sizeof c->group, o->group ? o->group : DEFAULT_GROUP, "group", why,
                      cap);
    if (!e && o->dlq_topic)
        e = copy_name(c->dlq_topic, sizeof c->dlq_topic, o->dlq_topic, "dead-letter topic", why,
                      cap);
    return e;
}

static tally_err make_state(tally_consumer *c, char *why, size_t cap)
{
    for (int i = 0; i < 2; i++)
        if (chunk_init(&c->chunks[i], (size_t)c->o.batch_events * CHUNK_GROWTH)) {
            snprintf(why, cap, "out of memory");
            return TALLY_NOMEM;
        }
    c->chunks[0].gen = c->next_gen = 1;
    if (tally_batch_create(c->l, &c->b)) {
        snprintf(why, cap, "out of memory");
        return TALLY_NOMEM;
    }
    if (pthread_mutex_init(&c->mu, NULL) || pthread_cond_init(&c->cv, NULL)) {
        snprintf(why, cap, "cannot create a lock");
        return TALLY_NOMEM;
    }
    c->sync_ready = true;
    return TALLY_OK;
}

tally_err tally_consumer_create(tally_ledger *l, const tally_consumer_opts *opts,
                                tally_consumer **out, char *why, size_t cap)
{
    *out = NULL;
    if (!l || !opts) {
        snprintf(why, cap, "no ledger or options");
        return TALLY_INVAL;
    }
    tally_consumer *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(why, cap, "out of memory");
        return TALLY_NOMEM;
    }
    c->l = l;
    tally_err e = check_opts(c, opts, why, cap);
    if (!e)
        e = make_state(c, why, cap);
    if (!e)
        e = make_consumer(c, why, cap);
    if (!e && c->dlq_topic[0])
        e = make_dlq(c, why, cap);
    if (e) {
        tally_consumer_destroy(c);
        return e;
    }
    c->st.lag = -1;
    c->st.first_ms = c->st.last_ms = -1;
    *out = c;
    return TALLY_OK;
}

void tally_consumer_destroy(tally_consumer *c)
{
    if (!c)
        return;
    pipeline_stop(c);
    for (int i = 0; i < 2; i++)
        chunk_drop(&c->chunks[i]);
    c->closing = true;
    if (c->rk) {
        (void)rd_kafka_consumer_close(c->rk);
        rd_kafka_destroy(c->rk);
    }
    if (c->dlq) {
        if (rd_kafka_flush(c->dlq, DLQ_FLUSH_MS) != RD_KAFKA_RESP_ERR_NO_ERROR)
            tally_log(TALLY_LOG_WARNING, "meter", "some dead-letter copies were not delivered");
        rd_kafka_destroy(c->dlq);
    }
    tally_batch_destroy(c->b);
    for (int i = 0; i < 2; i++)
        chunk_free(&c->chunks[i]);
    if (c->sync_ready) {
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
    }
    free(c->parts);
    free(c->dlq_ok);
    free(c);
}

void tally_consumer_stats_get(const tally_consumer *c, tally_consumer_stats *out)
{
    *out = c->st;
}

/* ---- Consuming ----------------------------------------------------------------- */

static void on_error(tally_consumer *c, const rd_kafka_message_t *m)
{
    char errstr[512];
    if (rd_kafka_fatal_error(c->rk, errstr, sizeof errstr)) {
        tally_log(TALLY_LOG_ERR, "meter", "fatal kafka error: %s", errstr);
        c->fatal = TALLY_KAFKA;
        return;
    }
    int64_t now = cons_now_ms();
    if (now - c->last_error_ms < ERROR_REPORT_MS)
        return;
    c->last_error_ms = now;
    tally_log(TALLY_LOG_ERR, "meter", "kafka: %s", rd_kafka_message_errstr(m));
}

static tally_err add_off(chunk *k, int32_t partition)
{
    if (k->n_offs == k->offs_cap) {
        size_t cap = k->offs_cap ? 2 * k->offs_cap : 64;
        chunk_off *o = realloc(k->offs, cap * sizeof *o);
        if (!o)
            return TALLY_NOMEM;
        k->offs = o;
        k->offs_cap = cap;
    }
    k->offs[k->n_offs++] = (chunk_off){.partition = partition};
    return TALLY_OK;
}

/* A message from a partition that the ledger is ahead of: the topic was
 * recreated or truncated. It is skipped (the ledger has that offset). */
static void warn_behind(tally_consumer *c, part *p, const rd_kafka_message_t *m)
{
    if (p->warned_behind)
        return;
    p->warned_behind = true;
    tally_log(TALLY_LOG_WARNING, "meter",
              "%s/%d: offset %lld is behind the ledger's %lld (topic recreated?); "
              "skipping to the ledger's offset",
              c->topic, (int)m->partition, (long long)m->offset, (long long)p->next);
}

/* Replaces a decoded result with a Kafka-path reject. */
static void reject_as(item *it, const char *reason, const char *detail)
{
    it->d.is_event = false;
    memset(&it->d.u.rej, 0, sizeof it->d.u.rej);
    snprintf(it->d.u.rej.reason, sizeof it->d.u.rej.reason, "%s", reason);
    snprintf(it->d.u.rej.detail, sizeof it->d.u.rej.detail, "%s", detail);
}

/* Decodes one copied message. On top of the pipeline's checks, the Kafka
 * path refuses a tombstone (a null value), and over a ledger directory an
 * event on a partition its subject does not route to (misrouted: its
 * shard's dedupe could not see a correctly keyed retry in another shard). */
static void decode_item(tally_consumer *c, chunk *k, item *it, const rd_kafka_message_t *m,
                        int64_t now_s)
{
    it->tombstone = m->payload == NULL;
    if (it->tombstone) {
        reject_as(it, "tombstone", "a Kafka tombstone (null value) is not an event");
        return;
    }
    (void)tally_pipeline_decode(k->arena + it->raw_off, it->raw_len, now_s, &it->d);
    if (!it->d.is_event || !c->o.shards || c->topic_parts <= 0)
        return;
    const char *acct = it->d.u.ev.account;
    if (tally_partition_of(acct, strlen(acct), c->topic_parts) != m->partition)
        reject_as(it, "misrouted",
                  "the subject's partition (murmur2 of the subject) is not the message's");
}

/* A chunk that must be committed before it takes anything more. */
static bool chunk_full(const chunk *k)
{
    return k->n == k->cap || k->arena_len >= CHUNK_MAX_BYTES;
}

/* Decodes one message into the chunk being filled. */
static void take(tally_consumer *c, const rd_kafka_message_t *m, int64_t now_s, int64_t now_ms)
{
    chunk *k = &c->chunks[c->fill];
    part *p = group_part(c, m->partition);
    if (m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET) {
        gap_on_reset(c, m);
        return;
    }
    if (m->err) {
        on_error(c, m);
        return;
    }
    if (!p || !p->assigned)
        return;
    if (chunk_full(k)) { /* consume_once never polls into a full chunk */
        tally_log(TALLY_LOG_ERR, "meter", "internal error: message past a full batch");
        c->fatal = TALLY_INTERNAL;
        return;
    }
    if (p->verify_at >= 0 && gap_verify(c, p, m))
        return;
    if (p->next >= 0 && m->offset < p->next) {
        warn_behind(c, p, m);
        return;
    }
    item *it = &k->items[k->n];
    if ((p->gen != k->gen && add_off(k, m->partition)) || chunk_copy(c, k, it, m)) {
        c->fatal = TALLY_NOMEM;
        return;
    }
    p->gen = k->gen;
    p->last_item = k->n;
    k->n++;
    decode_item(c, k, it, m, now_s);
    if (k->n == 1)
        k->first_ms = now_ms;
    if (c->st.first_ms < 0)
        c->st.first_ms = now_ms - c->start_ms;
    p->next = m->offset + 1;
    c->last_msg_ms = now_ms;
}

/* How long the next consume call may wait. */
static int poll_timeout(const tally_consumer *c, int64_t now_ms)
{
    const chunk *k = &c->chunks[c->fill];
    if (c->pending) /* a partition waits for its start to be tried again */
        return 10;
    if (k->n == 0)
        return POLL_MS;
    if (c->in_flight)
        return 2;
    int64_t left = k->first_ms + c->o.batch_ms - now_ms;
    return left < 1 ? 0 : left > POLL_MS ? POLL_MS : (int)left;
}

static bool idle_done(tally_consumer *c, int64_t now_ms)
{
    if (c->o.until_idle_ms <= 0 || !c->joined || c->pending || c->in_flight ||
        c->chunks[c->fill].n > 0)
        return false;
    if (now_ms - c->last_msg_ms < c->o.until_idle_ms)
        return false;
    return group_lag(c) == 0;
}

static void progress_tick(tally_consumer *c, tally_consumer_progress_fn fn, void *ctx,
                          int64_t start_ms, int64_t now_ms)
{
    if (now_ms < c->next_progress_ms)
        return;
    c->st.lag = group_lag(c);
    bool moved = c->st.messages != c->progress_msgs || c->chunks[c->fill].n > 0;
    if (fn && (moved || now_ms - c->last_progress_ms >= PROGRESS_IDLE_MS)) {
        fn(ctx, &c->st, now_ms - start_ms);
        c->last_progress_ms = now_ms;
    }
    c->progress_msgs = c->st.messages;
    c->next_progress_ms = now_ms + PROGRESS_MS;
}

/* A chunk that is due (by size or age): it is committed as soon as the
 * commit thread is free, and keeps growing (up to full) while it is not,
 * so a backlog is committed in fewer, larger transactions. */
static bool chunk_due(const tally_consumer *c, const chunk *k, int64_t now_ms)
{
    return k->n > 0 && ((int64_t)k->n >= c->o.batch_events || k->arena_len >= CHUNK_DUE_BYTES ||
                        now_ms - k->first_ms >= c->o.batch_ms);
}

/* Takes up to a burst of messages, one poll each: a rebalance callback runs
 * inside a poll, so every message is either taken before it (and committed
 * by it) or returned after it (from the new positions); a batch call could
 * hand back both kinds in one array. */
static void consume_once(tally_consumer *c)
{
    if (chunk_full(&c->chunks[c->fill])) {
        pipeline_seal(c, false);
        return;
    }
    int timeout = poll_timeout(c, cons_now_ms());
    int64_t now_s = tally_now_s(), now_ms = cons_now_ms();
    for (int got = 0; got < CONSUME_MAX && !c->fatal; got++) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c->rk, got ? 0 : timeout);
        if (!m)
            break;
        if (got == 0)
            now_ms = cons_now_ms();
        take(c, m, now_s, now_ms);
        rd_kafka_message_destroy(m);
        const chunk *k = &c->chunks[c->fill];
        if (c->unchecked) /* assigned in that poll: checked before anything is taken */
            break;
        if (chunk_full(k) || (!c->in_flight && (int64_t)k->n >= c->o.batch_events))
            break;
    }
    pipeline_collect(c, false);
    if (!c->in_flight && chunk_due(c, &c->chunks[c->fill], cons_now_ms()))
        pipeline_seal(c, false);
}

tally_err tally_consumer_run(tally_consumer *c, volatile sig_atomic_t *stop,
                             tally_consumer_progress_fn progress, void *ctx)
{
    rd_kafka_topic_partition_list_t *sub = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(sub, c->topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t err = rd_kafka_subscribe(c->rk, sub);
    rd_kafka_topic_partition_list_destroy(sub);
    if (err) {
        tally_log(TALLY_LOG_ERR, "meter", "subscribe failed: %s", rd_kafka_err2str(err));
        return TALLY_KAFKA;
    }
    if (pipeline_start(c))
        return TALLY_NOMEM;
    c->stop = stop;
    int64_t start_ms = c->start_ms = cons_now_ms();
    c->next_progress_ms = start_ms + PROGRESS_MS;
    while (!(stop && *stop) && !c->fatal) {
        group_start_pending(c);
        if (c->fatal)
            break;
        consume_once(c);
        int64_t now_ms = cons_now_ms();
        progress_tick(c, progress, ctx, start_ms, now_ms);
        if (idle_done(c, now_ms))
            break;
    }
    pipeline_seal(c, true);
    pipeline_stop(c);
    c->st.lag = group_lag(c);
    return c->fatal;
}
