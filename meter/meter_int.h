/* The meter module's one private header: the strict JSON scanner that the
 * event decoder reads with, then the Kafka consumer's internals. */
#ifndef TALLY_METER_INT_H
#define TALLY_METER_INT_H

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tally/event.h"
#include "tally/kafka_conf.h"
#include "tally/ledger.h"
#include "tally/meter.h"
#include "tally/pipeline.h"

/* ======== the JSON scanner (json_scan.c) ======== */

/* A small, strict, allocation-free JSON scanner (RFC 8259), internal to the
 * meter module. It is what tally_event_decode() reads events with.
 *
 * The scanner walks a buffer in place: the caller pulls an object's members
 * one at a time and either descends into a value or reads it whole. Reading
 * a value validates it completely (nested containers included) and hands back
 * where its text lies in the buffer; nothing is copied or allocated. String
 * contents are returned raw, escapes intact, and json_str_decode() unescapes
 * them on demand. Numbers are returned as their exact text.
 *
 * Strictness: whitespace is space, tab, CR and LF only; strings must be valid
 * UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF), with no raw
 * control characters, only the eight short escapes and \uXXXX, and no lone
 * surrogate in a \u escape; numbers follow the RFC grammar exactly (no leading
 * zeros, no "1.", no "+1"); literals are lower case; a value may be nested at
 * most JSON_MAX_DEPTH deep, the document's top value being at level 1 and
 * every value, scalars included, counting as a level. A document is one value
 * with only whitespace around it; the scanner does not look for duplicate
 * keys (its caller does, for the objects it reads).
 *
 * Errors are sticky: the first one is kept (a static message and the byte
 * offset where it was found) and every later call fails. */

#define JSON_MAX_DEPTH 32

typedef enum json_kind {
    JSON_ABSENT = 0, /* not read: used by callers for "no such member" */
    JSON_STRING,
    JSON_NUMBER,
    JSON_TRUE,
    JSON_FALSE,
    JSON_NULL,
    JSON_OBJECT,
    JSON_ARRAY,
} json_kind;

/* A value's place in the buffer. For a string, p/len are the bytes between
 * the quotes (escapes intact); for anything else the value's whole text. */
typedef struct json_val {
    const char *p;
    size_t len;
    json_kind type;
    bool escaped; /* string only: holds at least one backslash escape */
} json_val;

typedef struct json_scan {
    const char *start, *p, *end;
    const char *err; /* first error, a static string; NULL while there is none */
    size_t err_at;   /* its byte offset from start */
} json_scan;

/* Prepares to scan buf[0..len). buf is borrowed and need not be
 * NUL-terminated; nothing past buf + len is read. */
void json_scan_init(json_scan *s, const char *buf, size_t len);

/* Records an error found by the caller (say, a duplicate key) at `at`, a
 * place in the buffer, as if the scanner had found it; returns false. */
bool json_scan_fail(json_scan *s, const char *at, const char *msg);

/* Consumes the '{' of an object at nesting level `level`; its members are
 * then read with json_scan_member(), their values at level + 1. */
bool json_scan_object_begin(json_scan *s, int level);

/* Succeeds if only whitespace is left. */
bool json_scan_finish(json_scan *s);

/* Validates a whole document: one value, only whitespace around it. */
bool json_scan_document(json_scan *s, const char *buf, size_t len);

/* Unescapes the contents of a string value read by the scanner (so already
 * valid) into dst, writing at most cap bytes and no NUL. Returns the full
 * decoded length, which may exceed cap. */
size_t json_str_decode(const json_val *v, char *dst, size_t cap);

/* Whether two string values read by the scanner decode to the same bytes. */
bool json_str_equal(const json_val *a, const json_val *b);

/* ---- Inline fast paths ------------------------------------------------------
 * The functions below are the scanner's inner loop: inline so that a caller
 * walking an event pays no call per member. They handle compact ASCII JSON
 * themselves and hand anything else (white space, escapes, non-ASCII bytes,
 * numbers, containers, errors) to the out-of-line functions that follow. */

char json_scan_peek_slow(json_scan *s);
bool json_scan_string_slow(json_scan *s, const char *q, json_val *v);
bool json_scan_value_slow(json_scan *s, int level, json_val *v);
enum json_member_place { JSON_AFTER_MEMBER, JSON_BEFORE_KEY, JSON_AFTER_KEY };
int json_scan_member_error(json_scan *s, enum json_member_place where);

/* Skips whitespace and returns the next byte without consuming it, or 0 at
 * the end of the buffer or after an error. */
static inline char json_scan_peek(json_scan *s)
{
    if (s->p < s->end && (unsigned char)*s->p > ' ')
        return *s->p;
    return json_scan_peek_slow(s);
}

/* The high bit of each byte of w that a string scan must stop at: a quote, a
 * backslash, a control character or a non-ASCII byte. The lowest flagged
 * byte is always a true one (borrows only carry upwards); that is all a scan
 * uses. */
static inline uint64_t json_string_stops(uint64_t w)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t quote = w ^ (ones * '"'), bslash = w ^ (ones * '\\');
    uint64_t stops =
        ((quote - ones) & ~quote) | ((bslash - ones) & ~bslash) | ((w - ones * 0x20) & ~w) | w;
    return stops & highs;
}

/* Reads the string at s->p (a quote) into *v, eight bytes at a time. */
static inline bool json_scan_string(json_scan *s, json_val *v)
{
    const char *q = s->p + 1;
    while (s->end - q >= 8) {
        uint64_t w;
        memcpy(&w, q, 8);
        uint64_t stops = json_string_stops(w);
        if (stops) {
            q += (unsigned)__builtin_ctzll(stops) / 8;
            if (*q != '"')
                break;
            v->type = JSON_STRING;
            v->p = s->p + 1;
            v->len = (size_t)(q - v->p);
            v->escaped = false;
            s->p = q + 1;
            return true;
        }
        q += 8;
    }
    return json_scan_string_slow(s, q, v);
}

/* Reads one whole value at nesting level `level` into *v (v may be NULL). */
static inline bool json_scan_value(json_scan *s, int level, json_val *v)
{
    json_val unused;
    if (json_scan_peek(s) == '"' && level <= JSON_MAX_DEPTH)
        return json_scan_string(s, v ? v : &unused);
    return json_scan_value_slow(s, level, v);
}

/* Reads the next member key of the object being read, and the ':' after it.
 * *first must be true on the first call after json_scan_object_begin() (it
 * is cleared). Returns 1 with *key set (the value is next), 0 after the
 * closing '}', -1 on error. */
static inline int json_scan_member(json_scan *s, bool *first, json_val *key)
{
    char c = json_scan_peek(s);
    if (*first) {
        *first = false;
        if (c == '}') {
            s->p++;
            return 0;
        }
    } else if (c == ',') {
        s->p++;
        c = json_scan_peek(s);
    } else if (c == '}') {
        s->p++;
        return 0;
    } else {
        return json_scan_member_error(s, JSON_AFTER_MEMBER);
    }
    if (c != '"')
        return json_scan_member_error(s, JSON_BEFORE_KEY);
    if (!json_scan_string(s, key))
        return -1;
    if (json_scan_peek(s) != ':')
        return json_scan_member_error(s, JSON_AFTER_KEY);
    s->p++;
    return 1;
}

/* ======== the consumer (consumer*.c) ======== */

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

#define CHUNK_DUE_BYTES ((size_t)16 << 20) /* payload bytes that make a chunk due */
#define CHUNK_MAX_BYTES ((size_t)64 << 20) /* payload bytes one chunk may hold */
#define CHUNK_GROWTH    4   /* a chunk holds up to this many batches' worth while it waits */
#define ORIGIN_MAX      320 /* "kafka:" topic(<=249) "/" p "@" offset ["+r" epoch] */

/* One consumed message, decoded. Its key and value are copied into the
 * chunk's arena, so the Kafka message (which pins its whole fetch response)
 * is released at once. */
typedef struct item {
    bool tombstone; /* the message had no value (a null, not an empty one) */
    int32_t partition;
    int64_t offset;
    size_t raw_off, raw_len, key_off, key_len; /* in the chunk's arena */
    size_t origin_off;                         /* ... NUL-terminated (origin_format) */
    tally_decoded d;                           /* tally_pipeline_decode's result */
} item;

/* Where a chunk ends one partition: the CAS pair given to the ledger. */
typedef struct chunk_off {
    int32_t partition;
    int64_t expected_next, new_next;
    int64_t mark; /* message_mark of the message at new_next - 1 */
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
    bool assigned; /* ours and consumed */
    bool pending;  /* ours, paused until its watermarks are checked (group_start_pending) */
    bool checked;  /* pending, checked: it starts at start */
    bool has_mark; /* the ledger stored a mark with its offset */
    bool warned_behind;
    bool kafka_hold;     /* its chain ran ahead of the ledger: commit no more offsets to Kafka */
    int64_t next;        /* offset after the last message decoded; -1: none yet */
    int64_t chain;       /* the ledger's next offset once every sealed chunk commits */
    uint64_t gen;        /* gen of the last chunk that touched it */
    size_t last_item;    /* its last item in that chunk */
    int64_t verify_at;   /* offset re-read to check the log is the ledger's; -1: none */
    int64_t mark;        /* the ledger's mark of the message at verify_at */
    int64_t epoch;       /* restarts of its log the ledger accepted (origins' "+r<n>") */
    int64_t assigned_at; /* the offset it was assigned (or sought) at */
    int64_t start;       /* where it starts once checked */
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
    bool *dlq_ok;         /* which copies of the current round were delivered */
    size_t dlq_ok_cap;
    uint32_t dlq_round; /* in each copy's opaque, with its index */
    tally_batch *b;

    part *parts;
    int32_t n_parts;
    int32_t topic_parts; /* the topic's partition count from metadata; 0: unknown */
    bool joined;
    bool pending;             /* some partition is pending (not consumed yet) */
    bool unchecked;           /* some pending partition is not checked yet */
    int64_t pending_since_ms; /* when the last assignment made them pending */
    bool topic_parts_due;     /* topic_parts is read again before they start */
    bool in_rebalance;        /* inside the rebalance callback */
    bool closing;             /* leaving the group: assign nothing more */
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
/* Copies a message's key and value, and formats its origin, into k's arena
 * (the item's offsets); the batch borrows them from there until the commit
 * has returned. Errors: TALLY_NOMEM. */
tally_err chunk_copy(const tally_consumer *c, chunk *k, item *it, const rd_kafka_message_t *m);
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

/* Writes "kafka:<topic>/<partition>@<offset>" into out (ORIGIN_MAX bytes),
 * followed by "+r<epoch>" once the partition's log restarted (part.epoch). */
void origin_format(const tally_consumer *c, int32_t partition, int64_t offset, char *out);

/* consumer_dlq.c */
void dlq_configure(rd_kafka_conf_t *conf, tally_consumer *c);
/* Copies k's quarantined messages to the dead-letter topic and waits for
 * their delivery (sets k->dlq, k->dlq_failed). After k's commit. */
void dlq_chunk(tally_consumer *c, chunk *k);
/* Sends the copies of the partition's quarantined messages that the ledger
 * does not record as delivered; false if any copy was not confirmed. */
bool dlq_replay(tally_consumer *c, int32_t partition);

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

/* Re-assigns every partition that is ours from the ledger's offsets (so
 * their watermarks are checked again). Nothing may be in flight. */
void group_reassign(tally_consumer *c);
/* Outside the rebalance callback, from the poll loop: checks each pending
 * partition's watermarks (gap_check), then seeks it to its start if that is
 * not where it was assigned and resumes it; a partition with a gap that is
 * not accepted stays paused and the meter stops (c->fatal). Commits
 * whatever is in flight first. */
void group_start_pending(tally_consumer *c);

/* consumer_gap.c */
/* A mark of one message (a hash of its key and value), stored with the
 * offset after it so a restarted log can be told from the ledger's. */
int64_t message_mark(const void *key, size_t key_len, const void *val, size_t len);
/* On the first message of a partition being verified (p->verify_at):
 * returns true if it is to be skipped (it is the one the ledger ends at,
 * or the log was found restarted and handled). */
bool gap_verify(tally_consumer *c, part *p, const rd_kafka_message_t *m);
/* Checks a partition's stored next offset (*next, -1: none) against the
 * broker's watermarks. Returns 0 to go on from *next (moved to the log start
 * after an accepted gap, which is recorded in the ledger), -1 to stop the
 * partition (the gap is logged, counted in c->st and recorded as open).
 * Watermarks that cannot be read are no gap (0; *log_start -1). Blocks up
 * to WATERMARK_MS: never called in the rebalance callback. Nothing may be
 * in flight. */
int gap_check(tally_consumer *c, int32_t partition, int64_t *next, int64_t *log_start);
/* After librdkafka reported an offset reset (auto.offset.reset=error):
 * commits what is decoded and re-checks every assigned partition. */
void gap_on_reset(tally_consumer *c, const rd_kafka_message_t *m);

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
