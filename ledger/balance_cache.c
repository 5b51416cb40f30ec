/* What a batch remembers between its commits for the balance refresh
 * (ledger_int.h, "What a batch remembers between its commits").
 *
 * Entries are found by the account's hash; they live in one array that is
 * emptied as a whole when it is full, and an account whose interval rows
 * would take the rows held past BAL_CACHE_ROWS lets all of its rows go, so
 * memory stays bounded however long the meter runs. */
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"
#include "tally/event.h"

#define DAY_S 86400

struct bal_cache {
    bal_cache_iv *order; /* bal_cache_iv_rows' working copy */
    size_t cap_order;
    bal_cache_entry *v;
    size_t n, cap;    /* cap doubles from 64 up to BAL_CACHE_ACCOUNTS */
    size_t rows;      /* interval rows held by all entries */
    size_t adj_lines; /* adjustment lines held by all entries */
    size_t adj_held;  /* entries whose adjustments are held (adj_ok) */
    idx_table index;
};

typedef struct probe {
    const bal_cache *c;
    const char *account;
} probe;

static uint64_t account_hash(const char *account)
{
    uint64_t h[2];
    tally_hash128(account, strlen(account), 1, h);
    return h[0];
}

static bool entry_eq(const void *ctx, uint32_t idx)
{
    const probe *p = ctx;
    return strcmp(p->c->v[idx].acct.id, p->account) == 0;
}

tally_err bal_cache_create(bal_cache **out)
{
    bal_cache *c = calloc(1, sizeof *c);
    if (!c)
        return TALLY_NOMEM;
    *out = c;
    return TALLY_OK;
}

/* e holds no window and no row. */
static void rows_release(bal_cache *c, bal_cache_entry *e)
{
    c->rows -= e->n_ivs;
    free(e->ivs);
    e->ivs = NULL;
    e->n_ivs = e->cap_ivs = 0;
    for (size_t i = 0; i < BAL_CACHE_WINDOWS; i++)
        e->win[i].ok = false;
}

static void adj_drop(bal_cache *c, bal_cache_entry *e)
{
    c->adj_held -= e->adj_ok;
    c->adj_lines -= e->n_adj;
    e->n_adj = 0;
    e->adj_ok = false;
}

void bal_cache_clear(bal_cache *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++) {
        rows_release(c, &c->v[i]);
        free(c->v[i].adj);
    }
    c->n = 0;
    c->rows = 0;
    c->adj_lines = 0;
    c->adj_held = 0;
    if (c->index.slots)
        idx_table_clear(&c->index);
}

void bal_cache_destroy(bal_cache *c)
{
    if (!c)
        return;
    bal_cache_clear(c);
    free(c->order);
    free(c->v);
    idx_table_free(&c->index);
    free(c);
}

bal_cache_entry *bal_cache_find(bal_cache *c, const char *account)
{
    if (!c || !c->n)
        return NULL;
    probe p = {c, account};
    int64_t i = idx_table_find(&c->index, account_hash(account), entry_eq, &p);
    return i >= 0 ? &c->v[i] : NULL;
}

/* Room for one more entry: the array doubles (a batch that refreshes one
 * account, as an HTTP request's does, allocates little), and at
 * BAL_CACHE_ACCOUNTS the cache starts again, empty. */
static tally_err entry_room(bal_cache *c)
{
    if (c->n == BAL_CACHE_ACCOUNTS)
        bal_cache_clear(c);
    if (c->n < c->cap)
        return TALLY_OK;
    tally_err e = ledger_grow((void **)&c->v, c->n, &c->cap, sizeof *c->v, 64);
    if (e == TALLY_OK) /* emptied: the entries go back in */
        e = idx_table_reserve(&c->index, c->cap);
    for (size_t i = 0; e == TALLY_OK && i < c->n; i++)
        idx_table_insert(&c->index, account_hash(c->v[i].acct.id), (uint32_t)i);
    return e;
}

tally_err bal_cache_add(bal_cache *c, const tally_account *acct, bal_cache_entry **out)
{
    *out = NULL;
    tally_err err = entry_room(c);
    if (err != TALLY_OK) {
        bal_cache_clear(c); /* the index may be half rebuilt */
        return err;
    }
    bal_cache_entry *e = &c->v[c->n];
    memset(e, 0, sizeof *e);
    e->acct = *acct;
    idx_table_insert(&c->index, account_hash(acct->id), (uint32_t)c->n++);
    *out = e;
    return TALLY_OK;
}

bool bal_cache_iv_in(int64_t row_start, int64_t row_end, int64_t start, int64_t end)
{
    /* INV_Q_INTERVALS bound to (start - 1 day, end + 1 day): start_s > ?2 -
     * 86400 AND start_s < ?3 AND end_s > ?2. */
    return row_start > start - 2 * DAY_S && row_start < end + DAY_S && row_end > start - DAY_S;
}

/* Whether one of e's windows reads a row of these times. */
static bool held(const bal_cache_entry *e, int64_t row_start, int64_t row_end)
{
    for (size_t k = 0; k < BAL_CACHE_WINDOWS; k++)
        if (e->win[k].ok && bal_cache_iv_in(row_start, row_end, e->win[k].start, e->win[k].end))
            return true;
    return false;
}

static int id_order(const void *pa, const void *pb)
{
    const bal_cache_iv *a = pa, *b = pb;
    return a->id < b->id ? -1 : a->id > b->id;
}

const bal_cache_win *bal_cache_window(const bal_cache_entry *e, int64_t start, int64_t end)
{
    for (size_t i = 0; i < BAL_CACHE_WINDOWS; i++)
        if (e->win[i].ok && e->win[i].start == start && e->win[i].end == end)
            return &e->win[i];
    return NULL;
}

/* The slot a new window goes into: one holding nothing, else each slot in
 * turn (an account with more open periods than slots reads the rest from
 * the ledger, correctly, only slower). A window let go takes with it the
 * rows no other window reads. */
static bal_cache_win *win_slot(bal_cache *c, bal_cache_entry *e)
{
    for (size_t i = 0; i < BAL_CACHE_WINDOWS; i++)
        if (!e->win[i].ok)
            return &e->win[i];
    bal_cache_win *w = &e->win[e->win_next++ % BAL_CACHE_WINDOWS];
    w->ok = false;
    size_t k = 0;
    for (size_t i = 0; i < e->n_ivs; i++)
        if (held(e, e->ivs[i].iv.start_s, e->ivs[i].iv.end_s))
            e->ivs[k++] = e->ivs[i];
    c->rows -= e->n_ivs - k;
    e->n_ivs = k;
    return w;
}

/* The index of row id among v[0..n) (in id order), or where it would go
 * (*found false). */
static size_t iv_index(const bal_cache_iv *v, size_t n, int64_t id, bool *found)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < n && v[lo].id == id;
    return lo;
}

/* Room for n more rows in e; false (and e's rows and windows let go) past
 * the bound or without memory. */
static bool iv_room(bal_cache *c, bal_cache_entry *e, size_t n)
{
    bool ok = c->rows + n <= BAL_CACHE_ROWS;
    while (ok && e->n_ivs + n > e->cap_ivs)
        ok = ledger_grow((void **)&e->ivs, e->cap_ivs, &e->cap_ivs, sizeof *e->ivs, 8) == TALLY_OK;
    if (!ok)
        rows_release(c, e);
    return ok;
}

/* The rows e does not hold yet are added at its end, then put in id order;
 * those it holds are read again (the writes kept them current). */
void bal_cache_iv_load(bal_cache *c, bal_cache_entry *e, int64_t start, int64_t end,
                       const tally_interval *rows, const int64_t *ids, size_t n)
{
    bal_cache_win *w = win_slot(c, e);
    size_t had = e->n_ivs, add = 0;
    bool found;
    for (size_t i = 0; i < n; i++) {
        iv_index(e->ivs, had, ids[i], &found);
        add += !found;
    }
    if (add && !iv_room(c, e, add))
        return;
    for (size_t i = 0; i < n; i++) {
        size_t at = iv_index(e->ivs, had, ids[i], &found);
        if (found)
            e->ivs[at].iv = rows[i];
        else
            e->ivs[e->n_ivs++] = (bal_cache_iv){ids[i], rows[i]};
    }
    c->rows += add;
    if (add)
        qsort(e->ivs, e->n_ivs, sizeof *e->ivs, id_order);
    *w = (bal_cache_win){.ok = true, .start = start, .end = end};
}

static void iv_remove(bal_cache *c, bal_cache_entry *e, size_t i)
{
    memmove(&e->ivs[i], &e->ivs[i + 1], (e->n_ivs - i - 1) * sizeof *e->ivs);
    e->n_ivs--;
    c->rows--;
}

/* The row written: updated, added, or removed when no window reads it. */
void bal_cache_iv_put(bal_cache *c, const char *account, int64_t id, const tally_interval *iv)
{
    bal_cache_entry *e = bal_cache_find(c, account);
    if (!e)
        return;
    /* A row only grows, so one that starts before the bound always did. */
    if (e->adj_ok && iv->start_s < e->adj_reads_to)
        adj_drop(c, e);
    bool found;
    size_t i = iv_index(e->ivs, e->n_ivs, id, &found);
    bool in = held(e, iv->start_s, iv->end_s);
    if (found && in) {
        e->ivs[i].iv = *iv;
    } else if (found) {
        iv_remove(c, e, i);
    } else if (in && iv_room(c, e, 1)) { /* a new row: at the end, as ids grow */
        memmove(&e->ivs[i + 1], &e->ivs[i], (e->n_ivs - i) * sizeof *e->ivs);
        e->ivs[i] = (bal_cache_iv){id, *iv};
        e->n_ivs++;
        c->rows++;
    }
}

void bal_cache_iv_drop(bal_cache *c, const char *account, int64_t id)
{
    bal_cache_entry *e = bal_cache_find(c, account);
    if (!e)
        return;
    if (e->adj_ok) /* the row's times are not known here */
        adj_drop(c, e);
    bool found;
    size_t i = iv_index(e->ivs, e->n_ivs, id, &found);
    if (found)
        iv_remove(c, e, i);
}

void bal_cache_point_put(bal_cache *c, const char *account, int64_t t_s)
{
    if (!c || !c->adj_held) /* once per point written: no lookup for nothing */
        return;
    bal_cache_entry *e = bal_cache_find(c, account);
    if (e && e->adj_ok && t_s < e->adj_reads_to)
        adj_drop(c, e);
}

bool bal_cache_adj_get(const bal_cache_entry *e, const char *period, tally_line **v, size_t *n,
                       size_t *cap)
{
    if (!e->adj_ok || strcmp(e->adj_period, period) != 0)
        return false;
    size_t need = *n + e->n_adj;
    if (need > *cap) {
        tally_line *p = realloc(*v, need * sizeof *p);
        if (!p)
            return false; /* the caller works them out (and finds no memory either) */
        *v = p;
        *cap = need;
    }
    if (e->n_adj)
        memcpy(*v + *n, e->adj, e->n_adj * sizeof **v);
    *n += e->n_adj;
    return true;
}

void bal_cache_adj_keep(bal_cache *c, bal_cache_entry *e, const char *period, int64_t reads_to,
                        const tally_line *v, size_t n)
{
    adj_drop(c, e);
    if (strlen(period) >= sizeof e->adj_period || c->adj_lines + n > BAL_CACHE_ADJ_LINES)
        return;
    if (n > e->cap_adj) {
        tally_line *p = realloc(e->adj, n * sizeof *p);
        if (!p)
            return;
        e->adj = p;
        e->cap_adj = n;
    }
    if (n)
        memcpy(e->adj, v, n * sizeof *v);
    e->n_adj = n;
    c->adj_lines += n;
    memcpy(e->adj_period, period, strlen(period) + 1);
    e->adj_reads_to = reads_to;
    e->adj_ok = true;
    c->adj_held++;
}

static int iv_order(const void *pa, const void *pb)
{
    const bal_cache_iv *a = pa, *b = pb;
    if (a->iv.start_s != b->iv.start_s)
        return a->iv.start_s < b->iv.start_s ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

tally_err bal_cache_iv_rows(bal_cache *c, const bal_cache_entry *e, const bal_cache_win *w,
                            tally_interval **out, size_t *cap, size_t *n_out)
{
    /* The gather's order is the index's, (account, start_s, id): the
     * window's rows copied and sorted, unless they are in that order
     * already (rows opened one after the other usually are). */
    if (e->n_ivs > c->cap_order) {
        bal_cache_iv *v = realloc(c->order, e->n_ivs * sizeof *v);
        if (!v)
            return TALLY_NOMEM;
        c->order = v;
        c->cap_order = e->n_ivs;
    }
    size_t n = 0;
    bool sorted = true;
    for (size_t i = 0; i < e->n_ivs; i++) {
        const bal_cache_iv *r = &e->ivs[i];
        if (!bal_cache_iv_in(r->iv.start_s, r->iv.end_s, w->start, w->end))
            continue;
        if (n && iv_order(&c->order[n - 1], r) > 0)
            sorted = false;
        c->order[n++] = *r;
    }
    if (n > *cap) {
        tally_interval *v = realloc(*out, n * sizeof *v);
        if (!v)
            return TALLY_NOMEM;
        *out = v;
        *cap = n;
    }
    if (!sorted)
        qsort(c->order, n, sizeof *c->order, iv_order);
    for (size_t i = 0; i < n; i++)
        (*out)[i] = c->order[i].iv;
    *n_out = n;
    return TALLY_OK;
}
