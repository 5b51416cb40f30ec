/* A hash index for the batch's in-memory maps: slots of (entry index, low
 * 32 bits of its hash) with linear probing, kept at most half full. Removal
 * shifts later entries of the same probe run back (no tombstones), so
 * long-lived tables such as the open-interval map never degrade. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"

#define IDX_MIN_CAP 64

tally_err idx_table_reserve(idx_table *t, size_t n)
{
    size_t cap = IDX_MIN_CAP;
    while (cap < 2 * n)
        cap *= 2;
    if (cap > (size_t)1 << 31)
        return TALLY_NOMEM;
    if (!t->slots || cap > t->mask + 1) {
        idx_slot *slots = calloc(cap, sizeof *slots);
        if (!slots)
            return TALLY_NOMEM;
        idx_table_free(t);
        t->slots = slots;
        t->mask = cap - 1;
        t->used = 0;
        return TALLY_OK;
    }
    idx_table_clear(t);
    return TALLY_OK;
}

void idx_table_clear(idx_table *t)
{
    if (t->slots && t->used)
        memset(t->slots, 0, (t->mask + 1) * sizeof *t->slots);
    t->used = 0;
}

void idx_table_free(idx_table *t)
{
    free(t->slots);
    memset(t, 0, sizeof *t);
}

int64_t idx_table_find(const idx_table *t, uint64_t hash, idx_eq_fn eq, const void *ctx)
{
    if (!t->slots)
        return -1;
    uint32_t h = (uint32_t)hash;
    for (size_t i = h & t->mask; t->slots[i].idx1; i = (i + 1) & t->mask)
        if (t->slots[i].h == h && eq(ctx, t->slots[i].idx1 - 1))
            return t->slots[i].idx1 - 1;
    return -1;
}

void idx_table_prefetch(const idx_table *t, uint64_t hash)
{
    if (t->slots)
        __builtin_prefetch(&t->slots[(uint32_t)hash & t->mask]);
}

int64_t idx_table_peek(const idx_table *t, uint64_t hash)
{
    if (!t->slots)
        return -1;
    const idx_slot *s = &t->slots[(uint32_t)hash & t->mask];
    return s->idx1 && s->h == (uint32_t)hash ? (int64_t)s->idx1 - 1 : -1;
}

void idx_table_insert(idx_table *t, uint64_t hash, uint32_t idx)
{
    assert(t->slots && 2 * (t->used + 1) <= t->mask + 1);
    uint32_t h = (uint32_t)hash;
    size_t i = h & t->mask;
    while (t->slots[i].idx1)
        i = (i + 1) & t->mask;
    t->slots[i] = (idx_slot){idx + 1, h};
    t->used++;
}

/* Whether home slot k lies cyclically in (i, j]: the entry at j may not
 * move back to i. */
static bool stays(size_t i, size_t j, size_t k)
{
    return i <= j ? (i < k && k <= j) : (i < k || k <= j);
}

void idx_table_remove(idx_table *t, uint64_t hash, uint32_t idx)
{
    size_t i = (uint32_t)hash & t->mask;
    while (t->slots[i].idx1 != idx + 1) {
        assert(t->slots[i].idx1);
        i = (i + 1) & t->mask;
    }
    for (size_t j = (i + 1) & t->mask; t->slots[j].idx1; j = (j + 1) & t->mask) {
        if (stays(i, j, t->slots[j].h & t->mask))
            continue;
        t->slots[i] = t->slots[j];
        i = j;
    }
    t->slots[i] = (idx_slot){0, 0};
    t->used--;
}
