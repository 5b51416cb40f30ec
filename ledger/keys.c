/* API keys' rows (schemas/002_apikeys.sql). Only hashes are stored; making
 * and checking keys is the server's (server/auth.c). */
#include <stdio.h>
#include <string.h>

#include "ledger_int.h"

static tally_err finish(tally_ledger *l, sqlite3_stmt *st, int rc)
{
    tally_err e = rc == SQLITE_DONE ? TALLY_OK : ledger_sqlite_err(l, rc);
    sqlite3_finalize(st);
    return e;
}

tally_err tally_ledger_data_version(tally_ledger *l, int64_t *out)
{
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(l, "PRAGMA data_version", &st);
    if (e)
        return e;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *out = sqlite3_column_int64(st, 0);
        rc = SQLITE_DONE;
    }
    return finish(l, st, rc);
}

static void key_from_row(sqlite3_stmt *st, tally_key_row *k)
{
    memset(k, 0, sizeof *k);
    k->id = sqlite3_column_int64(st, 0);
    const void *h = sqlite3_column_blob(st, 1);
    if (h && sqlite3_column_bytes(st, 1) == (int)sizeof k->hash)
        memcpy(k->hash, h, sizeof k->hash);
    const unsigned char *a = sqlite3_column_text(st, 2);
    if (a)
        snprintf(k->account, sizeof k->account, "%s", (const char *)a);
    k->admin = sqlite3_column_int64(st, 3) == 1;
    k->created_s = sqlite3_column_int64(st, 4);
    k->revoked_s = sqlite3_column_int64(st, 5);
}

tally_err tally_ledger_keys(tally_ledger *l, bool active_only, tally_key_fn fn, void *ctx)
{
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(l,
                                 active_only ? "SELECT id, key_hash, account, admin, created_at, "
                                               "coalesce(revoked_at, 0) FROM api_keys "
                                               "WHERE revoked_at IS NULL ORDER BY id"
                                             : "SELECT id, key_hash, account, admin, created_at, "
                                               "coalesce(revoked_at, 0) FROM api_keys ORDER BY id",
                                 &st);
    if (e)
        return e;
    int rc;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        tally_key_row k;
        key_from_row(st, &k);
        e = fn(ctx, &k);
    }
    if (e) {
        sqlite3_finalize(st);
        return e;
    }
    return finish(l, st, rc);
}

tally_err tally_ledger_key_insert(tally_ledger *l, const unsigned char hash[32],
                                  const char *account, bool admin, int64_t created_s,
                                  int64_t *id_out)
{
    if (admin == (account != NULL))
        return TALLY_INVAL;
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(
        l, "INSERT INTO api_keys(key_hash, account, admin, created_at) VALUES (?1, ?2, ?3, ?4)",
        &st);
    if (e)
        return e;
    sqlite3_bind_blob(st, 1, hash, 32, SQLITE_STATIC);
    if (account)
        sqlite3_bind_text(st, 2, account, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, admin ? 1 : 0);
    sqlite3_bind_int64(st, 4, created_s);
    e = finish(l, st, sqlite3_step(st));
    if (!e && id_out)
        *id_out = sqlite3_last_insert_rowid(l->db);
    return e;
}

tally_err tally_ledger_key_revoke(tally_ledger *l, int64_t id, int64_t now_s)
{
    sqlite3_stmt *st;
    tally_err e =
        ledger_prepare(l, "SELECT revoked_at IS NOT NULL FROM api_keys WHERE id = ?1", &st);
    if (e)
        return e;
    sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st);
    bool found = rc == SQLITE_ROW, revoked = found && sqlite3_column_int(st, 0) == 1;
    e = finish(l, st, found ? SQLITE_DONE : rc);
    if (e)
        return e;
    if (!found)
        return TALLY_NOT_FOUND;
    if (revoked)
        return TALLY_EXISTS;
    e = ledger_prepare(
        l, "UPDATE api_keys SET revoked_at = ?1 WHERE id = ?2 AND revoked_at IS NULL", &st);
    if (e)
        return e;
    sqlite3_bind_int64(st, 1, now_s);
    sqlite3_bind_int64(st, 2, id);
    return finish(l, st, sqlite3_step(st));
}

tally_err tally_ledger_ping(tally_ledger *l)
{
    sqlite3_stmt *st;
    /* Reads a real table, so a missing or unreadable file is noticed. */
    tally_err e = ledger_prepare(l, "SELECT count(*) FROM api_keys", &st);
    if (e)
        return e;
    int rc = sqlite3_step(st);
    return finish(l, st, rc == SQLITE_ROW ? SQLITE_DONE : rc == SQLITE_DONE ? SQLITE_CORRUPT : rc);
}
