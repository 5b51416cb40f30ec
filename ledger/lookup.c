/* Small reads for the edges (HTTP, CLI, meter): who owns an invoice, what the
 * quarantine holds, read snapshots. */
#include <stdio.h>
#include <string.h>

#include "ledger_int.h"
#include "tally/ledger_sql.h"

tally_err tally_ledger_invoice_owner(tally_ledger *l, const char *id, char owner[TALLY_NAME_MAX])
{
    owner[0] = '\0';
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(l, "SELECT account FROM invoices WHERE id = ?1", &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const unsigned char *a = sqlite3_column_text(st, 0);
        snprintf(owner, TALLY_NAME_MAX, "%s", a ? (const char *)a : "");
        rc = SQLITE_DONE;
    }
    return ledger_finish(l, st, rc);
}

tally_err tally_ledger_quarantine_counts(tally_ledger *l, int64_t after_id,
                                         tally_reason_count_fn fn, void *ctx, int64_t *max_id)
{
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(
        l, "SELECT reason, count(*), max(id) FROM quarantine WHERE id > ?1 GROUP BY reason", &st);
    if (e)
        return e;
    sqlite3_bind_int64(st, 1, after_id);
    int rc;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const unsigned char *reason = sqlite3_column_text(st, 0);
        int64_t top = sqlite3_column_int64(st, 2);
        if (top > *max_id)
            *max_id = top;
        e = fn(ctx, reason ? (const char *)reason : "", sqlite3_column_int64(st, 1));
    }
    if (e) {
        sqlite3_finalize(st);
        return e;
    }
    return ledger_finish(l, st, rc);
}

tally_err tally_ledger_quarantine_reason(tally_ledger *l, const char *origin, char *reason,
                                         size_t cap)
{
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(l, "SELECT reason FROM quarantine WHERE origin = ?1", &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, origin, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    bool found = rc == SQLITE_ROW;
    if (found) {
        const unsigned char *r = sqlite3_column_text(st, 0);
        snprintf(reason, cap, "%s", r ? (const char *)r : "");
        rc = SQLITE_DONE;
    }
    e = ledger_finish(l, st, rc);
    return e ? e : found ? TALLY_OK : TALLY_NOT_FOUND;
}

tally_err tally_ledger_quarantine_each(tally_ledger *l, const char *origin_prefix,
                                       tally_quarantine_fn fn, void *ctx)
{
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(l,
                                 "SELECT origin, reason, raw, key_id, raw_size, raw_sha256 FROM "
                                 "quarantine "
                                 "WHERE substr(origin, 1, length(?1)) = ?1 ORDER BY id",
                                 &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, origin_prefix, -1, SQLITE_STATIC);
    int rc;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const unsigned char *origin = sqlite3_column_text(st, 0);
        const unsigned char *reason = sqlite3_column_text(st, 1);
        tally_quarantine_row q = {.origin = origin ? (const char *)origin : "",
                                  .reason = reason ? (const char *)reason : "",
                                  .raw = sqlite3_column_blob(st, 2),
                                  .raw_len = (size_t)sqlite3_column_bytes(st, 2),
                                  .key_id = sqlite3_column_int64(st, 3)};
        const unsigned char *sha = sqlite3_column_text(st, 5);
        q.raw_size = sqlite3_column_type(st, 4) == SQLITE_NULL
                         ? q.raw_len
                         : (size_t)sqlite3_column_int64(st, 4);
        q.raw_sha256 = sha ? (const char *)sha : "";
        e = fn(ctx, &q);
    }
    if (e) {
        sqlite3_finalize(st);
        return e;
    }
    return ledger_finish(l, st, rc);
}

tally_err tally_ledger_read_begin(tally_ledger *l)
{
    return tally_ledger_exec(l, "BEGIN DEFERRED");
}

tally_err tally_ledger_read_end(tally_ledger *l)
{
    tally_err e = tally_ledger_exec(l, "COMMIT");
    if (e && tally_ledger_exec(l, "ROLLBACK") == TALLY_OK)
        return TALLY_OK;
    return e;
}
