/* Interned names and the cell table (see rate_int.h).
 *
 * Both are open-addressed hash tables with linear probing, kept at most half
 * full and doubled when needed. The hash is FNV-1a with a finalizer: names
 * are short and come from our own input, so a simple hash is enough. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "rate_int.h"

#define FNV_OFFSET 1469598103934665603ULL
#define FNV_PRIME  1099511628211ULL

/* FNV-1a mixes its low bits poorly and tables index by the low bits, so
 * hashes end with a 64-bit finalizer (MurmurHash3's fmix64). */
static uint64_t fmix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 33);
}

static uint64_t fnv_str(const char *s)
{
    uint64_t h = FNV_OFFSET;

    while (*s)
        h = (h ^ (unsigned char)*s++) * FNV_PRIME;
    return fmix(h);
}

static tally_err names_grow(rate_names *t)
{
    size_t cap = t->cap ? 2 * t->cap : 64;
    const char **keys = calloc(cap, sizeof *keys);
    uint32_t *ids = calloc(cap, sizeof *ids);

    if (keys == NULL || ids == NULL || cap < t->cap) {
        free(keys);
        free(ids);
        return TALLY_NOMEM;
    }
    for (size_t i = 0; i < t->cap; i++) {
        size_t j;
        if (t->keys[i] == NULL)
            continue;
        for (j = fnv_str(t->keys[i]) & (cap - 1); keys[j] != NULL; j = (j + 1) & (cap - 1))
            ;
        keys[j] = t->keys[i];
        ids[j] = t->ids[i];
    }
    free(t->keys);
    free(t->ids);
    t->keys = keys;
    t->ids = ids;
    t->cap = cap;
    return TALLY_OK;
}

tally_err rate_name_id(rate_names *t, const char *s, uint32_t *id)
{
    tally_err err;
    size_t j;

    if (2 * (t->n + 1) > t->cap && (err = names_grow(t)) != TALLY_OK)
        return err;
    for (j = fnv_str(s) & (t->cap - 1); t->keys[j] != NULL; j = (j + 1) & (t->cap - 1)) {
        if (strcmp(t->keys[j], s) == 0) {
            *id = t->ids[j];
            return TALLY_OK;
        }
    }
    if (t->n >= UINT32_MAX)
        return TALLY_NOMEM;
    t->keys[j] = s;
    t->ids[j] = (uint32_t)t->n++;
    *id = t->ids[j];
    return TALLY_OK;
}

void rate_names_free(rate_names *t)
{
    free(t->keys);
    free(t->ids);
    memset(t, 0, sizeof *t);
}

/* Hash of a cell's key: everything but the sums and the borrowed strings
 * (whose ids stand for them), mixed a 64-bit word at a time. */
static uint64_t cell_hash(const rate_piece *p)
{
    uint64_t w[4] = {(uint64_t)p->kind << 48 | (uint64_t)p->meter << 32 |
                         (uint64_t)p->pricing << 16 | (uint64_t)p->migration,
                     (uint64_t)p->sku_id << 32 | p->dim2_id, (uint64_t)p->price_nano,
                     (uint64_t)p->epoch};
    uint64_t h = FNV_OFFSET;

    for (size_t i = 0; i < 4; i++) {
        h = (h ^ w[i]) * 0x9e3779b97f4a7c15ULL;
        h ^= h >> 29;
    }
    return fmix(h);
}

static bool cell_eq(const rate_piece *a, const rate_piece *b)
{
    return a->sku_id == b->sku_id && a->dim2_id == b->dim2_id && a->epoch == b->epoch &&
           a->price_nano == b->price_nano && a->kind == b->kind && a->meter == b->meter &&
           a->pricing == b->pricing && a->migration == b->migration;
}

static rate_piece *cell_slot(rate_piece *cells, size_t cap, const rate_piece *p)
{
    size_t j = cell_hash(p) & (cap - 1);

    while (cells[j].sku != NULL && !cell_eq(&cells[j], p))
        j = (j + 1) & (cap - 1);
    return &cells[j];
}

static tally_err cells_grow(rate_ctx *c)
{
    size_t cap = c->cap_cells ? 2 * c->cap_cells : 64;
    rate_piece *cells;

    if (cap < c->cap_cells || (cells = calloc(cap, sizeof *cells)) == NULL)
        return TALLY_NOMEM;
    for (size_t i = 0; i < c->cap_cells; i++)
        if (c->cells[i].sku != NULL)
            *cell_slot(cells, cap, &c->cells[i]) = c->cells[i];
    free(c->cells);
    c->cells = cells;
    c->cap_cells = cap;
    return TALLY_OK;
}

tally_err rate_push_piece(rate_ctx *c, const rate_piece *p)
{
    rate_piece key = *p, *slot;
    tally_err err;

    assert(p->epoch < c->n_epochs && p->sku != NULL && p->dim2 != NULL);
    if ((err = rate_name_id(&c->names, p->sku, &key.sku_id)) != TALLY_OK ||
        (err = rate_name_id(&c->names, p->dim2, &key.dim2_id)) != TALLY_OK)
        return err;
    if (2 * (c->n_cells + 1) > c->cap_cells && (err = cells_grow(c)) != TALLY_OK)
        return err;
    slot = cell_slot(c->cells, c->cap_cells, &key);
    if (slot->sku == NULL) {
        *slot = key;
        c->n_cells++;
        return TALLY_OK;
    }
    if (__builtin_add_overflow(slot->qty, p->qty, &slot->qty) ||
        __builtin_add_overflow(slot->num, p->num, &slot->num))
        return rate_fail(c, TALLY_OVERFLOW, "%s %s overflows", tally_line_kind_name(p->kind),
                         p->sku);
    return TALLY_OK;
}

size_t rate_cells_compact(rate_ctx *c)
{
    size_t k = 0;

    for (size_t i = 0; i < c->cap_cells; i++)
        if (c->cells[i].sku != NULL)
            c->cells[k++] = c->cells[i];
    assert(k == c->n_cells);
    return k;
}
