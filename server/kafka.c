/* The server's Kafka producer: events posted over HTTP go to the usage topic
 * keyed by account, through Tally's one producer configuration
 * (tally/producer.h: idempotent, acks=all). Delivery reports are served on
 * the event loop: the producer's wake descriptor becomes readable when
 * reports are waiting, and a libevent read event serves them. A slow timer
 * serves them too, as a safety net. Also: consumer lag for /metrics. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "server_int.h"
#include "tally/producer.h"

#define FLUSH_MS       5000
#define SAFETY_POLL_US 200000

struct srv_kafka {
    tally_producer *p;
    struct event *wake, *tick;
};

static void on_delivery(void *msg_ctx, tally_err e, const char *reason)
{
    srv_delivery *d = msg_ctx;
    if (!d)
        return;
    srv_events_call *ec = d->ec;
    srv_event_result *r = &ec->results[d->index];
    if (e) {
        r->status = SRV_EV_FAILED;
        snprintf(r->reason, sizeof r->reason, "%s", reason);
    } else {
        r->status = SRV_EV_PRODUCED;
    }
    if (--ec->pending == 0)
        srv_events_answer(ec);
}

tally_err srv_kafka_create(const char *brokers, srv_kafka **out, char *why, size_t cap)
{
    *out = NULL;
    srv_kafka *k = calloc(1, sizeof *k);
    if (!k)
        return TALLY_NOMEM;
    tally_producer_opts o = {
        .brokers = brokers, .client_id = "tally-serve", .on_delivery = on_delivery};
    tally_err e = tally_producer_create(&o, &k->p, why, cap);
    if (e) {
        free(k);
        return e;
    }
    *out = k;
    return TALLY_OK;
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    srv_kafka *k = arg;
    tally_producer_serve(k->p, 0);
}

tally_err srv_kafka_attach(srv_kafka *k, struct event_base *base)
{
    int fd = -1;
    tally_err e = tally_producer_wake_fd(k->p, &fd);
    if (e)
        return e;
    k->wake = event_new(base, fd, EV_READ | EV_PERSIST, on_wake, k);
    k->tick = event_new(base, -1, EV_PERSIST, on_wake, k);
    struct timeval tv = {0, SAFETY_POLL_US};
    if (!k->wake || !k->tick || event_add(k->wake, NULL) != 0 || event_add(k->tick, &tv) != 0)
        return TALLY_IO;
    return TALLY_OK;
}

void srv_kafka_destroy(srv_kafka *k)
{
    if (!k)
        return;
    /* Every request still waiting is answered: delivered, or failed. */
    tally_producer_destroy(k->p, FLUSH_MS);
    if (k->wake)
        event_free(k->wake);
    if (k->tick)
        event_free(k->tick);
    free(k);
}

tally_err srv_kafka_produce(srv_kafka *k, const char *topic, const char *key, const char *value,
                            size_t len, srv_delivery *d)
{
    tally_err e = tally_producer_send(k->p, topic, key, strlen(key), value, len, d);
    return e == TALLY_BUSY ? TALLY_KAFKA : e;
}

tally_err srv_kafka_lag(srv_kafka *k, tally_ledger *l, const char *topic, tally_buf *out)
{
    return tally_producer_lag(k->p, l, topic, out);
}
