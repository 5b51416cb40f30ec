/* A Kafka producer for code that must not speak librdkafka (the HTTP server,
 * the demo): Tally's one producer configuration (tally/kafka_conf.h) behind
 * an opaque handle.
 *
 * Delivery reports are served by tally_producer_serve on the caller's thread.
 * An event loop can wait on tally_producer_wake_fd, which becomes readable
 * when reports are waiting. */
#ifndef TALLY_PRODUCER_H
#define TALLY_PRODUCER_H

#include <stddef.h>
#include <stdint.h>

#include "tally/buf.h"
#include "tally/err.h"
#include "tally/ledger.h"

typedef struct tally_producer tally_producer;

/* Called once per message from tally_producer_serve (or _destroy): e is
 * TALLY_OK when the broker has it, else TALLY_KAFKA with reason naming the
 * Kafka error. msg_ctx is the pointer given to tally_producer_send. */
typedef void (*tally_delivery_fn)(void *msg_ctx, tally_err e, const char *reason);

typedef struct tally_producer_opts {
    const char *brokers;           /* required */
    const char *client_id;         /* required */
    tally_delivery_fn on_delivery; /* NULL: reports are dropped */
} tally_producer_opts;

/* Errors: TALLY_INVAL (opts), TALLY_KAFKA, TALLY_NOMEM; why says what. */
TALLY_MUST_CHECK tally_err tally_producer_create(const tally_producer_opts *o, tally_producer **out,
                                                 char *why, size_t cap);

/* Queues one message (copied). topic and key are borrowed for the call.
 * Errors: TALLY_BUSY (the local queue is full: serve, then retry),
 * TALLY_KAFKA (anything else). */
TALLY_MUST_CHECK tally_err tally_producer_send(tally_producer *p, const char *topic,
                                               const char *key, size_t key_len, const void *value,
                                               size_t len, void *msg_ctx);

/* Serves waiting delivery reports, waiting up to timeout_ms for the first. */
void tally_producer_serve(tally_producer *p, int timeout_ms);

/* A non-blocking descriptor that becomes readable when reports are waiting;
 * created on the first call, owned by p. Errors: TALLY_IO. */
TALLY_MUST_CHECK tally_err tally_producer_wake_fd(tally_producer *p, int *fd);

/* Waits up to timeout_ms for every queued message's report.
 * Errors: TALLY_KAFKA (some are still outstanding). */
TALLY_MUST_CHECK tally_err tally_producer_flush(tally_producer *p, int timeout_ms);

/* Flushes for up to flush_ms, fails what is left (each gets its report), and
 * frees p. Accepts NULL. */
void tally_producer_destroy(tally_producer *p, int flush_ms);

/* Appends Prometheus lines tally_consumer_lag{topic,partition} for every
 * partition of topic: the high watermark less the ledger's stored offset.
 * Partitions whose figures are unavailable get a comment line instead.
 * Errors: those of tally_buf_printf. */
TALLY_MUST_CHECK tally_err tally_producer_lag(tally_producer *p, tally_ledger *l, const char *topic,
                                              tally_buf *out);

#endif
