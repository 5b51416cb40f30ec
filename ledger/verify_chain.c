/* tally verify, the chain's part (schemas/009_chain.sql): every entry links
 * to the one before; each covered row still hashes to what its latest
 * entry recorded; no covered row is missing from the chain; and each
 * signed head the ledger holds (`ledger.head` outbox events) is on the
 * chain with a valid signature. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"
#include "tally/sign.h"

/* A covered table: its columns in the order the migration hashes them, how
 * a row is named, and how a row that is gone is named; for a table of a
 * group (schemas/017_chain_groups.sql), the group and the column naming
 * the group's parent (rowid for the parent's own table). */
typedef struct chain_table {
    const char *name, *cols, *desc, *gone;
    const ledger_chain_group *group; /* NULL: none */
    const char *key;
} chain_table;

static const chain_table tables[] = {
    {"usage_batches", "seq, meter, events, qty, created_at",
     "'usage batch ' || t.seq || ' (meter ' || t.meter || ')'", "usage batch row", NULL, NULL},
    {"accounts", "id, currency, timezone, name, created_at", "'account ' || t.id", "account", NULL,
     NULL},
    {"ratecards", "id, currency, effective_from, body, loaded_at, entered_at",
     "'rate card ' || t.id", "rate card", NULL, NULL},
    {"spot_prices", "id, sku, from_s, price_nano, origin, created_at, entered_at",
     "'spot price ' || t.id || ' (' || t.sku || ')'", "spot price", NULL, NULL},
    {"commitments", "id, account, sku, cards, from_s, to_s, created_at", "'commitment ' || t.id",
     "commitment", NULL, NULL},
    {"grants",
     "id, account, kind, amount_minor, currency, priority, effective_s, expires_s, scope, "
     "created_at",
     "'grant ' || t.id", "grant", NULL, NULL},
    {"entries", CHAIN_COLS_ENTRIES, "'entry ' || t.id || ' (' || t.kind || ' ' || t.ref || ')'",
     "entry", &ledger_chain_groups[LEDGER_GROUP_ENTRY], "rowid"},
    {"postings", CHAIN_COLS_POSTINGS,
     "'posting ' || t.id || ' (entry ' || t.entry_id || ', ' || t.ledger_acct || ')'", "posting",
     &ledger_chain_groups[LEDGER_GROUP_ENTRY], "entry_id"},
    {"invoices", CHAIN_COLS_INVOICES,
     "CASE t.doc_type WHEN 'invoice' THEN 'invoice ' ELSE 'credit note ' END || t.id",
     "invoice or credit note with seq", &ledger_chain_groups[LEDGER_GROUP_INVOICE], "rowid"},
    {"invoice_lines", CHAIN_COLS_INVOICE_LINES,
     "'invoice line ' || t.invoice_seq || '/' || t.line_no", "invoice line with rowid",
     &ledger_chain_groups[LEDGER_GROUP_INVOICE], "invoice_seq"},
    {"invoice_credits", CHAIN_COLS_INVOICE_CREDITS,
     "'invoice credit ' || t.invoice_seq || '/' || t.grant_id || '/' || t.line_no",
     "invoice credit with rowid", &ledger_chain_groups[LEDGER_GROUP_INVOICE], "invoice_seq"},
    {"outbox", "id, event_id, type, subject, payload, created_at", "'outbox event ' || t.event_id",
     "outbox row", NULL, NULL},
    {"account_limits", "account, low_balance_minor, stop_at_minor, release_after_s, updated_at",
     "'limits of account ' || t.account", "account limits row", NULL, NULL},
    {"offset_gaps",
     "id, topic, partition, from_offset, to_offset, kind, stored_next, log_start, log_end, "
     "created_at, state",
     "'offset gap ' || t.id || ' (' || t.topic || '/' || t.partition || ')'", "offset gap", NULL,
     NULL},
};

/* "t.a, t.b, ..." for "a, b, ...". */
static tally_err prefixed(tally_buf *b, const char *cols)
{
    tally_err e = tally_buf_puts(b, "t.");
    for (const char *c = cols; e == TALLY_OK && *c; c++)
        e = *c == ' ' ? tally_buf_puts(b, "t.") : tally_buf_append(b, c, 1);
    return e;
}

/* Each row's latest chain entry (alias c) with the row (alias t), or none
 * where the row is gone; table name twice. */
#define LATEST_FROM                                                                                \
    " FROM ledger_chain c LEFT JOIN %s t ON t.rowid = c.row_key WHERE c.tbl = '%s' AND c.seq = "   \
    "(SELECT max(c2.seq) FROM ledger_chain c2 WHERE c2.tbl = c.tbl AND c2.row_key = c.row_key)"

/* A row whose hash no longer matches its latest chain entry, or is gone. */
static tally_err changed_sql(const chain_table *t, tally_buf *b)
{
    tally_err e = tally_buf_printf(
        b,
        "SELECT CASE WHEN t.rowid IS NULL THEN '%s ' || c.row_key || ': deleted (chain entry ' "
        "|| c.seq || ' recorded it)' ELSE %s || ': changed since chain entry ' || c.seq || "
        "' recorded it' END" LATEST_FROM " AND (t.rowid IS NULL OR "
        "tally_sha256(tally_canon('%s', ",
        t->gone, t->desc, t->name, t->name, t->name);
    if (e == TALLY_OK)
        e = prefixed(b, t->cols);
    if (e == TALLY_OK)
        e = tally_buf_puts(b, ")) != c.row_hash) ORDER BY c.seq LIMIT 1");
    return e;
}

/* A covered row the chain never recorded, neither by an entry of its own
 * nor by its parent's group: written around Tally. */
static tally_err unchained_sql(const chain_table *t, tally_buf *b)
{
    tally_err e = tally_buf_printf(b,
                                   "SELECT %s || ': not in the ledger chain (written around "
                                   "Tally)' FROM %s t WHERE NOT EXISTS (SELECT 1 FROM "
                                   "ledger_chain c WHERE c.tbl = '%s' AND c.row_key = t.rowid)",
                                   t->desc, t->name, t->name);
    if (e == TALLY_OK && t->group)
        e = tally_buf_printf(b,
                             " AND NOT EXISTS (SELECT 1 FROM ledger_chain g WHERE g.tbl = '%s' "
                             "AND g.row_key = t.%s)",
                             t->group->name, t->key);
    return e ? e : tally_buf_puts(b, " ORDER BY t.rowid LIMIT 1");
}

#define N_TABLES (sizeof tables / sizeof *tables)
/* The entries kept from the links' pass: the covered tables', then the
 * groups'. */
#define N_ENTS (N_TABLES + LEDGER_GROUP_COUNT)

/* One chain entry of a covered table, kept from the links' pass (which
 * reads the whole chain anyway) for the rows' pass. */
typedef struct chain_ent {
    int64_t row_key, seq;
    unsigned char row_hash[32];
    bool hex_ok; /* row_hash was 64 lower-case hex digits, as the triggers write it */
} chain_ent;

/* A covered table's entries, in seq order as read, then sorted by row. */
typedef struct chain_ents {
    chain_ent *e;
    size_t n, cap;
    bool sorted; /* by (row_key, seq) */
} chain_ents;

static bool name_is(const char *name, const char *tbl, size_t nt)
{
    return strlen(name) == nt && memcmp(name, tbl, nt) == 0;
}

/* Where the entries of chain table tbl are kept in the links' pass, or -1. */
static int table_index(const char *tbl, size_t nt)
{
    for (size_t i = 0; i < N_TABLES; i++)
        if (name_is(tables[i].name, tbl, nt))
            return (int)i;
    for (size_t g = 0; g < LEDGER_GROUP_COUNT; g++)
        if (name_is(ledger_chain_groups[g].name, tbl, nt))
            return (int)(N_TABLES + g);
    return -1;
}

static const chain_ents *group_ents(const chain_ents *ents, const ledger_chain_group *g)
{
    return &ents[N_TABLES + (size_t)(g - ledger_chain_groups)];
}

/* Each byte's value as a lower-case hex digit, plus one (0: not one). */
static const unsigned char hex1[256] = {
    ['0'] = 1, ['1'] = 2,  ['2'] = 3,  ['3'] = 4,  ['4'] = 5,  ['5'] = 6,  ['6'] = 7,  ['7'] = 8,
    ['8'] = 9, ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16,
};

/* 64 lower-case hex digits into 32 bytes; false if s is not that. */
static bool unhex32(const char *s, size_t n, unsigned char out[32])
{
    if (n != 64)
        return false;
    unsigned bad = 0;
    for (size_t i = 0; i < 32; i++) {
        unsigned hi = hex1[(unsigned char)s[2 * i]], lo = hex1[(unsigned char)s[2 * i + 1]];
        bad |= (hi == 0) | (lo == 0);
        out[i] = (unsigned char)((hi - 1) << 4 | ((lo - 1) & 15));
    }
    return !bad;
}

static tally_err keep_entry(chain_ents *t, int64_t seq, int64_t key, const char *row_hash,
                            size_t nr)
{
    void *arr = t->e;
    tally_err err = ledger_grow(&arr, t->n, &t->cap, sizeof *t->e, 1024);
    t->e = arr;
    if (err)
        return err;
    chain_ent *e = &t->e[t->n];
    t->sorted = t->sorted && (t->n == 0 || e[-1].row_key <= key); /* seq grows as read */
    e->row_key = key;
    e->seq = seq;
    e->hex_ok = unhex32(row_hash, nr, e->row_hash);
    t->n++;
    return TALLY_OK;
}

static int by_row(const void *a, const void *b)
{
    const chain_ent *x = a, *y = b;
    if (x->row_key != y->row_key)
        return x->row_key < y->row_key ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void sort_ents(chain_ents *ents)
{
    if (!ents->sorted)
        qsort(ents->e, ents->n, sizeof *ents->e, by_row);
    ents->sorted = true;
}

static int key_cmp(const void *key, const void *ent)
{
    int64_t k = *(const int64_t *)key, r = ((const chain_ent *)ent)->row_key;
    return (k > r) - (k < r);
}

/* Whether sorted entries hold one for row key. */
static bool has_entry(const chain_ents *ents, int64_t key)
{
    return ents->n && bsearch(&key, ents->e, ents->n, sizeof *ents->e, key_cmp) != NULL;
}

/* A query the fast pass said must name a row (TALLY_INTERNAL if it does
 * not: the two would disagree). */
static tally_err must_name(vctx *v, const char *sql, const char *table)
{
    tally_err e = verify_sql(v, sql);
    return e ? e
             : verify_fail(v, TALLY_INTERNAL, "verify: the chain's checks of %s disagree", table);
}

/* Whether the row of st (rowid in column 0, the table's columns after it)
 * hashes to what its latest entry recorded. */
/* Whether the canonical form c hashes to what entry ent recorded. */
static bool hashes_as(const ledger_canon *c, const chain_ent *ent)
{
    char hex[65];
    unsigned char raw[32];
    tally_sha256_hex(c->p, c->len, hex);
    return ent->hex_ok && unhex32(hex, 64, raw) && memcmp(raw, ent->row_hash, sizeof raw) == 0;
}

static tally_err row_matches(const chain_table *t, sqlite3_stmt *st, int ncols,
                             const chain_ent *latest, char **buf, size_t *buf_cap, bool *same)
{
    ledger_canon c = {.p = *buf, .cap = *buf_cap};
    tally_err e = ledger_canon_row(&c, t->name, st, 1, ncols);
    *buf = c.p;
    *buf_cap = c.cap;
    if (e == TALLY_NOMEM)
        return e;
    *same = e == TALLY_OK && hashes_as(&c, latest);
    return TALLY_OK;
}

/* The table's rows in rowid order against its entries sorted by row: a
 * row's latest entry is the last of its run. *changed: a latest entry's row
 * is gone or hashes otherwise (the pass stops there); *unchained: a row has
 * no entry at all. */
static tally_err rows_pass(vctx *v, const chain_table *t, chain_ents *all, tally_buf *sql,
                           char **buf, size_t *buf_cap, bool *changed, bool *unchained)
{
    *changed = *unchained = false;
    chain_ents *ents = &all[t - tables];
    sort_ents(ents);
    int ncols = 1;
    for (const char *c = t->cols; *c; c++)
        ncols += *c == ',';
    tally_buf_reset(sql);
    tally_err e = tally_buf_puts(sql, "SELECT rowid, ");
    if (!e)
        e = tally_buf_puts(sql, t->cols);
    if (!e && t->group) /* the group's parent after the columns */
        e = tally_buf_printf(sql, ", %s", t->key);
    if (!e)
        e = tally_buf_printf(sql, " FROM %s ORDER BY rowid", t->name);
    if (e)
        return verify_fail(v, e, "out of memory");
    sqlite3_stmt *st = NULL;
    if ((e = ledger_prepare(v->l, sql->data, &st)))
        return verify_fail(v, e, "ledger database: %s", tally_ledger_errmsg(v->l));
    size_t i = 0;
    int rc = SQLITE_DONE;
    while (!e && !*changed && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t rowid = sqlite3_column_int64(st, 0);
        if (i < ents->n && ents->e[i].row_key < rowid) { /* its row is gone */
            *changed = true;
            break;
        }
        if (i == ents->n || ents->e[i].row_key != rowid) {
            /* no entry of its own: its parent's group must cover it */
            if (!t->group ||
                !has_entry(group_ents(all, t->group), sqlite3_column_int64(st, ncols + 1)))
                *unchained = true;
            continue;
        }
        while (i + 1 < ents->n && ents->e[i + 1].row_key == rowid)
            i++;
        bool same;
        e = row_matches(t, st, ncols, &ents->e[i++], buf, buf_cap, &same);
        *changed = !e && !same;
    }
    if (!e && !*changed && rc == SQLITE_DONE && i < ents->n) /* rows past the last are gone */
        *changed = true;
    tally_err db = !e && !*changed && rc != SQLITE_DONE ? ledger_sqlite_err(v->l, rc) : TALLY_OK;
    sqlite3_finalize(st);
    if (e)
        return verify_fail(v, e, "out of memory");
    if (db)
        return verify_fail(v, db, "ledger database: %s", tally_ledger_errmsg(v->l));
    return TALLY_OK;
}

/* Each covered row against its latest chain entry, then the rows the chain
 * never recorded; only when the pass in C finds either does the query run
 * that names the first (so the message is the SQL's, in its order). */
static tally_err check_table(vctx *v, const chain_table *t, chain_ents *ents, tally_buf *sql,
                             char **buf, size_t *buf_cap) /* ents: all of them */
{
    bool changed, unchained;
    tally_err e = rows_pass(v, t, ents, sql, buf, buf_cap, &changed, &unchained);
    if (!e && (changed || unchained)) {
        tally_buf_reset(sql);
        e = changed ? changed_sql(t, sql) : unchained_sql(t, sql);
        return e ? verify_fail(v, e, "out of memory") : must_name(v, sql->data, t->name);
    }
    return e;
}

/* ---- Groups (schemas/017_chain_groups.sql) ---- */

/* A group's table read in the parents' order: the parent's rowid (or the
 * kid's key) in column 0, then the columns the canonical form takes. */
typedef struct group_cur {
    sqlite3_stmt *st;
    int rc, ncols;
} group_cur;

static tally_err cur_open(vctx *v, tally_buf *sql, group_cur *c, const char *key, const char *cols,
                          const char *table, const char *order)
{
    tally_buf_reset(sql);
    tally_err e = tally_buf_printf(sql, "SELECT %s, %s FROM %s ORDER BY %s%s%s", key, cols, table,
                                   key, order ? ", " : "", order ? order : "");
    if (e)
        return verify_fail(v, e, "out of memory");
    if ((e = ledger_prepare(v->l, sql->data, &c->st)))
        return verify_fail(v, e, "ledger database: %s", tally_ledger_errmsg(v->l));
    c->ncols = sqlite3_column_count(c->st) - 1;
    c->rc = sqlite3_step(c->st);
    return TALLY_OK;
}

/* Steps c past its rows of parents before key. */
static void cur_seek(group_cur *c, int64_t key)
{
    while (c->rc == SQLITE_ROW && sqlite3_column_int64(c->st, 0) < key)
        c->rc = sqlite3_step(c->st);
}

static bool cur_at(const group_cur *c, int64_t key)
{
    return c->rc == SQLITE_ROW && sqlite3_column_int64(c->st, 0) == key;
}

static const chain_table *table_named(const char *name)
{
    for (size_t i = 0; i < N_TABLES; i++)
        if (strcmp(tables[i].name, name) == 0)
            return &tables[i];
    return NULL;
}

/* Names the parent of a group entry that no longer hashes as recorded. */
static tally_err group_changed(vctx *v, const ledger_chain_group *g, tally_buf *sql, int64_t key,
                               int64_t seq)
{
    const chain_table *t = table_named(g->table);
    sqlite3_stmt *st = NULL;
    tally_buf_reset(sql);
    tally_err e = tally_buf_printf(sql, "SELECT %s FROM %s t WHERE t.rowid = ?1", t->desc, t->name);
    if (!e)
        e = ledger_prepare(v->l, sql->data, &st);
    if (e) {
        sqlite3_finalize(st);
        return verify_fail(v, e, "ledger database: %s", tally_ledger_errmsg(v->l));
    }
    sqlite3_bind_int64(st, 1, key);
    const unsigned char *name = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_text(st, 0) : NULL;
    e = verify_fail(v, TALLY_TAMPERED, "%s: changed since chain entry %lld recorded it (%s)",
                    name ? (const char *)name : t->name, (long long)seq, g->what);
    sqlite3_finalize(st);
    return e;
}

/* Whether the group of the parent at cursor 0 and its kids' rows at the
 * other cursors hashes to what entry ent recorded; the kids' cursors step
 * past the parent's rows. */
static tally_err group_matches(const ledger_chain_group *g, group_cur *cur, const chain_ent *ent,
                               ledger_canon *canon, bool *same)
{
    canon->len = 0;
    tally_err e = ledger_canon_row(canon, g->table, cur[0].st, 1, cur[0].ncols);
    for (size_t k = 0; k < g->n_kids; k++) {
        group_cur *c = &cur[1 + k];
        cur_seek(c, ent->row_key);
        for (; cur_at(c, ent->row_key); c->rc = sqlite3_step(c->st))
            if (e == TALLY_OK)
                e = ledger_canon_row(canon, g->kids[k].table, c->st, 1, c->ncols);
    }
    if (e == TALLY_NOMEM)
        return e;
    *same = e == TALLY_OK && hashes_as(canon, ent);
    return TALLY_OK;
}

/* Each parent's latest group entry against the parent and its kids as
 * they are now: one pass over each table in the parents' order. */
static tally_err check_group(vctx *v, const ledger_chain_group *g, const chain_ents *ents,
                             tally_buf *sql, ledger_canon *canon)
{
    group_cur cur[3] = {{0}};
    tally_err e = cur_open(v, sql, &cur[0], "rowid", g->cols, g->table, NULL);
    for (size_t k = 0; !e && k < g->n_kids; k++)
        e = cur_open(v, sql, &cur[1 + k], g->kids[k].key, g->kids[k].cols, g->kids[k].table,
                     g->kids[k].order);
    for (size_t i = 0; !e && i < ents->n; i++) {
        const chain_ent *ent = &ents->e[i];
        if (i + 1 < ents->n && ents->e[i + 1].row_key == ent->row_key)
            continue; /* not the parent's latest */
        cur_seek(&cur[0], ent->row_key);
        bool same = false;
        if (!cur_at(&cur[0], ent->row_key)) { /* gone, or a read error (reported below) */
            if (cur[0].rc == SQLITE_ROW || cur[0].rc == SQLITE_DONE)
                e = verify_fail(
                    v, TALLY_TAMPERED, "%s %lld: deleted (chain entry %lld recorded it)",
                    table_named(g->table)->gone, (long long)ent->row_key, (long long)ent->seq);
            break;
        }
        if ((e = group_matches(g, cur, ent, canon, &same)))
            e = verify_fail(v, e, "out of memory");
        else if (!same)
            e = group_changed(v, g, sql, ent->row_key, ent->seq);
    }
    for (size_t k = 0; k <= g->n_kids; k++) {
        if (!e && cur[k].rc != SQLITE_ROW && cur[k].rc != SQLITE_DONE)
            e = verify_fail(v, ledger_sqlite_err(v->l, cur[k].rc), "ledger database: %s",
                            tally_ledger_errmsg(v->l));
        sqlite3_finalize(cur[k].st);
    }
    return e;
}

/* Every entry links to the one before: seq counts 1, 2, 3... and hash =
 * SHA-256(tally_canon(the previous entry's hash or '', seq, tbl, row_key,
 * row_hash)), computed here rather than in SQL (one pass in seq order; a
 * window query sorted the whole chain first). The first entry that does
 * not follow is named. The covered tables' entries are kept in ents for
 * the rows' pass. */
static tally_err link_fail(vctx *v, sqlite3_stmt *st, int64_t pseq, int64_t seq)
{
    if (seq != pseq + 1)
        return verify_fail(v, TALLY_TAMPERED,
                           "ledger chain entry %lld: entries %lld to %lld are missing",
                           (long long)seq, (long long)pseq + 1, (long long)seq - 1);
    const unsigned char *tbl = sqlite3_column_text(st, 1);
    return verify_fail(v, TALLY_TAMPERED,
                       "ledger chain entry %lld (%s row %lld): its hash does not follow from the "
                       "entry before (the chain was rewritten)",
                       (long long)seq, tbl ? (const char *)tbl : "",
                       (long long)sqlite3_column_int64(st, 2));
}

static tally_err check_links(vctx *v, chain_ents *ents)
{
    sqlite3_stmt *st;
    tally_err err = ledger_prepare(
        v->l, "SELECT seq, tbl, row_key, row_hash, hash FROM ledger_chain ORDER BY seq", &st);
    if (err != TALLY_OK)
        return verify_fail(v, err, "ledger database: %s", tally_ledger_errmsg(v->l));
    char prev[65] = "", want[65];
    int64_t pseq = 0;
    int rc = SQLITE_DONE;
    while (err == TALLY_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t seq = sqlite3_column_int64(st, 0);
        const char *tbl = (const char *)sqlite3_column_text(st, 1);
        size_t nt = (size_t)sqlite3_column_bytes(st, 1);
        const char *row_hash = (const char *)sqlite3_column_text(st, 3);
        size_t nr = (size_t)sqlite3_column_bytes(st, 3);
        const char *hash = (const char *)sqlite3_column_text(st, 4);
        size_t nh = (size_t)sqlite3_column_bytes(st, 4);
        if (!tbl || !row_hash || !hash) {
            err = verify_fail(v, TALLY_NOMEM, "out of memory");
            break;
        }
        err = ledger_chain_link(prev, strlen(prev), seq, tbl, nt, sqlite3_column_int64(st, 2),
                                row_hash, nr, want);
        int ti = err == TALLY_OK ? table_index(tbl, nt) : -1;
        if (ti >= 0)
            err = keep_entry(&ents[ti], seq, sqlite3_column_int64(st, 2), row_hash, nr);
        if (err != TALLY_OK)
            err = verify_fail(v, err, "out of memory");
        else if (seq != pseq + 1 || nh != 64 || memcmp(want, hash, 64) != 0)
            err = link_fail(v, st, pseq, seq);
        memcpy(prev, want, sizeof prev); /* equal to hash when the entry follows */
        pseq = seq;
    }
    if (err == TALLY_OK && rc != SQLITE_DONE)
        err = verify_fail(v, ledger_sqlite_err(v->l, rc), "ledger database: %s",
                          tally_ledger_errmsg(v->l));
    sqlite3_finalize(st);
    return err;
}

/* Usage against the chained batch totals, per meter. */
static const char usage_sql[] =
    "WITH want AS (SELECT meter, tally_qty_sum(qty, 1) q FROM usage_batches GROUP BY meter), "
    "have AS (SELECT meter, tally_qty_sum(w, s) q FROM (SELECT meter, weight w, end_s - start_s "
    "s FROM usage_intervals UNION ALL SELECT meter, qty, 1 FROM usage_points) GROUP BY meter) "
    "SELECT 'usage of meter ' || m.meter || ': the usage tables hold ' || coalesce(h.q, '0') || "
    "' (base units) but the chained batch totals add up to ' || coalesce(w.q, '0') || ' (usage "
    "rows were edited, inserted or deleted)' FROM (SELECT meter FROM want UNION SELECT meter "
    "FROM have) m LEFT JOIN want w ON w.meter = m.meter LEFT JOIN have h ON h.meter = m.meter "
    "WHERE coalesce(w.q, '0') != coalesce(h.q, '0') ORDER BY m.meter LIMIT 1";

/* Dedupe keys against the chained batches. Every event a batch accepted
 * left one key, and so did every event quarantined as overflow (its key is
 * recorded before its sum is found not to fit); nothing else adds a key.
 * Keys are the dedupe rows and the ids runs hold (whole fingerprints, as
 * integrity_check holds runs to). Fewer keys: keys were deleted or cleared
 * from a run, and replays of those events would be billed again. More:
 * keys were planted, and the events they name would be dropped as
 * duplicates, never billed. A ledger with usage from before migration 9
 * (batch 0 counts its rows, not its events) can only be held to "not
 * fewer". */
static const char keys_sql[] =
    "SELECT 'dedupe keys: ' || k || ' stored, but the chained usage batches accepted ' || e || "
    "' events' || CASE WHEN q > 0 THEN ' and ' || q || ' were quarantined as overflow' ELSE '' "
    "END || CASE WHEN k < e + q THEN ' (keys were deleted or edited: replays would be billed "
    "again)' ELSE ' (keys were planted: the events they name would never be billed)' END FROM "
    "(SELECT (SELECT count(*) FROM dedupe) + (SELECT coalesce(sum(length(fps) / 6), 0) FROM "
    "dedupe_runs) + (SELECT coalesce(sum(n), 0) FROM dedupe_windows) k, (SELECT "
    "coalesce(sum(events), 0) FROM usage_batches) e, (SELECT count(*) "
    "FROM quarantine WHERE reason = 'overflow') q, EXISTS (SELECT 1 FROM usage_batches WHERE "
    "seq = 0) old) WHERE k < e + q OR (k > e + q AND NOT old)";

/* Each dedupe window as the batch would read it: an edit that keeps the
 * count of keys (a bit moved, a record changed) shows here. */
static tally_err verify_windows(vctx *v)
{
    int64_t row;
    tally_err e = runs_check_windows(v->l, &row);
    if (e == TALLY_TAMPERED)
        return verify_fail(v, e,
                           "dedupe window %lld: its bitmap, count and content disagree (edited?)",
                           (long long)row);
    return e == TALLY_OK ? e : verify_fail(v, e, "ledger database: %s", tally_ledger_errmsg(v->l));
}

tally_err verify_chain(vctx *v)
{
    chain_ents ents[N_ENTS];
    for (size_t i = 0; i < N_ENTS; i++)
        ents[i] = (chain_ents){.sorted = true};
    tally_err err = check_links(v, ents);
    tally_buf sql;
    tally_buf_init(&sql, 0);
    char *buf = NULL;
    size_t buf_cap = 0;
    for (size_t g = 0; g < LEDGER_GROUP_COUNT; g++)
        sort_ents(&ents[N_TABLES + g]);
    for (size_t i = 0; err == TALLY_OK && i < N_TABLES; i++)
        err = check_table(v, &tables[i], ents, &sql, &buf, &buf_cap);
    ledger_canon canon = {.p = buf, .cap = buf_cap};
    for (size_t g = 0; err == TALLY_OK && g < LEDGER_GROUP_COUNT; g++)
        err = check_group(v, &ledger_chain_groups[g], &ents[N_TABLES + g], &sql, &canon);
    for (size_t i = 0; i < N_ENTS; i++)
        free(ents[i].e);
    free(canon.p);
    tally_buf_release(&sql);
    if (err == TALLY_OK)
        err = verify_sql(v, usage_sql);
    if (err == TALLY_OK)
        err = verify_sql(v, keys_sql);
    if (err == TALLY_OK)
        err = verify_windows(v);
    return err == TALLY_OK ? verify_heads(v) : err;
}
