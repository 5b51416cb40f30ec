/* Internal to the ledger module: reading the usage of a ledger directory
 * (include/tally/shard.h) from the files that need it (ledger.c, the invoice
 * engine, html_chart.c).
 *
 * A ledger opened from a directory has l->shards set. Its usage sources are
 * main.db itself (usage ingested from files or HTTP into the directory) and
 * every shard-<topic>-<partition>.db found there; each source has its own
 * meta.usage_seq. An invoice of a ledger directory records, in
 * invoices.usage_seq, the id of a usage snapshot: one row per source in
 * main.db's shard_snapshots table (schema in shard_read.c) with that
 * source's usage_seq when the invoice was finalized. Snapshot ids grow with
 * every snapshot and are taken inside the invoice's write transaction on
 * main.db, so a later id is never behind an earlier one for any source, and
 * the largest id among an account's invoices is what it was billed up to. */
#ifndef TALLY_SHARD_INT_H
#define TALLY_SHARD_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "ledger_int.h"

#define SHARD_DB_SUFFIX   ".db"
#define SHARD_LOCK_SUFFIX ".lock"
#define SHARD_NAME_MAX    280 /* "shard-" topic(<=249) "-" partition */
#define SHARD_MAIN_NAME   "main"
#define SHARD_MAIN_FILE   "main.db"

/* The statements ledger_usage_each caches per source: one slot per query
 * text (a slot must always be given the same text). */
typedef enum ledger_usage_slot {
    LEDGER_USAGE_INTERVALS,
    LEDGER_USAGE_POINTS,
    LEDGER_USAGE_LATE,
    LEDGER_USAGE_CHART_INTERVALS,
    LEDGER_USAGE_CHART_POINTS,
    LEDGER_USAGE_SLOTS
} ledger_usage_slot;

/* One usage source of a ledger directory: main.db or a shard. */
typedef struct shard_src {
    char name[SHARD_NAME_MAX]; /* "main" or "shard-<topic>-<partition>" */
    bool is_main;
    bool ready;  /* its tables exist (a meter may have just created the file) */
    sqlite3 *db; /* main: the ledger's own (borrowed); shard: read-only, opened on first use */
    sqlite3_stmt *st[LEDGER_USAGE_SLOTS];
    sqlite3_stmt *st_seq; /* its meta.usage_seq */
    int64_t map_rowid;    /* its accounts rows indexed up to this rowid */
} shard_src;

/* An account held by a source (the index is sorted by account, then src). */
typedef struct shard_ref {
    char account[TALLY_NAME_MAX];
    uint32_t src;
} shard_ref;

struct ledger_shards {
    char *dir;
    shard_src *src; /* src[0] is main.db */
    size_t n_src, cap_src;
    shard_ref *refs;
    size_t n_refs, cap_refs;
    bool mapped; /* refs built at least once */
    /* The snapshot whose rows were looked up last (ledger_usage_each). */
    int64_t snap_id;
    int64_t *snap_seqs; /* per source, cap_src long */
};

/* Opens the ledger directory dir: main.db (created if missing, with
 * migrations), the shard tables of main.db, the shards present, and adds the
 * accounts first seen in shards to main.db. Called by tally_ledger_open for
 * a directory. Errors: those of tally_ledger_open. */
tally_err ledger_dir_open(const char *dir, tally_ledger **out, char *why, size_t cap);

/* Frees the reader state (called by tally_ledger_close); accepts NULL. */
void ledger_shards_free(struct ledger_shards *s);

/* Looks for shards created since the last look, adds accounts first seen in
 * shards to main.db (only outside a transaction), and brings the index of
 * which shards hold which accounts up to date. A no-op for a plain ledger.
 * Errors: TALLY_DB, TALLY_IO, TALLY_NOMEM. */
tally_err ledger_shards_refresh(tally_ledger *l);

/* Calls fn once per database that may hold usage of account: for a plain
 * ledger, l's own database with snap_seq = snap; for a directory, main.db and
 * each shard holding the account, with snap_seq = that database's usage_seq
 * in snapshot snap (0 if snap is 0 or the database is not in it; a snap with
 * no rows is an invoice finalized before the ledger became a directory: snap
 * for main.db, 0 for shards). st is sql prepared on that database (cached in
 * slot), reset, bindings cleared; fn binds and steps it, and reports step
 * errors with ledger_stmt_err. Errors: TALLY_DB (message in l->errmsg),
 * TALLY_NOMEM, or what fn returns. */
typedef tally_err (*ledger_usage_fn)(void *ctx, sqlite3_stmt *st, int64_t snap_seq);
tally_err ledger_usage_each(tally_ledger *l, const char *account, ledger_usage_slot slot,
                            const char *sql, int64_t snap, ledger_usage_fn fn, void *ctx);

/* For a ledger directory, inside the caller's write transaction on main.db:
 * records the usage_seq of main.db and of every shard as a snapshot and
 * returns its id (the previous id when nothing changed since it). For a
 * plain ledger: main's meta.usage_seq. Errors: TALLY_DB, TALLY_NOMEM. */
tally_err ledger_usage_snapshot(tally_ledger *l, int64_t *id);

/* Records the message of st's database in l->errmsg and maps rc as
 * ledger_sqlite_err does. */
tally_err ledger_stmt_err(tally_ledger *l, sqlite3_stmt *st, int rc);

/* The source's connection, opening a shard on first use; *db is NULL (and
 * the result TALLY_OK) while the shard has no tables yet, which callers take
 * as an empty shard. Errors: those of shard_open_reader, TALLY_DB. */
tally_err shard_src_db(tally_ledger *l, shard_src *src, sqlite3 **db);
/* Records "<source>: <its SQLite message>" in l->errmsg and maps rc as
 * ledger_sqlite_err does. */
tally_err shard_src_err(tally_ledger *l, const shard_src *src, int rc);
/* Adds the shards created since the last look, in name order.
 * Errors: TALLY_IO, TALLY_NOMEM. */
tally_err shard_discover(tally_ledger *l);
/* The index of the source named name, or -1. */
ssize_t shard_src_index(const struct ledger_shards *s, const char *name);

/* For a ledger directory (shard_stats.c): the stored offset of (topic,
 * partition) from its shard; *found is false when there is no such shard.
 * Errors: TALLY_DB, TALLY_IO. */
tally_err ledger_shards_offset(tally_ledger *l, const char *topic, int32_t partition, int64_t *next,
                               bool *found);
/* For a ledger directory: adds every shard's totals to *out.
 * Errors: TALLY_DB, TALLY_IO, TALLY_NOMEM. */
tally_err ledger_shards_counts(tally_ledger *l, tally_ledger_counts *out);

/* Opens a shard file for reading (shard_read.c) or writing (shard_write.c):
 * read-only connections get query_only and a busy timeout. Errors: TALLY_IO
 * (cannot open), TALLY_DB. */
tally_err shard_open_reader(const char *path, sqlite3 **out, char *errmsg, size_t cap);

/* Milliseconds of the real-time clock (owner rows, fences). */
int64_t shard_now_ms(void);

#endif
