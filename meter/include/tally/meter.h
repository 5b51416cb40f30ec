/* The meter: the Kafka consumer in front of the ingest pipeline.
 *
 * The meter (tally_consumer) is one member of a Kafka consumer group that
 * writes usage into a ledger exactly once: each partition's next offset is
 * stored in the ledger in the same transaction as the batch of events it
 * ends, with compare-and-set, so a restarted, rebalanced or stale member can
 * neither lose a message nor count it twice. Offsets are also committed to
 * Kafka after each ledger commit, but only so that lag can be watched and
 * dead-letter copies resumed (meter/consumer_dlq.c); the ledger is the
 * source of truth.
 *
 * With a dead-letter topic, each quarantined message is also copied there,
 * at least once, with headers tally-reason and tally-origin
 * ("kafka:<topic>/<partition>@<offset>": repeats carry the same origin). */
#ifndef TALLY_METER_H
#define TALLY_METER_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tally/err.h"
#include "tally/ledger.h"
#include "tally/shard.h"

/* ---- The meter ------------------------------------------------------------ */

typedef struct tally_consumer tally_consumer;

typedef struct tally_consumer_opts {
    const char *brokers;        /* bootstrap.servers (loopback) */
    const char *topic;          /* usage topic */
    const char *group;          /* consumer group; NULL: "tally-meter" */
    const char *dlq_topic;      /* NULL: rejected messages go to quarantine only */
    int64_t until_idle_ms;      /* > 0: return once joined, caught up and no message
                                   arrived for this long; 0: run until stopped */
    int64_t batch_events;       /* commit after this many messages; 0: 10,000 */
    int64_t batch_ms;           /* ... or this long after a batch's first; 0: 100 */
    int64_t session_timeout_ms; /* group session timeout, >= 3,000 (shorter ones never
                                   settle a group); 0: 10,000 */
    bool no_pipeline;           /* decode and commit on one thread (default: two) */
    /* NULL: every partition is written into the ledger given to
     * tally_consumer_create. Else (a ledger directory) each partition is
     * written into its own shard, taken from this set (borrowed; it must
     * outlive the consumer) when the partition is assigned, waiting while
     * another process holds its lock, and released when it is revoked. */
    tally_shard_set *shards;
    /* A partition whose stored offset the broker no longer has (below its
     * log start, or above its log end) stops the meter with an error,
     * unless it is accepted here: then the gap is recorded in the ledger
     * (offset_gaps) and the partition goes on from the log start.
     * accept_gap: comma-separated "TOPIC/PARTITION" list, or NULL. */
    const char *accept_gap;
    bool accept_gaps; /* accept a gap on any partition */
} tally_consumer_opts;

typedef struct tally_consumer_stats {
    int64_t messages;      /* consumed and committed to the ledger */
    int64_t accepted;      /* billed events */
    int64_t duplicates;    /* repeated (source, id): counted, not billed */
    int64_t conflicts;     /* same key, different content: quarantined */
    int64_t quarantined;   /* rejected messages (conflicts not included) */
    int64_t dlq;           /* copies produced to the dead-letter topic */
    int64_t batches;       /* ledger transactions committed */
    int64_t stale;         /* batches dropped because the offsets moved */
    int64_t rebalances;    /* assignments received */
    int64_t partitions;    /* partitions assigned now */
    int64_t lag;           /* messages behind the high watermarks; -1: unknown */
    int64_t first_ms;      /* from the start of the run to the first message; -1: none */
    int64_t last_ms;       /* from the start of the run to the last commit; -1: none */
    int64_t gaps;          /* partitions stopped at an offset gap not accepted */
    int64_t gaps_accepted; /* gaps recorded in the ledger and gone past */
    int32_t gap_partition; /* the last gap found: partition and [from, to) */
    int64_t gap_from, gap_to;
} tally_consumer_stats;

/* Called about once a second from tally_consumer_run. */
typedef void (*tally_consumer_progress_fn)(void *ctx, const tally_consumer_stats *st,
                                           int64_t elapsed_ms);

/* Creates a group member writing into l (borrowed; it must outlive c and not
 * be used by anyone else while tally_consumer_run runs). Nothing is consumed
 * before tally_consumer_run. On error *out is NULL and why says what failed.
 * Errors: TALLY_INVAL, TALLY_KAFKA, TALLY_NOMEM. */
TALLY_MUST_CHECK tally_err tally_consumer_create(tally_ledger *l, const tally_consumer_opts *opts,
                                                 tally_consumer **out, char *why, size_t cap);

/* Joins the group and consumes until *stop becomes non-zero (e.g. set by a
 * signal handler) or, with until_idle_ms, until idle. On return every
 * consumed message is in the ledger (or was never committed there, so the
 * group will deliver it again). progress may be NULL.
 * Errors: TALLY_DB, TALLY_IO (the ledger refused a commit: that batch is
 * stored whole or not at all, as its stored offsets show; a restart resumes
 * from them), TALLY_KAFKA (a fatal consumer error), TALLY_NOMEM. */
TALLY_MUST_CHECK tally_err tally_consumer_run(tally_consumer *c, volatile sig_atomic_t *stop,
                                              tally_consumer_progress_fn progress, void *ctx);

/* Totals so far. */
void tally_consumer_stats_get(const tally_consumer *c, tally_consumer_stats *out);

/* Leaves the group and frees c; accepts NULL. Flushes the dead-letter
 * producer for up to 5 seconds. */
void tally_consumer_destroy(tally_consumer *c);

#endif
