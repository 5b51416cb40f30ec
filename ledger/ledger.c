/* The ledger connection: opening (pragmas, migrations), errors, the clock,
 * generic reads and writes, offsets and totals.
 *
 * Migrations are the embedded files "schemas/NNN_<name>.sql", applied in
 * order, each in its own transaction together with PRAGMA user_version = NNN,
 * so a crash between two migrations leaves a ledger at a consistent earlier
 * version that the next open completes. */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <pthread.h>

#include "ledger_int.h"
#include "tally/ledger_sql.h"
#include "tally/embed.h"

/* 8 MiB: what a commit of the write path uses again holds in it, and a
 * stream's memory stays flat (64 MiB grew with the ledger to its bound:
 * +10 % from 1M to 5M events, against +2 % and 1.05x the CPU for 8 MiB;
 * bench/RESULTS.md, "Issue 15, ninth pass"). */
#define CACHE_KIB_DEFAULT 8192
#define CACHE_KIB_MIN     1024
#define CACHE_KIB_MAX     (16LL << 20) /* 16 GiB */
#define MIGRATIONS_MAX    256

/* "<path>: <reason>" for tally_ledger_open's why. */
static void set_why(char *why, size_t cap, const char *path, const char *reason)
{
    if (why && cap > 0)
        snprintf(why, cap, "%s: %s", path, reason);
}

tally_err ledger_sqlite_err(tally_ledger *l, int rc)
{
    snprintf(l->errmsg, sizeof l->errmsg, "%s", sqlite3_errmsg(l->db));
    switch (rc & 0xff) {
    case SQLITE_FULL:
    case SQLITE_IOERR:
        return TALLY_IO;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return TALLY_BUSY;
    case SQLITE_NOMEM:
        return TALLY_NOMEM;
    default:
        return TALLY_DB;
    }
}

tally_err ledger_finish(tally_ledger *l, sqlite3_stmt *st, int rc)
{
    tally_err e = rc == SQLITE_DONE ? TALLY_OK : ledger_sqlite_err(l, rc);
    sqlite3_finalize(st);
    return e;
}

tally_err ledger_cached(tally_ledger *l, const char *sql, sqlite3_stmt **st)
{
    for (size_t i = 0; i < l->n_cached; i++)
        if (l->cached[i].sql == sql) {
            *st = l->cached[i].st;
            sqlite3_reset(*st);
            sqlite3_clear_bindings(*st);
            return TALLY_OK;
        }
    tally_err e = ledger_prepare(l, sql, st);
    if (e == TALLY_OK && l->n_cached < LEDGER_CACHED_MAX) /* else: the caller's own */
        l->cached[l->n_cached++] = (struct ledger_cached_stmt){sql, *st};
    return e;
}

tally_err ledger_cached_done(tally_ledger *l, sqlite3_stmt *st, int rc)
{
    tally_err e = rc == SQLITE_DONE ? TALLY_OK : ledger_sqlite_err(l, rc);
    for (size_t i = 0; i < l->n_cached; i++)
        if (l->cached[i].st == st) {
            sqlite3_reset(st);
            return e;
        }
    sqlite3_finalize(st);
    return e;
}

tally_err ledger_cached_exec(tally_ledger *l, const char *sql, bool quiet)
{
    sqlite3_stmt *st;
    tally_err e = ledger_cached(l, sql, &st);
    if (e != TALLY_OK)
        return e;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE || !quiet)
        return ledger_cached_done(l, st, rc);
    (void)ledger_cached_done(l, st, SQLITE_DONE);
    return TALLY_DB;
}

tally_err ledger_prepare(tally_ledger *l, const char *sql, sqlite3_stmt **st)
{
    int rc = sqlite3_prepare_v3(l->db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL);
    if (rc != SQLITE_OK) {
        *st = NULL;
        return ledger_sqlite_err(l, rc);
    }
    return TALLY_OK;
}

static tally_err exec_sql(tally_ledger *l, const char *sql)
{
    int rc = sqlite3_exec(l->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? TALLY_OK : ledger_sqlite_err(l, rc);
}

tally_err ledger_begin(tally_ledger *l)
{
    return exec_sql(l, "BEGIN IMMEDIATE");
}

tally_err ledger_commit(tally_ledger *l)
{
    tally_err e = exec_sql(l, "COMMIT");
    if (e != TALLY_OK)
        ledger_rollback(l);
    return e;
}

void ledger_rollback(tally_ledger *l)
{
    /* Nothing to undo when SQLite already rolled back (e.g. after SQLITE_FULL). */
    if (!sqlite3_get_autocommit(l->db))
        (void)sqlite3_exec(l->db, "ROLLBACK", NULL, NULL, NULL);
}

const char *tally_ledger_errmsg(tally_ledger *l)
{
    return l ? l->errmsg : "no ledger";
}

int64_t tally_now_s(void)
{
    const char *fixed = getenv("TALLY_NOW");
    int64_t t;
    if (fixed && *fixed && tally_time_parse(fixed, strlen(fixed), &t) == TALLY_OK)
        return t;
    return (int64_t)time(NULL);
}

/* ---- Opening ------------------------------------------------------------- */

static int64_t cache_kib(void)
{
    const char *s = getenv("TALLY_CACHE_KIB");
    if (!s || !*s)
        return CACHE_KIB_DEFAULT;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < CACHE_KIB_MIN || v > CACHE_KIB_MAX)
        return CACHE_KIB_DEFAULT;
    return v;
}

/* One value of a PRAGMA that returns a row (journal_mode, user_version). */
static tally_err pragma_text(tally_ledger *l, const char *sql, char *out, size_t cap)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(l->db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return ledger_sqlite_err(l, rc);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const unsigned char *v = sqlite3_column_text(st, 0);
        snprintf(out, cap, "%s", v ? (const char *)v : "");
        rc = SQLITE_DONE;
    }
    tally_err e = rc == SQLITE_DONE ? TALLY_OK : ledger_sqlite_err(l, rc);
    sqlite3_finalize(st);
    return e;
}

static tally_err user_version(tally_ledger *l, int64_t *v)
{
    char buf[32];
    tally_err e = pragma_text(l, "PRAGMA user_version", buf, sizeof buf);
    if (e == TALLY_OK)
        *v = strtoll(buf, NULL, 10);
    return e;
}

static tally_err apply_pragmas(tally_ledger *l, char *why, size_t cap)
{
    char sql[128], mode[32];
    sqlite3_busy_timeout(l->db, LEDGER_BUSY_TIMEOUT_MS);
    sqlite3_extended_result_codes(l->db, 1);
    (void)sqlite3_db_config(l->db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
    (void)sqlite3_db_config(l->db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
    tally_err e = pragma_text(l, "PRAGMA journal_mode=WAL", mode, sizeof mode);
    if (e == TALLY_OK && strcmp(mode, "wal") != 0 && strcmp(mode, "memory") != 0) {
        snprintf(l->errmsg, sizeof l->errmsg, "journal_mode is %s, not wal", mode);
        e = TALLY_DB;
    }
    snprintf(sql, sizeof sql,
             "PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON; PRAGMA temp_store=MEMORY; "
             "PRAGMA cache_size=-%lld;",
             (long long)cache_kib());
    if (e == TALLY_OK)
        e = exec_sql(l, sql);
    if (e != TALLY_OK)
        set_why(why, cap, l->path, l->errmsg);
    return e;
}

/* The number of a migration named "schemas/NNN_<name>.sql", or -1. */
static int migration_number(const char *name)
{
    static const char prefix[] = "schemas/";
    size_t n = strlen(name);
    if (strncmp(name, prefix, sizeof prefix - 1) != 0 || n < sizeof prefix + 8 ||
        strcmp(name + n - 4, ".sql") != 0)
        return -1;
    const char *d = name + sizeof prefix - 1;
    for (int i = 0; i < 3; i++)
        if (d[i] < '0' || d[i] > '9')
            return -1;
    if (d[3] != '_')
        return -1;
    return (d[0] - '0') * 100 + (d[1] - '0') * 10 + (d[2] - '0');
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(const tally_embedded *const *)a)->name,
                  (*(const tally_embedded *const *)b)->name);
}

/* The embedded migrations sorted by name; numbers must strictly increase. */
static tally_err list_migrations(const tally_embedded **out, size_t *n)
{
    *n = 0;
    for (const tally_embedded *f = tally_embedded_files; f->name; f++) {
        if (migration_number(f->name) < 1)
            continue;
        if (*n == MIGRATIONS_MAX)
            return TALLY_INTERNAL;
        out[(*n)++] = f;
    }
    qsort(out, *n, sizeof *out, by_name);
    for (size_t i = 1; i < *n; i++)
        if (migration_number(out[i]->name) <= migration_number(out[i - 1]->name))
            return TALLY_INTERNAL;
    return TALLY_OK;
}

/* Applies one migration unless a concurrent opener already did. */
static tally_err apply_migration(tally_ledger *l, const tally_embedded *m)
{
    int num = migration_number(m->name);
    int64_t have;
    char sql[64];
    tally_err e = ledger_begin(l);
    if (e != TALLY_OK)
        return e;
    e = user_version(l, &have);
    if (e == TALLY_OK && have < num) {
        e = exec_sql(l, m->data);
        snprintf(sql, sizeof sql, "PRAGMA user_version=%d", num);
        if (e == TALLY_OK)
            e = exec_sql(l, sql);
    }
    if (e == TALLY_OK)
        return ledger_commit(l);
    ledger_rollback(l);
    return e;
}

static tally_err migrate(tally_ledger *l, char *why, size_t cap)
{
    const tally_embedded *list[MIGRATIONS_MAX];
    size_t n;
    int64_t have;
    tally_err e = list_migrations(list, &n);
    if (e != TALLY_OK) {
        set_why(why, cap, l->path, "embedded migrations are misnumbered");
        return e;
    }
    e = user_version(l, &have);
    if (e == TALLY_OK && n > 0 && have > migration_number(list[n - 1]->name)) {
        snprintf(l->errmsg, sizeof l->errmsg,
                 "schema version %lld is newer than this tally (%d); upgrade tally",
                 (long long)have, migration_number(list[n - 1]->name));
        e = TALLY_UNSUPPORTED;
    }
    for (size_t i = 0; i < n && e == TALLY_OK; i++)
        if (migration_number(list[i]->name) > have)
            e = apply_migration(l, list[i]);
    if (e != TALLY_OK)
        set_why(why, cap, l->path, l->errmsg);
    return e;
}

/* Before SQLite's first use in the process: no memory statistics. Tally
 * never reads them, and keeping them takes a process-wide mutex on every
 * allocation, which connections on several threads (a meter's commit
 * thread, verify's second connection, a run's file writer) contend for.
 * If SQLite is already initialized (a test's VFS), it keeps its defaults. */
static void sqlite_setup(void)
{
    (void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

tally_err tally_ledger_open(const char *path, tally_ledger **out, char *why, size_t cap)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, sqlite_setup);
    struct stat sb;
    *out = NULL;
    size_t n = strlen(path);
    /* "DIR/" asks for a ledger directory: create it rather than a file. */
    if (n > 1 && path[n - 1] == '/' && mkdir(path, 0755) != 0 && errno != EEXIST) {
        set_why(why, cap, path, strerror(errno));
        return TALLY_IO;
    }
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) /* a ledger directory (shard.h) */
        return ledger_dir_open(path, out, why, cap);
    tally_ledger *l = calloc(1, sizeof *l);
    if (!l || !(l->path = strdup(path))) {
        free(l);
        set_why(why, cap, path, "out of memory");
        return TALLY_NOMEM;
    }
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    int rc = sqlite3_open_v2(path, &l->db, flags, NULL);
    if (rc != SQLITE_OK) {
        tally_err e = l->db ? ledger_sqlite_err(l, rc) : TALLY_NOMEM;
        if (e == TALLY_DB && (rc & 0xff) == SQLITE_CANTOPEN)
            e = TALLY_IO;
        set_why(why, cap, path, l->db ? l->errmsg : "out of memory");
        tally_ledger_close(l);
        return e;
    }
    tally_err e = ledger_chain_register(l);
    if (e == TALLY_OK)
        e = apply_pragmas(l, why, cap);
    if (e == TALLY_OK)
        e = migrate(l, why, cap);
    if (e != TALLY_OK) {
        tally_ledger_close(l);
        return e;
    }
    /* Balances are kept unless the operator turns them off (README,
     * "Prepaid balances"; bench/kafka.sh measures the cost). */
    const char *nb = getenv("TALLY_NO_BALANCES");
    l->no_balances = nb && strcmp(nb, "1") == 0;
    *out = l;
    return TALLY_OK;
}

void tally_ledger_close(tally_ledger *l)
{
    if (!l)
        return;
    ledger_cards_clear(l);
    ledger_shards_free(l->shards);
    sqlite3_finalize(l->st_cards_version);
    for (size_t i = 0; i < l->n_cached; i++)
        sqlite3_finalize(l->cached[i].st);
    ledger_chain_close(l);
    sqlite3_close_v2(l->db);
    free(l->path);
    free(l);
}

/* ---- Generic reads and writes -------------------------------------------- */

#define QUERY_COLS_INLINE 32

static tally_err query_rows(tally_ledger *l, sqlite3_stmt *st, tally_row_fn fn, void *ctx)
{
    int ncols = sqlite3_column_count(st);
    const char *inline_cols[QUERY_COLS_INLINE];
    const char **cols = inline_cols;
    if (ncols > QUERY_COLS_INLINE && !(cols = malloc((size_t)ncols * sizeof *cols)))
        return TALLY_NOMEM;
    tally_err e = TALLY_OK;
    int rc;
    while (e == TALLY_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        for (int i = 0; i < ncols; i++)
            cols[i] = (const char *)sqlite3_column_text(st, i);
        e = fn(ctx, ncols, cols);
    }
    if (e == TALLY_OK && rc != SQLITE_DONE)
        e = ledger_sqlite_err(l, rc);
    if (cols != inline_cols)
        free(cols);
    return e;
}

tally_err tally_ledger_query(tally_ledger *l, const char *sql, const char *const *params,
                             int nparams, tally_row_fn fn, void *ctx)
{
    sqlite3_stmt *st;
    const char *tail = NULL;
    int rc = sqlite3_prepare_v2(l->db, sql, -1, &st, &tail);
    if (rc != SQLITE_OK)
        return ledger_sqlite_err(l, rc);
    tally_err e = TALLY_OK;
    if (!st || !sqlite3_stmt_readonly(st) || (tail && tail[strspn(tail, " \t\r\n;")])) {
        snprintf(l->errmsg, sizeof l->errmsg, "not a single read-only query");
        e = TALLY_DB;
    }
    for (int i = 0; i < nparams && e == TALLY_OK; i++) {
        rc = params[i] ? sqlite3_bind_text(st, i + 1, params[i], -1, SQLITE_STATIC)
                       : sqlite3_bind_null(st, i + 1);
        if (rc != SQLITE_OK)
            e = ledger_sqlite_err(l, rc);
    }
    if (e == TALLY_OK)
        e = query_rows(l, st, fn, ctx);
    sqlite3_finalize(st);
    return e;
}

tally_err tally_ledger_exec(tally_ledger *l, const char *sql)
{
    char *msg = NULL;
    int rc = sqlite3_exec(l->db, sql, NULL, NULL, &msg);
    if (rc == SQLITE_OK)
        return TALLY_OK;
    tally_err e = ledger_sqlite_err(l, rc);
    if (msg)
        snprintf(l->errmsg, sizeof l->errmsg, "%s", msg);
    sqlite3_free(msg);
    return e;
}

/* ---- Offsets, totals, names ---------------------------------------------- */

tally_err tally_ledger_offset_get(tally_ledger *l, const char *topic, int32_t partition,
                                  int64_t *next)
{
    sqlite3_stmt *st;
    bool in_shard = false;
    *next = -1;
    if (l->shards) { /* a ledger directory: the partition's shard holds it */
        tally_err e = ledger_shards_offset(l, topic, partition, next, &in_shard);
        if (e || in_shard)
            return e;
    }
    tally_err e = ledger_prepare(
        l, "SELECT next_offset FROM offsets WHERE topic = ?1 AND partition = ?2", &st);
    if (e != TALLY_OK)
        return e;
    sqlite3_bind_text(st, 1, topic, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, partition);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *next = sqlite3_column_int64(st, 0);
        rc = SQLITE_DONE;
    }
    if (rc != SQLITE_DONE)
        e = ledger_sqlite_err(l, rc);
    sqlite3_finalize(st);
    return e;
}

/* Totals are kept in meta by the batch writer (a count(*) over tens of
 * millions of dedupe keys would take seconds). */
tally_err tally_ledger_counts_get(tally_ledger *l, tally_ledger_counts *out)
{
    static const struct {
        const char *key;
        size_t off;
    } fields[] = {
        {"count_dedupe", offsetof(tally_ledger_counts, dedupe_keys)},
        {"count_quarantine", offsetof(tally_ledger_counts, quarantined)},
        {"count_intervals", offsetof(tally_ledger_counts, intervals)},
        {"count_points", offsetof(tally_ledger_counts, points)},
    };
    sqlite3_stmt *st;
    memset(out, 0, sizeof *out);
    tally_err e = ledger_prepare(l, "SELECT value FROM meta WHERE key = ?1", &st);
    for (size_t i = 0; e == TALLY_OK && i < sizeof fields / sizeof *fields; i++) {
        sqlite3_bind_text(st, 1, fields[i].key, -1, SQLITE_STATIC);
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW)
            *(int64_t *)((char *)out + fields[i].off) = sqlite3_column_int64(st, 0);
        else if (rc != SQLITE_DONE)
            e = ledger_sqlite_err(l, rc);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    if (e == TALLY_OK && l->shards) /* a ledger directory: and every shard's */
        e = ledger_shards_counts(l, out);
    return e;
}

const char *tally_event_result_name(tally_event_result r)
{
    static const char *const names[] = {
        [TALLY_RESULT_ACCEPTED] = "accepted",
        [TALLY_RESULT_DUPLICATE] = "duplicate",
        [TALLY_RESULT_CONFLICT] = "conflict",
        [TALLY_RESULT_QUARANTINED] = "quarantined",
    };
    if ((unsigned)r < sizeof names / sizeof *names)
        return names[r];
    return "unknown";
}

tally_err ledger_grow(void **arr, size_t n, size_t *cap, size_t size, size_t first)
{
    if (n < *cap)
        return TALLY_OK;
    size_t nc = *cap ? *cap * 2 : first;
    if (nc < *cap || nc > SIZE_MAX / size)
        return TALLY_NOMEM;
    void *p = realloc(*arr, nc * size);
    if (!p)
        return TALLY_NOMEM;
    *arr = p;
    *cap = nc;
    return TALLY_OK;
}
