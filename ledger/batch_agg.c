/* Usage aggregation for ingest batches.
 *
 * Accelerator and storage events are coalesced into usage_intervals rows:
 * an event [s, e) of a key (account, meter, pricing, migration, resource,
 * dim, weight) extends the open interval of that key ending at s, or one
 * starting at e, and joins both when it fills the gap between them, as long
 * as the row stays within IV_MAX_SPAN_S. So one instance reporting every
 * second for a month costs about 31 rows, in any arrival order. Open
 * intervals are remembered across commits, in a table that doubles from
 * IV_FIRST as the stream's instances and volumes need (about 250 bytes
 * each) up to IV_MAX; past that the least recently touched is forgotten
 * first, which is always safe: its row is stored, and the next event of
 * that key simply starts a new row. (With 65,536, a stream of 80,000
 * instances and 46,000 volumes forgot and restarted them all the time: 3.2
 * rows per instance where one a day is due, and 2.5x the CPU per event.)
 * Rows are written once per commit however many events extended them.
 *
 * Traffic and token events are summed per (account, meter, dim, dim2, second)
 * for the commit, then added to usage_points. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"

tally_err batch_step(tally_batch *b, sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    while (rc == SQLITE_ROW)
        rc = sqlite3_step(st);
    tally_err e = rc == SQLITE_DONE ? TALLY_OK : ledger_sqlite_err(b->l, rc);
    sqlite3_reset(st);
    return e;
}

tally_err batch_seq(tally_batch *b, int64_t *seq)
{
    if (b->seq == 0) {
        sqlite3_stmt *st = b->st[ST_SEQ];
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW)
            b->seq = sqlite3_column_int64(st, 0);
        tally_err e = batch_step(b, st);
        if (e == TALLY_OK && b->seq == 0) {
            snprintf(b->l->errmsg, sizeof b->l->errmsg, "meta.usage_seq is missing");
            e = TALLY_DB;
        }
        if (e != TALLY_OK)
            return e;
    }
    *seq = b->seq;
    return TALLY_OK;
}

/* ---- Hashing ---------------------------------------------------------------- */

static size_t put_str(char *buf, size_t n, const char *s, size_t max)
{
    size_t len = strnlen(s, max - 1);
    memcpy(buf + n, s, len);
    buf[n + len] = '\0';
    return n + len + 1;
}

static uint64_t hash_bytes(const char *buf, size_t n)
{
    uint64_t h[2];
    tally_hash128(buf, n, 0, h);
    return h[0];
}

static uint64_t iv_key_hash(const tally_event *ev)
{
    char buf[3 * TALLY_NAME_MAX + 16];
    size_t n = put_str(buf, 0, ev->account, TALLY_NAME_MAX);
    n = put_str(buf, n, ev->resource, TALLY_NAME_MAX);
    n = put_str(buf, n, ev->dim, TALLY_NAME_MAX);
    buf[n++] = (char)ev->meter;
    buf[n++] = (char)ev->pricing;
    buf[n++] = (char)ev->migration;
    memcpy(buf + n, &ev->weight, sizeof ev->weight);
    return hash_bytes(buf, n + sizeof ev->weight);
}

/* The index hash of a key at one end of an interval. */
static uint64_t at_time(uint64_t key_hash, int64_t t_s)
{
    uint64_t x = key_hash ^ ((uint64_t)t_s * 0x9e3779b97f4a7c15ull);
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    return x ^ (x >> 29);
}

uint64_t agg_key_hash(const tally_event *ev)
{
    bool interval = ev->meter == TALLY_METER_ACCELERATOR || ev->meter == TALLY_METER_STORAGE;
    return interval ? iv_key_hash(ev) : 0;
}

void agg_prefetch(const tally_batch *b, uint64_t kh, int64_t start_s, int64_t end_s, bool entry)
{
    if (!kh || !b->iv)
        return;
    uint64_t at_end = at_time(kh, start_s), at_start = at_time(kh, end_s);
    if (!entry) {
        idx_table_prefetch(&b->iv_by_end, at_end);
        idx_table_prefetch(&b->iv_by_start, at_start);
        return;
    }
    int64_t i = idx_table_peek(&b->iv_by_end, at_end);
    if (i >= 0)
        __builtin_prefetch(&b->iv[i]);
    i = idx_table_peek(&b->iv_by_start, at_start);
    if (i >= 0)
        __builtin_prefetch(&b->iv[i]);
}

/* ---- Open intervals ------------------------------------------------------- */

typedef struct iv_probe {
    const tally_batch *b;
    const tally_event *ev;
    int64_t t_s;
    bool by_end;
} iv_probe;

static bool iv_same_key(const iv_entry *e, const tally_event *ev)
{
    return e->meter == ev->meter && e->pricing == ev->pricing && e->migration == ev->migration &&
           e->weight == ev->weight && strcmp(e->account, ev->account) == 0 &&
           strcmp(e->resource, ev->resource) == 0 && strcmp(e->dim, ev->dim) == 0;
}

static bool iv_eq(const void *ctx, uint32_t idx)
{
    const iv_probe *p = ctx;
    const iv_entry *e = &p->b->iv[idx];
    return (p->by_end ? e->end_s : e->start_s) == p->t_s && iv_same_key(e, p->ev);
}

static int64_t iv_find(const tally_batch *b, uint64_t kh, const tally_event *ev, int64_t t_s,
                       bool by_end)
{
    iv_probe p = {b, ev, t_s, by_end};
    return idx_table_find(by_end ? &b->iv_by_end : &b->iv_by_start, at_time(kh, t_s), iv_eq, &p);
}

static void lru_unlink(tally_batch *b, uint32_t idx)
{
    iv_entry *e = &b->iv[idx];
    if (e->lru_prev)
        b->iv[e->lru_prev - 1].lru_next = e->lru_next;
    else
        b->lru_head = e->lru_next;
    if (e->lru_next)
        b->iv[e->lru_next - 1].lru_prev = e->lru_prev;
    else
        b->lru_tail = e->lru_prev;
    e->lru_prev = e->lru_next = 0;
}

static void lru_push_front(tally_batch *b, uint32_t idx)
{
    iv_entry *e = &b->iv[idx];
    e->lru_prev = 0;
    e->lru_next = b->lru_head;
    if (b->lru_head)
        b->iv[b->lru_head - 1].lru_prev = idx + 1;
    b->lru_head = idx + 1;
    if (!b->lru_tail)
        b->lru_tail = idx + 1;
}

static void lru_touch(tally_batch *b, uint32_t idx)
{
    if (b->lru_head != idx + 1) {
        lru_unlink(b, idx);
        lru_push_front(b, idx);
    }
}

/* A dirty interval as agg_flush writes them: stored rows in rowid order,
 * then the new ones. */
struct iv_flush {
    int64_t row_id;
    uint32_t idx;
};

static tally_err mark_dirty(tally_batch *b, uint32_t idx)
{
    if (b->iv[idx].dirty)
        return TALLY_OK;
    if (b->n_dirty == b->dirty_alloc) {
        size_t n = b->dirty_alloc ? b->dirty_alloc * 2 : 256;
        uint32_t *d = realloc(b->dirty, n * sizeof *d);
        if (!d)
            return TALLY_NOMEM;
        b->dirty = d;
        struct iv_flush *o = realloc(b->flush_order, n * sizeof *o);
        if (!o)
            return TALLY_NOMEM;
        b->flush_order = o;
        b->dirty_alloc = n;
    }
    b->dirty[b->n_dirty++] = idx;
    b->iv[idx].dirty = true;
    return TALLY_OK;
}

/* The row as the balance cache holds it (balance_cache.c). */
static void iv_cached(tally_batch *b, const iv_entry *e)
{
    if (!b->bal_cache)
        return;
    tally_interval iv = {.meter = (tally_meter)e->meter,
                         .pricing = (tally_pricing)e->pricing,
                         .migration = e->migration != 0,
                         .weight = e->weight,
                         .start_s = e->start_s,
                         .end_s = e->end_s};
    memcpy(iv.resource, e->resource, sizeof iv.resource);
    memcpy(iv.dim, e->dim, sizeof iv.dim);
    bal_cache_iv_put(b->bal_cache, e->account, e->row_id, &iv);
}

/* Stores an interval's row: INSERT the first time, UPDATE afterwards (of
 * end_s alone when the start has not moved). */
static tally_err iv_write(tally_batch *b, iv_entry *e)
{
    int64_t seq;
    tally_err err = batch_seq(b, &seq);
    if (err != TALLY_OK)
        return err;
    enum batch_stmt which = !e->row_id                     ? ST_IV_INS
                            : e->start_s == e->row_start_s ? ST_IV_END
                                                           : ST_IV_UPD;
    sqlite3_stmt *st = b->st[which];
    if (which == ST_IV_INS) {
        sqlite3_bind_text(st, 1, e->account, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 5, e->meter);
        sqlite3_bind_int(st, 6, e->pricing);
        sqlite3_bind_int(st, 7, e->migration);
        sqlite3_bind_text(st, 8, e->resource, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 9, e->dim, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 10, e->weight);
        sqlite3_bind_int64(st, 2, e->start_s);
    } else {
        sqlite3_bind_int64(st, 1, e->row_id);
        if (which == ST_IV_UPD)
            sqlite3_bind_int64(st, 2, e->start_s);
    }
    sqlite3_bind_int64(st, 3, e->end_s);
    sqlite3_bind_int64(st, 4, seq);
    err = batch_step(b, st);
    if (err == TALLY_OK && !e->row_id) {
        e->row_id = sqlite3_last_insert_rowid(b->l->db);
        b->new_intervals++;
    }
    if (err == TALLY_OK) {
        e->row_start_s = e->start_s;
        e->dirty = false;
        iv_cached(b, e);
    }
    return err;
}

/* Forgets an entry (writing it first if it must be kept, deleting its row
 * if it was merged into another) and puts it on the free list. */
static tally_err iv_release(tally_batch *b, uint32_t idx, bool delete_row)
{
    iv_entry *e = &b->iv[idx];
    tally_err err = TALLY_OK;
    if (delete_row && e->row_id) {
        sqlite3_bind_int64(b->st[ST_IV_DEL], 1, e->row_id);
        err = batch_step(b, b->st[ST_IV_DEL]);
        b->new_intervals--;
        if (err == TALLY_OK && b->bal_cache)
            bal_cache_iv_drop(b->bal_cache, e->account, e->row_id);
    } else if (!delete_row && e->dirty) {
        err = iv_write(b, e);
    }
    if (err != TALLY_OK)
        return err;
    idx_table_remove(&b->iv_by_end, at_time(e->key_hash, e->end_s), idx);
    idx_table_remove(&b->iv_by_start, at_time(e->key_hash, e->start_s), idx);
    lru_unlink(b, idx);
    e->live = e->dirty = false;
    e->lru_next = b->free_head;
    b->free_head = idx + 1;
    return TALLY_OK;
}

/* Twice the room for open intervals, their indexes rebuilt. */
static tally_err iv_grow(tally_batch *b)
{
    size_t cap = b->iv_cap * 2 > IV_MAX ? IV_MAX : b->iv_cap * 2;
    iv_entry *v = realloc(b->iv, cap * sizeof *v);
    if (!v)
        return TALLY_NOMEM;
    memset(v + b->iv_cap, 0, (cap - b->iv_cap) * sizeof *v);
    b->iv = v;
    b->iv_cap = cap;
    tally_err err = idx_table_reserve(&b->iv_by_end, cap);
    if (err == TALLY_OK)
        err = idx_table_reserve(&b->iv_by_start, cap);
    if (err != TALLY_OK)
        return err; /* the caller's commit fails, and the batch forgets them */
    idx_table_clear(&b->iv_by_end);
    idx_table_clear(&b->iv_by_start);
    for (size_t i = 0; i < b->iv_used; i++) {
        const iv_entry *e = &b->iv[i];
        if (!e->live)
            continue;
        idx_table_insert(&b->iv_by_end, at_time(e->key_hash, e->end_s), (uint32_t)i);
        idx_table_insert(&b->iv_by_start, at_time(e->key_hash, e->start_s), (uint32_t)i);
    }
    return TALLY_OK;
}

static tally_err iv_alloc(tally_batch *b, uint32_t *idx)
{
    if (!b->free_head && b->iv_used == b->iv_cap && b->iv_cap < IV_MAX) {
        tally_err err = iv_grow(b);
        if (err != TALLY_OK)
            return err;
    }
    if (!b->free_head && b->iv_used == b->iv_cap) {
        tally_err err = iv_release(b, b->lru_tail - 1, false);
        if (err != TALLY_OK)
            return err;
    }
    if (b->free_head) {
        *idx = b->free_head - 1;
        b->free_head = b->iv[*idx].lru_next;
    } else {
        *idx = (uint32_t)b->iv_used++;
    }
    return TALLY_OK;
}

static tally_err iv_new(tally_batch *b, uint64_t kh, const tally_event *ev, int64_t s, int64_t end)
{
    uint32_t idx;
    tally_err err = iv_alloc(b, &idx);
    if (err != TALLY_OK)
        return err;
    iv_entry *e = &b->iv[idx];
    memset(e, 0, sizeof *e);
    e->key_hash = kh;
    e->start_s = s;
    e->end_s = end;
    e->weight = ev->weight;
    e->live = true;
    e->meter = (uint8_t)ev->meter;
    e->pricing = (uint8_t)ev->pricing;
    e->migration = ev->migration;
    memcpy(e->account, ev->account, sizeof e->account);
    memcpy(e->resource, ev->resource, sizeof e->resource);
    memcpy(e->dim, ev->dim, sizeof e->dim);
    idx_table_insert(&b->iv_by_end, at_time(kh, end), idx);
    idx_table_insert(&b->iv_by_start, at_time(kh, s), idx);
    lru_push_front(b, idx);
    return mark_dirty(b, idx);
}

/* Moves one end of an open interval, keeping the indexes in step. */
static tally_err iv_move(tally_batch *b, uint32_t idx, int64_t start_s, int64_t end_s)
{
    iv_entry *e = &b->iv[idx];
    if (end_s != e->end_s) {
        idx_table_remove(&b->iv_by_end, at_time(e->key_hash, e->end_s), idx);
        idx_table_insert(&b->iv_by_end, at_time(e->key_hash, end_s), idx);
        e->end_s = end_s;
    }
    if (start_s != e->start_s) {
        idx_table_remove(&b->iv_by_start, at_time(e->key_hash, e->start_s), idx);
        idx_table_insert(&b->iv_by_start, at_time(e->key_hash, start_s), idx);
        e->start_s = start_s;
    }
    lru_touch(b, idx);
    return mark_dirty(b, idx);
}

static tally_err iv_lazy_init(tally_batch *b)
{
    if (b->iv)
        return TALLY_OK;
    b->iv = calloc(IV_FIRST, sizeof *b->iv);
    b->iv_cap = b->iv ? IV_FIRST : 0;
    if (!b->iv || idx_table_reserve(&b->iv_by_end, IV_FIRST) != TALLY_OK ||
        idx_table_reserve(&b->iv_by_start, IV_FIRST) != TALLY_OK) {
        free(b->iv);
        b->iv = NULL;
        idx_table_free(&b->iv_by_end);
        idx_table_free(&b->iv_by_start);
        return TALLY_NOMEM;
    }
    return TALLY_OK;
}

tally_err agg_interval(tally_batch *b, const tally_event *ev, uint64_t key_hash)
{
    int64_t s = ev->time_s, end = s + ev->seconds;
    tally_err err = iv_lazy_init(b);
    if (err != TALLY_OK)
        return err;
    uint64_t kh = key_hash ? key_hash : iv_key_hash(ev);
    int64_t before = iv_find(b, kh, ev, s, true);   /* ends where the event starts */
    int64_t after = iv_find(b, kh, ev, end, false); /* starts where the event ends */
    if (before >= 0 && after >= 0 && b->iv[after].end_s - b->iv[before].start_s <= IV_MAX_SPAN_S) {
        int64_t joined_end = b->iv[after].end_s;
        err = iv_release(b, (uint32_t)after, true);
        return err ? err : iv_move(b, (uint32_t)before, b->iv[before].start_s, joined_end);
    }
    if (before >= 0 && end - b->iv[before].start_s <= IV_MAX_SPAN_S)
        return iv_move(b, (uint32_t)before, b->iv[before].start_s, end);
    if (after >= 0 && b->iv[after].end_s - s <= IV_MAX_SPAN_S)
        return iv_move(b, (uint32_t)after, s, b->iv[after].end_s);
    return iv_new(b, kh, ev, s, end);
}

/* ---- Points ----------------------------------------------------------------- */

typedef struct pt_probe {
    const tally_batch *b;
    const tally_event *ev;
} pt_probe;

static bool pt_eq(const void *ctx, uint32_t idx)
{
    const pt_probe *p = ctx;
    const struct pt_key *a = &p->b->pts[idx].key;
    const tally_event *ev = p->ev;
    return a->time_s == ev->time_s && a->meter == ev->meter &&
           strcmp(a->account, ev->account) == 0 && strcmp(a->dim, ev->dim) == 0 &&
           strcmp(a->dim2, ev->dim2) == 0;
}

static uint64_t pt_hash(const tally_event *ev)
{
    char buf[2 * TALLY_NAME_MAX + 16 + 16];
    size_t n = put_str(buf, 0, ev->account, TALLY_NAME_MAX);
    n = put_str(buf, n, ev->dim, TALLY_NAME_MAX);
    n = put_str(buf, n, ev->dim2, sizeof ev->dim2);
    buf[n++] = (char)ev->meter;
    memcpy(buf + n, &ev->time_s, sizeof ev->time_s);
    return hash_bytes(buf, n + sizeof ev->time_s);
}

tally_err agg_begin(tally_batch *b, size_t n_point_events)
{
    b->n_pts = 0;
    b->n_dirty = 0;
    if (n_point_events > b->pts_alloc) {
        pt_entry *p = realloc(b->pts, n_point_events * sizeof *p);
        if (!p)
            return TALLY_NOMEM;
        b->pts = p;
        const pt_entry **o = realloc(b->pt_order, n_point_events * sizeof *o);
        if (!o)
            return TALLY_NOMEM;
        b->pt_order = o;
        b->pts_alloc = n_point_events;
    }
    return idx_table_reserve(&b->pt_index, n_point_events);
}

/* The qty stored for ev's second before this commit (0 if none). */
static tally_err pt_stored(tally_batch *b, const tally_event *ev, int64_t *out)
{
    sqlite3_stmt *st = b->st[ST_PT_GET];
    sqlite3_bind_text(st, 1, ev->account, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, ev->meter);
    sqlite3_bind_text(st, 3, ev->dim, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, ev->dim2, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, ev->time_s);
    int rc = sqlite3_step(st);
    *out = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    tally_err e = rc == SQLITE_ROW || rc == SQLITE_DONE ? TALLY_OK : ledger_sqlite_err(b->l, rc);
    sqlite3_reset(st);
    return e;
}

tally_err agg_point(tally_batch *b, const tally_event *ev)
{
    pt_probe p = {b, ev};
    uint64_t h = pt_hash(ev);
    int64_t idx = idx_table_find(&b->pt_index, h, pt_eq, &p), sum, stored = 0;
    if (idx >= 0) {
        pt_entry *pe = &b->pts[idx];
        if (__builtin_add_overflow(pe->qty, ev->weight, &sum) ||
            __builtin_add_overflow(pe->stored, sum, &stored))
            return TALLY_OVERFLOW;
        pe->qty = sum;
        return TALLY_OK;
    }
    tally_err e = b->careful ? pt_stored(b, ev, &stored) : TALLY_OK;
    if (e != TALLY_OK)
        return e;
    if (__builtin_add_overflow(stored, ev->weight, &sum))
        return TALLY_OVERFLOW;
    assert(b->n_pts < b->pts_alloc);
    pt_entry *pe = &b->pts[b->n_pts];
    *pe = (pt_entry){
        .key = {.meter = ev->meter, .time_s = ev->time_s}, .qty = ev->weight, .stored = stored};
    memcpy(pe->key.account, ev->account, sizeof pe->key.account);
    memcpy(pe->key.dim, ev->dim, sizeof pe->key.dim);
    memcpy(pe->key.dim2, ev->dim2, sizeof pe->key.dim2);
    idx_table_insert(&b->pt_index, h, (uint32_t)b->n_pts++);
    return TALLY_OK;
}

/* INSERT a new second; if it is already stored, add to it. */
static tally_err pt_write(tally_batch *b, const pt_entry *p, int64_t seq)
{
    const struct pt_key *ev = &p->key;
    if (b->bal_cache)
        bal_cache_point_put(b->bal_cache, ev->account, ev->time_s);
    for (int k = 0; k < 2; k++) {
        sqlite3_stmt *st = b->st[k == 0 ? ST_PT_INS : ST_PT_ADD];
        sqlite3_bind_text(st, 1, ev->account, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 2, ev->meter);
        sqlite3_bind_text(st, 3, ev->dim, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, ev->dim2, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, ev->time_s);
        sqlite3_bind_int64(st, 6, p->qty);
        sqlite3_bind_int64(st, 7, seq);
        tally_err err = batch_step(b, st);
        if (err != TALLY_OK)
            return err;
        if (sqlite3_changes(b->l->db) == 1) {
            b->new_points += k == 0;
            return TALLY_OK;
        }
    }
    /* The row exists (the INSERT did nothing) and the guarded UPDATE refused:
     * its sum would pass INT64_MAX. */
    snprintf(b->l->errmsg, sizeof b->l->errmsg,
             "%s quantity of %.63s at second %lld would not fit in 64 bits",
             tally_meter_name(ev->meter), ev->account, (long long)ev->time_s);
    return TALLY_OVERFLOW;
}

/* ---- Hourly sums of points (schemas/013_points_hourly.sql) -------------------- */

/* Points in their row's key order (schemas/013_points_hourly.sql): each
 * insert lands next to the one before, and a dimension's hours are runs. */
static int pt_key_cmp(const void *a, const void *b)
{
    const struct pt_key *x = &(*(const pt_entry *const *)a)->key;
    const struct pt_key *y = &(*(const pt_entry *const *)b)->key;
    int c = strcmp(x->account, y->account);
    if (!c)
        c = (x->meter > y->meter) - (x->meter < y->meter);
    if (!c)
        c = strcmp(x->dim, y->dim);
    if (!c)
        c = strcmp(x->dim2, y->dim2);
    if (!c)
        c = (x->time_s > y->time_s) - (x->time_s < y->time_s);
    return c;
}

static bool same_hour(const struct pt_key *x, const struct pt_key *y)
{
    return x->meter == y->meter && x->time_s / 3600 == y->time_s / 3600 &&
           strcmp(x->account, y->account) == 0 && strcmp(x->dim, y->dim) == 0 &&
           strcmp(x->dim2, y->dim2) == 0;
}

static tally_err hour_write(tally_batch *b, const struct pt_key *ev, int64_t qty, bool fits)
{
    sqlite3_stmt *st = b->st[ST_HR_ADD];
    sqlite3_bind_text(st, 1, ev->account, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, ev->meter);
    sqlite3_bind_text(st, 3, ev->dim, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, ev->dim2, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, ev->time_s - ev->time_s % 3600);
    if (fits)
        sqlite3_bind_int64(st, 6, qty);
    else
        sqlite3_bind_null(st, 6);
    return batch_step(b, st);
}

/* Adds this commit's points (in pt_order, sorted) to their hours: one row
 * write per dimension and hour, however many seconds the commit added to
 * it. */
static tally_err hours_flush(tally_batch *b)
{
    tally_err err = TALLY_OK;
    for (size_t i = 0; err == TALLY_OK && i < b->n_pts;) {
        const struct pt_key *ev = &b->pt_order[i]->key;
        int64_t sum = 0;
        bool fits = true;
        size_t j = i;
        for (; j < b->n_pts && same_hour(ev, &b->pt_order[j]->key); j++)
            fits = fits && !__builtin_add_overflow(sum, b->pt_order[j]->qty, &sum);
        err = hour_write(b, ev, sum, fits);
        i = j;
    }
    return err;
}

static int flush_cmp(const void *pa, const void *pb)
{
    const struct iv_flush *a = pa, *b = pb;
    if ((a->row_id == 0) != (b->row_id == 0))
        return a->row_id == 0 ? 1 : -1;
    if (a->row_id != b->row_id)
        return a->row_id < b->row_id ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

/* Writes the commit's changed intervals, stored rows in rowid order (each
 * page of the table is then visited once, not once per row: with 126,000
 * open intervals a commit the updates in arrival order were a third of
 * ingest's CPU), then the new rows. */
static tally_err iv_flush_all(tally_batch *b)
{
    size_t n = 0;
    for (size_t i = 0; i < b->n_dirty; i++) {
        const iv_entry *e = &b->iv[b->dirty[i]];
        if (e->live && e->dirty)
            b->flush_order[n++] = (struct iv_flush){e->row_id, b->dirty[i]};
    }
    b->n_dirty = 0;
    if (n > 1)
        qsort(b->flush_order, n, sizeof *b->flush_order, flush_cmp);
    tally_err err = TALLY_OK;
    for (size_t i = 0; err == TALLY_OK && i < n; i++)
        err = iv_write(b, &b->iv[b->flush_order[i].idx]);
    return err;
}

tally_err agg_flush(tally_batch *b)
{
    int64_t seq = 0;
    tally_err err = iv_flush_all(b);
    if (err == TALLY_OK && b->n_pts)
        err = batch_seq(b, &seq);
    for (size_t i = 0; i < b->n_pts; i++)
        b->pt_order[i] = &b->pts[i];
    if (b->n_pts > 1)
        qsort(b->pt_order, b->n_pts, sizeof *b->pt_order, pt_key_cmp);
    for (size_t i = 0; err == TALLY_OK && i < b->n_pts; i++)
        err = pt_write(b, b->pt_order[i], seq);
    if (err == TALLY_OK && b->n_pts)
        err = hours_flush(b);
    return err;
}

tally_err agg_init(tally_batch *b)
{
    (void)b; /* intervals are set up on first use; points per commit */
    return TALLY_OK;
}

void agg_forget(tally_batch *b)
{
    b->iv_used = 0;
    b->lru_head = b->lru_tail = b->free_head = 0;
    b->n_dirty = 0;
    b->n_pts = 0;
    idx_table_clear(&b->iv_by_end);
    idx_table_clear(&b->iv_by_start);
}

void agg_free(tally_batch *b)
{
    free(b->iv);
    b->iv = NULL;
    free(b->dirty);
    b->dirty = NULL;
    free(b->flush_order);
    b->flush_order = NULL;
    b->n_dirty = b->dirty_alloc = 0;
    free(b->pts);
    b->pts = NULL;
    free(b->pt_order);
    b->pt_order = NULL;
    b->n_pts = b->pts_alloc = 0;
    idx_table_free(&b->iv_by_end);
    idx_table_free(&b->iv_by_start);
    idx_table_free(&b->pt_index);
    b->iv_used = b->iv_cap = 0;
    b->lru_head = b->lru_tail = b->free_head = 0;
}
