/* The canonical invoice document (JSON) and its CSV form.
 *
 * The canonical JSON is the source of truth for an invoice or credit note:
 * a finalized document is stored as these exact bytes, hashed, chained and
 * signed, and shown verbatim forever. Its rules:
 *
 *   - UTF-8, no insignificant whitespace, keys in this fixed order:
 *       invoice_id, type ("invoice" | "credit_note"), number (integer; 0 for
 *       drafts), account, currency, status ("draft" | "finalized"),
 *       period {label, start, end, timezone}, issued_at,
 *       lines [{line, kind, meter, sku, dim2, pricing, migration, quantity,
 *               unit, unit_price, price_unit, amount,
 *               credits [{grant_id, amount}],
 *               original_period, adjusts (adjustment lines only)}],
 *       subtotal, credits_applied [{grant_id, kind, amount}], total_credits,
 *       amount_due, refers_to and reason (credit notes only), key_id,
 *       prev_hash, hash, signature.
 *   - Money is a decimal string in major units with exactly the currency's
 *     minor digits ("39.82"); quantities are decimal integer strings in the
 *     meter's base unit (card-second, byte-second, byte, token); unit prices
 *     are decimal strings per price unit with at least 2 fractional digits
 *     ("1.90", "0.0006"); times are "YYYY-MM-DDTHH:MM:SSZ" (UTC); grant ids
 *     and line numbers are JSON integers.
 *   - A period is a calendar month in the account's time zone: label
 *     "YYYY-MM", start and end the UTC instants of its local midnights.
 *   - hash = SHA-256 (lower-case hex) of the document's bytes with the
 *     trailing `,"hash":"<64 hex>","signature":"<128 hex>"` removed, that is
 *     everything up to and including the prev_hash value, then `}`.
 *     prev_hash is the hash of the previous finalized document (invoices and
 *     credit notes share one chain ordered by invoices.seq; the first
 *     document's prev_hash is 64 zeros). signature = Ed25519 over the 32 raw
 *     bytes of the hash, 128 hex digits, made with the key named by key_id
 *     (tally/sign.h: 16 hex digits of the SHA-256 of the raw public key;
 *     documents from before key ids have none and verify with any kept key).
 *   - Drafts have invoice_id "draft:<account>:<period>", number 0, status
 *     "draft" and empty key_id, prev_hash, hash and signature.
 *   - A credit note mirrors the invoice it voids: same period and lines with
 *     quantities, amounts and credits negated, and refers_to/reason set.
 *     Voided is not a stored status: an invoice is void when a credit note
 *     refers to it; its stored document never changes.
 *
 * CSV: a header row, then one row per line, RFC 4180 (CRLF line ends):
 *   line,kind,meter,sku,dim2,pricing,migration,quantity,unit,unit_price,
 *   price_unit,amount,credited,original_period
 * where credited is the money paid on that line by credits. */
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "ledger_int.h"
#include "tally/money.h"
#include "tally/sign.h"

/* Appends s in quotes; s needs no escaping (a number or a time). */
static tally_err quoted(tally_buf *b, const char *s)
{
    tally_err e = tally_buf_puts(b, "\"");
    if (!e)
        e = tally_buf_puts(b, s);
    return e ? e : tally_buf_puts(b, "\"");
}

tally_err inv_json_money(tally_buf *b, int64_t minor, int digits)
{
    char s[48];
    tally_err e = tally_amount_format(minor, digits, s, sizeof s);
    return e ? e : quoted(b, s);
}

tally_err inv_json_time(tally_buf *b, int64_t t_s)
{
    char s[32];
    tally_err e = tally_time_format(t_s, s, sizeof s);
    return e ? e : quoted(b, s);
}

tally_err inv_i128_parse(const char *s, __int128 *out)
{
    if (!s || !*s)
        return TALLY_PARSE;
    bool neg = *s == '-';
    const char *p = s + neg;
    if (!*p)
        return TALLY_PARSE;
    const __int128 max = (((__int128)1) << 126) - 1 + (((__int128)1) << 126);
    __int128 v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return TALLY_PARSE;
        if (v > (max - (*p - '0')) / 10)
            return TALLY_OVERFLOW;
        v = v * 10 + (*p - '0');
    }
    *out = neg ? -v : v;
    return TALLY_OK;
}

/* A JSON writer with a sticky error: after the first failure every call is a
 * no-op and the error is returned at the end. A key or array element is given a
 * leading comma unless it opens its object or array. */
typedef struct jw {
    tally_buf *b;
    tally_err e;
} jw;

static void raw(jw *w, const char *s)
{
    if (!w->e)
        w->e = tally_buf_puts(w->b, s);
}

static void sep(jw *w)
{
    if (w->e || w->b->len == 0)
        return;
    char last = w->b->data[w->b->len - 1];
    if (last != '{' && last != '[' && last != ':')
        raw(w, ",");
}

static void key(jw *w, const char *k)
{
    sep(w);
    if (!w->e)
        w->e = tally_buf_json_str(w->b, k);
    raw(w, ":");
}

static void str(jw *w, const char *k, const char *v)
{
    key(w, k);
    if (!w->e)
        w->e = tally_buf_json_str(w->b, v ? v : "");
}

static void integer(jw *w, const char *k, int64_t v)
{
    char s[24] = "";
    key(w, k);
    if (!w->e)
        w->e = tally_i128_format(v, s, sizeof s);
    raw(w, s);
}

static void money(jw *w, const char *k, int64_t minor, int digits)
{
    key(w, k);
    if (!w->e)
        w->e = inv_json_money(w->b, minor, digits);
}

static void utc(jw *w, const char *k, int64_t t_s)
{
    key(w, k);
    if (!w->e)
        w->e = inv_json_time(w->b, t_s);
}

static void qty(jw *w, const char *k, __int128 q)
{
    char s[48];
    key(w, k);
    if (!w->e)
        w->e = tally_i128_format(q, s, sizeof s);
    if (!w->e)
        w->e = quoted(w->b, s);
}

static void price(jw *w, const char *k, int64_t nano)
{
    char s[48];
    key(w, k);
    if (!w->e)
        w->e = tally_price_format(nano, 2, s, sizeof s);
    if (!w->e)
        w->e = quoted(w->b, s);
}

static void head(jw *w, const inv_doc *d)
{
    raw(w, "{");
    str(w, "invoice_id", d->invoice_id);
    str(w, "type", d->credit_note ? "credit_note" : "invoice");
    integer(w, "number", d->number);
    str(w, "account", d->account);
    str(w, "currency", d->currency);
    str(w, "status", d->finalized ? "finalized" : "draft");
    key(w, "period");
    raw(w, "{");
    str(w, "label", d->period);
    utc(w, "start", d->period_start_s);
    utc(w, "end", d->period_end_s);
    str(w, "timezone", d->timezone);
    raw(w, "}");
    utc(w, "issued_at", d->issued_at_s);
}

/* The credits paid on line i, one entry per grant (summed), in the order the
 * grants were applied. */
static void line_credits(jw *w, const inv_doc *d, size_t i)
{
    key(w, "credits");
    raw(w, "[");
    for (size_t c = 0; c < d->n_credits; c++) {
        const tally_credit_use *u = &d->credits[c];
        bool seen = false;
        for (size_t p = 0; p < c && !seen; p++)
            seen = d->credits[p].line_index == i && d->credits[p].grant_id == u->grant_id;
        if (u->line_index != i || seen)
            continue;
        int64_t sum = 0;
        for (size_t q = c; q < d->n_credits; q++)
            if (d->credits[q].line_index == i && d->credits[q].grant_id == u->grant_id)
                sum += d->credits[q].amount_minor;
        sep(w);
        raw(w, "{");
        integer(w, "grant_id", u->grant_id);
        money(w, "amount", sum, d->minor_digits);
        raw(w, "}");
    }
    raw(w, "]");
}

static void line(jw *w, const inv_doc *d, size_t i)
{
    const tally_line *ln = &d->lines[i];
    sep(w);
    raw(w, "{");
    integer(w, "line", (int64_t)i + 1);
    str(w, "kind", tally_line_kind_name(ln->kind));
    str(w, "meter", tally_meter_name(ln->meter));
    str(w, "sku", ln->sku);
    str(w, "dim2", ln->dim2);
    str(w, "pricing", tally_pricing_name(ln->pricing));
    key(w, "migration");
    raw(w, ln->migration ? "true" : "false");
    qty(w, "quantity", ln->quantity);
    str(w, "unit", tally_meter_unit(ln->meter));
    price(w, "unit_price", ln->unit_price_nano);
    str(w, "price_unit", tally_meter_price_unit(ln->meter));
    money(w, "amount", ln->amount_minor, d->minor_digits);
    line_credits(w, d, i);
    if (ln->kind == TALLY_LINE_ADJUSTMENT) {
        str(w, "original_period", ln->original_period);
        str(w, "adjusts", tally_line_kind_name(ln->adjusts));
    }
    raw(w, "}");
}

/* credits_applied: one entry per grant, in the order grants were applied. */
static void credits_applied(jw *w, const inv_doc *d)
{
    key(w, "credits_applied");
    raw(w, "[");
    for (size_t c = 0; c < d->n_credits; c++) {
        const tally_credit_use *u = &d->credits[c];
        bool seen = false;
        for (size_t p = 0; p < c && !seen; p++)
            seen = d->credits[p].grant_id == u->grant_id;
        if (seen)
            continue;
        int64_t sum = 0;
        for (size_t q = c; q < d->n_credits; q++)
            if (d->credits[q].grant_id == u->grant_id)
                sum += d->credits[q].amount_minor;
        sep(w);
        raw(w, "{");
        integer(w, "grant_id", u->grant_id);
        str(w, "kind", tally_grant_kind_name(u->kind));
        money(w, "amount", sum, d->minor_digits);
        raw(w, "}");
    }
    raw(w, "]");
}

/* credit_issued: the `adjustment` grant that what late adjustments owe the
 * customer became (SPEC section 4); null grant_id in a draft. */
static void credit_issued(jw *w, const inv_doc *d)
{
    key(w, "credit_issued");
    raw(w, "{");
    if (d->credit_grant_id)
        integer(w, "grant_id", d->credit_grant_id);
    else {
        key(w, "grant_id");
        raw(w, "null");
    }
    str(w, "kind", tally_grant_kind_name(TALLY_GRANT_ADJUSTMENT));
    money(w, "amount", d->credit_issued_minor, d->minor_digits);
    raw(w, "}");
}

static void body(jw *w, const inv_doc *d)
{
    key(w, "lines");
    raw(w, "[");
    for (size_t i = 0; i < d->n_lines; i++)
        line(w, d, i);
    raw(w, "]");
    money(w, "subtotal", d->subtotal_minor, d->minor_digits);
    credits_applied(w, d);
    money(w, "total_credits", d->total_credits_minor, d->minor_digits);
    if (d->credit_issued_minor)
        credit_issued(w, d);
    money(w, "amount_due", d->amount_due_minor, d->minor_digits);
    if (d->credit_note) {
        str(w, "refers_to", d->refers_to);
        str(w, "reason", d->reason);
    }
}

/* The document up to its prev_hash: what its hash covers, with a '}'. */
static void doc_open(jw *w, const inv_doc *d, const char *key_id)
{
    head(w, d);
    body(w, d);
    str(w, "key_id", key_id);
    str(w, "prev_hash", d->finalized ? d->prev_hash : "");
}

static void doc_close(jw *w, const char *hash, const char *sig)
{
    str(w, "hash", hash);
    str(w, "signature", sig);
    raw(w, "}");
}

/* The hash of out[start..] + "}". */
static tally_err doc_hash(tally_buf *out, size_t start, char hash[65])
{
    tally_err e = tally_buf_puts(out, "}");
    if (e)
        return e;
    tally_sha256_hex(out->data + start, out->len - start, hash);
    out->len--;
    out->data[out->len] = '\0';
    return TALLY_OK;
}

/* Leaves out as it was at start when e is an error. */
static tally_err undo(tally_buf *out, size_t start, tally_err e)
{
    if (e) {
        out->len = start;
        if (out->data)
            out->data[start] = '\0';
    }
    return e;
}

tally_err inv_doc_json(const inv_doc *d, const char *key_path, tally_buf *out, char hash_hex[65],
                       char sig_hex[129])
{
    size_t start = out->len;
    char hash[65] = "", sig[129] = "", key_id[TALLY_KEY_ID_LEN + 1] = "";
    jw w = {out, d->finalized ? tally_key_id(key_path, key_id) : TALLY_OK};
    doc_open(&w, d, key_id);
    if (!w.e && d->finalized)
        w.e = doc_hash(out, start, hash);
    if (!w.e && d->finalized)
        w.e = tally_sign_hash(key_path, hash, sig);
    doc_close(&w, hash, sig);
    if (undo(out, start, w.e))
        return w.e;
    if (hash_hex)
        memcpy(hash_hex, hash, sizeof hash);
    if (sig_hex)
        memcpy(sig_hex, sig, sizeof sig);
    return TALLY_OK;
}

tally_err inv_doc_unsealed(const inv_doc *d, const char *key_id, tally_buf *out, char hash_hex[65])
{
    size_t start = out->len;
    jw w = {out, TALLY_OK};
    doc_open(&w, d, key_id);
    if (!w.e)
        w.e = doc_hash(out, start, hash_hex);
    return undo(out, start, w.e);
}

tally_err inv_doc_seal(tally_buf *out, const char hash_hex[65], const char sig_hex[129])
{
    size_t start = out->len;
    jw w = {out, TALLY_OK};
    doc_close(&w, hash_hex, sig_hex);
    return undo(out, start, w.e);
}

/* ---- CSV ------------------------------------------------------------------ */

static const char *const csv_columns[] = {
    "line",     "kind", "meter",      "sku",        "dim2",   "pricing",  "migration",
    "quantity", "unit", "unit_price", "price_unit", "amount", "credited", "original_period",
};
#define N_CSV_COLUMNS (sizeof csv_columns / sizeof *csv_columns)

/* The money paid by credits on one line, as a major-unit string. */
static tally_err credited(json_object *ln, int digits, char *s, size_t cap)
{
    json_object *cr = NULL;
    int64_t sum = 0;
    if (json_object_object_get_ex(ln, "credits", &cr) && json_object_is_type(cr, json_type_array))
        for (size_t i = 0; i < json_object_array_length(cr); i++) {
            json_object *amt = NULL;
            if (!json_object_object_get_ex(json_object_array_get_idx(cr, i), "amount", &amt))
                return TALLY_PARSE;
            const char *a = json_object_get_string(amt);
            int64_t v;
            if (tally_amount_parse(a, strlen(a), digits, true, &v, NULL) != TALLY_OK ||
                tally_money_add(sum, v, &sum) != TALLY_OK)
                return TALLY_PARSE;
        }
    return tally_amount_format(sum, digits, s, cap);
}

static tally_err csv_row(tally_buf *b, json_object *ln, int digits)
{
    tally_err e = TALLY_OK;
    for (size_t c = 0; c < N_CSV_COLUMNS && !e; c++) {
        char v[48] = "";
        json_object *f = NULL;
        const char *s = "";
        if (strcmp(csv_columns[c], "credited") == 0) {
            e = credited(ln, digits, v, sizeof v);
            s = v;
        } else if (json_object_object_get_ex(ln, csv_columns[c], &f)) {
            s = json_object_get_string(f);
        }
        if (!e && c > 0)
            e = tally_buf_puts(b, ",");
        if (!e)
            e = tally_buf_csv_field(b, s ? s : "");
    }
    return e ? e : tally_buf_puts(b, "\r\n");
}

tally_err inv_doc_csv(const char *doc, size_t len, tally_buf *out)
{
    json_object *root;
    tally_err e = tally_invoice_parse(doc, len, &root);
    if (!e)
        e = inv_doc_csv_parsed(root, out);
    json_object_put(root);
    return e;
}

tally_err inv_doc_csv_parsed(json_object *root, tally_buf *out)
{
    json_object *lines = NULL, *cur = NULL;
    if (!root || !json_object_object_get_ex(root, "lines", &lines) ||
        !json_object_is_type(lines, json_type_array) ||
        !json_object_object_get_ex(root, "currency", &cur))
        return TALLY_PARSE;
    const tally_currency *ccy = tally_currency_find(json_object_get_string(cur));
    if (!ccy)
        return TALLY_PARSE;
    tally_err e = TALLY_OK;
    for (size_t c = 0; c < N_CSV_COLUMNS && !e; c++)
        e = tally_buf_printf(out, "%s%s", c ? "," : "", csv_columns[c]);
    if (!e)
        e = tally_buf_puts(out, "\r\n");
    for (size_t i = 0; i < json_object_array_length(lines) && !e; i++)
        e = csv_row(out, json_object_array_get_idx(lines, i), ccy->minor_digits);
    return e;
}

void inv_col_text(sqlite3_stmt *st, int col, char *dst, size_t cap)
{
    const unsigned char *s = sqlite3_column_text(st, col);
    size_t n = s ? (size_t)sqlite3_column_bytes(st, col) : 0;
    if (n >= cap)
        n = cap - 1;
    if (n)
        memcpy(dst, s, n);
    dst[n] = '\0';
}

tally_err inv_line_from_row(sqlite3_stmt *st, tally_line *ln)
{
    memset(ln, 0, sizeof *ln);
    if (tally_line_kind_from_name((const char *)sqlite3_column_text(st, 0), &ln->kind) ||
        inv_i128_parse((const char *)sqlite3_column_text(st, 6), &ln->quantity))
        return TALLY_DB;
    ln->adjusts = ln->kind;
    if (ln->kind == TALLY_LINE_ADJUSTMENT &&
        tally_line_kind_from_name((const char *)sqlite3_column_text(st, 9), &ln->adjusts))
        return TALLY_DB;
    ln->meter = (tally_meter)sqlite3_column_int(st, 1);
    ln->pricing = (tally_pricing)sqlite3_column_int(st, 2);
    ln->migration = sqlite3_column_int(st, 3) != 0;
    inv_col_text(st, 4, ln->sku, sizeof ln->sku);
    inv_col_text(st, 5, ln->dim2, sizeof ln->dim2);
    ln->unit_price_nano = sqlite3_column_int64(st, 7);
    ln->amount_minor = sqlite3_column_int64(st, 8);
    inv_col_text(st, 10, ln->original_period, sizeof ln->original_period);
    return TALLY_OK;
}
