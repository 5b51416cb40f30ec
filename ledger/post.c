/* Double-entry postings: one entry row, then one postings row per leg.
 *
 * The caller passes signed amounts (positive debit, negative credit); they
 * must sum to zero, checked here before anything is written, so an
 * unbalanced entry can never reach the table. The balances table follows by
 * trigger (schemas/001_init.sql); the entry and its postings join the
 * ledger's chain as one group (schemas/017_chain_groups.sql). */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ledger_int.h"

/* Sums the legs with overflow checks; INT64_MIN has no opposite leg. */
static tally_err check_balanced(const ledger_posting *p, size_t n)
{
    int64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i].amount_minor == INT64_MIN || __builtin_add_overflow(sum, p[i].amount_minor, &sum))
            return TALLY_INVAL;
        if (strnlen(p[i].acct, sizeof p[i].acct) == sizeof p[i].acct || !p[i].acct[0])
            return TALLY_INVAL;
    }
    return sum == 0 ? TALLY_OK : TALLY_INVAL;
}

static tally_err insert_entry(tally_ledger *l, const char *kind, const char *ref, int64_t *id)
{
    sqlite3_stmt *st;
    tally_err e =
        ledger_cached(l, "INSERT INTO entries(kind, ref, created_at) VALUES (?1, ?2, ?3)", &st);
    if (e != TALLY_OK)
        return e;
    sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, ref, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, tally_now_s());
    int rc = sqlite3_step(st);
    *id = sqlite3_last_insert_rowid(l->db);
    return ledger_cached_done(l, st, rc);
}

/* *first: the rowid of the first posting written (INT64_MAX: none). */
static tally_err insert_legs(tally_ledger *l, int64_t entry_id, const char *currency,
                             const ledger_posting *p, size_t n, int64_t *first)
{
    *first = INT64_MAX;
    sqlite3_stmt *st;
    tally_err e = ledger_cached(l,
                                "INSERT INTO postings(entry_id, ledger_acct, currency, "
                                "debit_minor, credit_minor) VALUES (?1, ?2, ?3, ?4, ?5)",
                                &st);
    for (size_t i = 0; e == TALLY_OK && i < n; i++) {
        int64_t amt = p[i].amount_minor;
        if (amt == 0)
            continue;
        sqlite3_bind_int64(st, 1, entry_id);
        sqlite3_bind_text(st, 2, p[i].acct, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, currency, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 4, amt > 0 ? amt : 0);
        sqlite3_bind_int64(st, 5, amt < 0 ? -amt : 0);
        int rc = sqlite3_step(st);
        if (rc != SQLITE_DONE)
            e = ledger_sqlite_err(l, rc);
        else if (*first == INT64_MAX)
            *first = sqlite3_last_insert_rowid(l->db);
        sqlite3_reset(st);
    }
    if (st) /* hands the statement back (the loop reported any error) */
        (void)ledger_cached_done(l, st, SQLITE_DONE);
    return e;
}

tally_err ledger_post(tally_ledger *l, const char *kind, const char *ref, const char *currency,
                      const ledger_posting *p, size_t n)
{
    int64_t entry_id = 0;
    assert(kind && ref && currency && (p || n == 0));
    if (check_balanced(p, n) != TALLY_OK) {
        snprintf(l->errmsg, sizeof l->errmsg, "entry %s %s does not balance", kind, ref);
        return TALLY_INVAL;
    }
    tally_err e = ledger_cached_exec(l, "SAVEPOINT ledger_post", false);
    if (e != TALLY_OK)
        return e;
    int64_t first = INT64_MAX;
    e = insert_entry(l, kind, ref, &entry_id);
    if (e == TALLY_OK)
        e = insert_legs(l, entry_id, currency, p, n, &first);
    if (e == TALLY_OK) /* one chain entry for the entry and its postings */
        e = ledger_chain_group_add(l, LEDGER_GROUP_ENTRY, entry_id, first);
    if (e != TALLY_OK) /* quiet: l->errmsg keeps the failure's message */
        (void)ledger_cached_exec(l, "ROLLBACK TO ledger_post", true);
    tally_err r = ledger_cached_exec(l, "RELEASE ledger_post", e != TALLY_OK);
    return e != TALLY_OK ? e : r;
}
