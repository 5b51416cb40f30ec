/* Dedupe keys of ids that count up, kept as runs (schemas/015_dedupe_runs.sql).
 *
 * An id ending in 4 to 18 decimal digits, the whole id or after a
 * character that is not a letter, is (prefix, width, n). Its run is
 * the dedupe_runs row of (source, prefix, width, lo = n - n % RUN_SPAN): a
 * bitmap of the values seen in the window and their fingerprints in the
 * order of n. The row follows from the id alone, so arrival order never
 * matters and a key has exactly one place.
 *
 * Within a commit the batch keeps every run it used (run_slot): an id is
 * checked and recorded in memory, and each changed run is written once when
 * the commit ends. A source whose ids count up therefore costs one row
 * write per commit and window of 160 ids, instead of a row per event. The
 * runs stay held after a commit, as written, and the next commit uses them
 * without reading them again, but only if nothing but this batch wrote in
 * between (batch_commit.c, runs_session: the same test as the balance
 * cache's); a rolled-back commit forgets them. With 20,000 hosts, reading
 * each commit's runs again was 9 % of the meter's samples. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"

#define FP_BYTES   6
#define RUN_SPAN   160 /* ids per run: a full run is ~1,000 bytes, 4 to a page */
#define BITS_BYTES (RUN_SPAN / 8)
#define FP_MASK    ((UINT64_C(1) << (8 * FP_BYTES)) - 1)
/* Runs kept in memory by one commit, in an array that doubles from
 * SLOTS_FIRST as the commit's sources need; when SLOTS_MAX are held they are
 * written and forgotten (the next use of one reads it again). A slot is
 * 200 bytes and room for 8 fingerprints of 6 bytes at first, doubling
 * to 160 (a full window, 1.2 KB in all), so at most about 80 MB a batch,
 * and about 17 MB for a stream of ids that each begin a window of their
 * own. A commit needs a slot per
 * source and window of 160 ids it sees: with 4,096, a commit over 20,000
 * hosts wrote and read each run again every few events (a third of ingest's
 * CPU). */
#define SLOTS_FIRST 256
#define SLOTS_MAX   65536
#define FPS_FIRST   8 /* fingerprints a slot has room for at first; it doubles */

struct run_slot {
    uint64_t hash;    /* in the index */
    uint64_t used_in; /* the commit (runs_cache.commit_no) that last used it */
    int64_t src;
    int64_t lo;
    int64_t row;    /* its rowid when stored */
    uint32_t count; /* ids in the run: bits set, fingerprints held */
    bool stored;    /* a row exists (UPDATE, not INSERT) */
    bool dirty;
    uint8_t width;
    uint8_t prefix_len;
    char prefix[TALLY_ID_MAX];
    uint8_t bits[BITS_BYTES];
    uint32_t fps_cap; /* fingerprints fps has room for, kept when the slot is reused */
    uint8_t *fps;
};

bool runs_split(const char *id, size_t len, runs_id *out)
{
    size_t digits = 0;
    while (digits < len && id[len - 1 - digits] >= '0' && id[len - 1 - digits] <= '9')
        digits++;
    if (digits < 4 || digits > 18 || len >= TALLY_ID_MAX)
        return false;
    /* The counter is the whole id or follows a separator: digits at the end
     * of a random UUID or ULID ("...-a46655440012") are no counter, and a
     * run per such id would cost more than a row of its own. */
    char before = digits < len ? id[len - digits - 1] : '-';
    if ((before >= 'a' && before <= 'z') || (before >= 'A' && before <= 'Z'))
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

typedef struct slot_probe {
    const runs_cache *c;
    int64_t src, lo;
    const runs_id *k;
} slot_probe;

static bool slot_eq(const void *ctx, uint32_t idx)
{
    const slot_probe *p = ctx;
    const struct run_slot *s = &p->c->slots[idx];
    return s->src == p->src && s->lo == p->lo && s->width == p->k->width &&
           s->prefix_len == p->k->prefix_len &&
           memcmp(s->prefix, p->k->prefix, p->k->prefix_len) == 0;
}

static void bind_key(sqlite3_stmt *st, const struct run_slot *s)
{
    sqlite3_bind_int64(st, 1, s->src);
    sqlite3_bind_blob(st, 2, s->prefix, s->prefix_len, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, s->width);
    sqlite3_bind_int64(st, 4, s->lo);
}

/* Writes s's run if this commit changed it. */
static tally_err slot_write(tally_batch *b, struct run_slot *s)
{
    if (!s->dirty)
        return TALLY_OK;
    sqlite3_stmt *st = b->st[s->stored ? ST_RUN_UPD : ST_RUN_INS];
    bind_key(st, s);
    sqlite3_bind_blob(st, 5, s->bits, BITS_BYTES, SQLITE_STATIC);
    sqlite3_bind_blob(st, 6, s->fps, (int)(s->count * FP_BYTES), SQLITE_STATIC);
    if (s->stored)
        sqlite3_bind_int64(st, 7, s->row);
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

static uint32_t bits_count(const uint8_t *bits, uint32_t upto)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < upto / 8; i++)
        n += (uint32_t)__builtin_popcount(bits[i]);
    if (upto % 8)
        n += (uint32_t)__builtin_popcount(bits[upto / 8] & ((1u << (upto % 8)) - 1));
    return n;
}

/* Room in s for need fingerprints (at most RUN_SPAN). */
static tally_err fps_room(struct run_slot *s, uint32_t need)
{
    if (need <= s->fps_cap)
        return TALLY_OK;
    uint32_t cap = s->fps_cap ? s->fps_cap : FPS_FIRST;
    while (cap < need)
        cap *= 2;
    if (cap > RUN_SPAN)
        cap = RUN_SPAN;
    uint8_t *p = realloc(s->fps, (size_t)cap * FP_BYTES);
    if (!p)
        return TALLY_NOMEM;
    s->fps = p;
    s->fps_cap = cap;
    return TALLY_OK;
}

/* A stored row as read: its bitmap must count its fingerprints. */
static tally_err take_row(tally_batch *b, struct run_slot *s, sqlite3_stmt *st)
{
    int nbits = sqlite3_column_bytes(st, 1);
    const void *bits = sqlite3_column_blob(st, 1);
    int bytes = sqlite3_column_bytes(st, 2);
    const void *fps = sqlite3_column_blob(st, 2);
    if (nbits == BITS_BYTES && bits)
        memcpy(s->bits, bits, BITS_BYTES);
    if (nbits != BITS_BYTES || !bits || !fps || bytes % FP_BYTES ||
        (uint32_t)bytes != bits_count(s->bits, RUN_SPAN) * FP_BYTES) {
        snprintf(b->l->errmsg, sizeof b->l->errmsg,
                 "dedupe run %lld: its bitmap does not count its %d bytes of fingerprints "
                 "(edited?)",
                 (long long)sqlite3_column_int64(st, 0), bytes);
        return TALLY_TAMPERED;
    }
    s->row = sqlite3_column_int64(st, 0);
    tally_err e = fps_room(s, (uint32_t)(bytes / FP_BYTES));
    if (e != TALLY_OK)
        return e;
    s->count = (uint32_t)(bytes / FP_BYTES);
    memcpy(s->fps, fps, (size_t)bytes);
    s->stored = true;
    return TALLY_OK;
}

/* Reads s's stored run, or starts it empty. */
static tally_err slot_load(tally_batch *b, struct run_slot *s)
{
    sqlite3_stmt *st = b->st[ST_RUN_FIND];
    bind_key(st, s);
    int rc = sqlite3_step(st);
    tally_err e = TALLY_OK;
    s->stored = s->dirty = false;
    s->count = 0;
    memset(s->bits, 0, sizeof s->bits);
    if (rc == SQLITE_ROW)
        e = take_row(b, s, st);
    else if (rc != SQLITE_DONE)
        e = ledger_sqlite_err(b->l, rc);
    sqlite3_reset(st);
    return e;
}

/* Room for twice as many slots (SLOTS_FIRST at first), the index rebuilt. */
static tally_err slots_grow(runs_cache *c)
{
    size_t cap = c->cap ? c->cap * 2 : SLOTS_FIRST;
    if (cap > SLOTS_MAX)
        cap = SLOTS_MAX;
    struct run_slot *v = realloc(c->slots, cap * sizeof *v);
    if (!v)
        return TALLY_NOMEM;
    memset(v + c->cap, 0, (cap - c->cap) * sizeof *v); /* no fingerprints yet */
    c->slots = v;
    c->cap = cap;
    tally_err e = idx_table_reserve(&c->index, cap);
    if (e != TALLY_OK) {
        c->n = 0; /* the index may be gone: forget what was held */
        return e;
    }
    idx_table_clear(&c->index);
    for (size_t i = 0; i < c->n; i++)
        idx_table_insert(&c->index, c->slots[i].hash, (uint32_t)i);
    return TALLY_OK;
}

/* The slot of (src, k)'s run, read when this commit has not used it yet. */
static tally_err slot_of(tally_batch *b, int64_t src, const runs_id *k, struct run_slot **out)
{
    runs_cache *c = &b->runs;
    int64_t lo = k->n - k->n % RUN_SPAN;
    uint64_t h[2];
    tally_hash128(k->prefix, k->prefix_len,
                  (uint64_t)src ^ (uint64_t)lo * 0x9E3779B97F4A7C15ULL ^ (uint64_t)k->width, h);
    slot_probe p = {c, src, lo, k};
    int64_t i = c->n ? idx_table_find(&c->index, h[0], slot_eq, &p) : -1;
    if (i >= 0) {
        *out = &c->slots[i];
        (*out)->used_in = c->commit_no;
        return TALLY_OK;
    }
    tally_err e = TALLY_OK;
    if (c->n == SLOTS_MAX) {
        e = runs_flush(b);
        runs_forget(b);
    } else if (c->n == c->cap)
        e = slots_grow(c);
    if (e != TALLY_OK)
        return e;
    struct run_slot *s = &c->slots[c->n];
    s->hash = h[0];
    s->used_in = c->commit_no;
    s->src = src;
    s->lo = lo;
    s->width = (uint8_t)k->width;
    s->prefix_len = (uint8_t)k->prefix_len;
    memcpy(s->prefix, k->prefix, k->prefix_len);
    e = slot_load(b, s);
    if (e != TALLY_OK)
        return e;
    idx_table_insert(&c->index, h[0], (uint32_t)c->n++);
    *out = s;
    return TALLY_OK;
}

static uint64_t fp_get(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < FP_BYTES; i++)
        v = v << 8 | p[i];
    return v;
}

/* Records fp for slot k of s, keeping the fingerprints in the order of n. */
static tally_err fp_insert(struct run_slot *s, uint32_t k, uint64_t fp)
{
    tally_err e = fps_room(s, s->count + 1);
    if (e != TALLY_OK)
        return e;
    uint32_t at = bits_count(s->bits, k);
    uint8_t *p = s->fps + (size_t)at * FP_BYTES;
    memmove(p + FP_BYTES, p, (size_t)(s->count - at) * FP_BYTES);
    for (int i = FP_BYTES - 1; i >= 0; i--, fp >>= 8)
        p[i] = (uint8_t)fp;
    s->bits[k / 8] |= (uint8_t)(1u << (k % 8));
    s->count++;
    s->dirty = true;
    return TALLY_OK;
}

tally_err runs_dedupe(tally_batch *b, int64_t src, const runs_id *k, uint64_t fingerprint,
                      tally_event_result *res)
{
    struct run_slot *s;
    tally_err e = slot_of(b, src, k, &s);
    if (e != TALLY_OK)
        return e;
    uint32_t slot = (uint32_t)(k->n - s->lo);
    uint64_t fp = fingerprint & FP_MASK;
    if (s->bits[slot / 8] & (1u << (slot % 8))) {
        uint64_t stored = fp_get(s->fps + (size_t)bits_count(s->bits, slot) * FP_BYTES);
        *res = stored == fp ? TALLY_RESULT_DUPLICATE : TALLY_RESULT_CONFLICT;
        return TALLY_OK;
    }
    e = fp_insert(s, slot, fp);
    *res = TALLY_RESULT_ACCEPTED;
    return e;
}

tally_err runs_flush(tally_batch *b)
{
    runs_cache *c = &b->runs;
    tally_err e = TALLY_OK;
    for (size_t i = 0; e == TALLY_OK && i < c->n; i++)
        e = slot_write(b, &c->slots[i]);
    return e;
}

void runs_keep_recent(tally_batch *b)
{
    runs_cache *c = &b->runs;
    size_t k = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (c->slots[i].used_in != c->commit_no)
            continue;
        if (i != k) { /* a swap: the dropped slot's fingerprint room is reused */
            struct run_slot t = c->slots[k];
            c->slots[k] = c->slots[i];
            c->slots[i] = t;
        }
        k++;
    }
    if (k != c->n) {
        c->n = k;
        idx_table_clear(&c->index);
        for (size_t i = 0; i < k; i++)
            idx_table_insert(&c->index, c->slots[i].hash, (uint32_t)i);
    }
    c->commit_no++;
}

void runs_forget(tally_batch *b)
{
    runs_cache *c = &b->runs;
    c->commit_no++;
    if (c->n)
        idx_table_clear(&c->index);
    c->n = 0;
}

void runs_free(tally_batch *b)
{
    for (size_t i = 0; i < b->runs.cap; i++)
        free(b->runs.slots[i].fps);
    free(b->runs.slots);
    idx_table_free(&b->runs.index);
    b->runs = (runs_cache){0};
}
