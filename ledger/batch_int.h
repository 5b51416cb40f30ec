/* Internal to the ingest batch (batch.c, batch_agg.c, batch_table.c).
 *
 * A batch queues copies of events and rejects in memory; commit writes them
 * in one transaction. Aggregation state lives here too:
 *   - open intervals: accelerator and storage usage being coalesced into
 *     usage_intervals rows; kept across commits (bounded, LRU-evicted) so a
 *     long-running instance keeps extending the same row;
 *   - points: traffic and token quantities summed per second for one commit.
 * Nothing here allocates per event: every array grows geometrically and is
 * reused from one commit to the next. */
#ifndef TALLY_BATCH_INT_H
#define TALLY_BATCH_INT_H

#include "ledger_int.h"

#define BATCH_ARENA_CAP    ((size_t)512 << 20) /* raw messages and origins of one batch */
#define BATCH_ITEMS_MAX    ((size_t)4 << 20)
#define IV_MAX             65536 /* open intervals remembered across commits */
#define IV_MAX_SPAN_S      86400 /* a usage_intervals row never covers more */
#define ACCOUNTS_KNOWN_MAX 4096  /* accounts known to exist, before the set is reset */

/* ---- An index of entries by 64-bit hash (open addressing, linear probing).
 * Slots hold entry index + 1 (0 = empty) so a zeroed table is empty. */
typedef struct idx_table {
    uint32_t *slots;
    uint64_t *hashes;
    size_t mask; /* capacity - 1; capacity is a power of two */
    size_t used;
} idx_table;

typedef bool (*idx_eq_fn)(const void *ctx, uint32_t idx);

/* Sizes t for at least n entries at load <= 1/2, emptying it. Errors: NOMEM. */
tally_err idx_table_reserve(idx_table *t, size_t n);
void idx_table_clear(idx_table *t);
void idx_table_free(idx_table *t);
/* The entry with this hash for which eq(ctx, idx) holds, or -1. */
int64_t idx_table_find(const idx_table *t, uint64_t hash, idx_eq_fn eq, const void *ctx);
/* Adds idx under hash; t must have room (reserved). */
void idx_table_insert(idx_table *t, uint64_t hash, uint32_t idx);
/* Removes idx (which must be present under hash). */
void idx_table_remove(idx_table *t, uint64_t hash, uint32_t idx);

/* ---- Items ----------------------------------------------------------------- */

typedef struct batch_item {
    bool is_event;
    size_t origin_off, raw_off, raw_len; /* in the arena; origin is NUL-terminated */
    union {
        tally_event ev;
        tally_reject rej;
    } u;
} batch_item;

typedef struct batch_offset {
    char topic[256];
    int32_t partition;
    int64_t expected_next, new_next;
} batch_offset;

/* An open interval: one usage_intervals row (stored or not yet). */
typedef struct iv_entry {
    uint64_t key_hash; /* of (account, meter, pricing, migration, resource, dim, weight) */
    int64_t row_id;    /* 0: not stored yet */
    int64_t start_s, end_s, weight;
    uint32_t lru_prev, lru_next; /* index + 1; 0 = none */
    bool dirty, live;
    uint8_t meter, pricing, migration;
    char account[TALLY_NAME_MAX], resource[TALLY_NAME_MAX], dim[TALLY_NAME_MAX];
} iv_entry;

/* A traffic or token quantity summed over one second within a commit. */
typedef struct pt_entry {
    const tally_event *ev; /* first event of this (account, meter, dim, dim2, t_s) */
    int64_t qty;
} pt_entry;

enum batch_stmt {
    ST_DEDUPE_INS,
    ST_DEDUPE_FP,
    ST_QUARANTINE,
    ST_IV_INS,
    ST_IV_UPD,
    ST_IV_DEL,
    ST_PT_INS,
    ST_PT_ADD,
    ST_OFF_INS,
    ST_OFF_UPD,
    ST_SEQ,
    ST_COUNT,
    ST_COUNT_OF
};

struct tally_batch {
    tally_ledger *l;
    sqlite3_stmt *st[ST_COUNT_OF];

    batch_item *items;
    size_t n_items, items_alloc, n_points_queued;
    char *arena;
    size_t arena_len, arena_alloc;
    batch_offset *offsets;
    size_t n_offsets, offsets_alloc;

    /* Open intervals, found by (key, end_s) to append and (key, start_s) to
     * prepend; a doubly linked LRU list for eviction. */
    iv_entry *iv;
    size_t iv_used;
    idx_table iv_by_end, iv_by_start;
    uint32_t lru_head, lru_tail; /* index + 1; head = most recently touched */
    uint32_t free_head;          /* dropped entries, chained by lru_next */
    uint32_t *dirty;
    size_t n_dirty, dirty_alloc;

    /* Per commit. */
    pt_entry *pts;
    size_t n_pts, pts_alloc;
    idx_table pt_index;
    idx_table known_accounts; /* hashes of accounts known to exist */
    char (*account_names)[TALLY_NAME_MAX];
    size_t n_accounts;
    int64_t seq; /* usage_seq of this commit; 0 until usage is written */
    int64_t now_s;
    int64_t new_keys, new_quarantine, new_intervals, new_points;
};

/* ---- Aggregation (batch_agg.c); called inside the commit's transaction ---- */

tally_err agg_init(tally_batch *b);
void agg_free(tally_batch *b);
/* Forgets every open interval (after a failed commit: rows may not exist). */
void agg_forget(tally_batch *b);
/* Prepares the per-commit point index for n point events. */
tally_err agg_begin(tally_batch *b, size_t n_point_events);
/* Adds an accepted accelerator or storage event to the open intervals. */
tally_err agg_interval(tally_batch *b, const tally_event *ev);
/* Adds an accepted traffic or token event to this commit's points.
 * Errors: TALLY_OVERFLOW (the second's sum would not fit; nothing added). */
tally_err agg_point(tally_batch *b, const tally_event *ev);
/* Writes dirty intervals and this commit's points. */
tally_err agg_flush(tally_batch *b);
/* The usage_seq for rows written by this commit (bumped on first use). */
tally_err batch_seq(tally_batch *b, int64_t *seq);
/* Steps a write statement to completion and resets it. */
tally_err batch_step(tally_batch *b, sqlite3_stmt *st);

#endif
