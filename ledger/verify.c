/* tally_ledger_verify: everything a ledger promises, checked from its bytes.
 *
 * The checks run in a fixed order and stop at the first failure, which is
 * described as "<record>: <what is wrong>":
 *   1. SQLite's integrity_check;
 *   2. the triggers of the migrations in schemas/ (append-only guards, the
 *      balances trigger, ...) exist with their original SQL, and no others;
 *   3. bookkeeping: every posting belongs to an entry, every entry balances
 *      per currency, debits equal credits per currency;
 *   4. every balances row equals the sum of its postings, and every posted
 *      ledger account has one;
 *   5. invoice and credit note numbers run 1, 2, 3... per (type, year) and
 *      ids match them; entries refer to documents and grants that exist;
 *   6. each stored document: re-hashes to its hash, carries the hash,
 *      prev_hash and signature of its row, links to the previous document's
 *      hash, has a valid signature, and adds up (lines to subtotal, credits to
 *      total_credits, subtotal - credits + credit_issued to amount_due, never
 *      negative on an invoice) with the same totals as its row; an issued
 *      adjustment credit is a grant of the account of that kind and amount;
 *   7. the invoice_lines and invoice_credits rows agree with the totals;
 *   8. each document's entry posts its signed totals (receivable = amount
 *      due, grants = credits);
 *   9. the ledger's own chain (verify_chain.c): links, every covered row
 *      unchanged since its entry, no covered row outside the chain, usage
 *      against the chained batch totals, the dedupe keys against the events
 *      those batches accepted, the signed heads it holds;
 *  10. on a ledger directory, each shard's integrity, triggers and chain;
 *  11. the prepaid balances, which are derived (account_balances,
 *      running_periods): each recomputed by the refresh's own code and
 *      compared with what is stored (verify_balance.c).
 * Everything is read at one snapshot, so a concurrent writer cannot make a
 * consistent ledger look inconsistent. On a ledger file, 1 and 9 run on a
 * second connection on another thread, at the same snapshot as the rest
 * (begin_snapshot), while the signatures are verified on worker threads;
 * the failure reported is still the first in this order. */
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"
#include "tally/embed.h"
#include "tally/parallel.h"
#include "tally/sign.h"

#define ZERO_HASH "0000000000000000000000000000000000000000000000000000000000000000"

#define fail verify_fail

tally_err verify_fail(vctx *v, tally_err err, const char *fmt, ...)
{
    if (v->cap > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(v->why, v->cap, fmt, ap);
        va_end(ap);
    }
    return err;
}

static tally_err db_fail(vctx *v, tally_err err)
{
    return fail(v, err, "ledger database: %s", tally_ledger_errmsg(v->l));
}

static const char *col_text(sqlite3_stmt *st, int i)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    return s ? (const char *)s : "";
}

/* ---- 1. integrity --------------------------------------------------------- */

static tally_err check_integrity(vctx *v)
{
    sqlite3_stmt *st;
    tally_err err = ledger_prepare(v->l, "PRAGMA integrity_check", &st);
    if (err != TALLY_OK)
        return db_fail(v, err);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW)
        err = db_fail(v, ledger_sqlite_err(v->l, rc));
    else if (strcmp(col_text(st, 0), "ok") != 0)
        err = fail(v, TALLY_TAMPERED, "database file: integrity_check: %s", col_text(st, 0));
    sqlite3_finalize(st);
    return err;
}

/* ---- 2. triggers ---------------------------------------------------------- */

/* Whitespace-insensitive equality of two SQL texts (runs of blanks are one). */
static int sql_equal(const char *a, size_t alen, const char *b, size_t blen)
{
    size_t i = 0, j = 0;
    for (;;) {
        int sa = 0, sb = 0;
        while (i < alen && (a[i] == ' ' || a[i] == '\n' || a[i] == '\t' || a[i] == '\r'))
            i++, sa = 1;
        while (j < blen && (b[j] == ' ' || b[j] == '\n' || b[j] == '\t' || b[j] == '\r'))
            j++, sb = 1;
        if (i == alen || j == blen)
            return i == alen && j == blen;
        if (sa != sb || a[i] != b[j])
            return 0;
        i++, j++;
    }
}

/* The next "CREATE TRIGGER name ... END" or "DROP TRIGGER [IF EXISTS] name;" in a
 * migration's text from *pos: its name and, for a CREATE, its statement
 * (without the ';'; *stmt NULL for a DROP). Returns 0 when there is none. */
static int next_schema_trigger(const char **pos, char *name, size_t cap, const char **stmt,
                               size_t *len)
{
    static const char kw[] = "CREATE TRIGGER ", drop[] = "DROP TRIGGER ";
    const char *s = strstr(*pos, kw), *d = strstr(*pos, drop);
    bool is_drop = d && (!s || d < s);
    if (is_drop)
        s = d;
    if (!s)
        return 0;
    const char *n = s + (is_drop ? sizeof drop : sizeof kw) - 1;
    if (is_drop && strncmp(n, "IF EXISTS ", 10) == 0)
        n += 10;
    size_t nl = strcspn(n, is_drop ? " \n\t;" : " \n\t");
    const char *end = is_drop ? n + nl : strstr(n, "END;");
    if (!end || nl == 0 || nl >= cap)
        return 0;
    memcpy(name, n, nl);
    name[nl] = '\0';
    *stmt = is_drop ? NULL : s;
    *len = is_drop ? 0 : (size_t)(end + 3 - s);
    *pos = is_drop ? end : end + 4;
    return 1;
}

#define MAX_TRIGGERS 128

typedef struct want_trigger {
    char name[96];
    const char *sql;
    size_t len;
} want_trigger;

static int is_migration(const char *name)
{
    size_t n = strlen(name);
    return strncmp(name, "schemas/", 8) == 0 && n > 12 && strcmp(name + n - 4, ".sql") == 0;
}

/* The triggers the migrations create, in order; a later definition of a
 * name replaces an earlier one. Returns how many, or 0 on overflow. */
static size_t schema_triggers(want_trigger *t)
{
    size_t n = 0;
    for (const tally_embedded *f = tally_embedded_files; f->name; f++) {
        if (!is_migration(f->name))
            continue;
        const char *pos = f->data, *stmt;
        char name[96];
        size_t len;
        while (next_schema_trigger(&pos, name, sizeof name, &stmt, &len)) {
            size_t i = 0;
            while (i < n && strcmp(t[i].name, name) != 0)
                i++;
            if (!stmt) { /* dropped: no longer wanted */
                if (i < n)
                    memmove(&t[i], &t[i + 1], (n - i - 1) * sizeof *t);
                n -= i < n;
                continue;
            }
            if (i == MAX_TRIGGERS)
                return 0;
            n += i == n;
            memcpy(t[i].name, name, sizeof name);
            t[i].sql = stmt;
            t[i].len = len;
        }
    }
    return n;
}

static tally_err check_one_trigger(vctx *v, sqlite3_stmt *st, const want_trigger *t)
{
    sqlite3_reset(st);
    sqlite3_bind_text(st, 1, t->name, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        return fail(v, TALLY_TAMPERED, "trigger %s: missing (the ledger's protection was removed)",
                    t->name);
    if (rc != SQLITE_ROW)
        return db_fail(v, ledger_sqlite_err(v->l, rc));
    const char *have = col_text(st, 0);
    if (!sql_equal(have, strlen(have), t->sql, t->len))
        return fail(v, TALLY_TAMPERED, "trigger %s: definition differs from the schema's", t->name);
    return TALLY_OK;
}

/* A trigger nobody's migration created could rewrite rows as they land. */
static tally_err check_no_extra_triggers(vctx *v, const want_trigger *t, size_t n)
{
    sqlite3_stmt *st;
    tally_err err = ledger_prepare(
        v->l, "SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name", &st);
    if (err != TALLY_OK)
        return db_fail(v, err);
    int rc;
    while (err == TALLY_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *name = col_text(st, 0);
        size_t i = 0;
        while (i < n && strcmp(t[i].name, name) != 0)
            i++;
        if (i == n)
            err = fail(v, TALLY_TAMPERED, "trigger %s: not part of Tally's schema", name);
    }
    if (err == TALLY_OK && rc != SQLITE_DONE)
        err = db_fail(v, ledger_sqlite_err(v->l, rc));
    sqlite3_finalize(st);
    return err;
}

static tally_err check_triggers(vctx *v)
{
    want_trigger t[MAX_TRIGGERS];
    size_t n = schema_triggers(t);
    if (n == 0)
        return fail(v, TALLY_INTERNAL, "the compiled-in migrations list no triggers");
    sqlite3_stmt *st;
    tally_err err = ledger_prepare(
        v->l, "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ?1", &st);
    if (err != TALLY_OK)
        return db_fail(v, err);
    for (size_t i = 0; err == TALLY_OK && i < n; i++)
        err = check_one_trigger(v, st, &t[i]);
    sqlite3_finalize(st);
    return err == TALLY_OK ? check_no_extra_triggers(v, t, n) : err;
}

/* ---- 3-5, 7. checks written as SQL ---------------------------------------- */

/* Each query returns one row per violation, its first column saying what is
 * wrong with which record; the first row (in the query's order) is reported. */
static const char *const sql_checks_ledger[] = {
    /* 3. bookkeeping: entries balance */
    "SELECT 'posting ' || p.id || ': entry ' || p.entry_id || ' does not exist' "
    "FROM postings p LEFT JOIN entries e ON e.id = p.entry_id WHERE e.id IS NULL "
    "ORDER BY p.id LIMIT 1",
    "SELECT 'entry ' || e.id || ' (' || e.kind || ' ' || e.ref || '): debits ' || "
    "sum(p.debit_minor) || ' != credits ' || sum(p.credit_minor) || ' ' || p.currency || "
    "' (minor units)' FROM postings p JOIN entries e ON e.id = p.entry_id "
    "GROUP BY p.entry_id, p.currency HAVING sum(p.debit_minor) != sum(p.credit_minor) "
    "ORDER BY p.entry_id LIMIT 1",
    "SELECT 'currency ' || currency || ': debits ' || sum(debit_minor) || ' != credits ' || "
    "sum(credit_minor) || ' (minor units)' FROM postings GROUP BY currency "
    "HAVING sum(debit_minor) != sum(credit_minor) ORDER BY currency LIMIT 1",
    /* 4. balances */
    "SELECT 'balance ' || b.ledger_acct || ' ' || b.currency || ': stored debit ' || "
    "b.debit_minor || ' credit ' || b.credit_minor || ', postings say debit ' || "
    "coalesce(p.d, 0) || ' credit ' || coalesce(p.c, 0) FROM balances b "
    "LEFT JOIN (SELECT ledger_acct, currency, sum(debit_minor) d, sum(credit_minor) c "
    "FROM postings GROUP BY 1, 2) p USING (ledger_acct, currency) "
    "WHERE b.debit_minor != coalesce(p.d, 0) OR b.credit_minor != coalesce(p.c, 0) "
    "ORDER BY b.ledger_acct, b.currency LIMIT 1",
    "SELECT 'balance ' || p.ledger_acct || ' ' || p.currency || ': missing, but it has "
    "postings' FROM postings p LEFT JOIN balances b USING (ledger_acct, currency) "
    "WHERE b.ledger_acct IS NULL ORDER BY p.id LIMIT 1",
    /* 5. numbering and references */
    "SELECT CASE doc_type WHEN 'invoice' THEN 'invoice ' ELSE 'credit note ' END || id || "
    "': number ' || number || ' where ' || rn || ' was due (numbers of ' || doc_type || "
    "' ' || year || ' must have no gaps)' FROM (SELECT id, doc_type, year, number, "
    "row_number() OVER (PARTITION BY doc_type, year ORDER BY number) rn FROM invoices) "
    "WHERE number != rn ORDER BY doc_type, year, number LIMIT 1",
    "SELECT CASE doc_type WHEN 'invoice' THEN 'invoice ' ELSE 'credit note ' END || id || "
    "': id does not match its type, year and number' FROM invoices WHERE id != "
    "(CASE doc_type WHEN 'invoice' THEN 'INV' ELSE 'CN' END) || printf('-%04d-%06d', year, "
    "number) ORDER BY seq LIMIT 1",
    "SELECT 'credit note ' || c.id || ': refers to ' || coalesce(c.refers_to, 'nothing') || "
    "', which is not an earlier invoice' FROM invoices c WHERE c.doc_type = 'credit_note' "
    "AND NOT EXISTS (SELECT 1 FROM invoices i WHERE i.id = c.refers_to AND i.doc_type = "
    "'invoice' AND i.seq < c.seq) ORDER BY c.seq LIMIT 1",
    "SELECT 'entry ' || e.id || ' (' || e.kind || ' ' || e.ref || '): no such document' "
    "FROM entries e WHERE e.kind IN ('invoice', 'void') AND NOT EXISTS (SELECT 1 FROM "
    "invoices i WHERE i.id = e.ref) ORDER BY e.id LIMIT 1",
    "SELECT 'entry ' || e.id || ' (grant ' || e.ref || '): no such grant' FROM entries e "
    "WHERE e.kind = 'grant' AND NOT EXISTS (SELECT 1 FROM grants g WHERE CAST(g.id AS TEXT) "
    "= e.ref) ORDER BY e.id LIMIT 1",
    NULL,
};

static const char *const sql_checks_rows[] = {
    /* 7. invoice rows against their line and credit rows */
    "SELECT 'invoice line ' || l.invoice_seq || '/' || l.line_no || ': its invoice does "
    "not exist' FROM invoice_lines l WHERE NOT EXISTS (SELECT 1 FROM invoices i WHERE "
    "i.seq = l.invoice_seq) ORDER BY 1 LIMIT 1",
    "SELECT 'invoice credit ' || c.invoice_seq || '/' || c.grant_id || ': its invoice does "
    "not exist' FROM invoice_credits c WHERE NOT EXISTS (SELECT 1 FROM invoices i WHERE "
    "i.seq = c.invoice_seq) ORDER BY 1 LIMIT 1",
    "SELECT CASE doc_type WHEN 'invoice' THEN 'invoice ' ELSE 'credit note ' END || id || "
    "': its line rows sum to ' || s || ', not the subtotal ' || subtotal_minor || "
    "' (minor units)' FROM (SELECT i.*, (SELECT coalesce(sum(amount_minor), 0) FROM "
    "invoice_lines l WHERE l.invoice_seq = i.seq) s FROM invoices i) "
    "WHERE s != subtotal_minor ORDER BY seq LIMIT 1",
    "SELECT CASE doc_type WHEN 'invoice' THEN 'invoice ' ELSE 'credit note ' END || id || "
    "': its credit rows sum to ' || s || ', not the total credits ' || credits_minor || "
    "' (minor units)' FROM (SELECT i.*, (SELECT coalesce(sum(amount_minor), 0) FROM "
    "invoice_credits c WHERE c.invoice_seq = i.seq) s FROM invoices i) "
    "WHERE s != credits_minor ORDER BY seq LIMIT 1",
    /* 8. postings against each signed document's totals (the row's totals
     * were checked against the signed document in 6) */
    "SELECT CASE doc_type WHEN 'invoice' THEN 'invoice ' ELSE 'credit note ' END || id || "
    "': no ' || CASE doc_type WHEN 'invoice' THEN 'invoice' ELSE 'void' END || ' entry posts "
    "it' FROM invoices i WHERE NOT EXISTS (SELECT 1 FROM entries e WHERE e.ref = i.id AND "
    "e.kind = CASE i.doc_type WHEN 'invoice' THEN 'invoice' ELSE 'void' END) ORDER BY seq "
    "LIMIT 1",
    "SELECT CASE doc_type WHEN 'invoice' THEN 'invoice ' ELSE 'credit note ' END || id || "
    "': entry ' || eid || ' posts ' || r || ' to receivable:' || account || ' and ' || g || "
    "' to its grants, but the signed document says amount due ' || amount_due_minor || "
    "', credits ' || credits_minor || ' and credit issued ' || ci || ' (minor units)' FROM "
    "(SELECT i.*, e.id eid, "
    "(SELECT coalesce(sum(p.debit_minor - p.credit_minor), 0) FROM postings p WHERE "
    "p.entry_id = e.id AND p.ledger_acct = 'receivable:' || i.account) r, (SELECT "
    "coalesce(sum(p.debit_minor - p.credit_minor), 0) FROM postings p WHERE p.entry_id = e.id "
    "AND p.ledger_acct LIKE 'grant:%') g, "
    /* an issued adjustment credit (SPEC section 4) is posted to its grant; its
     * amount was checked against the document's credit_issued in 6 */
    "coalesce((SELECT amount_minor FROM grants WHERE id = json_extract(CAST(i.doc AS TEXT), "
    "'$.credit_issued.grant_id')), 0) * CASE i.doc_type WHEN 'invoice' THEN 1 ELSE -1 END ci "
    "FROM invoices i JOIN entries e ON e.ref = i.id AND "
    "e.kind IN ('invoice', 'void')) WHERE r != amount_due_minor OR g != credits_minor - ci "
    "ORDER BY seq LIMIT 1",
    NULL,
};

tally_err verify_sql(vctx *v, const char *sql)
{
    sqlite3_stmt *st;
    tally_err err = ledger_prepare(v->l, sql, &st);
    if (err != TALLY_OK)
        return db_fail(v, err);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        err = fail(v, TALLY_TAMPERED, "%s", col_text(st, 0));
    else if (rc != SQLITE_DONE)
        err = db_fail(v, ledger_sqlite_err(v->l, rc));
    sqlite3_finalize(st);
    return err;
}

static tally_err run_sql_list(vctx *v, const char *const *list)
{
    tally_err err = TALLY_OK;
    for (size_t i = 0; err == TALLY_OK && list[i]; i++)
        err = verify_sql(v, list[i]);
    return err;
}

/* Derived tables, after the chain has vouched for the rows they derive from. */
static const char *const sql_checks_derived[] = {
    /* usage by the hour against its seconds (schemas/013_points_hourly.sql):
     * invoices read an hour's sum, so an edited sum would change them */
    "SELECT 'usage_points_hourly: ' || h.account || ' meter ' || h.meter || ' ' || h.dim || "
    "'/' || h.dim2 || ' hour ' || h.hour_s || ' holds ' || h.qty || ' but its seconds add up "
    "to ' || coalesce((SELECT sum(p.qty) FROM usage_points p WHERE p.account = h.account AND "
    "p.meter = h.meter AND p.dim = h.dim AND p.dim2 = h.dim2 AND p.t_s >= h.hour_s AND "
    "p.t_s < h.hour_s + 3600), 0) FROM usage_points_hourly h WHERE h.qty IS NOT NULL AND "
    "h.qty IS NOT coalesce((SELECT sum(p.qty) FROM usage_points p WHERE p.account = h.account "
    "AND p.meter = h.meter AND p.dim = h.dim AND p.dim2 = h.dim2 AND p.t_s >= h.hour_s AND "
    "p.t_s < h.hour_s + 3600), 0) LIMIT 1",
    "SELECT 'usage_points: ' || p.account || ' meter ' || p.meter || ' ' || p.dim || '/' || "
    "p.dim2 || ' second ' || p.t_s || ' has no hourly sum' FROM usage_points p WHERE NOT EXISTS "
    "(SELECT 1 FROM usage_points_hourly h WHERE h.account = p.account AND h.meter = p.meter "
    "AND h.dim = p.dim AND h.dim2 = p.dim2 AND h.hour_s = p.t_s - p.t_s % 3600) LIMIT 1",
    NULL,
};

static tally_err check_derived_sql(vctx *v)
{
    return run_sql_list(v, sql_checks_derived);
}

static tally_err check_ledger_sql(vctx *v)
{
    return run_sql_list(v, sql_checks_ledger);
}

static tally_err check_rows_sql(vctx *v)
{
    return run_sql_list(v, sql_checks_rows);
}

/* ---- 6. documents ----------------------------------------------------------- */

/* One stored document and the row that holds it. */
typedef struct vdoc_row {
    const char *id;
    bool credit_note;
    const char *doc;
    size_t doc_len;
    const char *hash, *prev_hash, *signature, *currency, *account, *refers_to;
    int64_t subtotal_minor, credits_minor, amount_due_minor;
    const char *expect_prev; /* the previous document's hash, or zeros */
    const char *prev_id;     /* the previous document's id, or "" */
} vdoc_row;

/* The signed form ends `,"prev_hash":"<64>","hash":"<64>","signature":"<128>"}`;
 * the hash covers everything up to the prev_hash value, then '}'. */
static const char k_prev[] = ",\"prev_hash\":\"";
static const char k_hash[] = ",\"hash\":\"";
static const char k_sig[] = "\",\"signature\":\"";
#define TAIL_LEN (sizeof k_hash - 1 + 64 + sizeof k_sig - 1 + 128 + 2)
#define PREV_LEN (sizeof k_prev - 1 + 64 + 1)

typedef struct vdoc_parts {
    size_t body_len; /* bytes before `,"hash"` */
    char hash[65], prev[65], sig[129];
    char key_id[TALLY_KEY_ID_LEN + 1]; /* "" in documents from before key ids */
} vdoc_parts;

static const char k_key[] = ",\"key_id\":\"";
#define KEY_LEN (sizeof k_key - 1 + TALLY_KEY_ID_LEN + 1)

static int all_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

/* Splits a signed document into its parts; 0 if it has the signed form. */
static int split_doc(const char *d, size_t len, vdoc_parts *p)
{
    if (len < 2 + PREV_LEN + TAIL_LEN || d[0] != '{' || memcmp(d + len - 2, "\"}", 2) != 0)
        return -1;
    const char *t = d + len - TAIL_LEN;
    const char *h = t + sizeof k_hash - 1, *sg = h + 64 + sizeof k_sig - 1;
    if (memcmp(t, k_hash, sizeof k_hash - 1) != 0 || !all_hex(h, 64) ||
        memcmp(h + 64, k_sig, sizeof k_sig - 1) != 0 || !all_hex(sg, 128))
        return -1;
    const char *pv = t - PREV_LEN;
    if (memcmp(pv, k_prev, sizeof k_prev - 1) != 0 || !all_hex(pv + sizeof k_prev - 1, 64) ||
        t[-1] != '"')
        return -1;
    p->body_len = (size_t)(t - d);
    memcpy(p->hash, h, 64);
    p->hash[64] = '\0';
    memcpy(p->sig, sg, 128);
    p->sig[128] = '\0';
    memcpy(p->prev, pv + sizeof k_prev - 1, 64);
    p->prev[64] = '\0';
    p->key_id[0] = '\0';
    const char *kv = pv - KEY_LEN;
    if (pv - d > (ptrdiff_t)KEY_LEN && memcmp(kv, k_key, sizeof k_key - 1) == 0 && pv[-1] == '"' &&
        all_hex(kv + sizeof k_key - 1, TALLY_KEY_ID_LEN)) {
        memcpy(p->key_id, kv + sizeof k_key - 1, TALLY_KEY_ID_LEN);
        p->key_id[TALLY_KEY_ID_LEN] = '\0';
    }
    return 0;
}

static const char *label(const vdoc_row *r)
{
    return r->credit_note ? "credit note" : "invoice";
}

static tally_err rehash(const vdoc_row *r, const vdoc_parts *p, char hex[65])
{
    tally_buf b;
    tally_buf_init(&b, 0);
    tally_err err = tally_buf_append(&b, r->doc, p->body_len);
    if (err == TALLY_OK)
        err = tally_buf_append(&b, "}", 1);
    if (err == TALLY_OK)
        tally_sha256_hex(b.data, b.len, hex);
    tally_buf_release(&b);
    return err;
}

/* The hash, its copies, the chain link and the signature. */
static tally_err check_chain(vctx *v, const vdoc_row *r)
{
    vdoc_parts p;
    char hex[65];
    const char *what = NULL;
    if (split_doc(r->doc, r->doc_len, &p) != 0)
        what = "stored document is not in signed form (no trailing prev_hash, hash, signature)";
    else if (rehash(r, &p, hex) != TALLY_OK)
        return fail(v, TALLY_NOMEM, "%s %s: out of memory", label(r), r->id);
    else if (strcmp(hex, r->hash) != 0)
        what = "stored document does not match its hash";
    else if (strcmp(p.hash, r->hash) != 0)
        what = "hash inside the document differs from the stored hash";
    else if (strcmp(p.sig, r->signature) != 0)
        what = "signature inside the document differs from the stored signature";
    else if (strcmp(p.prev, r->prev_hash) != 0)
        what = "prev_hash inside the document differs from the stored prev_hash";
    if (what)
        return fail(v, TALLY_TAMPERED, "%s %s: %s", label(r), r->id, what);
    if (strcmp(r->prev_hash, r->expect_prev) != 0) {
        if (!r->prev_id[0])
            return fail(v, TALLY_TAMPERED, "%s %s: first in the chain but prev_hash is not zero",
                        label(r), r->id);
        return fail(v, TALLY_TAMPERED, "%s %s: prev_hash does not link to the hash of %s", label(r),
                    r->id, r->prev_id);
    }
    /* the signature: queued, verified on every core (verify_sigs.c) */
    return vsig_add(v, v->sigs, r->credit_note, r->id, p.key_id, r->hash, r->signature);
}

static bool text_is(vdoc_text t, const char *want)
{
    return t.s && t.n == strlen(want) && memcmp(t.s, want, t.n) == 0;
}

/* The document's credit_issued (SPEC section 4): absent is 0; present, an
 * `adjustment` grant with an id, positive on an invoice, negative on the
 * credit note that takes it back. */
static const char *issued_problem(const vdoc_fields *f, const vdoc_row *r)
{
    if (!f->issued_present)
        return NULL;
    if (!f->issued_ok)
        return "credit_issued is malformed";
    if (r->credit_note ? f->issued >= 0 : f->issued <= 0)
        return "credit_issued has the wrong sign";
    return NULL;
}

/* What the document says, against its row and its own arithmetic. */
static const char *doc_content_problem(const vdoc_fields *f, const vdoc_row *r)
{
    if (!text_is(f->invoice_id, r->id))
        return "invoice_id inside the document differs from its row";
    if (!text_is(f->type, r->credit_note ? "credit_note" : "invoice"))
        return "type inside the document differs from its row";
    if (!text_is(f->account, r->account) || !text_is(f->currency, r->currency))
        return "account or currency inside the document differs from its row";
    if (r->credit_note &&
        !(f->refers_to.s ? text_is(f->refers_to, r->refers_to) : !r->refers_to[0]))
        return "refers_to inside the document differs from its row";
    if (!f->subtotal.ok || !f->total_credits.ok || !f->amount_due.ok)
        return "totals inside the document are missing or malformed";
    int64_t sub = f->subtotal.v, cred = f->total_credits.v, due = f->amount_due.v, diff;
    int64_t issued = f->issued_present && f->issued_ok ? f->issued : 0;
    if (!f->lines.ok || !f->applied.ok)
        return "lines or credits inside the document are missing or malformed";
    if (f->lines.v != sub)
        return "lines do not sum to the subtotal";
    if (f->applied.v != cred)
        return "credits applied do not sum to total_credits";
    const char *bad = issued_problem(f, r);
    if (bad)
        return bad;
    if (__builtin_sub_overflow(sub, cred, &diff) || __builtin_add_overflow(diff, issued, &diff) ||
        diff != due)
        return "subtotal - total_credits + credit_issued != amount_due";
    if (!r->credit_note && (due < 0 || cred < 0))
        return "negative amount due or credits";
    if (!r->credit_note && issued && (due != 0 || cred != 0))
        return "credit_issued on an invoice with an amount due or credits applied";
    if (sub != r->subtotal_minor || cred != r->credits_minor || due != r->amount_due_minor)
        return "totals in its row differ from the signed document";
    return NULL;
}

/* The adjustment credit an invoice issued is a grant of its account, of
 * kind adjustment, for exactly that amount, with no expiry and no scope. */
static tally_err check_issued_grant(vctx *v, const vdoc_row *r, int64_t issued, int64_t grant_id)
{
    sqlite3_stmt *st;
    tally_err err =
        ledger_prepare(v->l,
                       "SELECT count(*) FROM grants WHERE id = ?1 AND account = ?2 "
                       "AND currency = ?3 AND kind = 'adjustment' AND amount_minor = ?4 "
                       "AND expires_s IS NULL AND scope = ''",
                       &st);
    if (err != TALLY_OK)
        return db_fail(v, err);
    sqlite3_bind_int64(st, 1, grant_id);
    sqlite3_bind_text(st, 2, r->account, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, r->currency, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, issued);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW)
        err = db_fail(v, ledger_sqlite_err(v->l, rc));
    else if (sqlite3_column_int64(st, 0) != 1)
        err = fail(v, TALLY_TAMPERED,
                   "%s %s: its credit_issued names grant %lld, which is not its adjustment credit",
                   label(r), r->id, (long long)grant_id);
    sqlite3_finalize(st);
    return err;
}

static tally_err check_content(vctx *v, const vdoc_row *r)
{
    const tally_currency *c = tally_currency_find(r->currency);
    if (!c)
        return fail(v, TALLY_TAMPERED, "%s %s: unknown currency '%s'", label(r), r->id,
                    r->currency);
    vdoc_fields f;
    bool object = false;
    if (vdoc_read(r->doc, r->doc_len, c->minor_digits, &f, &object) != TALLY_OK)
        return fail(v, TALLY_NOMEM, "out of memory");
    const char *what = object ? doc_content_problem(&f, r) : "stored document is not a JSON object";
    int64_t issued = f.issued_present && f.issued_ok ? f.issued : 0, grant_id = f.grant_id;
    vdoc_release(&f);
    if (what)
        return fail(v, TALLY_TAMPERED, "%s %s: %s", label(r), r->id, what);
    return r->credit_note || !issued ? TALLY_OK : check_issued_grant(v, r, issued, grant_id);
}

static tally_err check_document(vctx *v, const vdoc_row *r)
{
    if (r->doc_len > INT32_MAX)
        return fail(v, TALLY_TAMPERED, "%s %s: stored document too large", label(r), r->id);
    tally_err err = check_chain(v, r);
    return err == TALLY_OK ? check_content(v, r) : err;
}

tally_err verify_keys(vctx *v)
{
    if (v->keys)
        return TALLY_OK;
    tally_err err = tally_keyring_load(v->key_path, &v->keys);
    if (err == TALLY_NOT_FOUND)
        return fail(v, TALLY_NOT_FOUND,
                    "signing key %s: not found; verification of signatures needs the public key "
                    "(pass --key with the signing key or the PEM printed by 'tally pubkey --all')",
                    v->key_path);
    if (err != TALLY_OK)
        return fail(v, TALLY_CRYPTO, "signing key %s: not an Ed25519 private or public key PEM",
                    v->key_path);
    return TALLY_OK;
}

static tally_err check_documents(vctx *v)
{
    sqlite3_stmt *st;
    tally_err err = ledger_prepare(v->l,
                                   "SELECT seq, id, doc_type, doc, hash, prev_hash, signature, "
                                   "currency, subtotal_minor, credits_minor, amount_due_minor, "
                                   "account, coalesce(refers_to, '') FROM invoices ORDER BY seq",
                                   &st);
    if (err != TALLY_OK)
        return db_fail(v, err);
    char prev[65] = ZERO_HASH, prev_id[48] = "";
    int rc;
    while (err == TALLY_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (v->n_docs == 0)
            err = verify_keys(v);
        if (err == TALLY_OK && !v->sigs && vsig_create(v->key_path, v->keys, &v->sigs))
            err = fail(v, TALLY_NOMEM, "out of memory");
        vdoc_row row = {
            .id = col_text(st, 1),
            .credit_note = strcmp(col_text(st, 2), "credit_note") == 0,
            .doc = sqlite3_column_blob(st, 3),
            .doc_len = (size_t)sqlite3_column_bytes(st, 3),
            .hash = col_text(st, 4),
            .prev_hash = col_text(st, 5),
            .signature = col_text(st, 6),
            .currency = col_text(st, 7),
            .subtotal_minor = sqlite3_column_int64(st, 8),
            .credits_minor = sqlite3_column_int64(st, 9),
            .amount_due_minor = sqlite3_column_int64(st, 10),
            .account = col_text(st, 11),
            .refers_to = col_text(st, 12),
            .expect_prev = prev,
            .prev_id = prev_id,
        };
        if (err == TALLY_OK)
            err = check_document(v, &row);
        snprintf(prev, sizeof prev, "%s", row.hash);
        snprintf(prev_id, sizeof prev_id, "%s", row.id);
        v->n_docs++;
    }
    if (err == TALLY_OK && rc != SQLITE_DONE)
        err = db_fail(v, ledger_sqlite_err(v->l, rc));
    /* The signatures still queued, of documents up to the last one read: a
     * failure among them comes first in ledger order, so after a failure
     * here they are waited for. Otherwise they are verified while the later
     * checks run, and waited for at the end (tally_ledger_verify). */
    tally_err sig = err != TALLY_OK ? vsig_flush(v, v->sigs) : vsig_submit(v, v->sigs);
    if (err != TALLY_OK || sig != TALLY_OK) {
        vsig_destroy(v->sigs);
        v->sigs = NULL;
    }
    sqlite3_finalize(st);
    return sig != TALLY_OK ? sig : err;
}

/* ---- memory-mapped reads ------------------------------------------------- */

/* Verify reads every page of the file, some twice and on two connections:
 * mapped, a page is read from the OS's cache instead of being copied into
 * each connection's page cache (SQLite caps it at its own maximum, 2 GiB
 * by default; past that, pages are read as before). */
#define VERIFY_MMAP_BYTES "2147418112"

/* l's mmap_size (0 when it cannot be read), to be restored after verify. */
static int64_t mmap_size(tally_ledger *l)
{
    sqlite3_stmt *st;
    int64_t n = 0;
    if (ledger_prepare(l, "PRAGMA mmap_size", &st) != TALLY_OK)
        return 0;
    if (sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
}

static void set_mmap_size(tally_ledger *l, const char *bytes)
{
    char sql[64];
    if (l && !tally_fmt(sql, sizeof sql, "PRAGMA mmap_size=%s", bytes))
        (void)sqlite3_exec(l->db, sql, NULL, NULL, NULL);
}

/* ---- shards of a ledger directory ----------------------------------------- */

/* Each shard is a ledger file of its own that chains its own usage batches,
 * the accounts it first saw and its offset gaps (open and accepted): its
 * integrity, triggers and chain are checked like main.db's, and a failure
 * names the shard. */
static tally_err check_shard(vctx *v, const char *name)
{
    char path[4096], why[512] = "";
    if (tally_fmt(path, sizeof path, "%s/%s" SHARD_DB_SUFFIX, v->l->shards->dir, name))
        return fail(v, TALLY_INVAL, "shard %s: path too long", name);
    tally_ledger *sl = NULL;
    tally_err err = tally_ledger_open(path, &sl, why, sizeof why);
    if (err != TALLY_OK)
        return fail(v, err, "shard %s: cannot open: %s", name, why);
    vctx sv = {.l = sl, .key_path = v->key_path, .why = why, .cap = sizeof why};
    set_mmap_size(sl, VERIFY_MMAP_BYTES);
    err = check_integrity(&sv);
    if (err == TALLY_OK)
        err = check_triggers(&sv);
    if (err == TALLY_OK)
        err = verify_chain(&sv);
    tally_keyring_destroy(sv.keys);
    tally_ledger_close(sl);
    return err == TALLY_OK ? err : fail(v, err, "shard %s: %s", name, why);
}

static tally_err check_shards(vctx *v)
{
    if (!v->l->shards)
        return TALLY_OK;
    tally_err err = ledger_shards_refresh(v->l); /* shards created since open */
    if (err != TALLY_OK)
        return db_fail(v, err);
    const struct ledger_shards *s = v->l->shards;
    for (size_t i = 0; s && err == TALLY_OK && i < s->n_src; i++)
        if (!s->src[i].is_main)
            err = check_shard(v, s->src[i].name);
    return err;
}

/* ---- driver --------------------------------------------------------------- */

typedef tally_err (*check_fn)(vctx *v);

static const check_fn checks[] = {
    check_integrity, check_triggers,    check_ledger_sql, check_documents, check_rows_sql,
    verify_chain,    check_derived_sql, check_shards,     verify_balances,
};
#define N_CHECKS        (sizeof checks / sizeof *checks)
#define CHECK_INTEGRITY 0
#define CHECK_DOCS      3 /* check_documents: where a bad signature stands */
#define CHECK_CHAIN     5

/* How long verify waits for the write lock to start both connections at
 * one snapshot before it reads on one alone. */
#define VERIFY_FENCE_WAIT_MS 1000

/* One thread's share of the checks, in their order: the first to fail
 * stops it (first: its index; N_CHECKS when none failed). */
typedef struct vrun {
    vctx v;
    bool mine[N_CHECKS];
    size_t first;
    tally_err err, sig; /* sig: the signatures' (run 0) */
} vrun;

static void run_checks(vrun *r)
{
    r->first = N_CHECKS;
    r->err = TALLY_OK;
    for (size_t i = 0; i < N_CHECKS; i++)
        if (r->mine[i] && (r->err = checks[i](&r->v)) != TALLY_OK) {
            r->first = i;
            return;
        }
}

/* Run 0 then waits for the documents' signatures, helping the workers
 * verify them while the other connection's checks go on. */
static void run_one(void *ctx, size_t worker, size_t i)
{
    (void)worker;
    vrun *r = &((vrun *)ctx)[i];
    run_checks(r);
    if (i == 0) {
        r->sig = vsig_flush(&r->v, r->v.sigs);
        vsig_destroy(r->v.sigs);
        r->v.sigs = NULL;
    }
}

static tally_err summary(vctx *v)
{
    sqlite3_stmt *st;
    tally_err err = ledger_prepare(v->l,
                                   "SELECT (SELECT count(*) FROM entries), (SELECT count(*) FROM "
                                   "postings), (SELECT count(DISTINCT currency) FROM postings)",
                                   &st);
    if (err != TALLY_OK)
        return db_fail(v, err);
    if (sqlite3_step(st) == SQLITE_ROW)
        fail(v, TALLY_OK,
             "%lld entries (%lld postings) balanced in %lld currencies; %lld documents "
             "chained and signed",
             (long long)sqlite3_column_int64(st, 0), (long long)sqlite3_column_int64(st, 1),
             (long long)sqlite3_column_int64(st, 2), (long long)v->n_docs);
    sqlite3_finalize(st);
    return TALLY_OK;
}

/* Starts l's read transaction and, when l2 is not NULL, l2's at the same
 * snapshot: a third connection holds the write lock while both begin, so
 * no commit can come between them (WAL: a reader's snapshot is fixed by its
 * first read). *shared says whether l2 got it; if the lock cannot be had
 * (a read-only file, a writer that does not let go), l reads alone. */
static tally_err begin_snapshot(tally_ledger *l, tally_ledger *l2, bool *shared)
{
    static const char begin[] = "BEGIN; SELECT count(*) FROM sqlite_schema;";
    sqlite3 *fence = NULL;
    *shared = false;
    if (l2 && sqlite3_open_v2(l->path, &fence, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) ==
                  SQLITE_OK) {
        sqlite3_busy_timeout(fence, VERIFY_FENCE_WAIT_MS);
        *shared = sqlite3_exec(fence, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK;
    }
    int rc = sqlite3_exec(l->db, begin, NULL, NULL, NULL);
    if (rc == SQLITE_OK && *shared)
        *shared = sqlite3_exec(l2->db, begin, NULL, NULL, NULL) == SQLITE_OK;
    if (fence)
        sqlite3_exec(fence, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close_v2(fence);
    return rc == SQLITE_OK ? TALLY_OK : ledger_sqlite_err(l, rc);
}

/* TALLY_VERIFY_CONNECTIONS, for the tests: 1 keeps to one connection, 2
 * fails a verify that cannot have two; otherwise 0: two when it can. */
static int connections(void)
{
    const char *c = getenv("TALLY_VERIFY_CONNECTIONS");
    return c && (!strcmp(c, "1") || !strcmp(c, "2")) ? c[0] - '0' : 0;
}

/* A second connection to a plain ledger file for the integrity and chain
 * checks, which then run on another thread (NULL: none; a ledger
 * directory keeps to one connection). */
static tally_ledger *second_connection(const tally_ledger *l)
{
    tally_ledger *l2 = NULL;
    char why[256];
    if (l->shards || !l->path || !strcmp(l->path, ":memory:") || !l->path[0] ||
        connections() == 1 || tally_ledger_open(l->path, &l2, why, sizeof why) != TALLY_OK)
        return NULL;
    l2->no_balances = l->no_balances;
    return l2;
}

/* The failure that comes first in the checks' order: main's own, a bad
 * signature (it stands with check_documents and beats main's later
 * failures), or the other connection's. */
static tally_err first_failure(vrun *r, tally_err sig, char *why, size_t cap)
{
    if (sig != TALLY_OK && r[0].first > CHECK_DOCS) {
        r[0].first = CHECK_DOCS;
        r[0].err = sig;
    }
    if (r[1].first < r[0].first) {
        if (cap > 0)
            snprintf(why, cap, "%s", r[1].v.why);
        return r[1].err;
    }
    return r[0].err;
}

tally_err tally_ledger_verify(tally_ledger *l, const char *key_path, char *why, size_t cap)
{
    vrun r[2] = {{.v = {.l = l, .why = why, .cap = why ? cap : 0}}};
    key_path = key_path ? key_path : "";
    r[0].v.key_path = r[1].v.key_path = key_path;
    r[1].first = N_CHECKS;
    if (r[0].v.cap > 0)
        why[0] = '\0';
    /* One snapshot for every check (WAL readers do not block writers). */
    tally_ledger *l2 = second_connection(l);
    bool two = false;
    char was_mmap[24];
    snprintf(was_mmap, sizeof was_mmap, "%lld", (long long)mmap_size(l));
    set_mmap_size(l, VERIFY_MMAP_BYTES);
    set_mmap_size(l2, VERIFY_MMAP_BYTES);
    tally_err err = begin_snapshot(l, l2, &two);
    if (err == TALLY_OK && !two && connections() == 2) {
        sqlite3_exec(l->db, "COMMIT", NULL, NULL, NULL);
        snprintf(l->errmsg, sizeof l->errmsg, "no second connection at the same snapshot");
        err = TALLY_BUSY;
    }
    if (err != TALLY_OK) {
        tally_ledger_close(l2);
        set_mmap_size(l, was_mmap);
        return verify_fail(&r[0].v, err, "ledger database: %s", tally_ledger_errmsg(l));
    }
    char why2[512] = "";
    r[1].v = (vctx){.l = l2, .key_path = key_path, .why = why2, .cap = sizeof why2};
    for (size_t i = 0; i < N_CHECKS; i++) {
        r[1].mine[i] = two && (i == CHECK_INTEGRITY || i == CHECK_CHAIN);
        r[0].mine[i] = !r[1].mine[i];
    }
    tally_parallel_for(two ? 2 : 1, 2, run_one, r);
    err = first_failure(r, r[0].sig, why, r[0].v.cap);
    if (err == TALLY_OK)
        err = summary(&r[0].v);
    sqlite3_exec(l->db, "COMMIT", NULL, NULL, NULL);
    set_mmap_size(l, was_mmap);
    if (l2) {
        sqlite3_exec(l2->db, "COMMIT", NULL, NULL, NULL);
        tally_keyring_destroy(r[1].v.keys);
        tally_ledger_close(l2);
    }
    tally_keyring_destroy(r[0].v.keys);
    return err;
}
