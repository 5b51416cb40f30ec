/* Finalized documents: numbering, the hash chain, the stored rows and the
 * balanced postings of an invoice. Every function here runs inside the
 * caller's transaction (BEGIN IMMEDIATE), so a number, a chain link and the
 * rows that use them are taken and written atomically. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"
#include "tally/money.h"

/* Runs a one-value query (sql a string literal: its statement is cached)
 * with a text and an integer parameter. */
static tally_err one_int(tally_ledger *l, const char *sql, const char *p1, int64_t p2, int64_t *out)
{
    sqlite3_stmt *st;
    tally_err e = ledger_cached(l, sql, &st);
    if (e)
        return e;
    if (p1)
        sqlite3_bind_text(st, 1, p1, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, p2);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *out = sqlite3_column_int64(st, 0);
        rc = SQLITE_DONE;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_INTERNAL; /* an aggregate always has a row */
    }
    return ledger_cached_done(l, st, rc);
}

tally_err inv_next_number(tally_ledger *l, const char *doc_type, int year, int64_t *number)
{
    return one_int(l,
                   "SELECT coalesce(max(number), 0) + 1 FROM invoices "
                   "WHERE doc_type = ?1 AND year = ?2",
                   doc_type, year, number);
}

tally_err inv_usage_seq(tally_ledger *l, int64_t *seq)
{
    if (l->shards) /* a ledger directory: a snapshot of every database's seq */
        return ledger_usage_snapshot(l, seq);
    return one_int(l, "SELECT coalesce((SELECT value FROM meta WHERE key = 'usage_seq'), ?2)", NULL,
                   0, seq);
}

tally_err inv_last_hash(tally_ledger *l, char hash[65])
{
    sqlite3_stmt *st;
    tally_err e = ledger_cached(l, "SELECT hash FROM invoices ORDER BY seq DESC LIMIT 1", &st);
    if (e)
        return e;
    memcpy(hash, INV_ZERO_HASH, 65);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const char *h = (const char *)sqlite3_column_text(st, 0);
        if (h && strlen(h) == 64)
            memcpy(hash, h, 65);
        rc = SQLITE_DONE;
    }
    return ledger_cached_done(l, st, rc);
}

static tally_err insert_invoice(tally_ledger *l, const inv_doc *d, const inv_sealed *s,
                                int64_t *seq)
{
    int y = 0, m = 0;
    tally_err e = tally_period_parse(d->period, &y, &m);
    if (e)
        return e;
    sqlite3_stmt *st;
    e = ledger_cached(
        l,
        "INSERT INTO invoices(id, doc_type, year, number, account, period, currency, "
        "subtotal_minor, credits_minor, amount_due_minor, refers_to, reason, usage_seq, doc, "
        "hash, prev_hash, signature, finalized_at) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
        &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, d->invoice_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, d->credit_note ? "credit_note" : "invoice", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, y);
    sqlite3_bind_int64(st, 4, d->number);
    sqlite3_bind_text(st, 5, d->account, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 6, d->period, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 7, d->currency, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 8, d->subtotal_minor);
    sqlite3_bind_int64(st, 9, d->total_credits_minor);
    sqlite3_bind_int64(st, 10, d->amount_due_minor);
    if (d->credit_note) {
        sqlite3_bind_text(st, 11, d->refers_to, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 12, d->reason, -1, SQLITE_STATIC);
    }
    sqlite3_bind_int64(st, 13, s->usage_seq);
    sqlite3_bind_blob(st, 14, s->doc, (int)s->len, SQLITE_STATIC);
    sqlite3_bind_text(st, 15, s->hash, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 16, d->prev_hash, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 17, s->signature, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 18, d->issued_at_s);
    int rc = sqlite3_step(st);
    *seq = sqlite3_last_insert_rowid(l->db);
    return ledger_cached_done(l, st, rc);
}

static tally_err insert_lines(tally_ledger *l, const inv_doc *d, int64_t seq)
{
    sqlite3_stmt *st;
    tally_err e = ledger_cached(
        l,
        "INSERT INTO invoice_lines(invoice_seq, line_no, kind, meter, pricing, migration, sku, "
        "dim2, quantity, unit_price_nano, amount_minor, original_period, adjusts) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        &st);
    for (size_t i = 0; !e && i < d->n_lines; i++) {
        const tally_line *ln = &d->lines[i];
        bool adj = ln->kind == TALLY_LINE_ADJUSTMENT;
        char q[48];
        e = tally_i128_format(ln->quantity, q, sizeof q);
        if (e)
            break;
        sqlite3_bind_int64(st, 1, seq);
        sqlite3_bind_int64(st, 2, (int64_t)i + 1);
        sqlite3_bind_text(st, 3, tally_line_kind_name(ln->kind), -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 4, (int)ln->meter);
        sqlite3_bind_int(st, 5, (int)ln->pricing);
        sqlite3_bind_int(st, 6, ln->migration ? 1 : 0);
        sqlite3_bind_text(st, 7, ln->sku, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 8, ln->dim2, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 9, q, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 10, ln->unit_price_nano);
        sqlite3_bind_int64(st, 11, ln->amount_minor);
        sqlite3_bind_text(st, 12, adj ? ln->original_period : "", -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 13, adj ? tally_line_kind_name(ln->adjusts) : "", -1, SQLITE_STATIC);
        int rc = sqlite3_step(st);
        if (rc != SQLITE_DONE)
            e = ledger_sqlite_err(l, rc);
        sqlite3_reset(st);
    }
    if (st) /* hands the statement back (the loop reported any error) */
        (void)ledger_cached_done(l, st, SQLITE_DONE);
    return e;
}

/* One row per (grant, line), summed, inserted in the order the grants were
 * applied (rowid order keeps that order for credit notes). */
static tally_err insert_credits(tally_ledger *l, const inv_doc *d, int64_t seq)
{
    sqlite3_stmt *st;
    tally_err e = ledger_cached(l,
                                "INSERT INTO invoice_credits(invoice_seq, grant_id, line_no, "
                                "amount_minor) VALUES (?1, ?2, ?3, ?4)",
                                &st);
    for (size_t c = 0; !e && c < d->n_credits; c++) {
        const tally_credit_use *u = &d->credits[c];
        bool seen = false;
        int64_t sum = 0;
        for (size_t p = 0; p < c && !seen; p++)
            seen =
                d->credits[p].grant_id == u->grant_id && d->credits[p].line_index == u->line_index;
        if (seen)
            continue;
        for (size_t q = c; q < d->n_credits; q++)
            if (d->credits[q].grant_id == u->grant_id && d->credits[q].line_index == u->line_index)
                sum += d->credits[q].amount_minor;
        sqlite3_bind_int64(st, 1, seq);
        sqlite3_bind_int64(st, 2, u->grant_id);
        sqlite3_bind_int64(st, 3, (int64_t)u->line_index + 1);
        sqlite3_bind_int64(st, 4, sum);
        int rc = sqlite3_step(st);
        if (rc != SQLITE_DONE)
            e = ledger_sqlite_err(l, rc);
        sqlite3_reset(st);
    }
    if (st) /* hands the statement back (the loop reported any error) */
        (void)ledger_cached_done(l, st, SQLITE_DONE);
    return e;
}

tally_err inv_store(tally_ledger *l, const inv_doc *d, const inv_sealed *s)
{
    int64_t seq = 0;
    tally_err e = insert_invoice(l, d, s, &seq);
    if (!e)
        e = insert_lines(l, d, seq);
    if (!e)
        e = insert_credits(l, d, seq);
    if (!e) /* one chain entry for the document's rows */
        e = ledger_chain_group_add(l, LEDGER_GROUP_INVOICE, seq, 0);
    return e;
}

/* Adds amount to the posting of acct, creating it. */
static tally_err add_posting(ledger_posting *p, size_t *n, size_t cap, const char *acct,
                             int64_t amount)
{
    size_t i = 0;
    while (i < *n && strcmp(p[i].acct, acct) != 0)
        i++;
    if (i == *n) {
        if (*n == cap)
            return TALLY_INTERNAL;
        if (tally_fmt(p[i].acct, sizeof p[i].acct, "%s", acct) != TALLY_OK)
            return TALLY_TOO_LARGE;
        p[i].amount_minor = 0;
        (*n)++;
    }
    return tally_money_add(p[i].amount_minor, amount, &p[i].amount_minor);
}

/* The invoice's entry: revenue:<meter> is credited with each meter's net
 * line amounts (insurance lines excluded; debited if negative), the waivers
 * are debited to insurance:waivers, each credit use is debited to
 * grant:<id>, an issued adjustment credit is credited to its grant:<id>, and
 * receivable:<account> takes the balance (= amount due). */
tally_err inv_post_invoice(tally_ledger *l, const inv_doc *d)
{
    size_t cap = TALLY_METER_COUNT + 3 + d->n_credits;
    ledger_posting *p = calloc(cap, sizeof *p);
    if (!p)
        return TALLY_NOMEM;
    size_t n = 0;
    char acct[96];
    tally_err e = TALLY_OK;
    for (size_t i = 0; !e && i < d->n_lines; i++) {
        const tally_line *ln = &d->lines[i];
        if (ln->kind == TALLY_LINE_INSURANCE)
            e = tally_fmt(acct, sizeof acct, "insurance:waivers");
        else
            e = tally_fmt(acct, sizeof acct, "revenue:%s", tally_meter_name(ln->meter));
        if (!e)
            e = add_posting(p, &n, cap, acct, -ln->amount_minor);
    }
    for (size_t c = 0; !e && c < d->n_credits; c++) {
        e = tally_fmt(acct, sizeof acct, "grant:%lld", (long long)d->credits[c].grant_id);
        if (!e)
            e = add_posting(p, &n, cap, acct, d->credits[c].amount_minor);
    }
    if (!e && d->credit_issued_minor) { /* Cr grant:<id>: the customer's adjustment credit */
        e = tally_fmt(acct, sizeof acct, "grant:%lld", (long long)d->credit_grant_id);
        if (!e)
            e = add_posting(p, &n, cap, acct, -d->credit_issued_minor);
    }
    if (!e)
        e = tally_fmt(acct, sizeof acct, "receivable:%s", d->account);
    if (!e)
        e = add_posting(p, &n, cap, acct, d->amount_due_minor);
    if (!e)
        e = ledger_post(l, "invoice", d->invoice_id, d->currency, p, n);
    free(p);
    return e;
}
