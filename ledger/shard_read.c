/* Reading a ledger directory: main.db plus every shard found beside it
 * (tally/shard.h; ledger_int.h, ledger directories).
 *
 * Shards are found by listing the directory, opened read-only on first use,
 * and indexed by the accounts they hold (each shard's accounts table: the
 * batch writer creates an account there with its first accepted event), so
 * an account's usage is read from main.db and the shards that hold it.
 * Accounts first seen in shards are copied into main.db, where invoice runs
 * list accounts; main.db remembers per shard how far it copied. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include "ledger_int.h"
#include "tally/ledger_sql.h"
#include "tally/shard.h"

#define READER_BUSY_MS 10000

/* Tables of main.db that only ledger directories use. No triggers: `tally
 * verify` accepts only the migrations' triggers. */
static const char main_ddl[] =
    "CREATE TABLE IF NOT EXISTS shard_sources ("
    "  name TEXT PRIMARY KEY, accounts_rowid INTEGER NOT NULL, updated_at INTEGER NOT NULL"
    ") STRICT;"
    "CREATE TABLE IF NOT EXISTS shard_snapshots ("
    "  id INTEGER NOT NULL, source TEXT NOT NULL, usage_seq INTEGER NOT NULL,"
    "  PRIMARY KEY (id, source)"
    ") STRICT, WITHOUT ROWID;";

int64_t shard_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

tally_err ledger_stmt_err(tally_ledger *l, sqlite3_stmt *st, int rc)
{
    sqlite3 *db = st ? sqlite3_db_handle(st) : l->db;
    snprintf(l->errmsg, sizeof l->errmsg, "%s", sqlite3_errmsg(db));
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

tally_err shard_open_reader(const char *path, sqlite3 **out, char *errmsg, size_t cap)
{
    int rc = sqlite3_open_v2(path, out, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(*out, READER_BUSY_MS);
        sqlite3_extended_result_codes(*out, 1);
        (void)sqlite3_db_config(*out, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
        (void)sqlite3_db_config(*out, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
        rc = sqlite3_exec(*out, "PRAGMA query_only=ON", NULL, NULL, NULL);
    }
    if (rc == SQLITE_OK)
        return TALLY_OK;
    snprintf(errmsg, cap, "%s: %s", path, *out ? sqlite3_errmsg(*out) : "out of memory");
    sqlite3_close_v2(*out);
    *out = NULL;
    return (rc & 0xff) == SQLITE_CANTOPEN ? TALLY_IO : TALLY_DB;
}

/* ---- Sources ------------------------------------------------------------------ */

static void src_close(shard_src *s)
{
    for (int i = 0; i < LEDGER_USAGE_SLOTS; i++)
        sqlite3_finalize(s->st[i]);
    sqlite3_finalize(s->st_seq);
    if (!s->is_main)
        sqlite3_close_v2(s->db);
    memset(s, 0, sizeof *s);
}

void ledger_shards_free(struct ledger_shards *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_src; i++)
        src_close(&s->src[i]);
    free(s->src);
    free(s->refs);
    free(s->snap_seqs);
    free(s->dir);
    free(s);
}

static tally_err src_add(struct ledger_shards *s, const char *name, bool is_main)
{
    if (s->n_src == s->cap_src) {
        size_t n = s->cap_src ? s->cap_src * 2 : 16;
        shard_src *p = realloc(s->src, n * sizeof *p);
        if (!p)
            return TALLY_NOMEM;
        s->src = p;
        int64_t *q = realloc(s->snap_seqs, n * sizeof *q);
        if (!q)
            return TALLY_NOMEM;
        s->snap_seqs = q;
        s->cap_src = n;
    }
    shard_src *src = &s->src[s->n_src];
    memset(src, 0, sizeof *src);
    snprintf(src->name, sizeof src->name, "%s", name);
    src->is_main = is_main;
    s->snap_seqs[s->n_src] = 0;
    s->n_src++;
    s->snap_id = -1; /* the cached snapshot has no entry for it */
    return TALLY_OK;
}

tally_err shard_src_err(tally_ledger *l, const shard_src *src, int rc)
{
    tally_err e = ledger_stmt_err(l, NULL, rc); /* the code; the message is the source's */
    snprintf(l->errmsg, sizeof l->errmsg, "%.80s: %.160s", src->name,
             src->db ? sqlite3_errmsg(src->db) : "not open");
    return e;
}

tally_err shard_src_db(tally_ledger *l, shard_src *src, sqlite3 **db)
{
    *db = NULL;
    if (!src->db) {
        char path[4096];
        int n = snprintf(path, sizeof path, "%s/%s" SHARD_DB_SUFFIX, l->shards->dir, src->name);
        if (n < 0 || (size_t)n >= sizeof path)
            return TALLY_INVAL;
        tally_err e = shard_open_reader(path, &src->db, l->errmsg, sizeof l->errmsg);
        if (e)
            return e;
    }
    if (!src->ready) { /* a meter may have created the file and not its tables yet */
        sqlite3_stmt *st;
        int rc = sqlite3_prepare_v2(src->db, "PRAGMA user_version", -1, &st, NULL);
        if (rc != SQLITE_OK)
            return shard_src_err(l, src, rc);
        rc = sqlite3_step(st);
        src->ready = rc == SQLITE_ROW && sqlite3_column_int64(st, 0) > 0;
        tally_err e = rc == SQLITE_ROW ? TALLY_OK : ledger_stmt_err(l, st, rc);
        sqlite3_finalize(st);
        if (e || !src->ready)
            return e;
    }
    *db = src->db;
    return TALLY_OK;
}

/* Whether a directory entry is "shard-<topic>-<digits>.db"; name without ".db". */
static bool shard_file(const char *file, char *name, size_t cap)
{
    size_t n = strlen(file), suffix = sizeof SHARD_DB_SUFFIX - 1;
    if (n <= suffix + 8 || strncmp(file, "shard-", 6) != 0 ||
        strcmp(file + n - suffix, SHARD_DB_SUFFIX) != 0 || n - suffix >= cap)
        return false;
    size_t end = n - suffix, digits = 0;
    while (digits < end && file[end - 1 - digits] >= '0' && file[end - 1 - digits] <= '9')
        digits++;
    if (digits == 0 || digits > 10 || end - digits < 8 || file[end - digits - 1] != '-')
        return false;
    memcpy(name, file, end);
    name[end] = '\0';
    return true;
}

static bool src_known(const struct ledger_shards *s, const char *name)
{
    for (size_t i = 0; i < s->n_src; i++)
        if (strcmp(s->src[i].name, name) == 0)
            return true;
    return false;
}

static int by_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

tally_err shard_discover(tally_ledger *l)
{
    struct ledger_shards *s = l->shards;
    DIR *d = opendir(s->dir);
    if (!d) {
        snprintf(l->errmsg, sizeof l->errmsg, "%s: %s", s->dir, strerror(errno));
        return TALLY_IO;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    tally_err e = TALLY_OK;
    struct dirent *de;
    char name[SHARD_NAME_MAX];
    while (!e && (de = readdir(d)) != NULL) {
        if (!shard_file(de->d_name, name, sizeof name) || src_known(s, name))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **p = realloc(names, cap * sizeof *p);
            e = p ? TALLY_OK : TALLY_NOMEM;
            names = p ? p : names;
        }
        if (!e && !(names[n] = strdup(name)))
            e = TALLY_NOMEM;
        n += e == TALLY_OK;
    }
    closedir(d);
    if (!e && n > 0)
        qsort(names, n, sizeof *names, by_str);
    for (size_t i = 0; i < n; i++) {
        if (!e)
            e = src_add(s, names[i], false);
        free(names[i]);
    }
    free(names);
    return e;
}

/* ---- Which shards hold which accounts ------------------------------------------ */

static int by_ref(const void *a, const void *b)
{
    const shard_ref *x = a, *y = b;
    int c = strcmp(x->account, y->account);
    return c ? c : (x->src > y->src) - (x->src < y->src);
}

static tally_err ref_add(struct ledger_shards *s, const char *account, uint32_t src)
{
    if (s->n_refs == s->cap_refs) {
        size_t n = s->cap_refs ? s->cap_refs * 2 : 256;
        shard_ref *p = realloc(s->refs, n * sizeof *p);
        if (!p)
            return TALLY_NOMEM;
        s->refs = p;
        s->cap_refs = n;
    }
    shard_ref *r = &s->refs[s->n_refs++];
    snprintf(r->account, sizeof r->account, "%s", account);
    r->src = src;
    return TALLY_OK;
}

/* Indexes the accounts a shard gained since the last look. */
static tally_err map_src(tally_ledger *l, uint32_t i, bool *added)
{
    shard_src *src = &l->shards->src[i];
    sqlite3 *db;
    sqlite3_stmt *st;
    tally_err e = shard_src_db(l, src, &db);
    if (e || !db) /* !db: no tables yet, so no accounts */
        return e;
    int rc =
        sqlite3_prepare_v2(db, "SELECT rowid, id FROM accounts WHERE rowid > ?1", -1, &st, NULL);
    if (rc != SQLITE_OK) {
        snprintf(l->errmsg, sizeof l->errmsg, "%.80s: %.160s", src->name, sqlite3_errmsg(db));
        return TALLY_DB;
    }
    sqlite3_bind_int64(st, 1, src->map_rowid);
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *id = (const char *)sqlite3_column_text(st, 1);
        e = ref_add(l->shards, id ? id : "", i);
        src->map_rowid = sqlite3_column_int64(st, 0);
        *added = true;
    }
    if (!e && rc != SQLITE_DONE)
        e = ledger_stmt_err(l, st, rc);
    sqlite3_finalize(st);
    return e;
}

static tally_err map_refresh(tally_ledger *l)
{
    struct ledger_shards *s = l->shards;
    bool added = false;
    tally_err e = TALLY_OK;
    for (size_t i = 1; i < s->n_src && !e; i++)
        e = map_src(l, (uint32_t)i, &added);
    if (!e && added)
        qsort(s->refs, s->n_refs, sizeof *s->refs, by_ref);
    s->mapped = e == TALLY_OK;
    return e;
}

/* The first index entry of account, or n_refs. */
static size_t ref_first(const struct ledger_shards *s, const char *account)
{
    size_t lo = 0, hi = s->n_refs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(s->refs[mid].account, account) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* ---- Accounts first seen in shards ------------------------------------------- */

typedef struct new_account {
    tally_account a;
    int64_t created_at;
} new_account;

/* The accounts rows of shard src past main.db's copy mark. */
static tally_err unseen_accounts(tally_ledger *l, shard_src *src, new_account **rows, size_t *n,
                                 int64_t *last)
{
    sqlite3 *db;
    sqlite3_stmt *st = NULL;
    int64_t mark = 0;
    size_t cap = 0;
    *n = 0;
    tally_err e = shard_src_db(l, src, &db);
    if (!e && db)
        e = ledger_prepare(l, "SELECT accounts_rowid FROM shard_sources WHERE name = ?1", &st);
    if (e || !db)
        return e;
    sqlite3_bind_text(st, 1, src->name, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW)
        mark = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    int rc = sqlite3_prepare_v2(db,
                                "SELECT rowid, id, currency, timezone, name, created_at "
                                "FROM accounts WHERE rowid > ?1 ORDER BY rowid",
                                -1, &st, NULL);
    if (rc != SQLITE_OK)
        return shard_src_err(l, src, rc);
    sqlite3_bind_int64(st, 1, mark);
    *n = 0;
    *last = mark;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 64;
            new_account *p = realloc(*rows, cap * sizeof *p);
            if (!p) {
                e = TALLY_NOMEM;
                break;
            }
            *rows = p;
        }
        new_account *r = &(*rows)[(*n)++];
        memset(r, 0, sizeof *r);
        *last = sqlite3_column_int64(st, 0);
        const char *cols[4];
        for (int c = 0; c < 4; c++)
            cols[c] = (const char *)sqlite3_column_text(st, c + 1);
        snprintf(r->a.id, sizeof r->a.id, "%s", cols[0] ? cols[0] : "");
        snprintf(r->a.currency, sizeof r->a.currency, "%s", cols[1] ? cols[1] : "");
        snprintf(r->a.timezone, sizeof r->a.timezone, "%s", cols[2] ? cols[2] : "UTC");
        snprintf(r->a.name, sizeof r->a.name, "%s", cols[3] ? cols[3] : "");
        r->created_at = sqlite3_column_int64(st, 5);
    }
    if (!e && rc != SQLITE_DONE)
        e = ledger_stmt_err(l, st, rc);
    sqlite3_finalize(st);
    return e;
}

/* Inside a transaction on main.db: the rows (accounts main.db has win) and
 * the new copy mark. */
static tally_err copy_accounts(tally_ledger *l, const char *source, const new_account *rows,
                               size_t n, int64_t last)
{
    sqlite3_stmt *ins, *mark;
    tally_err e = ledger_prepare(l,
                                 "INSERT OR IGNORE INTO accounts(id, currency, timezone, name, "
                                 "created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                                 &ins);
    if (e)
        return e;
    e = ledger_prepare(l,
                       "INSERT INTO shard_sources(name, accounts_rowid, updated_at) "
                       "VALUES (?1, ?2, ?3) ON CONFLICT(name) DO UPDATE SET "
                       "accounts_rowid = max(accounts_rowid, excluded.accounts_rowid), "
                       "updated_at = excluded.updated_at",
                       &mark);
    for (size_t i = 0; !e && i < n; i++) {
        sqlite3_reset(ins);
        sqlite3_bind_text(ins, 1, rows[i].a.id, -1, SQLITE_STATIC);
        sqlite3_bind_text(ins, 2, rows[i].a.currency, -1, SQLITE_STATIC);
        sqlite3_bind_text(ins, 3, rows[i].a.timezone, -1, SQLITE_STATIC);
        sqlite3_bind_text(ins, 4, rows[i].a.name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(ins, 5, rows[i].created_at);
        int rc = sqlite3_step(ins);
        if (rc != SQLITE_DONE)
            e = ledger_sqlite_err(l, rc);
    }
    if (!e) {
        sqlite3_bind_text(mark, 1, source, -1, SQLITE_STATIC);
        sqlite3_bind_int64(mark, 2, last);
        sqlite3_bind_int64(mark, 3, tally_now_s());
        int rc = sqlite3_step(mark);
        if (rc != SQLITE_DONE)
            e = ledger_sqlite_err(l, rc);
    }
    sqlite3_finalize(ins);
    sqlite3_finalize(mark);
    return e;
}

/* Copies each shard's new accounts into main.db, one transaction per shard
 * that has any. Skipped inside a caller's transaction. */
static tally_err import_accounts(tally_ledger *l)
{
    struct ledger_shards *s = l->shards;
    new_account *rows = NULL;
    tally_err e = TALLY_OK;
    if (!sqlite3_get_autocommit(l->db))
        return TALLY_OK;
    for (size_t i = 1; i < s->n_src && !e; i++) {
        size_t n = 0;
        int64_t last = 0;
        e = unseen_accounts(l, &s->src[i], &rows, &n, &last);
        if (e || n == 0)
            continue;
        e = ledger_begin(l);
        if (!e) {
            e = copy_accounts(l, s->src[i].name, rows, n, last);
            if (!e)
                e = ledger_commit(l);
            else
                ledger_rollback(l);
        }
    }
    free(rows);
    return e;
}

tally_err ledger_shards_refresh(tally_ledger *l)
{
    if (!l->shards)
        return TALLY_OK;
    tally_err e = shard_discover(l);
    if (!e)
        e = import_accounts(l);
    if (!e)
        e = map_refresh(l);
    return e;
}

/* ---- Opening a directory -------------------------------------------------------- */

bool tally_ledger_exists(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return false;
    if (!S_ISDIR(sb.st_mode)) /* SQLite would make an empty file a new ledger */
        return sb.st_size > 0;
    char main_db[PATH_MAX];
    int n = snprintf(main_db, sizeof main_db, "%s/" SHARD_MAIN_FILE, path);
    return n > 0 && (size_t)n < sizeof main_db && stat(main_db, &sb) == 0 && sb.st_size > 0;
}

bool tally_ledger_is_dir(const tally_ledger *l)
{
    return l && l->shards;
}

const char *tally_ledger_dir(const tally_ledger *l)
{
    return l && l->shards ? l->shards->dir : NULL;
}

static tally_err dir_setup(tally_ledger *l, const char *dir)
{
    struct ledger_shards *s = calloc(1, sizeof *s);
    if (!s)
        return TALLY_NOMEM;
    l->shards = s;
    s->snap_id = -1;
    if (!(s->dir = strdup(dir)))
        return TALLY_NOMEM;
    tally_err e = src_add(s, SHARD_MAIN_NAME, true);
    if (e)
        return e;
    s->src[0].db = l->db;
    e = tally_ledger_exec(l, main_ddl);
    if (!e)
        e = shard_discover(l);
    if (!e)
        e = import_accounts(l);
    return e;
}

tally_err ledger_dir_open(const char *dir, tally_ledger **out, char *why, size_t cap)
{
    char path[4096];
    *out = NULL;
    int n = snprintf(path, sizeof path, "%s/" SHARD_MAIN_FILE, dir);
    if (n < 0 || (size_t)n >= sizeof path) {
        if (why && cap)
            snprintf(why, cap, "%s: path too long", dir);
        return TALLY_INVAL;
    }
    DIR *probe = opendir(path);
    if (probe) { /* main.db must be a file, or the open would recurse */
        closedir(probe);
        if (why && cap)
            snprintf(why, cap, "%s: is a directory", path);
        return TALLY_INVAL;
    }
    tally_err e = tally_ledger_open(path, out, why, cap);
    if (e)
        return e;
    e = dir_setup(*out, dir);
    if (e) {
        if (why && cap)
            snprintf(why, cap, "%s: %s", dir,
                     e == TALLY_NOMEM ? "out of memory" : tally_ledger_errmsg(*out));
        tally_ledger_close(*out);
        *out = NULL;
    }
    return e;
}

/* ---- Snapshots of every source's usage_seq ---------------------------------------- */

static const char seq_sql[] = "SELECT value FROM meta WHERE key = 'usage_seq'";

/* A source's meta.usage_seq now. */
static tally_err src_seq(tally_ledger *l, shard_src *src, int64_t *seq)
{
    sqlite3 *db;
    *seq = 0;
    tally_err e = shard_src_db(l, src, &db);
    if (e || !db)
        return e;
    if (!src->st_seq) {
        int rc = sqlite3_prepare_v3(db, seq_sql, -1, SQLITE_PREPARE_PERSISTENT, &src->st_seq, NULL);
        if (rc != SQLITE_OK)
            e = shard_src_err(l, src, rc);
    }
    if (e)
        return e;
    int rc = sqlite3_step(src->st_seq);
    *seq = rc == SQLITE_ROW ? sqlite3_column_int64(src->st_seq, 0) : 0;
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        e = ledger_stmt_err(l, src->st_seq, rc);
    sqlite3_reset(src->st_seq);
    return e;
}

ssize_t shard_src_index(const struct ledger_shards *s, const char *name)
{
    for (size_t i = 0; i < s->n_src; i++)
        if (strcmp(s->src[i].name, name) == 0)
            return (ssize_t)i;
    return -1;
}

/* Loads snapshot id's rows into s->snap_seqs (see ledger_usage_each). */
static tally_err snap_load(tally_ledger *l, int64_t id)
{
    struct ledger_shards *s = l->shards;
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(
        l, "SELECT source, usage_seq FROM shard_snapshots WHERE id = ?1 ORDER BY source", &st);
    if (e)
        return e;
    sqlite3_bind_int64(st, 1, id);
    memset(s->snap_seqs, 0, s->n_src * sizeof *s->snap_seqs);
    bool any = false;
    int rc;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        ssize_t i = shard_src_index(s, name ? name : "");
        if (i < 0 && !(e = shard_discover(l)))
            i = shard_src_index(s, name ? name : "");
        if (!e && i < 0) {
            snprintf(l->errmsg, sizeof l->errmsg,
                     "usage snapshot %lld names %s, which is not in %s", (long long)id,
                     name ? name : "?", s->dir);
            e = TALLY_DB;
        }
        if (!e)
            s->snap_seqs[i] = sqlite3_column_int64(st, 1);
        any = true;
    }
    if (!e && rc != SQLITE_DONE)
        e = ledger_sqlite_err(l, rc);
    sqlite3_finalize(st);
    if (!e && !any) /* finalized before the ledger was a directory */
        s->snap_seqs[0] = id;
    s->snap_id = e ? -1 : id;
    return e;
}

static tally_err one_value(tally_ledger *l, const char *sql, int64_t *out)
{
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(l, sql, &st);
    if (e)
        return e;
    int rc = sqlite3_step(st);
    *out = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        e = ledger_sqlite_err(l, rc);
    sqlite3_finalize(st);
    return e;
}

static tally_err snap_store(tally_ledger *l, int64_t id, const int64_t *seqs, size_t n)
{
    struct ledger_shards *s = l->shards;
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(
        l, "INSERT INTO shard_snapshots(id, source, usage_seq) VALUES (?1, ?2, ?3)", &st);
    for (size_t i = 0; !e && i < n; i++) {
        if (i > 0 && seqs[i] == 0)
            continue; /* absent means 0; main.db is always listed */
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_text(st, 2, s->src[i].name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, seqs[i]);
        int rc = sqlite3_step(st);
        if (rc != SQLITE_DONE)
            e = ledger_sqlite_err(l, rc);
    }
    sqlite3_finalize(st);
    return e;
}

static tally_err snapshot_dir(tally_ledger *l, int64_t *id)
{
    struct ledger_shards *s = l->shards;
    int64_t latest = 0, billed = 0;
    tally_err e = shard_discover(l);
    if (e)
        return e;
    size_t n = s->n_src; /* the sources this snapshot covers */
    int64_t *seqs = calloc(n, sizeof *seqs);
    if (!seqs)
        return TALLY_NOMEM;
    for (size_t i = 0; !e && i < n; i++)
        e = src_seq(l, &s->src[i], &seqs[i]);
    /* After the seqs: usage a shard holds up to its seq here was committed
     * with its account row, so the index now names every shard the gather
     * must read for it (an account's first usage in a shard may have landed
     * since the run began). */
    if (!e)
        e = map_refresh(l);
    if (!e)
        e = one_value(l, "SELECT coalesce(max(id), 0) FROM shard_snapshots", &latest);
    if (!e && latest > 0)
        e = snap_load(l, latest);
    if (!e && latest > 0 && s->n_src == n && memcmp(seqs, s->snap_seqs, n * sizeof *seqs) == 0) {
        *id = latest;
        goto out_seqs;
    }
    if (!e)
        e = one_value(l, "SELECT coalesce(max(usage_seq), 0) FROM invoices", &billed);
    if (!e) {
        *id = (latest > billed ? latest : billed) + 1;
        e = snap_store(l, *id, seqs, n);
    }
    s->snap_id = -1; /* ledger_usage_each reloads it from the stored rows */
out_seqs:
    free(seqs);
    return e;
}

tally_err ledger_usage_snapshot(tally_ledger *l, int64_t *id)
{
    *id = 0;
    if (!l->shards)
        return one_value(l, seq_sql, id);
    return snapshot_dir(l, id);
}

/* ---- Usage queries over the sources ------------------------------------------------ */

static tally_err each_src(tally_ledger *l, size_t i, ledger_usage_slot slot, const char *sql,
                          int64_t seq, ledger_usage_fn fn, void *ctx)
{
    shard_src *src = &l->shards->src[i];
    sqlite3 *db;
    tally_err e = shard_src_db(l, src, &db);
    if (e || !db) /* !db: no tables yet, so no usage */
        return e;
    if (!src->st[slot]) {
        int rc = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &src->st[slot], NULL);
        if (rc != SQLITE_OK) {
            snprintf(l->errmsg, sizeof l->errmsg, "%.80s: %.160s", src->name, sqlite3_errmsg(db));
            e = TALLY_DB;
        }
    }
    if (e)
        return e;
    sqlite3_stmt *st = src->st[slot];
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    e = fn(ctx, st, seq);
    sqlite3_reset(st);
    return e;
}

/* A plain ledger: its own database, with the connection's cached
 * statement for the query (callers pass static SQL). */
static tally_err plain_each(tally_ledger *l, const char *sql, int64_t snap, ledger_usage_fn fn,
                            void *ctx)
{
    sqlite3_stmt *st;
    tally_err e = ledger_cached(l, sql, &st);
    if (e)
        return e;
    e = fn(ctx, st, snap);
    (void)ledger_cached_done(l, st, SQLITE_DONE);
    return e;
}

tally_err ledger_usage_each(tally_ledger *l, const char *account, ledger_usage_slot slot,
                            const char *sql, int64_t snap, ledger_usage_fn fn, void *ctx)
{
    struct ledger_shards *s = l->shards;
    if (!s)
        return plain_each(l, sql, snap, fn, ctx);
    if ((unsigned)slot >= LEDGER_USAGE_SLOTS)
        return TALLY_INVAL;
    tally_err e = s->mapped ? TALLY_OK : map_refresh(l);
    if (!e && snap > 0 && snap != s->snap_id)
        e = snap_load(l, snap);
    if (!e)
        e = each_src(l, 0, slot, sql, snap > 0 ? s->snap_seqs[0] : 0, fn, ctx);
    for (size_t r = ref_first(s, account);
         !e && r < s->n_refs && strcmp(s->refs[r].account, account) == 0; r++) {
        uint32_t i = s->refs[r].src;
        e = each_src(l, i, slot, sql, snap > 0 ? s->snap_seqs[i] : 0, fn, ctx);
    }
    return e;
}
