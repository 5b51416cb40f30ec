/* The ledger's own hash chain (schemas/009_chain.sql, SPEC section 5): the
 * SQL functions its triggers use, registered on every connection the ledger
 * opens.
 *
 *   tally_canon(v1, v2, ...)  the canonical serialization of its arguments,
 *                             as a BLOB: for each value a type letter and
 *                             its bytes, lengths written out, so no two
 *                             different rows serialize alike:
 *                               NULL     "n;"
 *                               integer  "i" <decimal> ";"
 *                               text     "t" <byte length> ":" <bytes> ";"
 *                               blob     "b" <byte length> ":" <bytes> ";"
 *                             (reals never occur in Tally's tables; they
 *                             are refused).
 *   tally_sha256(x)           SHA-256 of the bytes of x, lower-case hex.
 *   tally_chain_add(t, k, c)  appends the chain entry of row k of table t
 *                             whose canonical form is c: row_hash =
 *                             SHA-256(c), hash = SHA-256(tally_canon(the
 *                             previous entry's hash or '', seq, t, k,
 *                             row_hash)). The triggers call it; it writes
 *                             with statements cached per connection, since
 *                             trigger bodies are compiled into every
 *                             statement that writes a covered table.
 *   tally_qty_sum(x, m)       aggregate: the exact sum of x * m (x an integer
 *                             or a decimal integer text, m an integer) as
 *                             decimal text, in 128 bits: usage quantities
 *                             (bytes x seconds) pass 64 bits.
 *
 * Usage is chained by batch totals, not row by row: each ingest commit
 * writes one usage_batches row per meter it added usage to (events and
 * quantity), and verify checks that the batches' totals add up to what the
 * usage tables hold (ledger_chain_count, ledger_chain_batch).
 *
 * Both are deterministic and innocuous, so they may run in triggers. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"
#include "tally/buf.h"
#include "tally/money.h"
#include "tally/sign.h"

/* The most bytes the canonical form of a value of n bytes takes: a type
 * letter, a length or an integer (at most 20 digits and a sign), ':' and
 * ';'. */
#define CANON_OVERHEAD 24

/* Appends the canonical form of a text or blob of n bytes at p. */
static size_t put_bytes(char *p, char type, const void *bytes, size_t n)
{
    size_t len = 0;
    p[len++] = type;
    len += tally_dec_i64(p + len, (int64_t)n);
    p[len++] = ':';
    if (n > 0)
        memcpy(p + len, bytes, n);
    len += n;
    p[len++] = ';';
    return len;
}

/* Where the values to serialize are: a SQL function's arguments, or n
 * columns of a statement's current row from first (read with the column
 * accessors, as SQLite asks for a row's values). */
typedef struct canon_src {
    sqlite3_value **argv;
    sqlite3_stmt *st;
    int first, n;
} canon_src;

static int src_type(const canon_src *s, int i)
{
    return s->st ? sqlite3_column_type(s->st, s->first + i) : sqlite3_value_type(s->argv[i]);
}

static int64_t src_int(const canon_src *s, int i)
{
    return s->st ? sqlite3_column_int64(s->st, s->first + i) : sqlite3_value_int64(s->argv[i]);
}

/* A text (as UTF-8) or blob's bytes and length. */
static const void *src_bytes(const canon_src *s, int i, bool text, size_t *n)
{
    const void *p;
    if (s->st)
        p = text ? (const void *)sqlite3_column_text(s->st, s->first + i)
                 : sqlite3_column_blob(s->st, s->first + i);
    else
        p = text ? (const void *)sqlite3_value_text(s->argv[i]) : sqlite3_value_blob(s->argv[i]);
    *n = (size_t)(s->st ? sqlite3_column_bytes(s->st, s->first + i)
                        : sqlite3_value_bytes(s->argv[i]));
    return p;
}

/* Where the canonical form is written: p holds len bytes of cap, grown by
 * grow (a realloc of SQLite's allocator or libc's) as the values come. */
typedef struct canon_out {
    char *p;
    size_t len, cap;
    void *(*grow)(void *p, size_t n);
} canon_out;

static bool reserve(canon_out *o, size_t n)
{
    if (o->cap - o->len >= n)
        return true;
    size_t cap = o->cap ? o->cap : 256;
    while (cap - o->len < n)
        cap *= 2;
    char *p = o->grow(o->p, cap);
    if (!p)
        return false;
    o->p = p;
    o->cap = cap;
    return true;
}

/* Appends the canonical form of the values to o, each value read once
 * (every chained row, and every row verify hashes, goes through here).
 * Returns TALLY_TAMPERED when one is a real (a value Tally never stores),
 * TALLY_NOMEM. */
static tally_err canon_put(canon_out *o, const canon_src *s)
{
    for (int i = 0; i < s->n; i++) {
        int t = src_type(s, i);
        size_t n = 0;
        const void *b = NULL;
        if (t == SQLITE_FLOAT)
            return TALLY_TAMPERED;
        if (t == SQLITE_TEXT || t == SQLITE_BLOB)
            b = src_bytes(s, i, t == SQLITE_TEXT, &n);
        if (!reserve(o, CANON_OVERHEAD + n))
            return TALLY_NOMEM;
        char *p = o->p + o->len;
        if (t == SQLITE_NULL) {
            memcpy(p, "n;", 2);
            o->len += 2;
        } else if (t == SQLITE_INTEGER) {
            size_t len = 0;
            p[len++] = 'i';
            len += tally_dec_i64(p + len, src_int(s, i));
            p[len++] = ';';
            o->len += len;
        } else {
            o->len += put_bytes(p, t == SQLITE_TEXT ? 't' : 'b', b, n);
        }
    }
    return TALLY_OK;
}

static void *sqlite_grow(void *p, size_t n)
{
    return sqlite3_realloc64(p, n);
}

static void *libc_grow(void *p, size_t n)
{
    return realloc(p, n);
}

/* The canonical form is written once, into memory SQLite takes over (no
 * copy). */
static void fn_canon(sqlite3_context *cx, int argc, sqlite3_value **argv)
{
    canon_src src = {.argv = argv, .n = argc};
    canon_out o = {.grow = sqlite_grow};
    tally_err e = reserve(&o, 1) ? canon_put(&o, &src) : TALLY_NOMEM;
    if (e == TALLY_TAMPERED)
        sqlite3_result_error(cx, "tally_canon: a value Tally never stores", -1);
    else if (e != TALLY_OK)
        sqlite3_result_error_nomem(cx);
    else
        sqlite3_result_blob64(cx, o.p, o.len, sqlite3_free);
    if (e != TALLY_OK)
        sqlite3_free(o.p);
}

tally_err ledger_canon_row(ledger_canon *c, const char *table, sqlite3_stmt *st, int first, int n)
{
    canon_src src = {.st = st, .first = first, .n = n};
    size_t nt = strlen(table);
    canon_out o = {.p = c->p, .len = c->len, .cap = c->cap, .grow = libc_grow};
    tally_err e = reserve(&o, nt + CANON_OVERHEAD) ? TALLY_OK : TALLY_NOMEM;
    if (e == TALLY_OK) {
        o.len += put_bytes(o.p + o.len, 't', table, nt);
        e = canon_put(&o, &src); /* TALLY_TAMPERED on a real: the SQL check names it */
    }
    c->p = o.p;
    c->len = o.len;
    c->cap = o.cap;
    return e;
}

static void fn_sha256(sqlite3_context *cx, int argc, sqlite3_value **argv)
{
    (void)argc;
    char hex[65];
    const void *p = sqlite3_value_blob(argv[0]);
    tally_sha256_hex(p ? p : "", (size_t)sqlite3_value_bytes(argv[0]), hex);
    sqlite3_result_text(cx, hex, 64, SQLITE_TRANSIENT);
}

/* A decimal integer text ("-12", "340282366920938463463374607431768211455"
 * is too large); 0 on success. */
static int parse_i128(const char *s, __int128 *out)
{
    bool neg = *s == '-';
    s += neg;
    if (!*s)
        return -1;
    __int128 v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || __builtin_mul_overflow(v, 10, &v) ||
            __builtin_add_overflow(v, *s - '0', &v))
            return -1;
    }
    *out = neg ? -v : v;
    return 0;
}

/* sqlite3_aggregate_context's memory is only 8-byte aligned, so the 128-bit
 * sum is kept as bytes and copied in and out. */
typedef struct qty_acc {
    unsigned char sum[sizeof(__int128)];
    bool bad;
} qty_acc;

static void fn_qty_step(sqlite3_context *cx, int argc, sqlite3_value **argv)
{
    (void)argc;
    qty_acc *a = sqlite3_aggregate_context(cx, sizeof *a);
    if (!a)
        return;
    __int128 x = 0, p;
    if (sqlite3_value_type(argv[0]) == SQLITE_TEXT)
        a->bad |= parse_i128((const char *)sqlite3_value_text(argv[0]), &x) != 0;
    else
        x = sqlite3_value_int64(argv[0]);
    __int128 sum;
    memcpy(&sum, a->sum, sizeof sum);
    a->bad |= __builtin_mul_overflow(x, (__int128)sqlite3_value_int64(argv[1]), &p) ||
              __builtin_add_overflow(sum, p, &sum);
    memcpy(a->sum, &sum, sizeof sum);
}

static void fn_qty_final(sqlite3_context *cx)
{
    qty_acc *a = sqlite3_aggregate_context(cx, 0);
    char buf[48];
    if (a && a->bad) {
        sqlite3_result_error(cx, "tally_qty_sum: overflow or malformed quantity", -1);
        return;
    }
    __int128 sum = 0;
    if (a)
        memcpy(&sum, a->sum, sizeof sum);
    if (tally_i128_format(sum, buf, sizeof buf) != TALLY_OK) {
        sqlite3_result_error(cx, "tally_qty_sum: cannot format", -1);
        return;
    }
    sqlite3_result_text(cx, buf, -1, SQLITE_TRANSIENT);
}

struct chain_conn {
    sqlite3 *db;
    sqlite3_stmt *last, *ins;
    ledger_canon group; /* a group's canonical form (ledger_chain_group_add) */
};

static void chain_conn_free(void *p)
{
    struct chain_conn *c = p;
    if (!c)
        return;
    sqlite3_finalize(c->last);
    sqlite3_finalize(c->ins);
    free(c->group.p);
    free(c);
}

void ledger_chain_close(tally_ledger *l)
{
    if (!l->chain)
        return;
    sqlite3_finalize(l->chain->last);
    sqlite3_finalize(l->chain->ins);
    l->chain->last = l->chain->ins = NULL;
}

/* The last entry's seq and hash (0 and "" for an empty chain). */
static int chain_last(struct chain_conn *c, int64_t *seq, char hash[65])
{
    int rc = SQLITE_OK;
    if (!c->last)
        rc = sqlite3_prepare_v3(c->db,
                                "SELECT seq, hash FROM ledger_chain ORDER BY seq DESC LIMIT 1", -1,
                                SQLITE_PREPARE_PERSISTENT, &c->last, NULL);
    if (rc != SQLITE_OK)
        return rc;
    *seq = 0;
    hash[0] = '\0';
    rc = sqlite3_step(c->last);
    if (rc == SQLITE_ROW) {
        *seq = sqlite3_column_int64(c->last, 0);
        const unsigned char *h = sqlite3_column_text(c->last, 1);
        snprintf(hash, 65, "%s", h ? (const char *)h : "");
        rc = SQLITE_DONE;
    }
    sqlite3_reset(c->last);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

tally_err ledger_chain_link(const char *prev, size_t np, int64_t seq, const char *tbl, size_t nt,
                            int64_t key, const char *row_hash, size_t nr, char hash[65])
{
    char stack[512], *b = stack;
    size_t cap = np + nt + nr + 5 * CANON_OVERHEAD, len = 0;
    if (cap > sizeof stack && !(b = malloc(cap)))
        return TALLY_NOMEM;
    len += put_bytes(b + len, 't', prev, np);
    b[len++] = 'i';
    len += tally_dec_i64(b + len, seq);
    b[len++] = ';';
    len += put_bytes(b + len, 't', tbl, nt);
    b[len++] = 'i';
    len += tally_dec_i64(b + len, key);
    b[len++] = ';';
    len += put_bytes(b + len, 't', row_hash, nr);
    tally_sha256_hex(b, len, hash);
    if (b != stack)
        free(b);
    return TALLY_OK;
}

static int chain_insert(struct chain_conn *c, int64_t seq, const char *tbl, int64_t key,
                        const char *row_hash, const char *hash)
{
    int rc = SQLITE_OK;
    if (!c->ins)
        rc = sqlite3_prepare_v3(c->db,
                                "INSERT INTO ledger_chain(seq, tbl, row_key, row_hash, hash) "
                                "VALUES (?1, ?2, ?3, ?4, ?5)",
                                -1, SQLITE_PREPARE_PERSISTENT, &c->ins, NULL);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_bind_int64(c->ins, 1, seq);
    sqlite3_bind_text(c->ins, 2, tbl, -1, SQLITE_STATIC);
    sqlite3_bind_int64(c->ins, 3, key);
    sqlite3_bind_text(c->ins, 4, row_hash, 64, SQLITE_STATIC);
    sqlite3_bind_text(c->ins, 5, hash, 64, SQLITE_STATIC);
    rc = sqlite3_step(c->ins);
    sqlite3_reset(c->ins);
    sqlite3_clear_bindings(c->ins);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* Appends the entry of row key of table tbl (nt bytes), whose canonical
 * form hashed to row_hash, after the chain's last entry. */
static int chain_append(struct chain_conn *c, const char *tbl, size_t nt, int64_t key,
                        const char row_hash[65])
{
    int64_t seq;
    char prev[65], hash[65];
    int rc = chain_last(c, &seq, prev);
    if (rc == SQLITE_OK && ledger_chain_link(prev, strlen(prev), seq + 1, tbl, nt, key, row_hash,
                                             64, hash) != TALLY_OK)
        rc = SQLITE_NOMEM;
    if (rc == SQLITE_OK)
        rc = chain_insert(c, seq + 1, tbl, key, row_hash, hash);
    return rc;
}

static void fn_chain_add(sqlite3_context *cx, int argc, sqlite3_value **argv)
{
    (void)argc;
    struct chain_conn *c = sqlite3_user_data(cx);
    const unsigned char *tbl = sqlite3_value_text(argv[0]);
    const void *canon = sqlite3_value_blob(argv[2]);
    if (!tbl || !canon || sqlite3_value_type(argv[1]) != SQLITE_INTEGER) {
        sqlite3_result_error(cx, "tally_chain_add: bad arguments", -1);
        return;
    }
    char row_hash[65];
    tally_sha256_hex(canon, (size_t)sqlite3_value_bytes(argv[2]), row_hash);
    int rc = chain_append(c, (const char *)tbl, (size_t)sqlite3_value_bytes(argv[0]),
                          sqlite3_value_int64(argv[1]), row_hash);
    if (rc != SQLITE_OK)
        sqlite3_result_error_code(cx, rc);
    else
        sqlite3_result_null(cx);
}

/* A document's rows are chained as two groups: the invoice or credit note
 * with its lines and credits, and its entry with its postings. A kid's sql
 * reads its rows in the order verify_chain.c reads them. */
const ledger_chain_group ledger_chain_groups[LEDGER_GROUP_COUNT] = {
    [LEDGER_GROUP_INVOICE] =
        {"invoice_group",
         "invoices",
         CHAIN_COLS_INVOICES,
         "SELECT " CHAIN_COLS_INVOICES " FROM invoices WHERE rowid = ?1",
         "the row, its lines or its credits",
         {{"invoice_lines", CHAIN_COLS_INVOICE_LINES, "invoice_seq", "line_no",
           "SELECT " CHAIN_COLS_INVOICE_LINES " FROM invoice_lines WHERE invoice_seq = ?1 "
           "ORDER BY line_no"},
          {"invoice_credits", CHAIN_COLS_INVOICE_CREDITS, "invoice_seq", "rowid",
           "SELECT " CHAIN_COLS_INVOICE_CREDITS " FROM invoice_credits WHERE invoice_seq = ?1 "
           "ORDER BY rowid"}},
         2},
    [LEDGER_GROUP_ENTRY] = {"entry_group",
                            "entries",
                            CHAIN_COLS_ENTRIES,
                            "SELECT " CHAIN_COLS_ENTRIES " FROM entries WHERE rowid = ?1",
                            "the row or its postings",
                            {{"postings", CHAIN_COLS_POSTINGS, "entry_id", "rowid",
                              "SELECT " CHAIN_COLS_POSTINGS " FROM postings WHERE rowid >= ?2 "
                              "AND entry_id = ?1 ORDER BY rowid"}},
                            1},
};

/* Appends the canonical form of each row sql (a cached statement, bound
 * to key and from) reads, as rows of table. */
static tally_err canon_rows(tally_ledger *l, ledger_canon *c, const char *table, const char *sql,
                            int64_t key, int64_t from)
{
    sqlite3_stmt *st;
    tally_err e = ledger_cached(l, sql, &st);
    if (e != TALLY_OK)
        return e;
    sqlite3_bind_int64(st, 1, key);
    if (sqlite3_bind_parameter_count(st) > 1)
        sqlite3_bind_int64(st, 2, from);
    int rc;
    while (e == TALLY_OK && (rc = sqlite3_step(st)) == SQLITE_ROW)
        e = ledger_canon_row(c, table, st, 0, sqlite3_column_count(st));
    if (e != TALLY_OK) {
        (void)ledger_cached_done(l, st, SQLITE_DONE);
        return e;
    }
    return ledger_cached_done(l, st, rc);
}

tally_err ledger_chain_group_add(tally_ledger *l, int g, int64_t key, int64_t kid_from)
{
    const ledger_chain_group *gr = &ledger_chain_groups[g];
    struct chain_conn *c = l->chain;
    c->group.len = 0;
    tally_err e = canon_rows(l, &c->group, gr->table, gr->sql, key, 0);
    if (e == TALLY_OK && c->group.len == 0) {
        snprintf(l->errmsg, sizeof l->errmsg, "%s %lld: no row to chain", gr->table,
                 (long long)key);
        e = TALLY_INTERNAL;
    }
    for (size_t k = 0; e == TALLY_OK && k < gr->n_kids; k++)
        e = canon_rows(l, &c->group, gr->kids[k].table, gr->kids[k].sql, key, kid_from);
    if (e == TALLY_TAMPERED) {
        snprintf(l->errmsg, sizeof l->errmsg, "%s %lld: a value Tally never stores", gr->table,
                 (long long)key);
        return e;
    }
    if (e != TALLY_OK)
        return e;
    char row_hash[65];
    tally_sha256_hex(c->group.p, c->group.len, row_hash);
    int rc = chain_append(c, gr->name, strlen(gr->name), key, row_hash);
    return rc == SQLITE_OK ? TALLY_OK : ledger_sqlite_err(l, rc);
}

tally_err ledger_chain_register(tally_ledger *l)
{
    sqlite3 *db = l->db;
    struct chain_conn *c = calloc(1, sizeof *c);
    if (!c)
        return TALLY_NOMEM;
    c->db = db;
    /* Marked innocuous so the schema's triggers may call it with
     * trusted_schema off: its one effect is to append to the chain, which a
     * schema planted by someone who can write the file could do anyway. */
    int rc = sqlite3_create_function_v2(db, "tally_chain_add", 3, SQLITE_UTF8 | SQLITE_INNOCUOUS, c,
                                        fn_chain_add, NULL, NULL, chain_conn_free);
    if (rc != SQLITE_OK)
        return TALLY_DB; /* SQLite called chain_conn_free */
    l->chain = c;
    int flags = SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS;
    rc = sqlite3_create_function(db, "tally_canon", -1, flags, NULL, fn_canon, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_create_function(db, "tally_sha256", 1, flags, NULL, fn_sha256, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_create_function(db, "tally_qty_sum", 2, flags, NULL, NULL, fn_qty_step,
                                     fn_qty_final);
    return rc == SQLITE_OK ? TALLY_OK : TALLY_DB;
}

void ledger_chain_count(tally_batch *b, const tally_event *ev)
{
    /* Validated events are bounded (SPEC section 1): weight * seconds fits. */
    bool held = ev->meter == TALLY_METER_ACCELERATOR || ev->meter == TALLY_METER_STORAGE;
    __int128 q = (__int128)ev->weight * (held ? ev->seconds : 1);
    b->chain_events[ev->meter]++;
    b->chain_qty[ev->meter] += q;
}

tally_err ledger_chain_batch(tally_batch *b)
{
    int64_t seq = 0;
    sqlite3_stmt *st = NULL;
    tally_err e = TALLY_OK;
    for (int m = 0; e == TALLY_OK && m < TALLY_METER_COUNT; m++) {
        if (b->chain_events[m] == 0)
            continue;
        char q[48];
        if (!st)
            e = batch_seq(b, &seq);
        if (e == TALLY_OK && !st)
            e = ledger_prepare(b->l,
                               "INSERT INTO usage_batches(seq, meter, events, qty, created_at) "
                               "VALUES (?1, ?2, ?3, ?4, ?5)",
                               &st);
        if (e == TALLY_OK)
            e = tally_i128_format(b->chain_qty[m], q, sizeof q);
        if (e != TALLY_OK)
            break;
        sqlite3_bind_int64(st, 1, seq);
        sqlite3_bind_int(st, 2, m);
        sqlite3_bind_int64(st, 3, b->chain_events[m]);
        sqlite3_bind_text(st, 4, q, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 5, b->now_s);
        e = batch_step(b, st);
    }
    sqlite3_finalize(st);
    memset(b->chain_events, 0, sizeof b->chain_events);
    memset(b->chain_qty, 0, sizeof b->chain_qty);
    return e;
}
