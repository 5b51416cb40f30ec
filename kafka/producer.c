/* The librdkafka-free producer (tally/producer.h) and consumer lag. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tally/kafka_conf.h"
#include "tally/producer.h"

#define WATERMARK_MS 2000

struct tally_producer {
    rd_kafka_t *rk;
    rd_kafka_queue_t *main_q;
    tally_delivery_fn on_delivery;
    int pipe_fd[2];
};

static void on_report(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    tally_producer *p = opaque;
    if (!p->on_delivery)
        return;
    p->on_delivery(m->_private, m->err ? TALLY_KAFKA : TALLY_OK,
                   m->err ? rd_kafka_err2name(m->err) : "");
}

tally_err tally_producer_create(const tally_producer_opts *o, tally_producer **out, char *why,
                                size_t cap)
{
    *out = NULL;
    tally_producer *p = calloc(1, sizeof *p);
    if (!p)
        return TALLY_NOMEM;
    p->pipe_fd[0] = p->pipe_fd[1] = -1;
    p->on_delivery = o ? o->on_delivery : NULL;
    rd_kafka_conf_t *conf = NULL;
    tally_producer_conf_opts co = {.brokers = o ? o->brokers : NULL,
                                   .client_id = o ? o->client_id : NULL,
                                   .kind = TALLY_PRODUCER_EXACT};
    tally_err e = tally_kafka_producer_conf(&co, &conf, why, cap);
    if (e) {
        free(p);
        return e;
    }
    rd_kafka_conf_set_dr_msg_cb(conf, on_report);
    rd_kafka_conf_set_opaque(conf, p);
    char err[256];
    p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!p->rk) {
        rd_kafka_conf_destroy(conf);
        free(p);
        snprintf(why, cap, "kafka producer: %s", err);
        return TALLY_KAFKA;
    }
    *out = p;
    return TALLY_OK;
}

tally_err tally_producer_send(tally_producer *p, const char *topic, const char *key, size_t key_len,
                              const void *value, size_t len, void *msg_ctx)
{
    rd_kafka_resp_err_t err = rd_kafka_producev(
        p->rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, key_len),
        RD_KAFKA_V_VALUE((void *)value, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_OPAQUE(msg_ctx), RD_KAFKA_V_END);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
        return TALLY_OK;
    return err == RD_KAFKA_RESP_ERR__QUEUE_FULL ? TALLY_BUSY : TALLY_KAFKA;
}

void tally_producer_serve(tally_producer *p, int timeout_ms)
{
    if (p->pipe_fd[0] >= 0) {
        char drain[64];
        while (read(p->pipe_fd[0], drain, sizeof drain) > 0)
            ;
    }
    if (rd_kafka_poll(p->rk, timeout_ms) > 0)
        while (rd_kafka_poll(p->rk, 0) > 0)
            ;
}

tally_err tally_producer_wake_fd(tally_producer *p, int *fd)
{
    if (p->pipe_fd[0] >= 0) {
        *fd = p->pipe_fd[0];
        return TALLY_OK;
    }
    if (pipe(p->pipe_fd) != 0)
        return TALLY_IO;
    for (int i = 0; i < 2; i++)
        if (fcntl(p->pipe_fd[i], F_SETFL, O_NONBLOCK) != 0 ||
            fcntl(p->pipe_fd[i], F_SETFD, FD_CLOEXEC) != 0)
            return TALLY_IO;
    p->main_q = rd_kafka_queue_get_main(p->rk);
    rd_kafka_queue_io_event_enable(p->main_q, p->pipe_fd[1], "1", 1);
    *fd = p->pipe_fd[0];
    return TALLY_OK;
}

tally_err tally_producer_flush(tally_producer *p, int timeout_ms)
{
    return rd_kafka_flush(p->rk, timeout_ms) == RD_KAFKA_RESP_ERR_NO_ERROR ? TALLY_OK : TALLY_KAFKA;
}

void tally_producer_destroy(tally_producer *p, int flush_ms)
{
    if (!p)
        return;
    /* Every message still queued gets its report: delivered, or failed. */
    if (rd_kafka_flush(p->rk, flush_ms) != RD_KAFKA_RESP_ERR_NO_ERROR)
        rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    tally_producer_serve(p, 0);
    if (p->main_q) {
        rd_kafka_queue_io_event_enable(p->main_q, -1, NULL, 0);
        rd_kafka_queue_destroy(p->main_q);
    }
    rd_kafka_destroy(p->rk);
    for (int i = 0; i < 2; i++)
        if (p->pipe_fd[i] >= 0)
            close(p->pipe_fd[i]);
    free(p);
}

/* ---- Consumer lag ---------------------------------------------------------- */

static tally_err lag_line(tally_producer *p, tally_ledger *l, const char *topic, int32_t part,
                          tally_buf *out)
{
    int64_t lo = 0, hi = 0, next = -1;
    if (rd_kafka_query_watermark_offsets(p->rk, topic, part, &lo, &hi, WATERMARK_MS) !=
            RD_KAFKA_RESP_ERR_NO_ERROR ||
        tally_ledger_offset_get(l, topic, part, &next) != TALLY_OK)
        return tally_buf_printf(out, "# partition %d: watermarks or stored offset unavailable\n",
                                (int)part);
    int64_t lag = hi - (next >= 0 ? next : lo);
    /* Kafka topic names are [a-zA-Z0-9._-]: nothing to escape in the label. */
    return tally_buf_printf(out, "tally_consumer_lag{topic=\"%s\",partition=\"%d\"} %lld\n", topic,
                            (int)part, (long long)(lag > 0 ? lag : 0));
}

tally_err tally_producer_lag(tally_producer *p, tally_ledger *l, const char *topic, tally_buf *out)
{
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(p->rk, topic, NULL);
    tally_err e = tally_buf_puts(out, "# HELP tally_consumer_lag Messages of the usage topic not "
                                      "yet in the ledger (high watermark - stored offset).\n"
                                      "# TYPE tally_consumer_lag gauge\n");
    if (!e &&
        (!rkt || rd_kafka_metadata(p->rk, 0, rkt, &md, WATERMARK_MS) != RD_KAFKA_RESP_ERR_NO_ERROR))
        e = tally_buf_puts(out, "# tally_consumer_lag: broker metadata unavailable\n");
    else if (!e && md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
        for (int i = 0; i < md->topics[0].partition_cnt && !e; i++)
            e = lag_line(p, l, topic, md->topics[0].partitions[i].id, out);
    if (md)
        rd_kafka_metadata_destroy(md);
    if (rkt)
        rd_kafka_topic_destroy(rkt);
    return e;
}
