/* Dedupe keys of ids that count up, kept as runs (schemas/015_dedupe_runs.sql).
 *
 * An id ending in 4 to 18 decimal digits is (prefix, width, n). A run is
 * one dedupe_runs row: the fingerprints of n = lo, lo+1, ..., at most
 * RUN_MAX of them. Runs of one (source, prefix, width) never overlap, so
 * the run that may hold n is the stored one with the greatest lo <= n.
 *
 * Within a commit the batch keeps, per (source, prefix, width), the run it
 * last used (run_slot): a source's next id is then checked and appended in
 * memory, and the run is written once when the commit ends, or when the
 * source moves to another run. A source whose ids count up therefore costs
 * two B-tree lookups and one row write per commit, instead of a row per
 * event. Nothing is kept from one commit to the next: every commit reads
 * what is stored, so another writer or a rolled-back commit cannot leave a
 * stale run behind. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"

#define FP_BYTES 6
/* A full run's row is about a quarter of a 4 KiB page, so that full runs
 * pack four to a page whatever the prefix's length: run_cap() ids, at most
 * RUN_MAX. */
#define RUN_MAX   163
#define ROW_BYTES 985 /* fingerprints plus prefix */
#define FP_MASK   ((UINT64_C(1) << (8 * FP_BYTES)) - 1)
/* Runs kept in memory by one commit; when full, they are written and
 * forgotten (the next use of one reads it again). */
#define SLOTS_MAX 4096

struct run_slot {
    uint64_t hash; /* of (src, prefix, width) */
    int64_t src;
    int64_t lo;      /* first n of the run */
    int64_t next_lo; /* lo of the next stored run, INT64_MAX when none */
    int64_t row;     /* its rowid when stored */
    uint32_t count;  /* ids in the run */
    bool stored;     /* a row with this lo exists (UPDATE, not INSERT) */
    bool dirty;
    uint8_t width;
    uint8_t prefix_len;
    char prefix[TALLY_ID_MAX];
    uint8_t fps[RUN_MAX * FP_BYTES];
};

bool runs_split(const char *id, size_t len, runs_id *out)
{
    size_t digits = 0;
    while (digits < len && id[len - 1 - digits] >= '0' && id[len - 1 - digits] <= '9')
        digits++;
    if (digits < 4 || digits > 18 || len >= TALLY_ID_MAX)
        return false;
    int64_t n = 0;
    for (size_t i = len - digits; i < len; i++)
        n = n * 10 + (id[i] - '0');
    out->prefix = id;
    out->prefix_len = len - digits;
    out->width = (int)digits;
    out->n = n;
    return true;
}

static uint64_t slot_hash(int64_t src, const runs_id *k)
{
    uint64_t h[2];
    tally_hash128(k->prefix, k->prefix_len, (uint64_t)src ^ ((uint64_t)k->width << 56), h);
    return h[0];
}

typedef struct slot_probe {
    const runs_cache *c;
    int64_t src;
    const runs_id *k;
} slot_probe;

static bool slot_eq(const void *ctx, uint32_t idx)
{
    const slot_probe *p = ctx;
    const struct run_slot *s = &p->c->slots[idx];
    return s->src == p->src && s->width == p->k->width && s->prefix_len == p->k->prefix_len &&
           memcmp(s->prefix, p->k->prefix, p->k->prefix_len) == 0;
}

static void bind_key(sqlite3_stmt *st, const struct run_slot *s)
{
    sqlite3_bind_int64(st, 1, s->src);
    sqlite3_bind_blob(st, 2, s->prefix, s->prefix_len, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, s->width);
}

static uint32_t run_cap(const struct run_slot *s)
{
    uint32_t cap = (uint32_t)(ROW_BYTES - s->prefix_len) / FP_BYTES;
    return cap < RUN_MAX ? cap : RUN_MAX;
}

/* Writes s's run if this commit changed it. */
static tally_err slot_write(tally_batch *b, struct run_slot *s)
{
    if (!s->dirty)
        return TALLY_OK;
    sqlite3_stmt *st = b->st[s->stored ? ST_RUN_UPD : ST_RUN_INS];
    bind_key(st, s);
    sqlite3_bind_int64(st, 4, s->lo);
    sqlite3_bind_blob(st, 5, s->fps, (int)(s->count * FP_BYTES), SQLITE_STATIC);
    if (s->stored)
        sqlite3_bind_int64(st, 6, s->row);
    tally_err e = batch_step(b, st);
    if (e == TALLY_OK && sqlite3_changes(b->l->db) != 1) {
        snprintf(b->l->errmsg, sizeof b->l->errmsg, "dedupe run at %lld %s", (long long)s->lo,
                 s->stored ? "vanished" : "already stored");
        e = TALLY_TAMPERED;
    }
    if (e == TALLY_OK && !s->stored)
        s->row = sqlite3_last_insert_rowid(b->l->db);
    if (e == TALLY_OK) {
        s->stored = true;
        s->dirty = false;
    }
    return e;
}

/* The lo of the first stored run after n, or INT64_MAX. */
static tally_err next_lo(tally_batch *b, const struct run_slot *s, int64_t n, int64_t *out)
{
    sqlite3_stmt *st = b->st[ST_RUN_NEXT];
    bind_key(st, s);
    sqlite3_bind_int64(st, 4, n);
    int rc = sqlite3_step(st);
    *out = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : INT64_MAX;
    sqlite3_reset(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? TALLY_OK : ledger_sqlite_err(b->l, rc);
}

/* A stored row as read: its fingerprints must be whole and within a run. */
static tally_err take_row(tally_batch *b, struct run_slot *s, sqlite3_stmt *st)
{
    int bytes = sqlite3_column_bytes(st, 1);
    const void *fps = sqlite3_column_blob(st, 1);
    if (bytes < FP_BYTES || bytes > RUN_MAX * FP_BYTES || bytes % FP_BYTES || !fps) {
        snprintf(b->l->errmsg, sizeof b->l->errmsg,
                 "dedupe run at %lld holds %d bytes of fingerprints (edited?)",
                 (long long)sqlite3_column_int64(st, 0), bytes);
        return TALLY_TAMPERED;
    }
    s->lo = sqlite3_column_int64(st, 0);
    s->count = (uint32_t)(bytes / FP_BYTES);
    s->row = sqlite3_column_int64(st, 2);
    memcpy(s->fps, fps, (size_t)bytes);
    s->stored = true;
    return TALLY_OK;
}

/* Points s at the run that holds n or that n extends, or at a new empty
 * run at n: the stored run with the greatest lo <= n decides. */
static tally_err slot_load(tally_batch *b, struct run_slot *s, int64_t n)
{
    sqlite3_stmt *st = b->st[ST_RUN_FIND];
    bind_key(st, s);
    sqlite3_bind_int64(st, 4, n);
    int rc = sqlite3_step(st);
    tally_err e = TALLY_OK;
    s->stored = false;
    s->dirty = false;
    if (rc == SQLITE_ROW)
        e = take_row(b, s, st);
    else if (rc != SQLITE_DONE)
        e = ledger_sqlite_err(b->l, rc);
    sqlite3_reset(st);
    if (e != TALLY_OK)
        return e;
    if (s->stored && n < s->lo + s->count) {
        /* n is in it. Unknown what follows the run, so an append reads again. */
        s->next_lo = s->lo + s->count;
        return TALLY_OK;
    }
    if (!s->stored || n > s->lo + s->count || s->count >= run_cap(s)) {
        s->lo = n; /* a run of its own */
        s->count = 0;
        s->stored = false;
    }
    return next_lo(b, s, n, &s->next_lo);
}

/* The slot of (src, k), new (and loaded for k->n) when this commit has none. */
static tally_err slot_of(tally_batch *b, int64_t src, const runs_id *k, struct run_slot **out)
{
    runs_cache *c = &b->runs;
    uint64_t hash = slot_hash(src, k);
    slot_probe p = {c, src, k};
    int64_t i = c->n ? idx_table_find(&c->index, hash, slot_eq, &p) : -1;
    if (i >= 0) {
        *out = &c->slots[i];
        return TALLY_OK;
    }
    tally_err e = TALLY_OK;
    if (c->n == SLOTS_MAX)
        e = runs_flush(b);
    if (e == TALLY_OK && !c->slots) {
        c->slots = malloc(SLOTS_MAX * sizeof *c->slots);
        e = c->slots ? idx_table_reserve(&c->index, SLOTS_MAX * 2) : TALLY_NOMEM;
    }
    if (e != TALLY_OK)
        return e;
    struct run_slot *s = &c->slots[c->n];
    s->hash = hash;
    s->src = src;
    s->width = (uint8_t)k->width;
    s->prefix_len = (uint8_t)k->prefix_len;
    memcpy(s->prefix, k->prefix, k->prefix_len);
    e = slot_load(b, s, k->n);
    if (e != TALLY_OK)
        return e;
    idx_table_insert(&c->index, hash, (uint32_t)c->n++);
    *out = s;
    return TALLY_OK;
}

static uint64_t fp_at(const struct run_slot *s, int64_t n)
{
    const uint8_t *p = s->fps + (size_t)(n - s->lo) * FP_BYTES;
    uint64_t v = 0;
    for (int i = 0; i < FP_BYTES; i++)
        v = v << 8 | p[i];
    return v;
}

static void fp_put(struct run_slot *s, uint64_t fp)
{
    uint8_t *p = s->fps + (size_t)s->count * FP_BYTES;
    for (int i = FP_BYTES - 1; i >= 0; i--, fp >>= 8)
        p[i] = (uint8_t)fp;
    s->count++;
    s->dirty = true;
}

/* n is in s's run, or s's run can take n as its next id. */
static bool slot_serves(const struct run_slot *s, int64_t n)
{
    if (n >= s->lo && n < s->lo + s->count)
        return true;
    return n == s->lo + s->count && s->count < run_cap(s) && n < s->next_lo;
}

tally_err runs_dedupe(tally_batch *b, int64_t src, const runs_id *k, uint64_t fingerprint,
                      tally_event_result *res)
{
    struct run_slot *s;
    tally_err e = slot_of(b, src, k, &s);
    if (e == TALLY_OK && !slot_serves(s, k->n)) {
        e = slot_write(b, s);
        if (e == TALLY_OK)
            e = slot_load(b, s, k->n);
    }
    if (e != TALLY_OK)
        return e;
    uint64_t fp = fingerprint & FP_MASK;
    if (k->n < s->lo + s->count) {
        *res = fp_at(s, k->n) == fp ? TALLY_RESULT_DUPLICATE : TALLY_RESULT_CONFLICT;
        return TALLY_OK;
    }
    fp_put(s, fp);
    *res = TALLY_RESULT_ACCEPTED;
    return TALLY_OK;
}

tally_err runs_flush(tally_batch *b)
{
    runs_cache *c = &b->runs;
    tally_err e = TALLY_OK;
    for (size_t i = 0; e == TALLY_OK && i < c->n; i++)
        e = slot_write(b, &c->slots[i]);
    runs_forget(b);
    return e;
}

void runs_forget(tally_batch *b)
{
    runs_cache *c = &b->runs;
    if (c->n)
        idx_table_clear(&c->index);
    c->n = 0;
}

void runs_free(tally_batch *b)
{
    free(b->runs.slots);
    idx_table_free(&b->runs.index);
    b->runs = (runs_cache){0};
}
