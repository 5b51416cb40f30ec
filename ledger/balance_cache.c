/* What a batch remembers between its commits for the balance refresh
 * (ledger_int.h, "What a batch remembers between its commits").
 *
 * Entries are found by the account's hash; they live in one array that is
 * emptied as a whole when it is full, and a window of interval rows that
 * would take the rows held past BAL_CACHE_ROWS is dropped, so memory stays
 * bounded however long the meter runs. */
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

static void win_release(bal_cache *c, bal_cache_win *w)
{
    c->rows -= w->n;
    free(w->ivs);
    memset(w, 0, sizeof *w);
}

static void entry_release(bal_cache *c, bal_cache_entry *e)
{
    for (size_t i = 0; i < BAL_CACHE_WINDOWS; i++)
        win_release(c, &e->win[i]);
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
        entry_release(c, &c->v[i]);
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

/* Room for one more row in w; false (and w's rows dropped) past the bound. */
static bool iv_room(bal_cache *c, bal_cache_win *w)
{
    if (c->rows < BAL_CACHE_ROWS &&
        ledger_grow((void **)&w->ivs, w->n, &w->cap, sizeof *w->ivs, 8) == TALLY_OK)
        return true;
    win_release(c, w);
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
 * the ledger, correctly, only slower). */
static bal_cache_win *win_slot(bal_cache_entry *e)
{
    for (size_t i = 0; i < BAL_CACHE_WINDOWS; i++)
        if (!e->win[i].ok)
            return &e->win[i];
    return &e->win[e->win_next++ % BAL_CACHE_WINDOWS];
}

/* A window's rows are kept in id order, so that the batch's writes (one
 * per interval row it changes) find theirs by binary search. */
void bal_cache_iv_load(bal_cache *c, bal_cache_entry *e, int64_t start, int64_t end,
                       const tally_interval *rows, const int64_t *ids, size_t n)
{
    bal_cache_win *w = win_slot(e);
    win_release(c, w);
    w->ok = true;
    w->start = start;
    w->end = end;
    for (size_t i = 0; i < n; i++) {
        if (!iv_room(c, w))
            return;
        w->ivs[w->n++] = (bal_cache_iv){ids[i], rows[i]};
        c->rows++;
    }
    if (w->n > 1)
        qsort(w->ivs, w->n, sizeof *w->ivs, id_order);
}

/* The row's index, or where it would go (*found false). */
static size_t iv_index(const bal_cache_win *w, int64_t id, bool *found)
{
    size_t lo = 0, hi = w->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (w->ivs[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < w->n && w->ivs[lo].id == id;
    return lo;
}

static void iv_remove(bal_cache *c, bal_cache_win *w, size_t i)
{
    memmove(&w->ivs[i], &w->ivs[i + 1], (w->n - i - 1) * sizeof *w->ivs);
    w->n--;
    c->rows--;
}

/* The row written into one window: updated, added, or removed when it no
 * longer belongs to what the window's gather reads. */
static void win_put(bal_cache *c, bal_cache_win *w, int64_t id, const tally_interval *iv)
{
    bool found;
    size_t i = iv_index(w, id, &found);
    bool in = bal_cache_iv_in(iv->start_s, iv->end_s, w->start, w->end);
    if (found && in) {
        w->ivs[i].iv = *iv;
    } else if (found) {
        iv_remove(c, w, i);
    } else if (in && iv_room(c, w)) { /* a new row: at the end, as ids grow */
        memmove(&w->ivs[i + 1], &w->ivs[i], (w->n - i) * sizeof *w->ivs);
        w->ivs[i] = (bal_cache_iv){id, *iv};
        w->n++;
        c->rows++;
    }
}

void bal_cache_iv_put(bal_cache *c, const char *account, int64_t id, const tally_interval *iv)
{
    bal_cache_entry *e = bal_cache_find(c, account);
    if (!e)
        return;
    /* A row only grows, so one that starts before the bound always did. */
    if (e->adj_ok && iv->start_s < e->adj_reads_to)
        adj_drop(c, e);
    for (size_t k = 0; k < BAL_CACHE_WINDOWS; k++)
        if (e->win[k].ok)
            win_put(c, &e->win[k], id, iv);
}

void bal_cache_iv_drop(bal_cache *c, const char *account, int64_t id)
{
    bal_cache_entry *e = bal_cache_find(c, account);
    if (!e)
        return;
    if (e->adj_ok) /* the row's times are not known here */
        adj_drop(c, e);
    for (size_t k = 0; k < BAL_CACHE_WINDOWS; k++) {
        bool found = false;
        size_t i = e->win[k].ok ? iv_index(&e->win[k], id, &found) : 0;
        if (found)
            iv_remove(c, &e->win[k], i);
    }
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

tally_err bal_cache_iv_rows(bal_cache *c, const bal_cache_win *w, tally_interval **out, size_t *cap,
                            size_t *n_out)
{
    /* The gather's order is the index's, (account, start_s, id): a sorted
     * copy, the window staying in id order. */
    if (w->n > c->cap_order) {
        bal_cache_iv *v = realloc(c->order, w->n * sizeof *v);
        if (!v)
            return TALLY_NOMEM;
        c->order = v;
        c->cap_order = w->n;
    }
    if (w->n > *cap) {
        tally_interval *v = realloc(*out, w->n * sizeof *v);
        if (!v)
            return TALLY_NOMEM;
        *out = v;
        *cap = w->n;
    }
    if (w->n)
        memcpy(c->order, w->ivs, w->n * sizeof *w->ivs);
    if (w->n > 1)
        qsort(c->order, w->n, sizeof *c->order, iv_order);
    for (size_t i = 0; i < w->n; i++)
        (*out)[i] = c->order[i].iv;
    *n_out = w->n;
    return TALLY_OK;
}
