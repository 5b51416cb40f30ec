/* The ledger's tally_page_source (tally/document.h): what the invoice page
 * shows beyond the signed document, read from the ledger, and
 * ledger_invoice_html, which renders a stored document with it. */
#include <stdio.h>
#include <string.h>

#include "ledger_int.h"

/* The page's lookups, prepared once per connection (ledger_cached): a run
 * renders a page per invoice. */
static const char name_sql[] = "SELECT name FROM accounts WHERE id = ?1";
static const char window_sql[] = "SELECT effective_s, expires_s, scope FROM grants WHERE id = ?1";

static tally_err account_name(void *ctx, const char *account, char *out, size_t cap)
{
    tally_ledger *l = ctx;
    sqlite3_stmt *st;
    out[0] = '\0';
    tally_err e = ledger_cached(l, name_sql, &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_text(st, 0))
        snprintf(out, cap, "%s", sqlite3_column_text(st, 0));
    return ledger_cached_done(l, st, rc == SQLITE_ROW ? SQLITE_DONE : rc);
}

static tally_err grant_window(void *ctx, int64_t grant, tally_grant_window *out)
{
    tally_ledger *l = ctx;
    sqlite3_stmt *st;
    tally_err e = ledger_cached(l, window_sql, &st);
    if (e)
        return e;
    sqlite3_bind_int64(st, 1, grant);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        out->effective_s = sqlite3_column_int64(st, 0);
        out->expires = sqlite3_column_type(st, 1) != SQLITE_NULL;
        out->expires_s = out->expires ? sqlite3_column_int64(st, 1) : 0;
        const char *scope = (const char *)sqlite3_column_text(st, 2);
        e = tally_buf_puts(out->scope, scope ? scope : "");
        (void)ledger_cached_done(l, st, SQLITE_DONE);
        return e;
    }
    e = ledger_cached_done(l, st, rc);
    return e ? e : TALLY_NOT_FOUND;
}

typedef struct usage_load {
    tally_ledger *l;
    const char *account;
    int64_t start_s, end_s;
    bool points;
    tally_usage_row_fn fn;
    void *fn_ctx;
} usage_load;

/* One database's rows of one query. */
static tally_err load_rows(void *ctx, sqlite3_stmt *st, int64_t snap_seq)
{
    usage_load *u = ctx;
    (void)snap_seq;
    sqlite3_bind_text(st, 1, u->account, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, u->start_s);
    sqlite3_bind_int64(st, 3, u->end_s);
    int rc;
    tally_err e = TALLY_OK;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW)
        e = u->fn(u->fn_ctx, (int)sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1),
                  sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3));
    if (e)
        return e;
    return rc == SQLITE_DONE ? TALLY_OK : ledger_stmt_err(u->l, st, rc);
}

/* The account's stored usage (in a ledger directory, from main.db and every
 * shard holding the account). Intervals are at most a day long, which bounds
 * the index range scanned. */
static tally_err usage(void *ctx, const char *account, int64_t start_s, int64_t end_s, bool points,
                       tally_usage_row_fn fn, void *fn_ctx)
{
    static const char *const sql[2] = {
        "SELECT meter, weight, start_s, end_s FROM usage_intervals WHERE account = ?1 "
        "AND start_s >= ?2 - 86400 AND start_s < ?3 AND end_s > ?2",
        "SELECT meter, qty, t_s, 0 FROM usage_points WHERE account = ?1 "
        "AND t_s >= ?2 AND t_s < ?3",
    };
    static const ledger_usage_slot slots[2] = {LEDGER_USAGE_CHART_INTERVALS,
                                               LEDGER_USAGE_CHART_POINTS};
    usage_load u = {ctx, account, start_s, end_s, points, fn, fn_ctx};
    return ledger_usage_each(ctx, account, slots[points], sql[points], 0, load_rows, &u);
}

tally_err ledger_invoice_html(tally_ledger *l, const char *doc, size_t len, tally_buf *out)
{
    tally_page_source src = {l, account_name, grant_window, usage};
    return tally_invoice_html(doc, len, l ? &src : NULL, out);
}

tally_err ledger_invoice_html_parsed(tally_ledger *l, struct json_object *root, tally_buf *out)
{
    tally_page_source src = {l, account_name, grant_window, usage};
    return tally_invoice_html_parsed(root, l ? &src : NULL, out);
}
