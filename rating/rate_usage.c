/* Usage, commitments and overage into pieces.
 *
 * Intervals (accelerator cards, storage bytes) are clipped to the period;
 * they may overlap, and overlapping usage adds up. Points (traffic, tokens)
 * inside the period are priced by the card in force at their second.
 *
 * Migration usage (the insured hot-migration window) is rated like any other
 * usage into lines of its own and waived (rate_add_piece).
 *
 * Reserved (SPEC section 2): each commitment bills cards x overlapping
 * seconds at the reserved price of the card in force at each second, used
 * or not. Reserved usage is shown as usage at price 0; at each second the
 * reserved cards in use above the cards committed for that SKU are overage,
 * billed at the on-demand price. Migration usage counts toward overage like
 * any reserved usage; overage is not itself migration usage, because which
 * of several overlapping runs is "above" the commitment is not defined. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "rate_int.h"

/* Clips [start, end) to the period; false if nothing is left. */
static bool clip(const tally_rating_input *in, int64_t start, int64_t end, int64_t *a, int64_t *b)
{
    *a = start > in->period_start_s ? start : in->period_start_s;
    *b = end < in->period_end_s ? end : in->period_end_s;
    return *a < *b;
}

tally_err rate_intervals(rate_ctx *c)
{
    const tally_rating_input *in = c->in;
    tally_err err;

    for (size_t i = 0; i < in->n_intervals; i++) {
        const tally_interval *iv = &in->intervals[i];
        bool accel = iv->meter == TALLY_METER_ACCELERATOR;
        rate_piece proto = {
            .kind = TALLY_LINE_USAGE, .meter = iv->meter, .sku = iv->dim, .dim2 = ""};
        int64_t a, b;

        if (!clip(in, iv->start_s, iv->end_s, &a, &b))
            continue;
        proto.pricing = accel ? iv->pricing : TALLY_PRICING_NONE;
        proto.migration = accel && iv->migration;
        if ((err = rate_add_span(c, &proto, a, b, iv->weight)) != TALLY_OK)
            return err;
    }
    return TALLY_OK;
}

tally_err rate_points(rate_ctx *c)
{
    const tally_rating_input *in = c->in;
    tally_err err;

    for (size_t i = 0; i < in->n_points; i++) {
        const tally_point *pt = &in->points[i];
        rate_piece proto = {.kind = TALLY_LINE_USAGE,
                            .meter = pt->meter,
                            .pricing = TALLY_PRICING_NONE,
                            .sku = pt->dim,
                            .dim2 = pt->dim2};
        int64_t price;

        if (pt->t_s < in->period_start_s || pt->t_s >= in->period_end_s || pt->qty == 0)
            continue;
        if ((err = rate_price_at(c, &proto, pt->t_s, &price)) != TALLY_OK)
            return err;
        if ((err = rate_add_piece(c, &proto, pt->t_s, pt->qty, price)) != TALLY_OK)
            return err;
    }
    return TALLY_OK;
}

/* One endpoint of reserved usage or of a commitment, for the overage sweep. */
typedef struct sweep_ev {
    const char *sku;
    uint32_t sku_id; /* interned: the sort compares integers */
    int64_t t_s;
    int64_t d_used;      /* change in reserved cards in use */
    int64_t d_committed; /* change in cards committed */
} sweep_ev;

static int cmp_sweep(const void *a, const void *b)
{
    const sweep_ev *x = a, *y = b;

    if (x->sku_id != y->sku_id)
        return (x->sku_id > y->sku_id) - (x->sku_id < y->sku_id);
    return (x->t_s > y->t_s) - (x->t_s < y->t_s);
}

/* Appends the two endpoints of cards held over [a, b) (clipped to the
 * period) to ev; used tells reserved usage from a commitment. */
static tally_err push_ends(rate_ctx *c, sweep_ev *ev, size_t *n, const char *sku, int64_t start,
                           int64_t end, int64_t cards, bool used)
{
    uint32_t id;
    int64_t a, b;
    tally_err err;

    if (cards == 0 || !clip(c->in, start, end, &a, &b))
        return TALLY_OK;
    if ((err = rate_name_id(&c->names, sku, &id)) != TALLY_OK)
        return err;
    ev[(*n)++] = (sweep_ev){sku, id, a, used ? cards : 0, used ? 0 : cards};
    ev[(*n)++] = (sweep_ev){sku, id, b, used ? -cards : 0, used ? 0 : -cards};
    return TALLY_OK;
}

/* The endpoints of all reserved usage and commitments. ev has room for 2
 * per interval and commitment. */
static tally_err sweep_events(rate_ctx *c, sweep_ev *ev, size_t *n)
{
    const tally_rating_input *in = c->in;
    tally_err err = TALLY_OK;

    *n = 0;
    for (size_t i = 0; i < in->n_intervals && err == TALLY_OK; i++) {
        const tally_interval *iv = &in->intervals[i];
        if (iv->meter == TALLY_METER_ACCELERATOR && iv->pricing == TALLY_PRICING_RESERVED)
            err = push_ends(c, ev, n, iv->dim, iv->start_s, iv->end_s, iv->weight, true);
    }
    for (size_t i = 0; i < in->n_commitments && err == TALLY_OK; i++) {
        const tally_commitment *cm = &in->commitments[i];
        err = push_ends(c, ev, n, cm->sku, cm->from_s, cm->to_s, cm->cards, false);
    }
    return err;
}

/* Sweeps the sorted endpoints: between two consecutive times of one SKU the
 * cards in use and committed are constant, so the excess is one span. */
static tally_err sweep_overage(rate_ctx *c, const sweep_ev *ev, size_t n)
{
    int64_t used = 0, committed = 0, excess;
    tally_err err;

    for (size_t i = 0; i < n; i++) {
        rate_piece proto = {.kind = TALLY_LINE_OVERAGE,
                            .meter = TALLY_METER_ACCELERATOR,
                            .pricing = TALLY_PRICING_RESERVED,
                            .sku = ev[i].sku,
                            .dim2 = ""};

        if (i > 0 && ev[i].sku_id != ev[i - 1].sku_id) {
            assert(used == 0 && committed == 0);
            used = committed = 0;
        }
        if (__builtin_add_overflow(used, ev[i].d_used, &used) ||
            __builtin_add_overflow(committed, ev[i].d_committed, &committed) ||
            __builtin_sub_overflow(used, committed, &excess))
            return rate_fail(c, TALLY_OVERFLOW, "reserved cards of %s overflow", ev[i].sku);
        if (i + 1 == n || excess <= 0 || ev[i + 1].sku_id != ev[i].sku_id)
            continue;
        if ((err = rate_add_span(c, &proto, ev[i].t_s, ev[i + 1].t_s, excess)) != TALLY_OK)
            return err;
    }
    return TALLY_OK;
}

static tally_err commitment_fees(rate_ctx *c)
{
    const tally_rating_input *in = c->in;
    tally_err err;

    for (size_t i = 0; i < in->n_commitments; i++) {
        const tally_commitment *cm = &in->commitments[i];
        rate_piece proto = {.kind = TALLY_LINE_COMMITMENT,
                            .meter = TALLY_METER_ACCELERATOR,
                            .pricing = TALLY_PRICING_RESERVED,
                            .sku = cm->sku,
                            .dim2 = ""};
        int64_t a, b;

        if (!clip(in, cm->from_s, cm->to_s, &a, &b))
            continue;
        if ((err = rate_add_span(c, &proto, a, b, cm->cards)) != TALLY_OK)
            return err;
    }
    return TALLY_OK;
}

tally_err rate_reserved(rate_ctx *c)
{
    const tally_rating_input *in = c->in;
    size_t room = in->n_intervals + in->n_commitments, n;
    sweep_ev *ev;
    tally_err err;

    if ((err = commitment_fees(c)) != TALLY_OK)
        return err;
    if (room == 0)
        return TALLY_OK;
    if (room > SIZE_MAX / (2 * sizeof *ev))
        return TALLY_NOMEM;
    ev = malloc(2 * room * sizeof *ev);
    if (ev == NULL)
        return TALLY_NOMEM;
    if ((err = sweep_events(c, ev, &n)) == TALLY_OK) {
        qsort(ev, n, sizeof *ev, cmp_sweep);
        err = sweep_overage(c, ev, n);
    }
    free(ev);
    return err;
}
