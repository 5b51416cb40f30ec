/* API keys' rows (schemas/002_apikeys.sql). Only hashes are stored; making
 * and checking keys is the server's (server/auth.c). */
#include <stdio.h>
#include <string.h>

#include "ledger_int.h"

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
    return ledger_finish(l, st, rc);
}

static const char *const role_names[] = {
    [TALLY_KEY_ACCOUNT] = "account", [TALLY_KEY_INGEST] = "ingest", [TALLY_KEY_ADMIN] = "admin"};

static void key_from_row(sqlite3_stmt *st, tally_key_row *k)
{
    memset(k, 0, sizeof *k);
    k->id = sqlite3_column_int64(st, 0);
    const void *h = sqlite3_column_blob(st, 1);
    if (h && sqlite3_column_bytes(st, 1) == (int)sizeof k->hash)
        memcpy(k->hash, h, sizeof k->hash);
    const char *role = (const char *)sqlite3_column_text(st, 2);
    k->role = TALLY_KEY_ACCOUNT;
    for (size_t i = 0; role && i < sizeof role_names / sizeof *role_names; i++)
        if (strcmp(role, role_names[i]) == 0)
            k->role = (tally_key_role)i;
    k->admin = k->role == TALLY_KEY_ADMIN;
    const unsigned char *a = sqlite3_column_text(st, 3);
    if (a)
        snprintf(k->account, sizeof k->account, "%s", (const char *)a);
    k->created_s = sqlite3_column_int64(st, 4);
    k->revoked_s = sqlite3_column_int64(st, 5);
}

/* Fills an ingest key's prefixes. */
static tally_err key_sources(tally_ledger *l, sqlite3_stmt *src, tally_key_row *k)
{
    sqlite3_reset(src);
    sqlite3_bind_int64(src, 1, k->id);
    int rc;
    while ((rc = sqlite3_step(src)) == SQLITE_ROW && k->n_sources < TALLY_KEY_SOURCES_MAX)
        snprintf(k->sources[k->n_sources++], sizeof k->sources[0], "%s",
                 (const char *)sqlite3_column_text(src, 0));
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? TALLY_OK : ledger_sqlite_err(l, rc);
}

tally_err tally_ledger_keys(tally_ledger *l, bool active_only, tally_key_fn fn, void *ctx)
{
    sqlite3_stmt *st, *src;
    tally_err e = ledger_prepare(l,
                                 active_only ? "SELECT id, key_hash, role, account, created_at, "
                                               "coalesce(revoked_at, 0) FROM api_keys "
                                               "WHERE revoked_at IS NULL ORDER BY id"
                                             : "SELECT id, key_hash, role, account, created_at, "
                                               "coalesce(revoked_at, 0) FROM api_keys ORDER BY id",
                                 &st);
    if (e)
        return e;
    e = ledger_prepare(l, "SELECT prefix FROM api_key_sources WHERE key_id = ?1 ORDER BY prefix",
                       &src);
    if (e) {
        sqlite3_finalize(st);
        return e;
    }
    int rc = SQLITE_DONE;
    tally_key_row k;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        key_from_row(st, &k);
        if (k.role == TALLY_KEY_INGEST)
            e = key_sources(l, src, &k);
        if (!e)
            e = fn(ctx, &k);
    }
    sqlite3_finalize(src);
    if (e) {
        sqlite3_finalize(st);
        return e;
    }
    return ledger_finish(l, st, rc);
}

static bool key_shape_ok(tally_key_role role, const char *account, const char *const *sources,
                         size_t n_sources)
{
    if ((role == TALLY_KEY_ACCOUNT) != (account != NULL))
        return false;
    if (role != TALLY_KEY_INGEST)
        return role == TALLY_KEY_ACCOUNT || role == TALLY_KEY_ADMIN ? n_sources == 0 : false;
    if (n_sources == 0 || n_sources > TALLY_KEY_SOURCES_MAX)
        return false;
    for (size_t i = 0; i < n_sources; i++)
        if (!sources[i] || !sources[i][0] || strlen(sources[i]) >= TALLY_ID_MAX)
            return false;
    return true;
}

static tally_err insert_sources(tally_ledger *l, int64_t id, const char *const *sources,
                                size_t n_sources)
{
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(
        l, "INSERT OR IGNORE INTO api_key_sources(key_id, prefix) VALUES (?1, ?2)", &st);
    for (size_t i = 0; i < n_sources && !e; i++) {
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_text(st, 2, sources[i], -1, SQLITE_STATIC);
        int rc = sqlite3_step(st);
        if (rc != SQLITE_DONE)
            e = ledger_sqlite_err(l, rc);
    }
    if (st)
        sqlite3_finalize(st);
    return e;
}

tally_err tally_ledger_key_insert(tally_ledger *l, const unsigned char hash[32],
                                  tally_key_role role, const char *account,
                                  const char *const *sources, size_t n_sources, int64_t created_s,
                                  int64_t *id_out)
{
    if (!key_shape_ok(role, account, sources, n_sources))
        return TALLY_INVAL;
    sqlite3_stmt *st;
    tally_err e = ledger_begin(l);
    if (e)
        return e;
    e = ledger_prepare(
        l, "INSERT INTO api_keys(key_hash, role, account, created_at) VALUES (?1, ?2, ?3, ?4)",
        &st);
    if (!e) {
        sqlite3_bind_blob(st, 1, hash, 32, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, role_names[role], -1, SQLITE_STATIC);
        if (account)
            sqlite3_bind_text(st, 3, account, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 4, created_s);
        e = ledger_finish(l, st, sqlite3_step(st));
    }
    int64_t id = e ? 0 : sqlite3_last_insert_rowid(l->db);
    if (!e)
        e = insert_sources(l, id, sources, n_sources);
    if (e) {
        ledger_rollback(l);
        return e;
    }
    e = ledger_commit(l);
    if (!e && id_out)
        *id_out = id;
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
    e = ledger_finish(l, st, found ? SQLITE_DONE : rc);
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
    return ledger_finish(l, st, sqlite3_step(st));
}

tally_err tally_ledger_ping(tally_ledger *l)
{
    sqlite3_stmt *st;
    /* Reads a real table, so a missing or unreadable file is noticed. */
    tally_err e = ledger_prepare(l, "SELECT count(*) FROM api_keys", &st);
    if (e)
        return e;
    int rc = sqlite3_step(st);
    return ledger_finish(l, st,
                         rc == SQLITE_ROW    ? SQLITE_DONE
                         : rc == SQLITE_DONE ? SQLITE_CORRUPT
                                             : rc);
}
