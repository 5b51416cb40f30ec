/* Writing shards: taking a partition's shard, the owner rows and the fence,
 * copying rate cards from main.db, and letting the shard go
 * (include/tally/shard.h).
 *
 * Acquisition order: the lock first (nothing is written before it is held),
 * then the shard database, a new owner row (epoch = the newest + 1), the
 * fence on this connection, and the rate cards. Release order: the owner
 * row's release stamp, the database closed, the lock dropped last. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ledger_int.h"
#include "tally/ledger_sql.h"
#include "tally/log.h"
#include "tally/shard.h"

#define OWNER_MAX       160
#define CACHE_KIB_SHARD 16384 /* page cache per held shard (main.db keeps 8 MiB) */
#define CACHE_KIB_MIN   1024
#define CACHE_KIB_MAX   (16LL << 20)

/* Owner rows: one per acquisition. The fence fills in the write columns. */
static const char shard_ddl[] =
    "CREATE TABLE IF NOT EXISTS shard_owners ("
    "  epoch INTEGER PRIMARY KEY,"
    "  owner TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,"
    "  topic TEXT NOT NULL, partition INTEGER NOT NULL,"
    "  acquired_ms INTEGER NOT NULL,"
    "  released_ms INTEGER,"               /* NULL: held now, or the holder died */
    "  writes INTEGER NOT NULL DEFAULT 0," /* batches committed under this epoch */
    "  first_offset INTEGER," /* the stored offset its first write replaced (-1: none) */
    "  last_offset INTEGER,"  /* the offset its last write stored */
    "  first_write_ms INTEGER, last_write_ms INTEGER"
    ") STRICT;";

/* The fence, per connection (TEMP): a write of the stored offset is refused
 * unless this epoch is the newest, and is counted against it. Every meter
 * batch writes its partition's offset, so every batch passes here inside
 * its own transaction. */
static const char fence_fmt[] =
    "CREATE TEMP TRIGGER shard_fence_insert AFTER INSERT ON main.offsets BEGIN "
    "SELECT RAISE(ABORT, 'shard fence: a newer owner holds this shard') "
    "WHERE (SELECT max(epoch) FROM shard_owners) IS NOT %lld; "
    "UPDATE shard_owners SET writes = writes + 1, first_offset = coalesce(first_offset, -1), "
    "last_offset = NEW.next_offset, "
    "first_write_ms = coalesce(first_write_ms, tally_shard_now_ms()), "
    "last_write_ms = tally_shard_now_ms() WHERE epoch = %lld; END;"
    "CREATE TEMP TRIGGER shard_fence_update AFTER UPDATE OF next_offset ON main.offsets BEGIN "
    "SELECT RAISE(ABORT, 'shard fence: a newer owner holds this shard') "
    "WHERE (SELECT max(epoch) FROM shard_owners) IS NOT %lld; "
    "UPDATE shard_owners SET writes = writes + 1, "
    "first_offset = coalesce(first_offset, OLD.next_offset), last_offset = NEW.next_offset, "
    "first_write_ms = coalesce(first_write_ms, tally_shard_now_ms()), "
    "last_write_ms = tally_shard_now_ms() WHERE epoch = %lld; END;";

struct tally_shard {
    tally_shard_set *set;
    tally_shard *next;
    char topic[256];
    int32_t partition;
    char name[SHARD_NAME_MAX];
    int lock_fd;
    tally_ledger *l;
    tally_batch *b;
    int64_t epoch;
    int64_t cards_seen; /* main.db's rate card version last copied; -1: none */
};

struct tally_shard_set {
    tally_ledger *main;
    char owner[OWNER_MAX];
    char host[64];
    tally_shard *head;
    sqlite3_stmt *st_cards; /* main.db's rate card version, prepared once */
};

tally_err tally_shard_set_create(tally_ledger *main, const char *owner, tally_shard_set **out)
{
    *out = NULL;
    if (!tally_ledger_is_dir(main))
        return TALLY_INVAL;
    tally_shard_set *s = calloc(1, sizeof *s);
    if (!s)
        return TALLY_NOMEM;
    s->main = main;
    if (gethostname(s->host, sizeof s->host) != 0)
        snprintf(s->host, sizeof s->host, "?");
    s->host[sizeof s->host - 1] = '\0';
    if (owner && *owner)
        snprintf(s->owner, sizeof s->owner, "%s", owner);
    else
        snprintf(s->owner, sizeof s->owner, "%s:%ld", s->host, (long)getpid());
    *out = s;
    return TALLY_OK;
}

void tally_shard_set_destroy(tally_shard_set *s)
{
    if (!s)
        return;
    tally_shard_release_all(s);
    sqlite3_finalize(s->st_cards);
    free(s);
}

tally_shard *tally_shard_find(tally_shard_set *s, const char *topic, int32_t partition)
{
    for (tally_shard *sh = s ? s->head : NULL; sh; sh = sh->next)
        if (sh->partition == partition && strcmp(sh->topic, topic) == 0)
            return sh;
    return NULL;
}

tally_ledger *tally_shard_ledger(tally_shard *sh)
{
    return sh->l;
}

int64_t tally_shard_epoch(const tally_shard *sh)
{
    return sh->epoch;
}

tally_err tally_shard_batch(tally_shard *sh, tally_batch **out)
{
    tally_err e = sh->b ? TALLY_OK : tally_batch_create(sh->l, &sh->b);
    *out = e ? NULL : sh->b;
    return e;
}

void tally_shard_batch_drop(tally_shard *sh)
{
    tally_batch_destroy(sh->b);
    sh->b = NULL;
}

/* ---- Rate cards from main.db ----------------------------------------------------- */

/* Cards are never updated or deleted, so the count and the highest rowid
 * change exactly when one is loaded (as ledger_cards() relies on too). */
static tally_err cards_version(tally_shard_set *s, int64_t *v)
{
    tally_err e = TALLY_OK;
    if (!s->st_cards)
        e = ledger_prepare(s->main, "SELECT count(*), coalesce(max(rowid), 0) FROM ratecards",
                           &s->st_cards);
    if (e)
        return e;
    int rc = sqlite3_step(s->st_cards);
    if (rc == SQLITE_ROW)
        *v = (sqlite3_column_int64(s->st_cards, 0) << 32) ^ sqlite3_column_int64(s->st_cards, 1);
    else
        e = ledger_sqlite_err(s->main, rc);
    sqlite3_reset(s->st_cards);
    return e;
}

/* Inside a transaction on the shard: every card of main.db it lacks. Cards
 * are immutable, so a card with the same id is the same card. */
static tally_err copy_cards(tally_shard *sh)
{
    tally_ledger *m = sh->set->main;
    sqlite3_stmt *get, *put;
    tally_err e = ledger_prepare(m,
                                 "SELECT id, currency, effective_from, body, loaded_at, "
                                 "entered_at FROM ratecards ORDER BY effective_from",
                                 &get);
    if (e)
        return e;
    e = ledger_prepare(sh->l,
                       "INSERT OR IGNORE INTO ratecards(id, currency, effective_from, "
                       "body, loaded_at, entered_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                       &put);
    int rc;
    while (!e && (rc = sqlite3_step(get)) == SQLITE_ROW) {
        sqlite3_reset(put);
        for (int c = 0; c < 6; c++)
            sqlite3_bind_value(put, c + 1, sqlite3_column_value(get, c));
        int prc = sqlite3_step(put);
        if (prc != SQLITE_DONE)
            e = ledger_sqlite_err(sh->l, prc);
    }
    if (!e && rc != SQLITE_DONE)
        e = ledger_sqlite_err(m, rc);
    sqlite3_finalize(get);
    sqlite3_finalize(put);
    return e;
}

tally_err tally_shard_prepare(tally_shard *sh)
{
    int64_t v = 0;
    tally_err e = cards_version(sh->set, &v);
    if (e) {
        snprintf(sh->l->errmsg, sizeof sh->l->errmsg, "main.db: %s",
                 tally_ledger_errmsg(sh->set->main));
        return e;
    }
    if (v == sh->cards_seen)
        return TALLY_OK;
    e = ledger_begin(sh->l);
    if (!e) {
        e = copy_cards(sh);
        if (!e)
            e = ledger_commit(sh->l);
        else
            ledger_rollback(sh->l);
    }
    if (!e)
        sh->cards_seen = v;
    return e;
}

/* ---- Owner rows and the fence ------------------------------------------------------ */

static void now_ms_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    (void)argv;
    sqlite3_result_int64(ctx, shard_now_ms());
}

static tally_err new_epoch(tally_shard *sh)
{
    sqlite3_stmt *st;
    tally_err e = ledger_begin(sh->l);
    if (e)
        return e;
    e = ledger_prepare(sh->l,
                       "INSERT INTO shard_owners(epoch, owner, host, pid, topic, partition, "
                       "acquired_ms) SELECT coalesce(max(epoch), 0) + 1, ?1, ?2, ?3, ?4, ?5, ?6 "
                       "FROM shard_owners RETURNING epoch",
                       &st);
    if (!e) {
        sqlite3_bind_text(st, 1, sh->set->owner, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, sh->set->host, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, (int64_t)getpid());
        sqlite3_bind_text(st, 4, sh->topic, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 5, sh->partition);
        sqlite3_bind_int64(st, 6, shard_now_ms());
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            sh->epoch = sqlite3_column_int64(st, 0);
            rc = sqlite3_step(st);
        }
        if (rc != SQLITE_DONE)
            e = ledger_sqlite_err(sh->l, rc);
        sqlite3_finalize(st);
    }
    if (!e)
        return ledger_commit(sh->l);
    ledger_rollback(sh->l);
    return e;
}

static tally_err install_fence(tally_shard *sh)
{
    char sql[sizeof fence_fmt + 96];
    long long ep = (long long)sh->epoch;
    int rc = sqlite3_create_function(sh->l->db, "tally_shard_now_ms", 0,
                                     SQLITE_UTF8 | SQLITE_INNOCUOUS, NULL, now_ms_fn, NULL, NULL);
    if (rc != SQLITE_OK)
        return ledger_sqlite_err(sh->l, rc);
    snprintf(sql, sizeof sql, fence_fmt, ep, ep, ep, ep);
    return tally_ledger_exec(sh->l, sql);
}

/* ---- Acquire and release ------------------------------------------------------------ */

static tally_err shard_path(const tally_shard *sh, const char *suffix, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%s%s", tally_ledger_dir(sh->set->main), sh->name, suffix);
    return n > 0 && (size_t)n < cap ? TALLY_OK : TALLY_INVAL;
}

/* The page cache of one held shard: $TALLY_SHARD_CACHE_KIB, else 16 MiB, so
 * a meter holding many partitions stays bounded (64 shards: 1 GiB at most). */
static int64_t shard_cache_kib(void)
{
    const char *s = getenv("TALLY_SHARD_CACHE_KIB");
    if (!s || !*s)
        return CACHE_KIB_SHARD;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < CACHE_KIB_MIN || v > CACHE_KIB_MAX)
        return CACHE_KIB_SHARD;
    return v;
}

/* ---- Balances in main.db ------------------------------------------------------------ */

/* Refreshes in main.db the balances the shard's commits left pending and
 * learns main.db's mark for it (shard_balance.c): with all, whatever is
 * there (at acquisition: a previous holder's rows); else only when this
 * holder wrote rows above the mark it knows, or main.db's mark went back
 * (a restore), so a chunk's flush of a shard it did not touch costs one
 * lookup in main.db and no read of the shard. Never fails the usage,
 * which is durable already: main.db busy is logged at info (the rows stay
 * pending for the next flush), any other failure as a warning. */
static tally_err shard_balances_flush(tally_shard *sh, bool all)
{
    if (!sh->l->balances_in_main)
        return TALLY_OK;
    tally_ledger *m = sh->set->main;
    int64_t n = 0, have = 0;
    tally_err e = TALLY_OK;
    if (!all && sh->l->balance_pending_seq <= sh->l->balance_mark) {
        e = ledger_shard_balance_mark(m, sh->name, &have);
        if (!e && have >= sh->l->balance_mark)
            return TALLY_OK; /* this holder's commits are all refreshed */
    }
    if (!e)
        e = ledger_shard_balances_flush(m, sh->name, &sh->l->balance_mark, &n);
    if (e == TALLY_BUSY)
        tally_log(TALLY_LOG_INFO, "ledger", "%s: balances left pending, main.db is busy (%s)",
                  sh->name, m->errmsg);
    else if (e)
        tally_log(TALLY_LOG_WARNING, "ledger", "%s: balances left pending: %s (%s)", sh->name,
                  tally_err_str(e), m->errmsg);
    else if (n > 0)
        tally_log(TALLY_LOG_DEBUG, "ledger", "%s: %lld balances refreshed in main.db", sh->name,
                  (long long)n);
    return e;
}

tally_err tally_shard_set_balances_flush(tally_shard_set *s)
{
    tally_err worst = TALLY_OK;
    for (tally_shard *sh = s ? s->head : NULL; sh; sh = sh->next) {
        tally_err e = shard_balances_flush(sh, false);
        if (e && e != TALLY_BUSY && !worst)
            worst = e;
    }
    return worst;
}

/* Everything after the lock: database, owner row, fence, cards. */
static tally_err open_locked(tally_shard *sh, char *why, size_t cap)
{
    char path[4096], note[512], cache[64];
    tally_err e = shard_path(sh, SHARD_DB_SUFFIX, path, sizeof path);
    if (!e)
        e = tally_ledger_open(path, &sh->l, why, cap);
    if (e)
        return e;
    /* No grants here: main.db keeps the balances, and each commit records
     * the accounts it touched for main.db to refresh (shard_balance.c);
     * unless balances are not kept at all (TALLY_NO_BALANCES=1). */
    sh->l->balances_in_main = !sh->l->no_balances;
    sh->l->no_balances = true;
    snprintf(cache, sizeof cache, "PRAGMA cache_size=-%lld", (long long)shard_cache_kib());
    e = tally_ledger_exec(sh->l, cache);
    if (!e)
        e = tally_ledger_exec(sh->l, shard_ddl);
    if (!e)
        e = new_epoch(sh);
    if (!e)
        e = install_fence(sh);
    if (!e)
        e = tally_shard_prepare(sh);
    if (e) {
        snprintf(why, cap, "%s: %s", path, tally_ledger_errmsg(sh->l));
        return e;
    }
    snprintf(note, sizeof note, "owner=%s host=%s pid=%ld epoch=%lld since_ms=%lld\n",
             sh->set->owner, sh->set->host, (long)getpid(), (long long)sh->epoch,
             (long long)shard_now_ms());
    shard_lock_note(sh->lock_fd, note);
    return TALLY_OK;
}

/* Frees a shard that is not (or no longer) in its set's list. */
static void shard_free(tally_shard *sh)
{
    tally_batch_destroy(sh->b);
    tally_ledger_close(sh->l);
    shard_lock_drop(sh->lock_fd); /* last: nothing is written without the lock */
    free(sh);
}

tally_err tally_shard_acquire(tally_shard_set *s, const char *topic, int32_t partition,
                              int64_t wait_ms, tally_shard **out, char *why, size_t cap)
{
    char path[4096];
    *out = tally_shard_find(s, topic, partition);
    if (*out)
        return TALLY_OK;
    tally_shard *sh = calloc(1, sizeof *sh);
    if (!sh) {
        snprintf(why, cap, "out of memory");
        return TALLY_NOMEM;
    }
    sh->set = s;
    sh->lock_fd = -1;
    sh->cards_seen = -1;
    sh->partition = partition;
    if (!tally_shard_name(topic, partition, sh->name, sizeof sh->name)) {
        snprintf(why, cap, "no shard for topic '%.60s' partition %d", topic ? topic : "",
                 (int)partition);
        free(sh);
        return TALLY_INVAL;
    }
    tally_err e = tally_fmt(sh->topic, sizeof sh->topic, "%s", topic);
    if (e) {
        snprintf(why, cap, "topic name too long");
        free(sh);
        return e;
    }
    e = shard_path(sh, SHARD_LOCK_SUFFIX, path, sizeof path);
    if (!e)
        e = shard_lock_take(path, wait_ms, &sh->lock_fd, why, cap);
    if (!e)
        e = open_locked(sh, why, cap);
    if (e) {
        shard_free(sh);
        return e;
    }
    sh->next = s->head;
    s->head = sh;
    *out = sh;
    (void)shard_balances_flush(sh, true); /* what a previous holder left pending */
    return TALLY_OK;
}

static void stamp_released(tally_shard *sh)
{
    sqlite3_stmt *st;
    if (ledger_prepare(sh->l, "UPDATE shard_owners SET released_ms = ?1 WHERE epoch = ?2", &st))
        return; /* the row stays open: a reader takes it for a holder that died */
    sqlite3_bind_int64(st, 1, shard_now_ms());
    sqlite3_bind_int64(st, 2, sh->epoch);
    (void)sqlite3_step(st);
    sqlite3_finalize(st);
}

void tally_shard_release(tally_shard *sh)
{
    if (!sh)
        return;
    for (tally_shard **p = &sh->set->head; *p; p = &(*p)->next)
        if (*p == sh) {
            *p = sh->next;
            break;
        }
    if (sh->l && sh->epoch > 0)
        stamp_released(sh);
    shard_free(sh);
}

void tally_shard_release_all(tally_shard_set *s)
{
    while (s && s->head)
        tally_shard_release(s->head);
}
