/* Reading invoices back: one document in a format, and an account's list of
 * finalized documents. (Usage and balance reports: invoice_report.c.) */
#include <stdio.h>
#include <string.h>

#include "ledger_int.h"
#include "tally/money.h"

static const struct format_name {
    const char *name;
    tally_doc_format format;
} format_names[] = {
    {"json", TALLY_FORMAT_JSON},
    {"csv", TALLY_FORMAT_CSV},
    {"html", TALLY_FORMAT_HTML},
};

tally_err tally_doc_format_from_name(const char *s, tally_doc_format *out)
{
    for (size_t i = 0; s && i < sizeof format_names / sizeof *format_names; i++)
        if (strcmp(s, format_names[i].name) == 0) {
            *out = format_names[i].format;
            return TALLY_OK;
        }
    return TALLY_INVAL;
}

/* Splits "draft:<account>:<period>" (the account may itself hold ':'). */
static bool draft_id(const char *id, char *account, size_t cap, char period[8])
{
    if (strncmp(id, "draft:", 6) != 0)
        return false;
    const char *colon = strrchr(id + 6, ':');
    if (!colon || colon == id + 6 || strlen(colon + 1) != 7)
        return false;
    size_t n = (size_t)(colon - (id + 6));
    if (n >= cap)
        return false;
    memcpy(account, id + 6, n);
    account[n] = '\0';
    memcpy(period, colon + 1, 8);
    return true;
}

/* The stored document of id into doc. Errors: TALLY_NOT_FOUND, TALLY_DB. */
static tally_err load_doc(tally_ledger *l, const char *id, tally_buf *doc)
{
    char account[TALLY_NAME_MAX], period[8];
    bool draft = draft_id(id, account, sizeof account, period);
    if (!draft && strncmp(id, "draft:", 6) == 0)
        return TALLY_NOT_FOUND;
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(l,
                                 draft ? "SELECT doc FROM drafts WHERE account = ?1 AND period = ?2"
                                       : "SELECT doc FROM invoices WHERE id = ?1",
                                 &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, draft ? account : id, -1, SQLITE_STATIC);
    if (draft)
        sqlite3_bind_text(st, 2, period, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        e = tally_buf_append(doc, sqlite3_column_blob(st, 0), (size_t)sqlite3_column_bytes(st, 0));
    else
        e = rc == SQLITE_DONE ? TALLY_NOT_FOUND : ledger_sqlite_err(l, rc);
    sqlite3_finalize(st);
    return e;
}

tally_err tally_invoice_show(tally_ledger *l, const char *id, tally_doc_format f, tally_buf *out)
{
    if (!id)
        return TALLY_INVAL;
    tally_buf doc;
    tally_buf_init(&doc, 0);
    tally_err e = load_doc(l, id, &doc);
    if (!e) {
        if (f == TALLY_FORMAT_JSON)
            e = tally_buf_append(out, doc.data, doc.len);
        else if (f == TALLY_FORMAT_CSV)
            e = inv_doc_csv(doc.data, doc.len, out);
        else if (f == TALLY_FORMAT_HTML)
            e = ledger_invoice_html(l, doc.data, doc.len, out);
        else
            e = TALLY_INVAL;
    }
    tally_buf_release(&doc);
    return e;
}

static tally_err list_row(tally_buf *out, sqlite3_stmt *st)
{
    const char *currency = (const char *)sqlite3_column_text(st, 3);
    const tally_currency *c = tally_currency_find(currency ? currency : "");
    int digits = c ? c->minor_digits : 2;
    bool credit_note = strcmp((const char *)sqlite3_column_text(st, 1), "credit_note") == 0;
    tally_err e = tally_buf_puts(out, out->data[out->len - 1] == '[' ? "{" : ",{");
    if (!e)
        e = tally_buf_puts(out, "\"invoice_id\":");
    if (!e)
        e = tally_buf_json_str(out, (const char *)sqlite3_column_text(st, 0));
    if (!e)
        e = tally_buf_printf(
            out, ",\"type\":\"%s\",\"period\":", credit_note ? "credit_note" : "invoice");
    if (!e)
        e = tally_buf_json_str(out, (const char *)sqlite3_column_text(st, 2));
    if (!e)
        e = tally_buf_printf(out, ",\"status\":\"%s\",\"currency\":",
                             sqlite3_column_int(st, 7) ? "void" : "finalized");
    if (!e)
        e = tally_buf_json_str(out, currency ? currency : "");
    const char *keys[3] = {"subtotal", "total_credits", "amount_due"};
    for (int k = 0; k < 3 && !e; k++) {
        e = tally_buf_printf(out, ",\"%s\":", keys[k]);
        if (!e)
            e = inv_json_money(out, sqlite3_column_int64(st, 4 + k), digits);
    }
    return e ? e : tally_buf_puts(out, "}");
}

tally_err tally_invoice_list(tally_ledger *l, const char *account, tally_buf *out)
{
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(
        l,
        "SELECT i.id, i.doc_type, i.period, i.currency, i.subtotal_minor, i.credits_minor, "
        "i.amount_due_minor, i.doc_type = 'invoice' AND EXISTS (SELECT 1 FROM invoices c "
        "WHERE c.account = i.account AND c.period = i.period AND +c.doc_type = 'credit_note' "
        "AND c.refers_to = i.id) FROM invoices i WHERE i.account = ?1 ORDER BY i.seq",
        &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, account ? account : "", -1, SQLITE_STATIC);
    size_t start = out->len;
    e = tally_buf_puts(out, "[");
    int rc;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW)
        e = list_row(out, st);
    if (!e && rc != SQLITE_DONE)
        e = ledger_sqlite_err(l, rc);
    if (!e)
        e = tally_buf_puts(out, "]");
    sqlite3_finalize(st);
    if (e && out->data) {
        out->len = start;
        out->data[start] = '\0';
    }
    return e;
}
