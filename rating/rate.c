/* tally_rate_period(): one account's period from usage to credited lines.
 *
 * The steps are in rate_int.h; the pricing rules in rate_split.c,
 * rate_usage.c and rate_minimum.c; the credit rules in rate_credits.c.
 *
 * Totals: subtotal is the sum of all line amounts (extra lines included);
 * credits never exceed it, so amount_due = subtotal - credits >= 0 whenever
 * the subtotal is. A subtotal below zero can only come from negative
 * adjustment lines (usage billed earlier that was withdrawn): then no credit
 * is applied, amount_due is 0 and credit_issued is -subtotal, the money owed
 * to the customer, which the ledger issues as an `adjustment` grant (SPEC
 * section 4). */
#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "rate_int.h"

static bool terminated(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) != NULL;
}

static bool bad_span(int64_t start, int64_t end)
{
    int64_t d;
    return end < start || __builtin_sub_overflow(end, start, &d);
}

static tally_err check_interval(rate_ctx *c, const tally_interval *iv, size_t i)
{
    bool accel = iv->meter == TALLY_METER_ACCELERATOR;

    if (!accel && iv->meter != TALLY_METER_STORAGE)
        return rate_fail(c, TALLY_INVAL, "interval %zu: meter is not accelerator or storage", i);
    if (accel && iv->pricing != TALLY_PRICING_ON_DEMAND && iv->pricing != TALLY_PRICING_SPOT &&
        iv->pricing != TALLY_PRICING_RESERVED)
        return rate_fail(c, TALLY_INVAL, "interval %zu: bad pricing", i);
    if (iv->weight < 0 || bad_span(iv->start_s, iv->end_s))
        return rate_fail(c, TALLY_INVAL, "interval %zu: bad weight or span", i);
    if (!terminated(iv->dim, sizeof iv->dim) || !terminated(iv->resource, sizeof iv->resource))
        return rate_fail(c, TALLY_INVAL, "interval %zu: unterminated name", i);
    return TALLY_OK;
}

static tally_err check_usage(rate_ctx *c)
{
    const tally_rating_input *in = c->in;
    tally_err err;

    for (size_t i = 0; i < in->n_intervals; i++)
        if ((err = check_interval(c, &in->intervals[i], i)) != TALLY_OK)
            return err;
    for (size_t i = 0; i < in->n_points; i++) {
        const tally_point *p = &in->points[i];
        if ((p->meter != TALLY_METER_TRAFFIC && p->meter != TALLY_METER_TOKENS) || p->qty < 0 ||
            !terminated(p->dim, sizeof p->dim) || !terminated(p->dim2, sizeof p->dim2))
            return rate_fail(c, TALLY_INVAL, "point %zu: bad meter, quantity or name", i);
    }
    for (size_t i = 0; i < in->n_commitments; i++) {
        const tally_commitment *cm = &in->commitments[i];
        if (cm->cards < 0 || cm->to_s < cm->from_s || !terminated(cm->sku, sizeof cm->sku))
            return rate_fail(c, TALLY_INVAL, "commitment %" PRId64 ": bad cards or span", cm->id);
    }
    return TALLY_OK;
}

static tally_err check_input(rate_ctx *c)
{
    const tally_rating_input *in = c->in;

    if ((in->n_cards && !in->cards) || (in->n_spot && !in->spot) ||
        (in->n_intervals && !in->intervals) || (in->n_points && !in->points) ||
        (in->n_commitments && !in->commitments) || (in->n_grants && !in->grants) ||
        (in->n_extra_lines && !in->extra_lines))
        return rate_fail(c, TALLY_INVAL, "missing input array");
    if (in->minor_digits < 0 || in->minor_digits > TALLY_PRICE_DIGITS)
        return rate_fail(c, TALLY_INVAL, "bad minor digits %d", in->minor_digits);
    if (in->period_end_s <= in->period_start_s || bad_span(in->period_start_s, in->period_end_s))
        return rate_fail(c, TALLY_INVAL, "empty or invalid period");
    for (size_t i = 0; i < in->n_cards; i++)
        if (in->cards[i] == NULL ||
            (i > 0 && in->cards[i - 1]->effective_from_s > in->cards[i]->effective_from_s))
            return rate_fail(c, TALLY_INVAL, "rate cards are not sorted by effective time");
    return check_usage(c);
}

/* Subtotal, credits and amount due. */
static tally_err totals(rate_ctx *c, tally_rating_result *out)
{
    int64_t subtotal = 0, credits = 0;
    tally_err err;

    for (size_t i = 0; i < c->n_lines; i++)
        if (tally_money_add(subtotal, c->lines[i].amount_minor, &subtotal) != TALLY_OK)
            return rate_fail(c, TALLY_OVERFLOW, "subtotal overflows");
    if ((err = rate_apply_credits(c, subtotal > 0 ? subtotal : 0)) != TALLY_OK)
        return err;
    for (size_t i = 0; i < c->n_credits; i++)
        if (tally_money_add(credits, c->credits[i].amount_minor, &credits) != TALLY_OK)
            return rate_fail(c, TALLY_OVERFLOW, "credits overflow");
    assert(credits >= 0 && (credits <= subtotal || credits == 0));
    out->subtotal_minor = subtotal;
    out->total_credits_minor = credits;
    out->amount_due_minor = subtotal - credits; /* cannot overflow: 0 <= credits */
    if (out->amount_due_minor < 0) {            /* then credits == 0 */
        out->credit_issued_minor = -out->amount_due_minor;
        out->amount_due_minor = 0;
    }
    return TALLY_OK;
}

static void ctx_free(rate_ctx *c)
{
    free(c->cuts);
    free(c->epochs);
    free(c->spot);
    free(c->cells);
    rate_names_free(&c->names);
    free(c->line_num);
    free(c->lines);
    free(c->credits);
}

tally_err tally_rate_period(const tally_rating_input *in, tally_rating_result *out, char *why,
                            size_t cap)
{
    rate_ctx c = {.in = in, .why = why, .cap = cap};
    tally_err err;

    if (why != NULL && cap > 0)
        why[0] = '\0';
    if (in == NULL || out == NULL)
        return TALLY_INVAL;
    memset(out, 0, sizeof *out);
    if ((err = check_input(&c)) != TALLY_OK)
        return err;
    if ((err = rate_prepare(&c)) != TALLY_OK || (err = rate_intervals(&c)) != TALLY_OK ||
        (err = rate_points(&c)) != TALLY_OK || (err = rate_reserved(&c)) != TALLY_OK ||
        (err = rate_minimums(&c)) != TALLY_OK || (err = rate_build_lines(&c)) != TALLY_OK ||
        (err = totals(&c, out)) != TALLY_OK)
        goto out_free;
    out->lines = c.lines;
    out->n_lines = c.n_lines;
    out->credits = c.credits;
    out->n_credits = c.n_credits;
    c.lines = NULL;
    c.credits = NULL;
out_free:
    if (err != TALLY_OK) {
        if (err == TALLY_NOMEM)
            (void)rate_fail(&c, err, "out of memory");
        memset(out, 0, sizeof *out);
    }
    ctx_free(&c);
    return err;
}

void tally_rating_result_release(tally_rating_result *r)
{
    if (r == NULL)
        return;
    free(r->lines);
    free(r->credits);
    memset(r, 0, sizeof *r);
}
