/* Minimum billable duration (SPEC section 2).
 *
 * Accelerator usage is grouped by (instance, sku, pricing). A run is a
 * maximal chain of intervals in which each next interval starts at most
 * min_billable_s after the latest end so far (a longer gap starts a new
 * run); min_billable_s comes from the card in force at the run's start. The
 * whole input is searched (it reaches one day past each edge of the period),
 * and a run belongs to the period that holds its start.
 *
 * A run whose span (latest end - first start) is shorter than the minimum is
 * topped up with a MINIMUM line: min_billable_s x the most cards held at once
 * in the run, less the card-seconds the run used, at the run's price at its
 * start (on-demand, or the spot price then). Reserved runs get no top-up (the
 * commitment is billed anyway) and migration usage is never part of a run
 * (it is waived). Two short runs are each topped up; at the same price their
 * top-ups share a line. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "rate_int.h"

typedef struct edge {
    int64_t t_s;
    int64_t d_cards;
} edge;

/* An interval in the run search, with its group as interned ids so that
 * sorting a month of usage compares integers, not strings. */
typedef struct run_iv {
    uint32_t resource, sku;
    tally_pricing pricing;
    int64_t start_s; /* iv->start_s, kept here for the sort */
    const tally_interval *iv;
} run_iv;

static int cmp_run(const void *a, const void *b)
{
    const run_iv *x = a, *y = b;

    if (x->resource != y->resource)
        return (x->resource > y->resource) - (x->resource < y->resource);
    if (x->sku != y->sku)
        return (x->sku > y->sku) - (x->sku < y->sku);
    if (x->pricing != y->pricing)
        return (x->pricing > y->pricing) - (x->pricing < y->pricing);
    return (x->start_s > y->start_s) - (x->start_s < y->start_s);
}

static bool same_group(const run_iv *x, const run_iv *y)
{
    return x->resource == y->resource && x->sku == y->sku && x->pricing == y->pricing;
}

/* Ends sort before starts at the same second: intervals are half-open. */
static int cmp_edge(const void *a, const void *b)
{
    const edge *x = a, *y = b;

    if (x->t_s != y->t_s)
        return (x->t_s > y->t_s) - (x->t_s < y->t_s);
    return (x->d_cards > y->d_cards) - (x->d_cards < y->d_cards);
}

/* The most cards held at once by run[0..n), and the card-seconds used. */
static tally_err run_usage(const run_iv *run, size_t n, edge *tmp, int64_t *max_cards,
                           __int128 *used)
{
    int64_t now = 0;

    *max_cards = 0;
    *used = 0;
    for (size_t i = 0; i < n; i++) {
        const tally_interval *iv = run[i].iv;
        __int128 part = (__int128)iv->weight * (iv->end_s - iv->start_s);
        if (__builtin_add_overflow(*used, part, used))
            return TALLY_OVERFLOW;
        tmp[2 * i] = (edge){iv->start_s, iv->weight};
        tmp[2 * i + 1] = (edge){iv->end_s, -iv->weight};
    }
    qsort(tmp, 2 * n, sizeof *tmp, cmp_edge);
    for (size_t i = 0; i < 2 * n; i++) {
        if (__builtin_add_overflow(now, tmp[i].d_cards, &now))
            return TALLY_OVERFLOW;
        if (now > *max_cards)
            *max_cards = now;
    }
    assert(now == 0);
    return TALLY_OK;
}

/* Tops up the run run[0..n) to min_s if it is shorter. */
static tally_err top_up(rate_ctx *c, const run_iv *run, size_t n, int64_t min_s, edge *tmp)
{
    const tally_interval *first = run[0].iv;
    rate_piece proto = {.kind = TALLY_LINE_MINIMUM,
                        .meter = TALLY_METER_ACCELERATOR,
                        .pricing = first->pricing,
                        .sku = first->dim,
                        .dim2 = ""};
    int64_t start = first->start_s, max_cards, price;
    __int128 used, qty;
    tally_err err;

    if ((err = run_usage(run, n, tmp, &max_cards, &used)) != TALLY_OK)
        return rate_fail(c, err, "usage of %s on %s overflows", first->dim, first->resource);
    qty = (__int128)min_s * max_cards - used;
    if (qty <= 0)
        return TALLY_OK;
    if ((err = rate_price_at(c, &proto, start, &price)) != TALLY_OK)
        return err;
    return rate_add_piece(c, &proto, start, qty, price);
}

/* The minimum of the SKU under the card in force at t (0: none). */
static int64_t min_billable_at(const rate_ctx *c, const char *sku, int64_t t)
{
    const tally_ratecard *card = tally_ratecard_at(c->in->cards, c->in->n_cards, t);
    const tally_sku_price *sp = tally_ratecard_sku(card, sku);

    return sp != NULL && sp->min_billable_s > 0 ? sp->min_billable_s : 0;
}

/* Walks the sorted intervals run by run. */
static tally_err walk_runs(rate_ctx *c, const run_iv *r, size_t n, edge *tmp)
{
    const tally_rating_input *in = c->in;
    tally_err err;

    for (size_t i = 0, j; i < n; i = j) {
        int64_t start = r[i].iv->start_s, end = r[i].iv->end_s, reach;
        int64_t min_s = min_billable_at(c, r[i].iv->dim, start);

        for (j = i + 1; j < n && same_group(&r[i], &r[j]); j++) {
            if (__builtin_add_overflow(end, min_s, &reach))
                reach = INT64_MAX;
            if (r[j].iv->start_s > reach)
                break;
            if (r[j].iv->end_s > end)
                end = r[j].iv->end_s;
        }
        if (min_s == 0 || end - start >= min_s || start < in->period_start_s ||
            start >= in->period_end_s)
            continue;
        if ((err = top_up(c, r + i, j - i, min_s, tmp)) != TALLY_OK)
            return err;
    }
    return TALLY_OK;
}

/* Run candidates: accelerator usage that is neither reserved nor migration. */
static tally_err gather(rate_ctx *c, run_iv *r, size_t *n)
{
    const tally_rating_input *in = c->in;
    tally_err err;

    *n = 0;
    for (size_t i = 0; i < in->n_intervals; i++) {
        const tally_interval *x = &in->intervals[i];
        run_iv *y = &r[*n];

        if (x->meter != TALLY_METER_ACCELERATOR || x->migration ||
            x->pricing == TALLY_PRICING_RESERVED || x->weight <= 0 || x->end_s <= x->start_s)
            continue;
        if ((err = rate_name_id(&c->names, x->resource, &y->resource)) != TALLY_OK ||
            (err = rate_name_id(&c->names, x->dim, &y->sku)) != TALLY_OK)
            return err;
        y->pricing = x->pricing;
        y->start_s = x->start_s;
        y->iv = x;
        (*n)++;
    }
    return TALLY_OK;
}

tally_err rate_minimums(rate_ctx *c)
{
    size_t n_iv = c->in->n_intervals, n;
    run_iv *r;
    edge *tmp;
    tally_err err;

    if (n_iv == 0)
        return TALLY_OK;
    r = calloc(n_iv, sizeof *r);
    tmp = calloc(n_iv, 2 * sizeof *tmp);
    if (r == NULL || tmp == NULL) {
        err = TALLY_NOMEM;
        goto out_free;
    }
    if ((err = gather(c, r, &n)) != TALLY_OK)
        goto out_free;
    qsort(r, n, sizeof *r, cmp_run);
    err = walk_runs(c, r, n, tmp);
out_free:
    free(r);
    free(tmp);
    return err;
}
