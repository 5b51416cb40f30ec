/* Splitting usage into pieces that each have one price and one credit epoch.
 *
 * Prices (SPEC section 2): the rate card in force at second t (the greatest
 * effective_from_s <= t) prices that second. Accelerators are priced per
 * card-hour, storage per GB-day, traffic per GB and tokens per million
 * tokens (tally_meter_unit_divisor). A spot second at t costs the spot point
 * of its SKU with the greatest from_s <= t; of points with equal from_s the
 * one given later in the input wins (a correction issued at run time).
 * Spot usage before a SKU's first point has no price. */
#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rate_int.h"

tally_err rate_fail(rate_ctx *c, tally_err err, const char *fmt, ...)
{
    va_list ap;

    if (c->why != NULL && c->cap > 0 && c->why[0] == '\0') {
        va_start(ap, fmt);
        vsnprintf(c->why, c->cap, fmt, ap);
        va_end(ap);
    }
    return err;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Sorts v[0..n) and drops duplicates; returns the new count. */
static size_t sort_unique(int64_t *v, size_t n)
{
    size_t k = 0;

    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cmp_i64);
    for (size_t i = 1; i < n; i++)
        if (v[i] != v[k])
            v[++k] = v[i];
    return k + 1;
}

/* Appends t to v if it lies strictly inside the period. */
static void push_inside(const tally_rating_input *in, int64_t *v, size_t *n, int64_t t)
{
    if (t > in->period_start_s && t < in->period_end_s)
        v[(*n)++] = t;
}

static int cmp_spot(const void *a, const void *b)
{
    const tally_spot_point *x = *(const tally_spot_point *const *)a;
    const tally_spot_point *y = *(const tally_spot_point *const *)b;
    int s = strcmp(x->sku, y->sku);

    if (s != 0)
        return s;
    if (x->from_s != y->from_s)
        return (x->from_s > y->from_s) - (x->from_s < y->from_s);
    return (x > y) - (x < y); /* same input array: later position last */
}

/* Builds the epochs, the cut points and the spot index. */
tally_err rate_prepare(rate_ctx *c)
{
    const tally_rating_input *in = c->in;
    size_t n_bounds = 0, n_cuts = 0;

    /* 2 bounds per grant + the start; cuts add one per card */
    if (in->n_grants > SIZE_MAX / 4 || in->n_cards > SIZE_MAX / 4 || in->n_spot == SIZE_MAX)
        return TALLY_NOMEM;
    c->epochs = calloc(2 * in->n_grants + 2, sizeof *c->epochs);
    c->cuts = calloc(2 * in->n_grants + in->n_cards + 1, sizeof *c->cuts);
    c->spot = calloc(in->n_spot + 1, sizeof *c->spot);
    if (c->epochs == NULL || c->cuts == NULL || c->spot == NULL)
        return TALLY_NOMEM;
    c->epochs[n_bounds++] = in->period_start_s;
    for (size_t i = 0; i < in->n_grants; i++) {
        push_inside(in, c->epochs, &n_bounds, in->grants[i].effective_s);
        push_inside(in, c->epochs, &n_bounds, in->grants[i].expires_s);
    }
    n_bounds = sort_unique(c->epochs, n_bounds);
    c->n_epochs = n_bounds;
    c->epochs[n_bounds] = in->period_end_s;

    for (size_t i = 1; i < n_bounds; i++)
        c->cuts[n_cuts++] = c->epochs[i];
    for (size_t i = 0; i < in->n_cards; i++)
        push_inside(in, c->cuts, &n_cuts, in->cards[i]->effective_from_s);
    c->n_cuts = sort_unique(c->cuts, n_cuts);

    for (size_t i = 0; i < in->n_spot; i++)
        c->spot[i] = &in->spot[i];
    c->n_spot = in->n_spot;
    if (c->n_spot > 1)
        qsort(c->spot, c->n_spot, sizeof *c->spot, cmp_spot);
    return TALLY_OK;
}

/* Index of the first of v[0..n) greater than t. */
static size_t upper_bound(const int64_t *v, size_t n, int64_t t)
{
    size_t lo = 0, hi = n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid] <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

size_t rate_epoch_of(const rate_ctx *c, int64_t t_s)
{
    size_t i = upper_bound(c->epochs, c->n_epochs, t_s);

    assert(i > 0); /* t_s >= period start */
    return i - 1;
}

/* The spot points of sku: [*lo, *hi) in c->spot. */
static void spot_range(const rate_ctx *c, const char *sku, size_t *lo, size_t *hi)
{
    size_t a = 0, b = c->n_spot;

    while (a < b) { /* first point with sku >= the one asked */
        size_t mid = a + (b - a) / 2;
        if (strcmp(c->spot[mid]->sku, sku) < 0)
            a = mid + 1;
        else
            b = mid;
    }
    *lo = a;
    while (a < c->n_spot && strcmp(c->spot[a]->sku, sku) == 0)
        a++;
    *hi = a;
}

/* The first point in [lo, hi) with from_s > t (hi if none). */
static size_t spot_after(const rate_ctx *c, size_t lo, size_t hi, int64_t t)
{
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->spot[mid]->from_s <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static tally_err spot_price(rate_ctx *c, const char *sku, int64_t t, int64_t *price)
{
    size_t lo, hi, i;

    spot_range(c, sku, &lo, &hi);
    i = spot_after(c, lo, hi, t);
    if (i == lo)
        return rate_fail(c, TALLY_NO_PRICE, "no spot price for %s at %" PRId64, sku, t);
    *price = c->spot[i - 1]->price_nano;
    return TALLY_OK;
}

/* An accelerator piece's price: commitments at the reserved price, overage
 * at on-demand, reserved usage inside a commitment at 0 (the commitment
 * already pays for it), on-demand and spot usage at their own price. */
static tally_err accel_price(rate_ctx *c, const tally_ratecard *card, const rate_piece *p,
                             int64_t t, int64_t *price)
{
    const tally_sku_price *sp = tally_ratecard_sku(card, p->sku);
    bool reserved_price = p->kind == TALLY_LINE_COMMITMENT;
    bool on_demand = p->kind == TALLY_LINE_OVERAGE || p->pricing == TALLY_PRICING_ON_DEMAND;

    if (sp == NULL)
        return rate_fail(c, TALLY_NO_PRICE, "unknown sku %s in rate card %s at %" PRId64, p->sku,
                         card->id, t);
    if (reserved_price || (!on_demand && p->pricing == TALLY_PRICING_RESERVED)) {
        if (!sp->has_reserved)
            return rate_fail(c, TALLY_NO_PRICE, "no reserved price for %s at %" PRId64, p->sku, t);
        *price = reserved_price ? sp->reserved_nano : 0;
        return TALLY_OK;
    }
    if (on_demand) {
        if (!sp->has_on_demand)
            return rate_fail(c, TALLY_NO_PRICE, "no on-demand price for %s at %" PRId64, p->sku, t);
        *price = sp->on_demand_nano;
        return TALLY_OK;
    }
    if (p->pricing == TALLY_PRICING_SPOT)
        return spot_price(c, p->sku, t, price);
    return rate_fail(c, TALLY_NO_PRICE, "no pricing for %s usage at %" PRId64, p->sku, t);
}

tally_err rate_price_at(rate_ctx *c, const rate_piece *proto, int64_t t_s, int64_t *price_nano)
{
    const tally_ratecard *card = tally_ratecard_at(c->in->cards, c->in->n_cards, t_s);

    if (card == NULL)
        return rate_fail(c, TALLY_NO_PRICE, "no rate card in force at %" PRId64, t_s);
    if (proto->meter == TALLY_METER_ACCELERATOR)
        return accel_price(c, card, proto, t_s, price_nano);
    if (tally_ratecard_dim_price(card, proto->meter, proto->sku, proto->dim2, price_nano) !=
        TALLY_OK)
        return rate_fail(c, TALLY_NO_PRICE, "no %s price for %s%s%s at %" PRId64,
                         tally_meter_name(proto->meter), proto->sku, proto->dim2[0] ? "/" : "",
                         proto->dim2, t_s);
    return TALLY_OK;
}

/* Migration usage is rated like any usage and waived by an insurance piece
 * of exactly the negative value, so each migration line has an insurance
 * line that cancels it to the fen. Zero-priced migration usage (reserved
 * usage inside a commitment) needs no waiver and gets none. */
tally_err rate_add_piece(rate_ctx *c, const rate_piece *proto, int64_t t_s, __int128 qty,
                         int64_t price_nano)
{
    rate_piece p = *proto;
    tally_err err;

    assert(t_s >= c->in->period_start_s && t_s < c->in->period_end_s);
    p.price_nano = price_nano;
    p.epoch = rate_epoch_of(c, t_s);
    p.qty = qty;
    if (tally_money_exact(qty, price_nano, c->in->minor_digits, &p.num) != TALLY_OK)
        return rate_fail(c, TALLY_OVERFLOW, "amount of %s usage overflows", proto->sku);
    if ((err = rate_push_piece(c, &p)) != TALLY_OK)
        return err;
    if (!p.migration || p.kind != TALLY_LINE_USAGE || p.num == 0)
        return TALLY_OK;
    p.kind = TALLY_LINE_INSURANCE;
    if (__builtin_sub_overflow((__int128)0, p.num, &p.num))
        return rate_fail(c, TALLY_OVERFLOW, "insurance of %s usage overflows", p.sku);
    return rate_push_piece(c, &p);
}

tally_err rate_add_span(rate_ctx *c, const rate_piece *proto, int64_t a, int64_t b, int64_t weight)
{
    bool spot = proto->meter == TALLY_METER_ACCELERATOR && proto->kind == TALLY_LINE_USAGE &&
                proto->pricing == TALLY_PRICING_SPOT;
    size_t lo = 0, hi = 0;
    tally_err err;

    assert(a >= c->in->period_start_s && b <= c->in->period_end_s && weight >= 0);
    if (weight == 0 || a >= b)
        return TALLY_OK; /* nothing held, nothing to bill */
    if (spot)
        spot_range(c, proto->sku, &lo, &hi);
    for (int64_t x = a, y; x < b; x = y) {
        size_t k = upper_bound(c->cuts, c->n_cuts, x);
        int64_t price;

        y = k < c->n_cuts && c->cuts[k] < b ? c->cuts[k] : b;
        if (spot) {
            size_t s = spot_after(c, lo, hi, x);
            if (s < hi && c->spot[s]->from_s < y)
                y = c->spot[s]->from_s;
        }
        if ((err = rate_price_at(c, proto, x, &price)) != TALLY_OK)
            return err;
        /* |weight| < 2^63 and y - x < 2^64: the product fits in 128 bits */
        err = rate_add_piece(c, proto, x, (__int128)weight * (y - x), price);
        if (err != TALLY_OK)
            return err;
    }
    return TALLY_OK;
}
