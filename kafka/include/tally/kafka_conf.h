/* Tally's one producer configuration, for the modules that speak librdkafka
 * themselves (kafka/, the meter's dead-letter copies, benchmarks). Everything
 * else produces through tally/producer.h and never sees librdkafka.
 *
 * Every producer Tally owns gets its settings here, so that all of them agree
 * on the partitioner (TALLY_KAFKA_PARTITIONER: a key lands on the partition
 * Java clients and tally_partition_of pick), on acknowledgements and on
 * idempotence. */
#ifndef TALLY_KAFKA_CONF_H
#define TALLY_KAFKA_CONF_H

#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "tally/err.h"

typedef enum tally_producer_kind {
    /* Usage and announcements (serve, demo, publisher): idempotent, acks=all,
     * so retries neither duplicate nor reorder. */
    TALLY_PRODUCER_EXACT,
    /* Dead-letter copies: at least once, keyed like the original. */
    TALLY_PRODUCER_COPIES,
    /* Benchmarks' load generators: large batches, long timeouts. */
    TALLY_PRODUCER_BULK,
} tally_producer_kind;

typedef struct tally_producer_conf_opts {
    const char *brokers;   /* bootstrap.servers; required */
    const char *client_id; /* required, e.g. "tally-publish" */
    tally_producer_kind kind;
    int64_t message_timeout_ms; /* 0: the kind's default */
} tally_producer_conf_opts;

/* A new librdkafka configuration for a producer of this kind; the caller
 * adds its callbacks and owns *out (rd_kafka_new takes it). On error *out is
 * NULL and why says which setting failed. Errors: TALLY_INVAL, TALLY_NOMEM. */
TALLY_MUST_CHECK tally_err tally_kafka_producer_conf(const tally_producer_conf_opts *o,
                                                     rd_kafka_conf_t **out, char *why, size_t cap);

#endif
