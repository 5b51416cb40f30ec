/* Outbox counts per event type, for /metrics (include/tally/outbox.h).
 *
 * Rows are never deleted and only sent_at ever changes (schemas/003_outbox.sql),
 * so a caller can count each type's events incrementally by id and ask only
 * for what is still pending: a scrape reads the rows added since the last
 * one and the pending rows (through the outbox_pending index), never the
 * whole table. */
#include "ledger_int.h"
#include "tally/outbox.h"

tally_err tally_outbox_type_counts(tally_ledger *l, int64_t after_id, tally_outbox_type_fn fn,
                                   void *ctx, int64_t *through_id)
{
    if (!l || !fn || after_id < 0)
        return TALLY_INVAL;
    /* One statement: added and pending come from the same snapshot. */
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(
        l,
        "SELECT type, sum(added), sum(pending), max(CASE WHEN added = 1 THEN id END) FROM ("
        "SELECT type, id, 1 AS added, 0 AS pending FROM outbox WHERE id > ?1 UNION ALL "
        "SELECT type, id, 0, 1 FROM outbox INDEXED BY outbox_pending WHERE sent_at IS NULL) "
        "GROUP BY type ORDER BY type",
        &st);
    if (e)
        return e;
    sqlite3_bind_int64(st, 1, after_id);
    int64_t top = after_id;
    int rc;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const unsigned char *type = sqlite3_column_text(st, 0);
        if (sqlite3_column_type(st, 3) != SQLITE_NULL && sqlite3_column_int64(st, 3) > top)
            top = sqlite3_column_int64(st, 3);
        e = fn(ctx, type ? (const char *)type : "", sqlite3_column_int64(st, 1),
               sqlite3_column_int64(st, 2));
    }
    if (e) {
        sqlite3_finalize(st);
        return e;
    }
    e = ledger_finish(l, st, rc);
    if (!e && through_id)
        *through_id = top;
    return e;
}
