/* Credits paying lines (SPEC section 4).
 *
 * Grants are used in order of priority (lower first), then earliest expiry
 * (no expiry last), then age (lower id first); each grant walks the usage
 * lines in canonical order. A grant may pay only the part of a line whose
 * usage happened inside [effective_s, expires_s) and whose (meter, sku,
 * pricing) matches its scope; commitment fees and overage are
 * pricing=reserved. Time of a commitment line is its committed seconds, of
 * a minimum top-up its run's start.
 *
 * What a grant may pay of a line is round_half_up of the line's remaining
 * exact value in the epochs of the grant's window, capped by the line's
 * unpaid amount and the grant's balance. What it paid is then taken out of
 * those epochs, earliest first, so a later grant with an overlapping window
 * cannot pay the same usage twice. Lines with amount <= 0, migration
 * (waived) lines, insurance lines and extra (adjustment) lines are never
 * paid. Credits in all never exceed the subtotal (budget_minor). */
#include <assert.h>
#include <stdlib.h>

#include "rate_int.h"

static int cmp_grant(const void *a, const void *b)
{
    const tally_grant *x = *(const tally_grant *const *)a;
    const tally_grant *y = *(const tally_grant *const *)b;

    if (x->priority != y->priority)
        return (x->priority > y->priority) - (x->priority < y->priority);
    if (x->expires_s != y->expires_s)
        return (x->expires_s > y->expires_s) - (x->expires_s < y->expires_s);
    return (x->id > y->id) - (x->id < y->id);
}

/* Index of the first epoch starting at or after t (n_epochs if none). */
static size_t epoch_from(const rate_ctx *c, int64_t t)
{
    size_t lo = 0, hi = c->n_epochs;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->epochs[mid] < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static bool payable(const tally_line *l, const tally_grant *g)
{
    bool kind_ok = l->kind == TALLY_LINE_USAGE || l->kind == TALLY_LINE_COMMITMENT ||
                   l->kind == TALLY_LINE_OVERAGE || l->kind == TALLY_LINE_MINIMUM;

    return kind_ok && !l->migration && l->amount_minor > 0 && l->credited_minor < l->amount_minor &&
           tally_scope_matches(&g->scope, l->meter, l->sku, l->pricing);
}

/* Takes paid (on the line's denominator) out of epochs [lo, hi), earliest
 * first. Rounding up may pay up to half a minor unit more than the epochs
 * held; that remainder is taken from the last epoch, so the window's
 * remaining value is always exactly what it was less what was paid. */
static void take(__int128 *num, size_t lo, size_t hi, __int128 paid)
{
    for (size_t e = lo; e < hi && paid > 0; e++) {
        __int128 t = num[e] < paid ? num[e] : paid;
        if (t <= 0)
            continue;
        num[e] -= t;
        paid -= t;
    }
    num[hi - 1] -= paid;
}

static tally_err record(rate_ctx *c, const tally_grant *g, size_t line, int64_t amount)
{
    if (c->n_credits == c->cap_credits) {
        size_t cap = c->cap_credits ? 2 * c->cap_credits : 16;
        tally_credit_use *p;

        if (cap > SIZE_MAX / sizeof *p)
            return TALLY_NOMEM;
        if ((p = realloc(c->credits, cap * sizeof *p)) == NULL)
            return TALLY_NOMEM;
        c->credits = p;
        c->cap_credits = cap;
    }
    c->credits[c->n_credits++] = (tally_credit_use){
        .grant_id = g->id, .kind = g->kind, .line_index = line, .amount_minor = amount};
    return TALLY_OK;
}

/* What grant g, with *balance left, pays of line l over epochs [lo, hi). */
static tally_err pay_line(rate_ctx *c, const tally_grant *g, size_t l, size_t lo, size_t hi,
                          int64_t *balance, int64_t *budget)
{
    tally_line *line = &c->lines[l];
    __int128 *num = &c->line_num[l * c->n_epochs], sum = 0, den, paid;
    int64_t pay;

    for (size_t e = lo; e < hi; e++)
        if (__builtin_add_overflow(sum, num[e], &sum))
            return rate_fail(c, TALLY_OVERFLOW, "credit on %s overflows", line->sku);
    den = tally_money_denominator(tally_meter_unit_divisor(line->meter));
    if (sum <= 0 || tally_money_div_round(sum, den, &pay) != TALLY_OK)
        return sum <= 0 ? TALLY_OK : rate_fail(c, TALLY_OVERFLOW, "credit overflows");
    if (pay > line->amount_minor - line->credited_minor)
        pay = line->amount_minor - line->credited_minor;
    if (pay > *balance)
        pay = *balance;
    if (pay > *budget)
        pay = *budget;
    if (pay <= 0)
        return TALLY_OK;
    if (__builtin_mul_overflow((__int128)pay, den, &paid))
        return rate_fail(c, TALLY_OVERFLOW, "credit on %s overflows", line->sku);
    take(num, lo, hi, paid);
    line->credited_minor += pay;
    *balance -= pay;
    *budget -= pay;
    assert(line->credited_minor <= line->amount_minor && *balance >= 0 && *budget >= 0);
    return record(c, g, l, pay);
}

static tally_err apply_grant(rate_ctx *c, const tally_grant *g, int64_t *budget)
{
    int64_t balance = g->remaining_minor;
    size_t lo = epoch_from(c, g->effective_s), hi = epoch_from(c, g->expires_s);
    tally_err err;

    if (balance <= 0 || lo >= hi)
        return TALLY_OK;
    for (size_t l = 0; l < c->n_usage_lines && balance > 0 && *budget > 0; l++) {
        if (!payable(&c->lines[l], g))
            continue;
        if ((err = pay_line(c, g, l, lo, hi, &balance, budget)) != TALLY_OK)
            return err;
    }
    return TALLY_OK;
}

tally_err rate_apply_credits(rate_ctx *c, int64_t budget_minor)
{
    const tally_rating_input *in = c->in;
    const tally_grant **order;
    tally_err err = TALLY_OK;

    if (in->n_grants == 0 || budget_minor <= 0)
        return TALLY_OK;
    if ((order = calloc(in->n_grants, sizeof *order)) == NULL)
        return TALLY_NOMEM;
    for (size_t i = 0; i < in->n_grants; i++)
        order[i] = &in->grants[i];
    qsort(order, in->n_grants, sizeof *order, cmp_grant);
    for (size_t i = 0; i < in->n_grants && err == TALLY_OK && budget_minor > 0; i++)
        err = apply_grant(c, order[i], &budget_minor);
    free(order);
    return err;
}
