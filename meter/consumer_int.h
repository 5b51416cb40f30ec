/* Internal to the meter (consumer.c, consumer_chunk.c, consumer_group.c).
 *
 * The main thread consumes from Kafka and decodes each message into a chunk
 * (tally_pipeline_decode, the ingest pipeline's first step, is stateless and
 * thread-safe). A full or old enough
 * chunk is sealed with each partition's (expected, new) offsets and handed
 * to the commit thread, which queues it (tally_pipeline_queue) into the one
 * tally_batch (so the
 * batch's open intervals keep coalescing across commits), commits, produces
 * dead-letter copies and releases the messages. Two chunks alternate, so
 * decoding the next overlaps committing the last. Only the commit thread
 * touches the ledger while a chunk is in flight; the main thread reads
 * stored offsets only when none is. */
#ifndef TALLY_CONSUMER_INT_H
#define TALLY_CONSUMER_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "tally/event.h"
#include "tally/kafka_conf.h"
#include "tally/ledger.h"
#include "tally/meter.h"
#include "tally/pipeline.h"

#define CHUNK_DUE_BYTES ((size_t)16 << 20) /* payload bytes that make a chunk due */
#define CHUNK_MAX_BYTES ((size_t)64 << 20) /* payload bytes one chunk may hold */
#define CHUNK_GROWTH    4   /* a chunk holds up to this many batches' worth while it waits */
#define ORIGIN_MAX      320 /* "kafka:" topic(<=249) "/" p "@" offset */

/* One consumed message, decoded. Its key and value are copied into the
 * chunk's arena, so the Kafka message (which pins its whole fetch response)
 * is released at once. */
typedef struct item {
    int32_t partition;
    int64_t offset;
    size_t raw_off, raw_len, key_off, key_len; /* in the chunk's arena */
    tally_decoded d;                           /* tally_pipeline_decode's result */
} item;

/* Where a chunk ends one partition: the CAS pair given to the ledger. */
typedef struct chunk_off {
    int32_t partition;
    int64_t expected_next, new_next;
} chunk_off;

typedef struct chunk {
    item *items;
    size_t n, cap;
    char *arena; /* keys and values of the items */
    size_t arena_len, arena_cap;
    chunk_off *offs;
    size_t n_offs, offs_cap;
    uint64_t gen;     /* marks partitions touched by this filling */
    int64_t first_ms; /* when its first message was queued */
    tally_event_result *results;
    /* Outcome, written by whoever commits it. */
    tally_err err;
    tally_batch_stats st;
    int64_t dlq;     /* dead-letter copies produced */
    bool dlq_failed; /* some copy was not confirmed */
} chunk;

/* What the meter knows about one partition of its topic. */
typedef struct part {
    bool assigned;
    bool warned_behind;
    bool kafka_hold; /* a dead-letter copy failed: commit no more offsets to Kafka */
    int64_t next;    /* offset after the last message decoded; -1: none yet */
    int64_t chain;   /* the ledger's next offset once every sealed chunk commits */
    uint64_t gen;    /* gen of the last chunk that touched it */
} part;

struct tally_consumer {
    tally_ledger *l;
    tally_consumer_opts o;
    char topic[256];
    size_t topic_len;
    char group[256];
    char dlq_topic[256];
    rd_kafka_t *rk;
    rd_kafka_t *dlq;      /* producer, when a dead-letter topic is set */
    int64_t dlq_failures; /* failed deliveries not yet accounted for */
    tally_batch *b;

    part *parts;
    int32_t n_parts;
    bool joined;
    bool in_rebalance; /* inside the rebalance callback */
    bool closing;      /* leaving the group: assign nothing more */
    tally_err fatal;

    chunk chunks[2];
    int fill;       /* index of the chunk being filled */
    bool in_flight; /* chunks[1 - fill] is with the commit thread */
    uint64_t next_gen;

    /* The commit thread (absent with o.no_pipeline). */
    pthread_t thread;
    bool thread_started;
    bool sync_ready; /* mu and cv initialised */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    chunk *job;  /* handed to the thread */
    chunk *done; /* finished, not yet collected */
    bool quit;

    tally_consumer_stats st;
    int64_t start_ms;         /* when tally_consumer_run began */
    int64_t last_msg_ms;      /* last message taken, or the last assignment */
    int64_t last_error_ms;    /* last Kafka error reported */
    int64_t next_progress_ms; /* when progress is due */
    int64_t last_progress_ms; /* when progress was last reported */
    int64_t progress_msgs;    /* st.messages at the last tick */

    volatile sig_atomic_t *stop; /* tally_consumer_run's stop flag, or NULL */
};

/* Milliseconds of a monotonic clock. */
int64_t cons_now_ms(void);

/* consumer_chunk.c */
tally_err chunk_init(chunk *k, size_t cap);
void chunk_free(chunk *k);
/* Copies a message's key and value into k's arena (the item's offsets).
 * Errors: TALLY_NOMEM. */
tally_err chunk_copy(chunk *k, item *it, const rd_kafka_message_t *m);
/* Empties the chunk (nothing is committed). */
void chunk_drop(chunk *k);
/* Queues k into the batch, commits it, produces dead-letter copies and
 * empties it; the outcome is left in k. Commit-thread side. */
void chunk_commit(tally_consumer *c, chunk *k);
tally_err pipeline_start(tally_consumer *c);
void pipeline_stop(tally_consumer *c);
/* Seals the chunk being filled (if it holds anything) and hands it over;
 * with wait, returns only once nothing is in flight. */
void pipeline_seal(tally_consumer *c, bool wait);
/* Drops the chunk being filled (its partitions restart from the ledger). */
void pipeline_drop_fill(tally_consumer *c);
/* Collects a finished chunk if there is one (blocking with wait). */
void pipeline_collect(tally_consumer *c, bool wait);

/* Writes "kafka:<topic>/<partition>@<offset>" into out (ORIGIN_MAX bytes). */
void origin_format(const tally_consumer *c, int32_t partition, int64_t offset, char *out);

/* consumer_dlq.c */
void dlq_configure(rd_kafka_conf_t *conf, tally_consumer *c);
/* Copies k's quarantined messages to the dead-letter topic and waits for
 * their delivery (sets k->dlq, k->dlq_failed). After k's commit. */
void dlq_chunk(tally_consumer *c, chunk *k);
/* Copies again the quarantined messages of partition at offsets [from, to);
 * false if any copy was not confirmed. */
bool dlq_replay(tally_consumer *c, int32_t partition, int64_t from, int64_t to);

/* consumer_group.c */
void group_rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                        rd_kafka_topic_partition_list_t *parts, void *opaque);
/* After a dropped (stale) chunk: re-reads every assigned partition's stored
 * offset and restarts consumption there. */
void group_resync(tally_consumer *c);
/* Messages behind the cached high watermarks; -1 if any is unknown. */
int64_t group_lag(tally_consumer *c);
/* The partition's state, or NULL if it is not in the table. */
part *group_part(tally_consumer *c, int32_t partition);
/* Commits the ledger's offsets to Kafka too (async; for lag monitoring). */
void group_commit_kafka(tally_consumer *c, const chunk *k);

/* consumer_shard.c: with o.shards, each partition writes into its shard. */
/* The ledger holding the partition: its shard's, if taken, else c->l. */
tally_ledger *shard_ledger_of(tally_consumer *c, int32_t partition);
/* Takes the partition's shard, waiting while another process holds its lock
 * (until *c->stop or closing), and reads its stored offset. */
tally_err shard_take(tally_consumer *c, int32_t partition, int64_t *next);
/* Lets go of the shards of partitions not in list. */
void shard_retain(tally_consumer *c, const rd_kafka_topic_partition_list_t *list);
/* Commits the chunk into its partitions' shards, one transaction each; k->st
 * holds what was stored even when a later shard failed. */
tally_err shard_chunk_commit(tally_consumer *c, chunk *k);

#endif
