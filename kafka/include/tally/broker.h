/* The embedded broker, a product command (`tally broker`).
 *
 * The embedded broker (tally_broker) is librdkafka's mock cluster: several
 * in-process brokers that speak enough of the Kafka protocol for producers,
 * consumer groups and offset commits. It listens on 127.0.0.1 only. Messages
 * live in memory only and each partition keeps about its newest 5 MB (and at
 * most 100,000 produced message sets); older data is dropped, as if by
 * retention. It is for the demo, tests and benchmarks, not for production. */
#ifndef TALLY_BROKER_H
#define TALLY_BROKER_H

#include <stddef.h>

#include "tally/err.h"

typedef struct tally_broker tally_broker;

typedef struct tally_broker_opts {
    int brokers;       /* mock brokers, ids 1..brokers; 0: 3 */
    int port;          /* 0: none; else also accept bootstrap connections on
                          127.0.0.1:port (see tally_broker_bootstrap) */
    const char *topic; /* NULL: "usage" */
    int partitions;    /* of topic; 0: 8 */
} tally_broker_opts;

/* Starts the mock cluster and creates the topic, "usage-dlq" (with as many
 * partitions as the topic) and "invoices" (1 partition). The mock cluster
 * binds ephemeral loopback ports that cannot be chosen; with opts->port set,
 * a forwarder listens on that port and relays each connection to the first
 * broker that accepts it. Clients bootstrap through it, but the cluster's
 * metadata still names the brokers' own ports, which clients then use
 * directly. On error *out is NULL and why says what failed.
 * Errors: TALLY_INVAL, TALLY_IO (port in use), TALLY_KAFKA, TALLY_NOMEM. */
TALLY_MUST_CHECK tally_err tally_broker_create(const tally_broker_opts *opts, tally_broker **out,
                                               char *why, size_t cap);

/* Stops the cluster (dropping its messages) and the forwarder; accepts NULL. */
void tally_broker_destroy(tally_broker *b);

/* The bootstrap.servers string: "127.0.0.1:<port>" when a port was asked
 * for, else the brokers' own "127.0.0.1:p1,127.0.0.1:p2,...". Owned by b. */
const char *tally_broker_bootstrap(const tally_broker *b);

/* Creates a topic (replication: min(3, brokers)).
 * Errors: TALLY_INVAL, TALLY_KAFKA (e.g. it exists). */
TALLY_MUST_CHECK tally_err tally_broker_topic_create(tally_broker *b, const char *topic,
                                                     int partitions);

/* Applies one fault-injection command, for tests:
 *   error API COUNT ERR   the next COUNT requests of API (Fetch, OffsetCommit,
 *                         JoinGroup, SyncGroup, Heartbeat, ...; or a number)
 *                         fail with ERR (a Kafka error name such as
 *                         NOT_COORDINATOR or UNKNOWN, or a number)
 *   clear API             drops the errors still pending for API
 *   down ID / up ID       takes broker ID off the network / back
 *   rtt ID MS             delays broker ID's responses by MS
 *   topic NAME N          creates topic NAME with N partitions
 * Errors: TALLY_PARSE (why says what is wrong), TALLY_KAFKA. */
TALLY_MUST_CHECK tally_err tally_broker_control(tally_broker *b, const char *line, char *why,
                                                size_t cap);

#endif
