/* Voiding an invoice through a credit note.
 *
 * The credit note CN-<year>-<n> (gapless per year of the period, like
 * invoices) mirrors the invoice: the same period, the same lines with
 * quantities and amounts negated, each line's credits negated, and subtotal,
 * total credits and amount due negated; refers_to names the invoice and
 * reason says why. Its entry reverses the invoice's entry posting by posting
 * (so each grant is given back exactly what the invoice took). It is hashed,
 * chained and signed like an invoice, all in one transaction. The invoice's
 * stored document never changes: "void" is derived from the credit note that
 * refers to it, and its period then has no live invoice, so the next
 * finalizing run for it issues a fresh, newly numbered invoice. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"
#include "tally/money.h"
#include "tally/sign.h"

typedef struct voided {
    int64_t seq;
    char id[48];
    char account[TALLY_NAME_MAX];
    char period[8];
    char currency[4];
    char timezone[64];
    int64_t start_s, end_s;
    int64_t subtotal_minor, credits_minor, amount_due_minor;
    tally_line *lines;
    size_t n_lines;
    tally_credit_use *credits;
    size_t n_credits;
    int64_t credit_issued_minor, credit_grant_id; /* negated, as the credit note shows them */
} voided;

/* The adjustment credit the invoice issued, if any (its credit_issued). */
static tally_err doc_credit_issued(json_object *root, voided *v)
{
    json_object *ci = NULL, *gid = NULL, *amt = NULL;
    if (!json_object_object_get_ex(root, "credit_issued", &ci))
        return TALLY_OK;
    const tally_currency *c = tally_currency_find(v->currency);
    const char *s =
        json_object_object_get_ex(ci, "amount", &amt) ? json_object_get_string(amt) : NULL;
    int64_t minor = 0;
    if (!c || !s || !json_object_object_get_ex(ci, "grant_id", &gid) ||
        tally_amount_parse(s, strlen(s), c->minor_digits, false, &minor, NULL) != TALLY_OK)
        return TALLY_DB;
    v->credit_issued_minor = -minor;
    v->credit_grant_id = json_object_get_int64(gid);
    return TALLY_OK;
}

/* The period as the invoice's document states it. */
static tally_err doc_period(const void *doc, int len, voided *v)
{
    json_tokener *tok = json_tokener_new();
    if (!tok)
        return TALLY_NOMEM;
    json_object *root = json_tokener_parse_ex(tok, doc, len);
    json_tokener_free(tok);
    json_object *p = NULL, *f[3] = {NULL, NULL, NULL};
    tally_err e = TALLY_DB;
    if (root && json_object_object_get_ex(root, "period", &p) &&
        json_object_object_get_ex(p, "start", &f[0]) &&
        json_object_object_get_ex(p, "end", &f[1]) &&
        json_object_object_get_ex(p, "timezone", &f[2])) {
        const char *s = json_object_get_string(f[0]), *t = json_object_get_string(f[1]);
        snprintf(v->timezone, sizeof v->timezone, "%s", json_object_get_string(f[2]));
        if (tally_time_parse(s, strlen(s), &v->start_s) == TALLY_OK &&
            tally_time_parse(t, strlen(t), &v->end_s) == TALLY_OK)
            e = doc_credit_issued(root, v);
    }
    json_object_put(root);
    return e;
}

/* The invoice row. Errors: TALLY_NOT_FOUND, TALLY_FINALIZED (a credit note,
 * or already void), TALLY_DB. */
static tally_err load_invoice(tally_ledger *l, const char *id, voided *v)
{
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(
        l,
        "SELECT i.seq, i.doc_type, i.account, i.period, i.currency, i.subtotal_minor, "
        "i.credits_minor, i.amount_due_minor, i.doc, EXISTS (SELECT 1 FROM invoices c "
        "WHERE c.account = i.account AND c.period = i.period AND +c.doc_type = 'credit_note' "
        "AND c.refers_to = i.id) FROM invoices i WHERE i.id = ?1",
        &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        e = TALLY_NOT_FOUND;
    else if (rc != SQLITE_ROW)
        e = ledger_sqlite_err(l, rc);
    else if (strcmp((const char *)sqlite3_column_text(st, 1), "invoice") != 0 ||
             sqlite3_column_int(st, 9))
        e = TALLY_FINALIZED;
    if (!e) {
        v->seq = sqlite3_column_int64(st, 0);
        snprintf(v->id, sizeof v->id, "%s", id);
        inv_col_text(st, 2, v->account, sizeof v->account);
        inv_col_text(st, 3, v->period, sizeof v->period);
        inv_col_text(st, 4, v->currency, sizeof v->currency);
        v->subtotal_minor = -sqlite3_column_int64(st, 5);
        v->credits_minor = -sqlite3_column_int64(st, 6);
        v->amount_due_minor = -sqlite3_column_int64(st, 7);
        e = doc_period(sqlite3_column_blob(st, 8), sqlite3_column_bytes(st, 8), v);
        if (e)
            snprintf(l->errmsg, sizeof l->errmsg, "stored document of %s does not parse", id);
    }
    sqlite3_finalize(st);
    return e;
}

/* The invoice's lines, negated. */
static tally_err load_lines(tally_ledger *l, voided *v)
{
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(l,
                                 "SELECT " INV_LINE_COLS ", count(*) OVER () FROM invoice_lines "
                                 "WHERE invoice_seq = ?1 ORDER BY line_no",
                                 &st);
    if (e)
        return e;
    sqlite3_bind_int64(st, 1, v->seq);
    int rc;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (!v->lines) {
            v->lines = calloc((size_t)sqlite3_column_int64(st, 11), sizeof *v->lines);
            if (!v->lines) {
                e = TALLY_NOMEM;
                break;
            }
        }
        tally_line *ln = &v->lines[v->n_lines];
        if (inv_line_from_row(st, ln)) {
            snprintf(l->errmsg, sizeof l->errmsg, "a stored line of %s does not parse", v->id);
            e = TALLY_DB;
            break;
        }
        v->n_lines++;
        ln->quantity = -ln->quantity;
        ln->amount_minor = -ln->amount_minor;
    }
    if (!e && rc != SQLITE_DONE)
        e = ledger_sqlite_err(l, rc);
    sqlite3_finalize(st);
    return e;
}

/* The invoice's credit uses, negated, in the order they were applied. */
static tally_err load_credits(tally_ledger *l, voided *v)
{
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(l,
                                 "SELECT c.grant_id, g.kind, c.line_no, c.amount_minor, "
                                 "count(*) OVER () FROM invoice_credits c JOIN grants g "
                                 "ON g.id = c.grant_id WHERE c.invoice_seq = ?1 ORDER BY c.rowid",
                                 &st);
    if (e)
        return e;
    sqlite3_bind_int64(st, 1, v->seq);
    int rc;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (!v->credits) {
            v->credits = calloc((size_t)sqlite3_column_int64(st, 4), sizeof *v->credits);
            if (!v->credits) {
                e = TALLY_NOMEM;
                break;
            }
        }
        tally_credit_use *u = &v->credits[v->n_credits++];
        u->grant_id = sqlite3_column_int64(st, 0);
        if (tally_grant_kind_from_name((const char *)sqlite3_column_text(st, 1), &u->kind)) {
            /* Never relabel: the credit note must restore exactly what was used. */
            snprintf(l->errmsg, sizeof l->errmsg, "grant %lld of %s has an unknown kind",
                     (long long)u->grant_id, v->id);
            e = TALLY_DB;
            break;
        }
        u->line_index = (size_t)(sqlite3_column_int64(st, 2) - 1);
        u->amount_minor = -sqlite3_column_int64(st, 3);
    }
    if (!e && rc != SQLITE_DONE)
        e = ledger_sqlite_err(l, rc);
    sqlite3_finalize(st);
    return e;
}

/* Posts the invoice's entry again with every sign flipped. */
static tally_err reverse_entry(tally_ledger *l, const voided *v, const char *cn_id)
{
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(l,
                                 "SELECT p.ledger_acct, p.credit_minor - p.debit_minor, "
                                 "count(*) OVER () FROM postings p JOIN entries e "
                                 "ON e.id = p.entry_id WHERE e.kind = 'invoice' AND e.ref = ?1 "
                                 "ORDER BY p.id",
                                 &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, v->id, -1, SQLITE_STATIC);
    ledger_posting *p = NULL;
    size_t n = 0;
    int rc;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (!p && !(p = calloc((size_t)sqlite3_column_int64(st, 2), sizeof *p))) {
            e = TALLY_NOMEM;
            break;
        }
        inv_col_text(st, 0, p[n].acct, sizeof p[n].acct);
        p[n++].amount_minor = sqlite3_column_int64(st, 1);
    }
    if (!e && rc != SQLITE_DONE)
        e = ledger_sqlite_err(l, rc);
    sqlite3_finalize(st);
    if (!e)
        e = ledger_post(l, "void", cn_id, v->currency, p, n);
    free(p);
    return e;
}

/* An invoice that issued an adjustment credit can be voided only while the
 * credit is unspent: its reversal takes the credit back whole, so a credit a
 * later invoice used would be paid twice. Void the later invoices first. */
static tally_err check_credit_unspent(tally_ledger *l, const voided *v)
{
    if (!v->credit_issued_minor)
        return TALLY_OK;
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(l,
                                 "SELECT coalesce((SELECT credit_minor - debit_minor FROM balances "
                                 "WHERE ledger_acct = 'grant:' || ?1 AND currency = ?2), 0)",
                                 &st);
    if (e)
        return e;
    sqlite3_bind_int64(st, 1, v->credit_grant_id);
    sqlite3_bind_text(st, 2, v->currency, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW)
        e = ledger_sqlite_err(l, rc);
    else if (sqlite3_column_int64(st, 0) < -v->credit_issued_minor) {
        snprintf(l->errmsg, sizeof l->errmsg,
                 "%s issued adjustment credit %lld, which later invoices have used; void them "
                 "first",
                 v->id, (long long)v->credit_grant_id);
        e = TALLY_FINALIZED;
    }
    sqlite3_finalize(st);
    return e;
}

/* Numbers, seals and stores the credit note; posts the reversal. */
static tally_err issue(tally_ledger *l, const voided *v, const char *reason, const char *key_path,
                       char *cn_id, size_t cap)
{
    int y, m;
    char prev[65], id[48];
    inv_sealed s = {0};
    inv_doc d = {
        .credit_note = true,
        .account = v->account,
        .currency = v->currency,
        .finalized = true,
        .period = v->period,
        .period_start_s = v->start_s,
        .period_end_s = v->end_s,
        .timezone = v->timezone,
        .issued_at_s = tally_now_s(),
        .lines = v->lines,
        .n_lines = v->n_lines,
        .credits = v->credits,
        .n_credits = v->n_credits,
        .subtotal_minor = v->subtotal_minor,
        .total_credits_minor = v->credits_minor,
        .amount_due_minor = v->amount_due_minor,
        .credit_issued_minor = v->credit_issued_minor,
        .credit_grant_id = v->credit_grant_id,
        .refers_to = v->id,
        .reason = reason,
        .prev_hash = prev,
    };
    const tally_currency *c = tally_currency_find(v->currency);
    d.minor_digits = c ? c->minor_digits : 2;
    tally_err e = tally_period_parse(v->period, &y, &m) ? TALLY_DB : TALLY_OK;
    if (!e)
        e = inv_next_number(l, "credit_note", y, &d.number);
    if (!e)
        e = inv_last_hash(l, prev);
    if (!e)
        e = inv_usage_seq(l, &s.usage_seq);
    if (e)
        return e;
    snprintf(id, sizeof id, "CN-%04d-%06lld", y, (long long)d.number);
    d.invoice_id = id;
    tally_buf doc;
    tally_buf_init(&doc, 0);
    e = inv_doc_json(&d, key_path, &doc, s.hash, s.signature);
    s.doc = doc.data;
    s.len = doc.len;
    if (!e)
        e = inv_store(l, &d, &s);
    if (!e)
        e = reverse_entry(l, v, id);
    if (!e) /* creditnote.issued and invoice.voided, in this same transaction */
        e = ledger_outbox_invoice_voided(l, v->id, id, v->account, doc.data, doc.len);
    if (!e && cn_id && cap)
        snprintf(cn_id, cap, "%s", id);
    tally_buf_release(&doc);
    return e;
}

tally_err tally_invoice_void(tally_ledger *l, const char *id, const char *reason,
                             const char *key_path, char *cn_id, size_t cap)
{
    char sig[129];
    if (!id || !reason)
        return TALLY_INVAL;
    tally_err e = key_path ? tally_sign_hash(key_path, INV_ZERO_HASH, sig) : TALLY_NOT_FOUND;
    if (e)
        return TALLY_CRYPTO;
    voided v = {0};
    l->errmsg[0] = '\0'; /* a refusal below says why here */
    e = ledger_begin(l);
    if (e)
        return e;
    e = load_invoice(l, id, &v);
    if (!e)
        e = load_lines(l, &v);
    if (!e)
        e = load_credits(l, &v);
    if (!e)
        e = check_credit_unspent(l, &v);
    if (!e)
        e = issue(l, &v, reason, key_path, cn_id, cap);
    if (!e) /* the period is open again: its charges are running charges */
        e = ledger_balance_refresh_span(l, v.account, v.start_s, v.end_s - 1, "void");
    if (!e)
        e = ledger_commit(l);
    else
        ledger_rollback(l);
    free(v.lines);
    free(v.credits);
    return e;
}
