/* Reading a ledger in one snapshot and holding it to the stream model
 * (rel_model.h states the invariant), plus the whole-ledger checks every
 * reliability scenario ends with. */
#ifndef TALLY_REL_CHECK_H
#define TALLY_REL_CHECK_H

#include <stdarg.h>
#include <stddef.h>

#include "rel_model.h"
#include "tally/ledger_sql.h"

typedef struct rel_snap {
    int64_t next[REL_MAX_PARTS]; /* stored next offset; 0 if none */
    long dedupe, meta_dedupe, meta_quarantine, quarantine, foreign;
    int64_t usage_iv[REL_MAX_ACCOUNTS], usage_pt[REL_MAX_ACCOUNTS];
    int *q_part;
    int64_t *q_off;
    long n_q, cap_q;
} rel_snap;

static inline tally_err rel_row_offsets(void *ctx, int ncols, const char *const *c)
{
    rel_snap *s = ctx;
    (void)ncols;
    long p = strtol(c[0], NULL, 10);
    if (p < 0 || p >= REL_MAX_PARTS)
        return TALLY_RANGE;
    s->next[p] = strtoll(c[1], NULL, 10);
    return TALLY_OK;
}

static inline tally_err rel_row_origin(void *ctx, int ncols, const char *const *c)
{
    rel_snap *s = ctx;
    int p = -1;
    long long off = -1;
    (void)ncols;
    if (sscanf(c[0], "kafka:usage/%d@%lld", &p, &off) != 2 || p < 0 || p >= REL_MAX_PARTS) {
        s->foreign++;
        return TALLY_OK;
    }
    if (s->n_q == s->cap_q) {
        s->cap_q = s->cap_q ? 2 * s->cap_q : 256;
        s->q_part = realloc(s->q_part, (size_t)s->cap_q * sizeof *s->q_part);
        s->q_off = realloc(s->q_off, (size_t)s->cap_q * sizeof *s->q_off);
        if (!s->q_part || !s->q_off)
            return TALLY_NOMEM;
    }
    s->q_part[s->n_q] = p;
    s->q_off[s->n_q++] = off;
    return TALLY_OK;
}

static inline tally_err rel_row_long(void *ctx, int ncols, const char *const *c)
{
    (void)ncols;
    *(long *)ctx = c[0] ? strtol(c[0], NULL, 10) : 0;
    return TALLY_OK;
}

static inline tally_err rel_row_usage(void *ctx, int ncols, const char *const *c, int64_t *tab)
{
    (void)ncols;
    (void)ctx;
    int a = -1;
    if (sscanf(c[0], "acct-%d", &a) != 1 || a < 0 || a >= REL_MAX_ACCOUNTS)
        return TALLY_RANGE;
    tab[a] = strtoll(c[1], NULL, 10);
    return TALLY_OK;
}

static inline tally_err rel_row_iv(void *ctx, int ncols, const char *const *c)
{
    return rel_row_usage(ctx, ncols, c, ((rel_snap *)ctx)->usage_iv);
}

static inline tally_err rel_row_pt(void *ctx, int ncols, const char *const *c)
{
    return rel_row_usage(ctx, ncols, c, ((rel_snap *)ctx)->usage_pt);
}

static inline tally_err rel_row_text(void *ctx, int ncols, const char *const *c)
{
    tally_buf *b = ctx;
    for (int i = 0; i < ncols; i++)
        if (tally_buf_printf(b, "%s%s", i ? "|" : "", c[i] ? c[i] : "NULL"))
            return TALLY_NOMEM;
    return tally_buf_puts(b, "\n");
}

/* Fills why and returns false. */
static inline bool rel_fail(char *why, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline bool rel_fail(char *why, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return false;
}

static inline void rel_snap_free(rel_snap *s)
{
    free(s->q_part);
    free(s->q_off);
    memset(s, 0, sizeof *s);
}

/* Reads what the invariant needs from an open ledger, in one read
 * transaction (meters may be writing). Returns false with why filled if the
 * ledger cannot be read. */
static inline bool rel_snap_read_ledger(tally_ledger *l, rel_snap *s, char *why, size_t cap)
{
    static const struct {
        const char *sql;
        tally_row_fn fn;
        size_t field; /* offset of a long in rel_snap for rel_row_long */
    } q[] = {
        {"SELECT partition, next_offset FROM offsets WHERE topic = 'usage'", rel_row_offsets, 0},
        {"SELECT origin FROM quarantine", rel_row_origin, 0},
        {"SELECT count(*) FROM dedupe_keys", rel_row_long, offsetof(rel_snap, dedupe)},
        {"SELECT count(*) FROM quarantine", rel_row_long, offsetof(rel_snap, quarantine)},
        {"SELECT value FROM meta WHERE key = 'count_dedupe'", rel_row_long,
         offsetof(rel_snap, meta_dedupe)},
        {"SELECT value FROM meta WHERE key = 'count_quarantine'", rel_row_long,
         offsetof(rel_snap, meta_quarantine)},
        {"SELECT account, sum(weight * (end_s - start_s)) FROM usage_intervals GROUP BY 1",
         rel_row_iv, 0},
        {"SELECT account, sum(qty) FROM usage_points GROUP BY 1", rel_row_pt, 0},
    };
    memset(s, 0, sizeof *s);
    tally_err e = tally_ledger_exec(l, "BEGIN");
    for (size_t i = 0; e == TALLY_OK && i < sizeof q / sizeof *q; i++) {
        void *ctx = q[i].fn == rel_row_long ? (void *)((char *)s + q[i].field) : (void *)s;
        e = tally_ledger_query(l, q[i].sql, NULL, 0, q[i].fn, ctx);
    }
    if (e != TALLY_OK)
        snprintf(why, cap, "reading the ledger: %s (%s)", tally_err_str(e), tally_ledger_errmsg(l));
    if (tally_ledger_exec(l, "COMMIT") != TALLY_OK && e == TALLY_OK)
        e = TALLY_DB;
    return e == TALLY_OK;
}

/* The same, opening the ledger at db. */
static inline bool rel_snap_read(const char *db, rel_snap *s, char *why, size_t cap)
{
    tally_ledger *l = NULL;
    memset(s, 0, sizeof *s);
    if (tally_ledger_open(db, &l, why, cap) != TALLY_OK)
        return false;
    bool ok = rel_snap_read_ledger(l, s, why, cap);
    tally_ledger_close(l);
    return ok;
}

/* Holds a snapshot to the model; prev (if not NULL) holds the offsets seen
 * before, which must never be ahead of these. */
static inline bool rel_snap_check(const rel_snap *s, const rel_stream *st, const int64_t *prev,
                                  char *why, size_t cap)
{
    long want_keys = 0, want_q = 0, delivered[REL_MAX_PARTS] = {0};
    int64_t iv[REL_MAX_ACCOUNTS] = {0}, pt[REL_MAX_ACCOUNTS] = {0};
    for (long k = 0; k < st->n; k++) {
        const rel_msg *m = &st->m[k];
        if (m->offset < 0)
            continue;
        delivered[m->part]++;
        if (m->offset >= s->next[m->part])
            continue;
        want_q += m->kind == REL_CONFLICT || m->kind == REL_POISON;
        want_keys += m->kind == REL_VALID;
        if (m->kind == REL_VALID)
            *(m->point ? &pt[m->acct] : &iv[m->acct]) += m->usage;
    }
    for (int p = 0; p < st->parts; p++) {
        if (s->next[p] > delivered[p])
            return rel_fail(why, cap, "partition %d: stored offset %" PRId64 " > %ld produced", p,
                            s->next[p], delivered[p]);
        if (prev && s->next[p] < prev[p])
            return rel_fail(why, cap,
                            "partition %d: stored offset went back from %" PRId64 " to %" PRId64, p,
                            prev[p], s->next[p]);
    }
    /* Every Kafka quarantine row must be a conflict or poison message below
     * its partition's offset; with the counts equal, the sets are equal. */
    for (long i = 0; i < s->n_q; i++) {
        int p = s->q_part[i];
        int64_t o = s->q_off[i];
        const rel_msg *hit = NULL;
        for (long k = 0; k < st->n && !hit; k++)
            if (st->m[k].part == p && st->m[k].offset == o)
                hit = &st->m[k];
        if (!hit || o >= s->next[p] || hit->kind == REL_VALID || hit->kind == REL_DUP)
            return rel_fail(why, cap,
                            "quarantine row for usage/%d@%" PRId64 " (stored next %" PRId64
                            ") is not a poison or conflict message below the offset",
                            p, o, s->next[p]);
    }
    if (s->n_q != want_q || s->foreign || s->quarantine != s->n_q)
        return rel_fail(why, cap, "quarantine: %ld Kafka rows (%ld others), model says %ld", s->n_q,
                        s->foreign, want_q);
    if (s->dedupe != want_keys || s->meta_dedupe != s->dedupe ||
        s->meta_quarantine != s->quarantine)
        return rel_fail(why, cap,
                        "dedupe: %ld keys (meta %ld), model says %ld; meta quarantine %ld",
                        s->dedupe, s->meta_dedupe, want_keys, s->meta_quarantine);
    for (int a = 0; a < st->accounts; a++)
        if (s->usage_iv[a] != iv[a] || s->usage_pt[a] != pt[a])
            return rel_fail(why, cap,
                            "acct-%02d: usage %" PRId64 "/%" PRId64 ", model says %" PRId64
                            "/%" PRId64,
                            a, s->usage_iv[a], s->usage_pt[a], iv[a], pt[a]);
    return true;
}

/* PRAGMA integrity_check, `tally verify` (with the signing key, once the
 * ledger has finalized invoices; NULL before) and conservation. */
static inline void rel_assert_sound(const char *db, const char *key)
{
    tally_ledger *l = NULL;
    char why[512] = "", ok[64] = "";
    if (tally_ledger_open(db, &l, why, sizeof why) != TALLY_OK)
        fail_msg("cannot open %s: %s", db, why);
    tally_buf out;
    tally_buf_init(&out, 0);
    if (tally_ledger_query(l, "PRAGMA integrity_check", NULL, 0, rel_row_text, &out) != TALLY_OK)
        fail_msg("integrity_check did not run: %s", tally_ledger_errmsg(l));
    snprintf(ok, sizeof ok, "%s", out.data ? out.data : "");
    if (strcmp(ok, "ok\n") != 0)
        fail_msg("integrity_check on %s: %s", db, out.data ? out.data : "(nothing)");
    tu_assert_conservation(l);
    tally_ledger_close(l);
    tally_buf_reset(&out);
    int rc = tu_tally(&out, "--db '%s' %s%s%s verify 2>&1", db, key ? "--key '" : "",
                      key ? key : "", key ? "'" : "");
    if (rc != 0)
        fail_msg("tally verify failed (%d) on %s: %s", rc, db, out.data ? out.data : "");
    tally_buf_release(&out);
}

#endif
