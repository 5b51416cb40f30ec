/* Cells into invoice lines (SPEC sections 3 and 5).
 *
 * A line is one (meter, kind, sku/dim, dim2, pricing, migration, unit price):
 * its quantity sums base units and its amount is the exact sum of its
 * pieces rounded half-up once. Lines come out in canonical order, the order
 * of that key; the exact value of each line per credit epoch is kept for
 * rate_credits.c. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rate_int.h"

#define CMP(x, y) (((x) > (y)) - ((x) < (y)))

/* The canonical key order shared by pieces and lines. */
static int key_cmp(tally_meter ma, tally_line_kind ka, const char *sa, const char *da,
                   tally_pricing pa, bool mga, int64_t pra, tally_meter mb, tally_line_kind kb,
                   const char *sb, const char *db, tally_pricing pb, bool mgb, int64_t prb)
{
    int s;

    if ((s = CMP(ma, mb)) != 0 || (s = CMP(ka, kb)) != 0)
        return s;
    if ((s = strcmp(sa, sb)) != 0 || (s = strcmp(da, db)) != 0)
        return s;
    if ((s = CMP(pa, pb)) != 0 || (s = CMP(mga, mgb)) != 0)
        return s;
    return CMP(pra, prb);
}

static int piece_key_cmp(const rate_piece *a, const rate_piece *b)
{
    return key_cmp(a->meter, a->kind, a->sku, a->dim2, a->pricing, a->migration, a->price_nano,
                   b->meter, b->kind, b->sku, b->dim2, b->pricing, b->migration, b->price_nano);
}

static int cmp_piece(const void *a, const void *b)
{
    const rate_piece *x = a, *y = b;
    int s = piece_key_cmp(x, y);

    return s != 0 ? s : CMP(x->epoch, y->epoch);
}

int rate_line_cmp(const tally_line *a, const tally_line *b)
{
    return key_cmp(a->meter, a->kind, a->sku, a->dim2, a->pricing, a->migration, a->unit_price_nano,
                   b->meter, b->kind, b->sku, b->dim2, b->pricing, b->migration,
                   b->unit_price_nano);
}

/* Starts line l from piece p (quantity and amount are added later). */
static void line_from_piece(tally_line *l, const rate_piece *p)
{
    memset(l, 0, sizeof *l);
    l->kind = p->kind;
    l->meter = p->meter;
    l->pricing = p->pricing;
    l->migration = p->migration;
    snprintf(l->sku, sizeof l->sku, "%s", p->sku);
    snprintf(l->dim2, sizeof l->dim2, "%s", p->dim2);
    l->unit_price_nano = p->price_nano;
    l->adjusts = p->kind;
}

/* Merges cells [i, j) (one key) into line l; num points to its epochs. */
static tally_err merge_line(rate_ctx *c, size_t i, size_t j, tally_line *l, __int128 *num)
{
    __int128 total = 0;
    int64_t div = tally_meter_unit_divisor(c->cells[i].meter);

    line_from_piece(l, &c->cells[i]);
    for (size_t k = i; k < j; k++) {
        const rate_piece *p = &c->cells[k];
        if (__builtin_add_overflow(l->quantity, p->qty, &l->quantity) ||
            __builtin_add_overflow(total, p->num, &total) ||
            __builtin_add_overflow(num[p->epoch], p->num, &num[p->epoch]))
            return rate_fail(c, TALLY_OVERFLOW, "line %s %s overflows",
                             tally_line_kind_name(p->kind), p->sku);
    }
    if (div <= 0 ||
        tally_money_div_round(total, tally_money_denominator(div), &l->amount_minor) != TALLY_OK)
        return rate_fail(c, TALLY_OVERFLOW, "amount of line %s %s overflows",
                         tally_line_kind_name(l->kind), l->sku);
    return TALLY_OK;
}

static size_t count_lines(const rate_ctx *c, size_t n_cells)
{
    size_t n = 0;

    for (size_t i = 0; i < n_cells; i++)
        if (i == 0 || piece_key_cmp(&c->cells[i - 1], &c->cells[i]) != 0)
            n++;
    return n;
}

tally_err rate_build_lines(rate_ctx *c)
{
    const tally_rating_input *in = c->in;
    size_t n, total, cells, l = 0, n_cells = rate_cells_compact(c);
    tally_err err;

    if (n_cells > 1)
        qsort(c->cells, n_cells, sizeof *c->cells, cmp_piece);
    n = count_lines(c, n_cells);
    if (__builtin_add_overflow(n, in->n_extra_lines, &total) ||
        __builtin_mul_overflow(n, c->n_epochs, &cells))
        return TALLY_NOMEM;
    c->lines = calloc(total + 1, sizeof *c->lines);
    c->line_num = calloc(cells + 1, sizeof *c->line_num);
    if (c->lines == NULL || c->line_num == NULL)
        return TALLY_NOMEM;
    for (size_t i = 0, j; i < n_cells; i = j, l++) {
        for (j = i + 1; j < n_cells && piece_key_cmp(&c->cells[i], &c->cells[j]) == 0;)
            j++;
        err = merge_line(c, i, j, &c->lines[l], &c->line_num[l * c->n_epochs]);
        if (err != TALLY_OK)
            return err;
    }
    assert(l == n);
    for (size_t i = 0; i < in->n_extra_lines; i++) {
        c->lines[n + i] = in->extra_lines[i];
        c->lines[n + i].credited_minor = 0;
    }
    c->n_usage_lines = n;
    c->n_lines = total;
    return TALLY_OK;
}
