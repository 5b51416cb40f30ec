/* The publisher: sends the ledger's outbox (include/tally/outbox.h) to a
 * Kafka topic, "invoices" by default.
 *
 * It is an idempotent librdkafka producer (enable.idempotence=true,
 * acks=all). It reads pending events in id order, produces each one's
 * stored CloudEvent bytes with the account as the key (and the header
 * content-type: application/cloudevents+json), and stamps an event sent only
 * after the broker's acknowledgement (its delivery report) has arrived.
 *
 *   - Restart-safe at any point: an event is pending until stamped, and a
 *     pending event is always sent with the same bytes and id. A crash
 *     between the acknowledgement and the stamp sends that event again:
 *     delivery is at least once with stable ids, which is exactly once for
 *     consumers that dedupe by id. At most 128 events are produced and not
 *     yet stamped at any time, which bounds what one crash can repeat.
 *   - Broker down: each attempt is bounded by message_timeout_ms; events that
 *     fail stay pending and are retried, oldest first, after a backoff that
 *     doubles up to backoff_max_ms. Nothing is dropped.
 *   - Order: one account's events share a partition and are produced in id
 *     order. After a failed delivery the failed event is produced again
 *     after any later events that were already in flight and went through,
 *     so a consumer may then see them out of id order.
 *
 * A tally_publisher uses the ledger from the thread that calls
 * tally_publisher_run; the ledger is borrowed and must outlive it. */
#ifndef TALLY_PUBLISH_H
#define TALLY_PUBLISH_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "tally/err.h"
#include "tally/ledger.h"

#define TALLY_PUBLISH_TOPIC "invoices"

typedef struct tally_publisher tally_publisher;

typedef struct tally_publish_opts {
    const char *brokers;        /* bootstrap.servers */
    const char *topic;          /* NULL: "invoices" */
    int64_t until_idle_ms;      /* > 0: return once nothing was pending or in flight for
                                   this long; 0: run until stopped */
    int64_t deadline_ms;        /* > 0: stop after this long; TALLY_KAFKA if events are
                                   still pending then */
    int64_t message_timeout_ms; /* bound on one delivery attempt; 0: 10,000 */
    int64_t backoff_max_ms;     /* longest wait between retry rounds; 0: 10,000 */
} tally_publish_opts;

typedef struct tally_publish_stats {
    int64_t published;    /* acknowledged and stamped sent by this publisher */
    int64_t produced;     /* messages handed to the producer, retries included */
    int64_t failures;     /* failed delivery attempts (the events stay pending) */
    int64_t retries;      /* rounds that started over from the oldest pending event */
    int64_t in_flight;    /* produced, no delivery report yet */
    int64_t pending;      /* events pending in the outbox at the last look; -1: unknown */
    char last_error[256]; /* the latest delivery or client error; "" if none */
} tally_publish_stats;

/* Called about once a second from tally_publisher_run. */
typedef void (*tally_publish_progress_fn)(void *ctx, const tally_publish_stats *st,
                                          int64_t elapsed_ms);

/* Creates the producer (it connects lazily: a broker that is not up yet is
 * not an error). On error *out is NULL and why says what failed.
 * Errors: TALLY_INVAL (options), TALLY_KAFKA, TALLY_NOMEM. */
TALLY_MUST_CHECK tally_err tally_publisher_create(tally_ledger *l, const tally_publish_opts *opts,
                                                  tally_publisher **out, char *why, size_t cap);

/* Publishes until *stop becomes non-zero (e.g. set by a SIGTERM handler;
 * stop may be NULL), until idle (until_idle_ms) or until the deadline. Then
 * it produces nothing new, waits up to message_timeout_ms + 1 s for the
 * reports of what is in flight, and stamps what was acknowledged; what was
 * not acknowledged stays pending. A stop returns TALLY_OK. progress may be
 * NULL.
 * Errors: TALLY_KAFKA (the deadline passed with events pending, or the
 * producer could not be recreated after a fatal error), TALLY_DB, TALLY_IO,
 * TALLY_BUSY (the ledger refused or held off a stamp: those events stay
 * pending and are sent again), TALLY_NOMEM. */
TALLY_MUST_CHECK tally_err tally_publisher_run(tally_publisher *p, volatile sig_atomic_t *stop,
                                               tally_publish_progress_fn progress, void *ctx);

/* Totals so far. */
void tally_publisher_stats_get(const tally_publisher *p, tally_publish_stats *out);

/* Frees p, dropping anything still queued (those events stay pending);
 * accepts NULL. */
void tally_publisher_destroy(tally_publisher *p);

/* Publishes what is pending and returns TALLY_OK once the outbox is empty,
 * or TALLY_KAFKA after timeout_ms (> 0) with events still pending (plus at
 * most min(timeout_ms, 10 s) + 1 s for what is then in flight). *published
 * (may be NULL) is the number of events stamped sent. For `tally demo` and
 * tests.
 * Errors: TALLY_INVAL, TALLY_KAFKA, and those of tally_publisher_run. */
TALLY_MUST_CHECK tally_err tally_publish_drain(tally_ledger *l, const char *brokers,
                                               const char *topic, int timeout_ms,
                                               size_t *published);

#endif
