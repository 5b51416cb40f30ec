/* tally verify, the prepaid balances' part (schemas/012_balance.sql).
 *
 * account_balances and running_periods hold no fact of their own: they are
 * what the refresh (ledger/balance.c) derives from usage, prices, grants,
 * limits and invoices, kept so that a read is a lookup. Nothing chains them,
 * so an edit (an account un-suspended by raising its balance_minor, a
 * running period lowered) is found by deriving them again:
 *   1. cheap consistency in SQL: every running period belongs to a stored
 *      balance, the running charges are the sum of the periods, the balance
 *      is credits - (running - covered), the currency is the account's, and
 *      the events announced (event_seq) are the balance events the outbox
 *      holds for the account;
 *   2. each account's balance recomputed with the refresh's own code as of
 *      its stored updated_at (the instant that refresh saw), from all the
 *      account's usage, writing nothing (bal_check), and compared field by
 *      field, period by period, with the state, exhaustion and next check
 *      that refresh would have stored.
 * A failure names the account. On a ledger directory the recomputation reads
 * the account's usage from main.db and every shard holding it; an account
 * that differs but has usage a meter committed to a shard and main.db has not
 * refreshed yet (a balance_pending row above main.db's mark: the lag of one
 * chunk, include/tally/balance.h) is not a failure, its balance is only
 * behind. Skipped when the process runs with TALLY_NO_BALANCES=1 (balances
 * not kept). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"

#define BALANCE_EVENT_TYPES                                                                        \
    "('balance.low', 'balance.exhausted', 'balance.recovered', 'account.suspend', "                \
    "'account.resume', 'volume.release')"

static const char *const sql_checks[] = {
    "SELECT 'running period ' || r.period || ' of account ' || r.account || ': the account has "
    "no stored balance' FROM running_periods r WHERE NOT EXISTS (SELECT 1 FROM account_balances "
    "b WHERE b.account = r.account) ORDER BY r.account, r.period LIMIT 1",

    "SELECT 'balance of account ' || b.account || ': running_minor ' || b.running_minor || "
    "' and covered_minor ' || b.covered_minor || ' differ from its running periods (' || "
    "coalesce(r.s, 0) || ', ' || coalesce(r.c, 0) || ')' FROM account_balances b LEFT JOIN "
    "(SELECT account, sum(subtotal_minor) s, sum(credits_minor) c FROM running_periods GROUP BY "
    "account) r ON r.account = b.account WHERE b.running_minor != coalesce(r.s, 0) OR "
    "b.covered_minor != coalesce(r.c, 0) ORDER BY b.account LIMIT 1",

    "SELECT 'balance of account ' || account || ': balance_minor ' || balance_minor || ' is not "
    "credits_minor - (running_minor - covered_minor) = ' || (credits_minor - (running_minor - "
    "covered_minor)) FROM account_balances WHERE balance_minor != credits_minor - "
    "(running_minor - covered_minor) ORDER BY account LIMIT 1",

    "SELECT 'balance of account ' || b.account || ': currency ' || b.currency || ', but the "
    "account''s is ' || coalesce(a.currency, 'missing (no such account)') FROM account_balances "
    "b LEFT JOIN accounts a ON a.id = b.account WHERE a.currency IS NULL OR a.currency != "
    "b.currency ORDER BY b.account LIMIT 1",

    "SELECT 'balance of account ' || b.account || ': event_seq ' || b.event_seq || ', but the "
    "outbox holds ' || coalesce(o.n, 0) || ' balance events of it' FROM account_balances b "
    "LEFT JOIN (SELECT subject, count(*) n FROM outbox WHERE type IN " BALANCE_EVENT_TYPES
    " GROUP BY subject) o ON o.subject = b.account WHERE b.event_seq != coalesce(o.n, 0) "
    "ORDER BY b.account LIMIT 1",
};

/* Clears why when the account's balance differs only because a shard holds
 * usage of it that main.db has not refreshed yet. Read after the
 * recomputation: a shard commits usage and its pending row together, and
 * main.db's marks are read in verify's snapshot, so usage the recomputation
 * saw beyond the stored balance always has a row above the mark. */
static tally_err lagging(vctx *v, const char *account, char *why)
{
    bool pending = false;
    tally_err err = ledger_shard_balance_pending(v->l, account, &pending);
    if (err == TALLY_OK && pending)
        why[0] = '\0';
    return err;
}

tally_err verify_balances(vctx *v)
{
    if (v->l->no_balances)
        return TALLY_OK;
    tally_err err = TALLY_OK;
    for (size_t i = 0; err == TALLY_OK && i < sizeof sql_checks / sizeof *sql_checks; i++)
        err = verify_sql(v, sql_checks[i]);
    if (err != TALLY_OK)
        return err;
    char(*acc)[TALLY_NAME_MAX] = NULL;
    size_t n = 0;
    bal_engine *b = NULL;
    char why[512];
    err = ledger_accounts_of(
        v->l, "SELECT account FROM account_balances WHERE ?1 = ?1 ORDER BY account", 0, &acc, &n);
    if (err == TALLY_OK && n)
        err = bal_engine_create(v->l, &b);
    for (size_t i = 0; err == TALLY_OK && i < n; i++) {
        err = bal_check(b, acc[i], why, sizeof why);
        if (err == TALLY_OK && why[0])
            err = lagging(v, acc[i], why);
        if (err != TALLY_OK)
            err = verify_fail(v, err, "balance of account %s: cannot be recomputed: %s (%s)",
                              acc[i], tally_err_str(err), tally_ledger_errmsg(v->l));
        else if (why[0])
            err = verify_fail(v, TALLY_TAMPERED,
                              "balance of account %s: %s (account_balances and running_periods "
                              "are derived: edited, or written around Tally)",
                              acc[i], why);
    }
    if (err != TALLY_OK && err != TALLY_TAMPERED && !v->why[0])
        err =
            verify_fail(v, err, "balances: %s (%s)", tally_err_str(err), tally_ledger_errmsg(v->l));
    bal_engine_destroy(b);
    free(acc);
    return err;
}
