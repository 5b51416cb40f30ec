/* Prepaid balances of the accounts that meters write into the shards of a
 * ledger directory (include/tally/balance.h, schemas/014_balance_pending.sql).
 *
 * A shard holds no grants, limits or balances: its batch commit records each
 * account it touched in its balance_pending (with the span of the new usage
 * and the commit's usage_seq), in the usage's own transaction. A flush reads
 * the rows above main.db's mark for the shard and, in one main.db write
 * transaction, refreshes each account (bal_refresh, reading the account's
 * usage from every shard) and raises the mark to the highest seq it read.
 *
 * Crash safety. The usage and its pending row commit together in the shard;
 * the refreshes and the mark commit together in main.db. A crash between the
 * two leaves the row above the mark, so the next flush (the meter's next
 * chunk, the next acquisition of the shard, the publisher's sweep) does the
 * refresh. Doing a refresh again is harmless: it recomputes the balance from
 * the ledger, and writes an event only when the stored state changes, in the
 * transaction that stores it; so a flush repeated after a crash, or over a
 * mark moved back, announces nothing twice. A flush never touches the shard,
 * and its failure never undoes the usage, which is durable before it runs.
 *
 * A flush waits for main.db's write lock only FLUSH_BUSY_MS: when another
 * writer (an invoice run, say) holds it, the rows stay pending and ingest
 * goes on; the next flush takes them, as their seq is still above the mark. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"
#include "tally/log.h"

#define FLUSH_BUSY_MS   100 /* a flush's wait for main.db's write lock */
#define FLUSH_ROUNDS    64  /* flushes of one shard per sweep, at most */
#define PENDING_VERSION 14  /* the migration that creates balance_pending */

typedef struct pending_rows {
    batch_touch *rows;
    size_t n, cap;
    int64_t max_seq;
} pending_rows;

/* main.db's mark for the shard (0: none). */
tally_err ledger_shard_balance_mark(tally_ledger *m, const char *name, int64_t *mark)
{
    sqlite3_stmt *st;
    tally_err e = ledger_cached(m, "SELECT seq FROM shard_balance_marks WHERE shard = ?1", &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    *mark = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    return ledger_cached_done(m, st, rc == SQLITE_ROW ? SQLITE_DONE : rc);
}

static tally_err mark_raise(tally_ledger *m, const char *name, int64_t seq)
{
    sqlite3_stmt *st;
    tally_err e = ledger_cached(m,
                                "INSERT INTO shard_balance_marks(shard, seq) VALUES (?1, ?2) "
                                "ON CONFLICT(shard) DO UPDATE SET seq = max(seq, excluded.seq)",
                                &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, seq);
    return ledger_cached_done(m, st, sqlite3_step(st));
}

/* The shard's reader connection, or NULL when it has no balance_pending yet
 * (no tables, or written only by a meter older than migration 14). */
static tally_err pending_db(tally_ledger *m, shard_src *src, sqlite3 **db)
{
    tally_err e = shard_src_db(m, src, db);
    if (e || !*db)
        return e;
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(*db, "PRAGMA user_version", -1, &st, NULL);
    if (rc != SQLITE_OK)
        return shard_src_err(m, src, rc);
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW || sqlite3_column_int64(st, 0) < PENDING_VERSION)
        *db = NULL;
    e = rc == SQLITE_ROW ? TALLY_OK : ledger_stmt_err(m, st, rc);
    sqlite3_finalize(st);
    return e;
}

static tally_err pending_add(pending_rows *p, sqlite3_stmt *st)
{
    if (ledger_grow((void **)&p->rows, p->n, &p->cap, sizeof *p->rows, 64) != TALLY_OK)
        return TALLY_NOMEM;
    batch_touch *t = &p->rows[p->n++];
    const char *a = (const char *)sqlite3_column_text(st, 0);
    snprintf(t->account, sizeof t->account, "%s", a ? a : "");
    t->lo_s = sqlite3_column_int64(st, 1);
    t->hi_s = sqlite3_column_int64(st, 2);
    t->created = false; /* main.db may know it from before: read everything */
    p->max_seq = sqlite3_column_int64(st, 3);
    return TALLY_OK;
}

/* The rows above mark, oldest seq first: about SHARD_FLUSH_ROWS, and the
 * rest of the last commit's, so that the mark never splits a commit. */
static tally_err pending_read(tally_ledger *m, shard_src *src, int64_t mark, pending_rows *p)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    tally_err e = pending_db(m, src, &db);
    if (e || !db)
        return e;
    int rc = sqlite3_prepare_v2(db,
                                "SELECT account, lo_s, hi_s, seq FROM balance_pending "
                                "WHERE seq > ?1 ORDER BY seq, account",
                                -1, &st, NULL);
    if (rc != SQLITE_OK)
        return shard_src_err(m, src, rc);
    sqlite3_bind_int64(st, 1, mark);
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (p->n >= SHARD_FLUSH_ROWS && sqlite3_column_int64(st, 3) != p->max_seq) {
            rc = SQLITE_DONE;
            break;
        }
        e = pending_add(p, st);
    }
    if (!e && rc != SQLITE_DONE)
        e = ledger_stmt_err(m, st, rc);
    sqlite3_finalize(st);
    return e;
}

/* The refreshes and the mark: one main.db transaction. */
static tally_err flush_rows(tally_ledger *m, const char *name, const pending_rows *p)
{
    /* Outside the transaction: the accounts first seen in shards join
     * main.db (the refresh looks the account up there), and the index of
     * the shards that hold each account is brought up to date (the refresh
     * reads the account's usage from all of them). */
    tally_err e = ledger_shards_refresh(m);
    if (!e)
        e = ledger_begin(m);
    if (e)
        return e;
    e = bal_refresh_touched(m, NULL, NULL, p->rows, p->n);
    if (!e)
        e = mark_raise(m, name, p->max_seq);
    if (!e)
        return ledger_commit(m);
    ledger_rollback(m);
    return e;
}

tally_err ledger_shard_balances_flush(tally_ledger *m, const char *name, int64_t *mark, int64_t *n)
{
    pending_rows p = {0};
    int64_t have = 0;
    if (n)
        *n = 0;
    if (!m->shards || m->no_balances)
        return TALLY_OK;
    if (!sqlite3_get_autocommit(m->db)) {
        snprintf(m->errmsg, sizeof m->errmsg,
                 "balances of shards are refreshed outside a transaction only");
        return TALLY_BUSY;
    }
    ssize_t i = shard_src_index(m->shards, name);
    tally_err e = i < 0 ? shard_discover(m) : TALLY_OK;
    if (!e && i < 0)
        i = shard_src_index(m->shards, name);
    if (e || i < 0)
        return e;
    e = ledger_shard_balance_mark(m, name, &have);
    if (e)
        return e;
    *mark = have; /* main.db's word, even if it went back (a restore) */
    e = pending_read(m, &m->shards->src[i], have, &p);
    if (!e && p.n > 0) {
        sqlite3_busy_timeout(m->db, FLUSH_BUSY_MS);
        e = flush_rows(m, name, &p);
        sqlite3_busy_timeout(m->db, LEDGER_BUSY_TIMEOUT_MS);
    }
    if (!e && p.n > 0) {
        if (p.max_seq > *mark)
            *mark = p.max_seq;
        if (n)
            *n = (int64_t)p.n;
    }
    free(p.rows);
    return e;
}

tally_err ledger_shard_balances_flush_all(tally_ledger *m, int64_t *n)
{
    *n = 0;
    if (!m->shards || m->no_balances)
        return TALLY_OK;
    tally_err e = shard_discover(m);
    for (size_t i = 1; !e && i < m->shards->n_src; i++) {
        char name[SHARD_NAME_MAX];
        int64_t mark = 0, done = 0;
        snprintf(name, sizeof name, "%s", m->shards->src[i].name);
        for (int r = 0; !e && r < FLUSH_ROUNDS; r++) { /* about SHARD_FLUSH_ROWS each */
            e = ledger_shard_balances_flush(m, name, &mark, &done);
            *n += done;
            if (done == 0)
                break;
        }
    }
    if (e == TALLY_BUSY) {
        tally_log(TALLY_LOG_INFO, "ledger",
                  "balances of shards not refreshed yet: main.db is busy (%s); next sweep",
                  m->errmsg);
        e = TALLY_OK;
    }
    return e;
}

tally_err ledger_shard_balance_pending(tally_ledger *m, const char *account, bool *pending)
{
    *pending = false;
    if (!m->shards)
        return TALLY_OK;
    tally_err e = TALLY_OK;
    for (size_t i = 1; !e && !*pending && i < m->shards->n_src; i++) {
        shard_src *src = &m->shards->src[i];
        sqlite3 *db;
        sqlite3_stmt *st;
        int64_t mark = 0;
        e = ledger_shard_balance_mark(m, src->name, &mark);
        if (!e)
            e = pending_db(m, src, &db);
        if (e || !db)
            continue;
        int rc = sqlite3_prepare_v2(
            db, "SELECT 1 FROM balance_pending WHERE account = ?1 AND seq > ?2", -1, &st, NULL);
        if (rc != SQLITE_OK) {
            e = shard_src_err(m, src, rc);
            break;
        }
        sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, mark);
        rc = sqlite3_step(st);
        *pending = rc == SQLITE_ROW;
        if (rc != SQLITE_ROW && rc != SQLITE_DONE)
            e = ledger_stmt_err(m, st, rc);
        sqlite3_finalize(st);
    }
    return e;
}
