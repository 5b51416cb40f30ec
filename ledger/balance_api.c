/* Prepaid balances: limits, lookups, sweeps and counts
 * (include/tally/balance.h). The refresh itself is balance.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"
#include "tally/balance.h"
#include "tally/money.h"

static tally_err failf(tally_ledger *l, tally_err e, char *why, size_t cap, const char *msg)
{
    snprintf(l->errmsg, sizeof l->errmsg, "%s", msg);
    if (why && cap)
        snprintf(why, cap, "%s", msg);
    return e;
}

/* ---- Limits ------------------------------------------------------------------ */

static tally_err check_limits(tally_ledger *l, const tally_limits *lim, const tally_currency *c,
                              char *why, size_t cap)
{
    int64_t max = tally_grant_max_minor(c);
    if (lim->has_low && (lim->low_minor > max || lim->low_minor < -max))
        return failf(l, TALLY_RANGE, why, cap, "the low-balance mark is over the grant bound");
    if (lim->stop_at_minor > max || lim->stop_at_minor < -max)
        return failf(l, TALLY_RANGE, why, cap, "the stop mark is over the grant bound");
    if (lim->has_low && lim->low_minor <= lim->stop_at_minor)
        return failf(l, TALLY_RANGE, why, cap, "the low-balance mark must be above the stop mark");
    if (lim->release_after_s < 0 || lim->release_after_s > TALLY_BALANCE_RELEASE_MAX)
        return failf(l, TALLY_RANGE, why, cap, "--release-after must be 0 to 3660 days");
    return TALLY_OK;
}

static tally_err limits_write(tally_ledger *l, const char *account, const tally_limits *lim)
{
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(
        l,
        "INSERT INTO account_limits(account, low_balance_minor, stop_at_minor, release_after_s, "
        "updated_at) VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT(account) DO UPDATE SET "
        "low_balance_minor = excluded.low_balance_minor, stop_at_minor = excluded.stop_at_minor, "
        "release_after_s = excluded.release_after_s, updated_at = excluded.updated_at",
        &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
    if (lim->has_low)
        sqlite3_bind_int64(st, 2, lim->low_minor);
    sqlite3_bind_int64(st, 3, lim->stop_at_minor);
    sqlite3_bind_int64(st, 4, lim->release_after_s);
    sqlite3_bind_int64(st, 5, tally_now_s());
    return ledger_finish(l, st, sqlite3_step(st));
}

tally_err tally_limits_set(tally_ledger *l, const char *account, const tally_limits_change *c,
                           char *why, size_t cap)
{
    tally_account a;
    tally_limits lim;
    tally_err e = tally_ledger_account_get(l, account, &a);
    if (e)
        return e;
    const tally_currency *ccy = tally_currency_find(a.currency);
    if (!ccy)
        return TALLY_UNKNOWN_CURRENCY;
    e = ledger_begin(l);
    if (e)
        return e;
    e = bal_limits_get(l, account, &lim, NULL);
    if (!e) {
        if (c->clear_low)
            lim.has_low = false;
        if (c->low_minor) {
            lim.has_low = true;
            lim.low_minor = *c->low_minor;
        }
        if (c->stop_at_minor)
            lim.stop_at_minor = *c->stop_at_minor;
        if (c->release_after_s)
            lim.release_after_s = *c->release_after_s;
        e = check_limits(l, &lim, ccy, why, cap);
    }
    if (!e)
        e = limits_write(l, account, &lim);
    if (!e)
        e = ledger_balance_refresh(l, account, "limits");
    if (e) {
        ledger_rollback(l);
        return e;
    }
    return ledger_commit(l);
}

/* ---- Lookups ------------------------------------------------------------------ */

/* The stored balance; *due when there is none or its next check has come. */
static tally_err balance_read(tally_ledger *l, const char *account, tally_balance *out, bool *due)
{
    bal_row r;
    bool found = false;
    tally_err e = bal_row_get(l, account, &r, &found);
    *due = !found || (r.has_next && r.next_check_s <= tally_now_s());
    if (e || !found)
        return e;
    snprintf(out->account, sizeof out->account, "%s", account);
    snprintf(out->currency, sizeof out->currency, "%s", r.currency);
    out->running_minor = r.v[0];
    out->covered_minor = r.v[1];
    out->credits_minor = r.v[2];
    out->balance_minor = r.v[3];
    out->burn_minor = r.v[4];
    out->state = bal_state_from_name(r.state);
    out->updated_at_s = r.updated_at_s;
    return TALLY_OK;
}

/* Refreshes one account in a transaction of its own. */
static tally_err refresh_one(tally_ledger *l, const char *account, const char *cause)
{
    tally_err e = ledger_begin(l);
    if (e)
        return e;
    e = ledger_balance_refresh(l, account, cause);
    if (e) {
        ledger_rollback(l);
        return e;
    }
    return ledger_commit(l);
}

static void runway(tally_balance *b)
{
    int64_t above = b->balance_minor - b->limits.stop_at_minor;
    b->has_runway = b->burn_minor > 0 && b->controlled;
    if (!b->has_runway)
        return;
    if (above <= 0) {
        b->runway_s = 0;
        return;
    }
    __int128 r = (__int128)above * TALLY_BALANCE_WINDOW_S / b->burn_minor;
    b->runway_s = r > INT64_MAX ? INT64_MAX : (int64_t)r;
}

tally_err tally_balance_get(tally_ledger *l, const char *account, tally_balance *out)
{
    memset(out, 0, sizeof *out);
    tally_account a;
    bool due = false;
    tally_err e = tally_ledger_account_get(l, account, &a);
    if (!e)
        e = balance_read(l, account, out, &due);
    if (!e && due && !l->no_balances && !sqlite3_get_autocommit(l->db)) {
        /* The refresh needs a write transaction of its own: say so, rather
         * than fail inside the caller's (a read snapshot, say). */
        snprintf(l->errmsg, sizeof l->errmsg,
                 "the balance of %.63s is due a refresh: ask again outside a transaction", account);
        return TALLY_BUSY;
    }
    if (!e && due && !l->no_balances) {
        e = refresh_one(l, account, "clock");
        if (!e)
            e = balance_read(l, account, out, &due);
    }
    if (!e)
        e = bal_limits_get(l, account, &out->limits, &out->controlled);
    if (e)
        return e;
    const tally_currency *c = tally_currency_find(out->currency[0] ? out->currency : a.currency);
    if (!out->currency[0]) /* a shard: nothing kept */
        snprintf(out->currency, sizeof out->currency, "%s", a.currency);
    snprintf(out->account, sizeof out->account, "%s", a.id);
    out->minor_digits = c ? c->minor_digits : 2;
    runway(out);
    return TALLY_OK;
}

static tally_err money(tally_buf *out, const char *key, int64_t v, int digits)
{
    tally_err e = tally_buf_printf(out, ",\"%s\":", key);
    return e ? e : inv_json_money(out, v, digits);
}

tally_err tally_balance_json(const tally_balance *b, tally_buf *out)
{
    int d = b->minor_digits;
    tally_err e = tally_buf_puts(out, "{\"account\":");
    if (!e)
        e = tally_buf_json_str(out, b->account);
    if (!e)
        e = tally_buf_printf(out, ",\"currency\":\"%s\"", b->currency);
    if (!e)
        e = money(out, "running_charges", b->running_minor, d);
    if (!e)
        e = money(out, "credits_available", b->credits_minor, d);
    if (!e)
        e = money(out, "balance", b->balance_minor, d);
    if (!e)
        e = tally_buf_printf(out, ",\"state\":\"%s\",\"spend_control\":%s",
                             tally_balance_state_name(b->state), b->controlled ? "true" : "false");
    if (!e)
        e = b->has_runway
                ? tally_buf_printf(out, ",\"runway_seconds\":%lld", (long long)b->runway_s)
                : tally_buf_puts(out, ",\"runway_seconds\":null");
    if (!e) /* the window's charges scaled to an hour: exact, then rounded */
        e = money(out, "burn_rate_per_hour",
                  (int64_t)(((__int128)b->burn_minor * 3600 + TALLY_BALANCE_WINDOW_S / 2) /
                            TALLY_BALANCE_WINDOW_S),
                  d);
    if (!e)
        e = b->limits.has_low ? money(out, "low_balance", b->limits.low_minor, d)
                              : tally_buf_puts(out, ",\"low_balance\":null");
    if (!e)
        e = money(out, "stop_at", b->limits.stop_at_minor, d);
    if (!e)
        e = tally_buf_printf(out, ",\"release_after_seconds\":%lld",
                             (long long)b->limits.release_after_s);
    if (!e)
        e = tally_buf_puts(out, ",\"updated_at\":");
    if (!e)
        e = b->updated_at_s ? inv_json_time(out, b->updated_at_s) : tally_buf_puts(out, "null");
    return e ? e : tally_buf_puts(out, "}");
}

/* ---- Sweeps -------------------------------------------------------------------- */

tally_err ledger_accounts_of(tally_ledger *l, const char *sql, int64_t t,
                             char (**out)[TALLY_NAME_MAX], size_t *n)
{
    sqlite3_stmt *st;
    *out = NULL;
    *n = 0;
    size_t cap = 0;
    tally_err e = ledger_prepare(l, sql, &st);
    if (e)
        return e;
    sqlite3_bind_int64(st, 1, t);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            char(*p)[TALLY_NAME_MAX] = realloc(*out, nc * sizeof *p);
            if (!p) {
                sqlite3_finalize(st);
                return TALLY_NOMEM;
            }
            *out = p;
            cap = nc;
        }
        snprintf((*out)[(*n)++], TALLY_NAME_MAX, "%s", sqlite3_column_text(st, 0));
    }
    return ledger_finish(l, st, rc);
}

static tally_err refresh_each(tally_ledger *l, const char *sql, int64_t t, const char *cause,
                              int64_t *n_out)
{
    char(*acc)[TALLY_NAME_MAX] = NULL;
    size_t n = 0;
    *n_out = 0;
    if (l->no_balances)
        return TALLY_OK;
    tally_err e = ledger_accounts_of(l, sql, t, &acc, &n);
    for (size_t i = 0; !e && i < n; i++) {
        e = refresh_one(l, acc[i], cause);
        if (!e)
            (*n_out)++;
    }
    free(acc);
    return e;
}

tally_err tally_balance_sweep(tally_ledger *l, int64_t now_s, int64_t *n)
{
    int64_t flushed = 0;
    /* A ledger directory: what meters' shard commits left pending (a meter
     * that died before its flush, and whose partitions nobody took since). */
    tally_err f = ledger_shard_balances_flush_all(l, &flushed);
    tally_err e = refresh_each(l,
                               "SELECT account FROM account_balances WHERE next_check_s IS NOT "
                               "NULL AND next_check_s <= ?1 ORDER BY account",
                               now_s, "clock", n);
    *n += flushed;
    return f ? f : e;
}

tally_err tally_balance_refresh_all(tally_ledger *l, int64_t *n)
{
    return refresh_each(l, "SELECT id FROM accounts WHERE ?1 = ?1 ORDER BY id", 0, "rebuild", n);
}

tally_err ledger_balance_refresh_all(tally_ledger *l, const char *cause)
{
    if (l->no_balances)
        return TALLY_OK;
    char(*acc)[TALLY_NAME_MAX] = NULL;
    size_t n = 0;
    bal_engine *b = NULL;
    tally_err e =
        ledger_accounts_of(l, "SELECT account FROM account_balances WHERE ?1 = ?1", 0, &acc, &n);
    if (!e && n)
        e = bal_engine_create(l, &b);
    for (size_t i = 0; !e && i < n; i++)
        e = bal_refresh(b, acc[i], 1, 0, cause);
    bal_engine_destroy(b);
    free(acc);
    return e;
}

tally_err tally_balance_state_counts(tally_ledger *l, int64_t counts[TALLY_BALANCE_STATE_COUNT])
{
    for (int i = 0; i < TALLY_BALANCE_STATE_COUNT; i++)
        counts[i] = 0;
    sqlite3_stmt *st;
    tally_err e =
        ledger_prepare(l, "SELECT state, count(*) FROM account_balances GROUP BY state", &st);
    if (e)
        return e;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *s = (const char *)sqlite3_column_text(st, 0);
        for (int i = 0; i < TALLY_BALANCE_STATE_COUNT; i++)
            if (strcmp(s, tally_balance_state_name((tally_balance_state)i)) == 0)
                counts[i] = sqlite3_column_int64(st, 1);
    }
    return ledger_finish(l, st, rc);
}
