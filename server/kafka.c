/* The server's Kafka producer: events posted over HTTP go to the usage topic
 * keyed by account, with the idempotent producer (acks=all, no duplicates or
 * reordering from retries). Delivery reports are served on the event loop:
 * librdkafka writes to a pipe when its queue becomes non-empty, and a
 * libevent read event on the pipe polls the queue dry. A slow timer polls
 * too, as a safety net. Also: consumer lag for /metrics. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <librdkafka/rdkafka.h>

#include "server_int.h"
#include "tally/shard.h"

#define FLUSH_MS       5000
#define MSG_TIMEOUT_MS "15000"
#define WATERMARK_MS   2000
#define SAFETY_POLL_US 200000

struct srv_kafka {
    rd_kafka_t *rk;
    rd_kafka_queue_t *main_q;
    int pipe_fd[2];
    struct event *wake, *tick;
};

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    srv_delivery *d = m->_private;
    if (!d)
        return;
    srv_events_call *ec = d->ec;
    srv_event_result *r = &ec->results[d->index];
    if (m->err) {
        r->status = SRV_EV_FAILED;
        snprintf(r->reason, sizeof r->reason, "%s", rd_kafka_err2name(m->err));
    } else {
        r->status = SRV_EV_PRODUCED;
    }
    if (--ec->pending == 0)
        srv_events_answer(ec);
}

static tally_err conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, char *why,
                          size_t cap)
{
    char err[256];
    if (rd_kafka_conf_set(conf, name, value, err, sizeof err) == RD_KAFKA_CONF_OK)
        return TALLY_OK;
    snprintf(why, cap, "kafka %s: %s", name, err);
    return TALLY_KAFKA;
}

tally_err srv_kafka_create(const char *brokers, srv_kafka **out, char *why, size_t cap)
{
    static const char *const settings[][2] = {
        {"enable.idempotence", "true"},
        {"acks", "all"},
        {"linger.ms", "2"},
        {"message.timeout.ms", MSG_TIMEOUT_MS},
        {"client.id", "tally-serve"},
        /* events are keyed by account: the partition every Tally producer picks */
        {"partitioner", TALLY_KAFKA_PARTITIONER},
    };
    *out = NULL;
    srv_kafka *k = calloc(1, sizeof *k);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    tally_err e = k && conf ? conf_set(conf, "bootstrap.servers", brokers, why, cap) : TALLY_NOMEM;
    for (size_t i = 0; i < sizeof settings / sizeof *settings && !e; i++)
        e = conf_set(conf, settings[i][0], settings[i][1], why, cap);
    if (e)
        goto fail;
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    char err[256];
    k->pipe_fd[0] = k->pipe_fd[1] = -1;
    k->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!k->rk) {
        snprintf(why, cap, "kafka producer: %s", err);
        e = TALLY_KAFKA;
        goto fail;
    }
    *out = k;
    return TALLY_OK;
fail:
    if (conf)
        rd_kafka_conf_destroy(conf);
    free(k);
    return e;
}

static void serve_queue(srv_kafka *k)
{
    while (rd_kafka_poll(k->rk, 0) > 0)
        ;
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    char drain[64];
    while (read(fd, drain, sizeof drain) > 0)
        ;
    serve_queue(arg);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    serve_queue(arg);
}

tally_err srv_kafka_attach(srv_kafka *k, struct event_base *base)
{
    if (pipe(k->pipe_fd) != 0)
        return TALLY_IO;
    for (int i = 0; i < 2; i++)
        if (fcntl(k->pipe_fd[i], F_SETFL, O_NONBLOCK) != 0 ||
            fcntl(k->pipe_fd[i], F_SETFD, FD_CLOEXEC) != 0)
            return TALLY_IO;
    k->wake = event_new(base, k->pipe_fd[0], EV_READ | EV_PERSIST, on_wake, k);
    k->tick = event_new(base, -1, EV_PERSIST, on_tick, k);
    struct timeval tv = {0, SAFETY_POLL_US};
    if (!k->wake || !k->tick || event_add(k->wake, NULL) != 0 || event_add(k->tick, &tv) != 0)
        return TALLY_IO;
    k->main_q = rd_kafka_queue_get_main(k->rk);
    rd_kafka_queue_io_event_enable(k->main_q, k->pipe_fd[1], "1", 1);
    return TALLY_OK;
}

void srv_kafka_destroy(srv_kafka *k)
{
    if (!k)
        return;
    /* Every request still waiting is answered: delivered, or failed. */
    if (rd_kafka_flush(k->rk, FLUSH_MS) != RD_KAFKA_RESP_ERR_NO_ERROR)
        rd_kafka_purge(k->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    serve_queue(k);
    if (k->main_q) {
        rd_kafka_queue_io_event_enable(k->main_q, -1, NULL, 0);
        rd_kafka_queue_destroy(k->main_q);
    }
    rd_kafka_destroy(k->rk);
    if (k->wake)
        event_free(k->wake);
    if (k->tick)
        event_free(k->tick);
    for (int i = 0; i < 2; i++)
        if (k->pipe_fd[i] >= 0)
            close(k->pipe_fd[i]);
    free(k);
}

tally_err srv_kafka_produce(srv_kafka *k, const char *topic, const char *key, const char *value,
                            size_t len, srv_delivery *d)
{
    rd_kafka_resp_err_t err = rd_kafka_producev(
        k->rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, strlen(key)),
        RD_KAFKA_V_VALUE((void *)value, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_OPAQUE(d), RD_KAFKA_V_END);
    return err == RD_KAFKA_RESP_ERR_NO_ERROR ? TALLY_OK : TALLY_KAFKA;
}

/* ---- Consumer lag ---------------------------------------------------------- */

static tally_err lag_line(srv_kafka *k, tally_ledger *l, const char *topic, int32_t p,
                          tally_buf *out)
{
    int64_t lo = 0, hi = 0, next = -1;
    if (rd_kafka_query_watermark_offsets(k->rk, topic, p, &lo, &hi, WATERMARK_MS) !=
            RD_KAFKA_RESP_ERR_NO_ERROR ||
        tally_ledger_offset_get(l, topic, p, &next) != TALLY_OK)
        return tally_buf_printf(out, "# partition %d: watermarks or stored offset unavailable\n",
                                (int)p);
    int64_t lag = hi - (next >= 0 ? next : lo);
    /* Kafka topic names are [a-zA-Z0-9._-]: nothing to escape in the label. */
    return tally_buf_printf(out, "tally_consumer_lag{topic=\"%s\",partition=\"%d\"} %lld\n", topic,
                            (int)p, (long long)(lag > 0 ? lag : 0));
}

tally_err srv_kafka_lag(srv_kafka *k, tally_ledger *l, const char *topic, tally_buf *out)
{
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(k->rk, topic, NULL);
    tally_err e = tally_buf_puts(out, "# HELP tally_consumer_lag Messages of the usage topic not "
                                      "yet in the ledger (high watermark - stored offset).\n"
                                      "# TYPE tally_consumer_lag gauge\n");
    if (!e &&
        (!rkt || rd_kafka_metadata(k->rk, 0, rkt, &md, WATERMARK_MS) != RD_KAFKA_RESP_ERR_NO_ERROR))
        e = tally_buf_puts(out, "# tally_consumer_lag: broker metadata unavailable\n");
    else if (!e && md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
        for (int i = 0; i < md->topics[0].partition_cnt && !e; i++)
            e = lag_line(k, l, topic, md->topics[0].partitions[i].id, out);
    if (md)
        rd_kafka_metadata_destroy(md);
    if (rkt)
        rd_kafka_topic_destroy(rkt);
    return e;
}
