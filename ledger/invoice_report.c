/* Usage and balance reports (JSON) for the CLI and the HTTP API.
 *
 * Usage: the account's usage in [from, to) rated as a draft would rate it
 * (commitments included, before credits), grouped by sku, meter or local
 * day. A group's quantity is the usage measured (usage lines, in the meter's
 * base unit); its amount is every charge of the group (usage, commitment
 * fees, overage, minimum top-ups, insurance waivers). By day, each local day
 * of the account's time zone is rated on its own, one group per (day,
 * meter), and lists days in order.
 *
 * Balance: the account's prepaid balance as the ledger keeps it
 * (include/tally/balance.h: running charges, credits available, balance,
 * state, runway), every grant with what is left of it (the credit balance of
 * grant:<id>), the credits still usable (grants not expired now), and the
 * month to date: the live finalized invoice of the current period if there
 * is one, otherwise its running charges. All lookups: nothing is rated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"
#include "tally/money.h"

#define MAX_DAYS TALLY_USAGE_MAX_DAYS

static const char *const by_names[] = {"sku", "day", "meter"};

typedef struct group {
    char key[TALLY_NAME_MAX];
    tally_meter meter;
    __int128 quantity;
    int64_t amount_minor;
} group;

typedef struct report {
    group *v;
    size_t n, cap;
    int64_t total_minor;
} report;

/* Adds one line to its group (created in order of first appearance). */
static tally_err add_line(report *r, const char *key, const tally_line *ln)
{
    size_t i = 0;
    while (i < r->n && !(r->v[i].meter == ln->meter && strcmp(r->v[i].key, key) == 0))
        i++;
    if (i == r->n) {
        if (r->n == r->cap) {
            size_t nc = r->cap ? r->cap * 2 : 16;
            group *p = realloc(r->v, nc * sizeof *p);
            if (!p)
                return TALLY_NOMEM;
            r->v = p;
            r->cap = nc;
        }
        memset(&r->v[i], 0, sizeof r->v[i]);
        snprintf(r->v[i].key, sizeof r->v[i].key, "%s", key);
        r->v[i].meter = ln->meter;
        r->n++;
    }
    group *g = &r->v[i];
    if (ln->kind == TALLY_LINE_USAGE)
        g->quantity += ln->quantity;
    if (tally_money_add(g->amount_minor, ln->amount_minor, &g->amount_minor) ||
        tally_money_add(r->total_minor, ln->amount_minor, &r->total_minor))
        return TALLY_OVERFLOW;
    return TALLY_OK;
}

/* Rates [start, end) and adds its lines under day (or their sku or meter). */
static tally_err rate_window(inv_gatherer *g, const tally_account *a, int64_t start, int64_t end,
                             tally_usage_by by, const char *day, inv_input *x, report *r)
{
    tally_rating_result res = {0};
    char why[256];
    tally_err e = inv_gather(g, a, start, end, false, x);
    if (!e)
        e = tally_rate_period(&x->in, &res, why, sizeof why);
    for (size_t i = 0; !e && i < res.n_lines; i++) {
        const tally_line *ln = &res.lines[i];
        const char *key = by == TALLY_BY_DAY   ? day
                          : by == TALLY_BY_SKU ? ln->sku
                                               : tally_meter_name(ln->meter);
        e = add_line(r, key, ln);
    }
    tally_rating_result_release(&res);
    return e;
}

static tally_err rate_days(inv_gatherer *g, const tally_account *a, int64_t from, int64_t to,
                           inv_input *x, report *r)
{
    tally_err e = TALLY_OK;
    int days = 0;
    for (int64_t t = from; !e && t < to; days++) {
        int64_t ds, de;
        char label[16];
        if (days >= MAX_DAYS)
            return TALLY_INVAL;
        e = tally_day_bounds(a->timezone, t, &ds, &de, label, sizeof label);
        if (!e)
            e = rate_window(g, a, t, de < to ? de : to, TALLY_BY_DAY, label, x, r);
        t = de;
    }
    return e;
}

static tally_err usage_json(const tally_account *a, int digits, int64_t from, int64_t to,
                            tally_usage_by by, const report *r, tally_buf *out)
{
    tally_err e = tally_buf_puts(out, "{\"account\":");
    if (!e)
        e = tally_buf_json_str(out, a->id);
    if (!e)
        e = tally_buf_printf(out, ",\"currency\":\"%s\",\"from\":", a->currency);
    if (!e)
        e = inv_json_time(out, from);
    if (!e)
        e = tally_buf_puts(out, ",\"to\":");
    if (!e)
        e = inv_json_time(out, to);
    if (!e)
        e = tally_buf_printf(out, ",\"by\":\"%s\",\"groups\":[", by_names[by]);
    for (size_t i = 0; !e && i < r->n; i++) {
        char q[48];
        const group *g = &r->v[i];
        e = tally_i128_format(g->quantity, q, sizeof q);
        if (!e)
            e = tally_buf_puts(out, i ? ",{\"key\":" : "{\"key\":");
        if (!e)
            e = tally_buf_json_str(out, g->key);
        if (!e)
            e = tally_buf_printf(out,
                                 ",\"meter\":\"%s\",\"quantity\":\"%s\",\"unit\":\"%s\","
                                 "\"amount\":",
                                 tally_meter_name(g->meter), q, tally_meter_unit(g->meter));
        if (!e)
            e = inv_json_money(out, g->amount_minor, digits);
        if (!e)
            e = tally_buf_puts(out, "}");
    }
    if (!e)
        e = tally_buf_puts(out, "],\"total\":");
    if (!e)
        e = inv_json_money(out, r->total_minor, digits);
    return e ? e : tally_buf_puts(out, "}");
}

tally_err tally_usage_report(tally_ledger *l, const char *account, int64_t from_s, int64_t to_s,
                             tally_usage_by by, tally_buf *out)
{
    tally_account a;
    if ((int)by < 0 || by > TALLY_BY_METER || from_s >= to_s)
        return TALLY_INVAL;
    tally_err e = tally_ledger_account_get(l, account, &a);
    if (e)
        return e;
    const tally_currency *c = tally_currency_find(a.currency);
    if (!c)
        return TALLY_UNKNOWN_CURRENCY;
    inv_gatherer *g = NULL;
    inv_input x = {0};
    report r = {0};
    e = inv_gatherer_create(l, &g);
    if (!e)
        e = by == TALLY_BY_DAY ? rate_days(g, &a, from_s, to_s, &x, &r)
                               : rate_window(g, &a, from_s, to_s, by, NULL, &x, &r);
    size_t start = out->len;
    if (!e)
        e = usage_json(&a, c->minor_digits, from_s, to_s, by, &r, out);
    if (e && out->data) {
        out->len = start;
        out->data[start] = '\0';
    }
    free(r.v);
    inv_input_release(&x);
    inv_gatherer_destroy(g);
    return e;
}

/* ---- Balance ---------------------------------------------------------------- */

static tally_err grant_json(tally_buf *out, sqlite3_stmt *st, int digits, bool first)
{
    tally_err e = tally_buf_printf(out, "%s{\"grant_id\":%lld,\"kind\":", first ? "" : ",",
                                   (long long)sqlite3_column_int64(st, 0));
    if (!e)
        e = tally_buf_json_str(out, (const char *)sqlite3_column_text(st, 1));
    if (!e)
        e = tally_buf_puts(out, ",\"amount\":");
    if (!e)
        e = inv_json_money(out, sqlite3_column_int64(st, 2), digits);
    if (!e)
        e = tally_buf_puts(out, ",\"remaining\":");
    if (!e)
        e = inv_json_money(out, sqlite3_column_int64(st, 3), digits);
    if (!e)
        e = tally_buf_printf(out, ",\"priority\":%d,\"effective_at\":", sqlite3_column_int(st, 4));
    if (!e)
        e = inv_json_time(out, sqlite3_column_int64(st, 5));
    if (!e)
        e = tally_buf_puts(out, ",\"expires_at\":");
    if (!e)
        e = sqlite3_column_type(st, 6) == SQLITE_NULL
                ? tally_buf_puts(out, "null")
                : inv_json_time(out, sqlite3_column_int64(st, 6));
    if (!e)
        e = tally_buf_puts(out, ",\"scope\":");
    if (!e)
        e = tally_buf_json_str(out, (const char *)sqlite3_column_text(st, 7));
    return e ? e : tally_buf_puts(out, "}");
}

/* "grants":[...] and "credits_remaining" (grants not expired at now_s). */
static tally_err grants_json(tally_ledger *l, const tally_account *a, int digits, int64_t now_s,
                             tally_buf *out)
{
    sqlite3_stmt *st;
    tally_err e = ledger_cached(l,
                                "SELECT g.id, g.kind, g.amount_minor, " LEDGER_GRANT_LEFT(
                                    "g") ", g.priority, g.effective_s, g.expires_s, g.scope FROM "
                                         "grants g WHERE g.account = ?1 "
                                         "ORDER BY g.id",
                                &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, a->id, -1, SQLITE_STATIC);
    int64_t left = 0;
    int rc, n = 0;
    e = tally_buf_puts(out, ",\"grants\":[");
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        e = grant_json(out, st, digits, n++ == 0);
        bool usable =
            sqlite3_column_type(st, 6) == SQLITE_NULL || sqlite3_column_int64(st, 6) > now_s;
        if (!e && usable && tally_money_add(left, sqlite3_column_int64(st, 3), &left))
            e = TALLY_OVERFLOW;
    }
    if (!e && rc != SQLITE_DONE)
        e = ledger_sqlite_err(l, rc);
    sqlite3_reset(st);
    if (!e)
        e = tally_buf_puts(out, "],\"credits_remaining\":");
    return e ? e : inv_json_money(out, left, digits);
}

/* The current period's totals: its live invoice, or its running charges
 * (include/tally/balance.h): a lookup either way. */
static tally_err month_to_date(tally_ledger *l, const tally_account *a, const char *period,
                               int64_t tot[3])
{
    sqlite3_stmt *st;
    tally_err e = ledger_cached(
        l,
        "SELECT subtotal_minor, credits_minor, due_minor FROM running_periods "
        "WHERE account = ?1 AND period = ?2 UNION ALL "
        "SELECT i.subtotal_minor, i.credits_minor, i.amount_due_minor FROM invoices i "
        "WHERE i.account = ?1 AND i.period = ?2 AND +i.doc_type = 'invoice' AND NOT EXISTS "
        "(SELECT 1 FROM invoices c WHERE c.account = i.account AND c.period = i.period "
        "AND +c.doc_type = 'credit_note' AND c.refers_to = i.id) LIMIT 1",
        &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, a->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, period, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        for (int i = 0; i < 3; i++)
            tot[i] = sqlite3_column_int64(st, i);
        rc = SQLITE_DONE;
    }
    return ledger_cached_done(l, st, rc);
}

tally_err tally_balance_report(tally_ledger *l, const char *account, tally_buf *out)
{
    tally_account a;
    tally_balance bal;
    tally_err e = tally_balance_get(l, account, &bal);
    if (!e)
        e = tally_ledger_account_get(l, account, &a);
    if (e)
        return e;
    const tally_currency *c = tally_currency_find(a.currency);
    if (!c)
        return TALLY_UNKNOWN_CURRENCY;
    int64_t now = tally_now_s(), tot[3] = {0, 0, 0};
    char period[8];
    size_t start = out->len;
    e = tally_period_of(a.timezone, now, period, sizeof period);
    if (!e)
        e = tally_balance_json(&bal, out);
    if (!e) { /* reopen the object: the grants and this month follow */
        out->len--;
        out->data[out->len] = '\0';
        e = grants_json(l, &a, c->minor_digits, now, out);
    }
    if (!e)
        e = month_to_date(l, &a, period, tot);
    if (!e)
        e = tally_buf_printf(out, ",\"month_to_date\":{\"period\":\"%s\"", period);
    const char *keys[3] = {"subtotal", "credits", "amount_due"};
    for (int i = 0; !e && i < 3; i++) {
        e = tally_buf_printf(out, ",\"%s\":", keys[i]);
        if (!e)
            e = inv_json_money(out, tot[i], c->minor_digits);
    }
    if (!e)
        e = tally_buf_puts(out, "}}");
    if (e && out->data) {
        out->len = start;
        out->data[start] = '\0';
    }
    return e;
}
