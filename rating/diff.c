/* Adjustment lines for late usage (SPEC section 1, "Late events").
 *
 * A finalized invoice never changes. When usage arrives for a finalized
 * period, the period is rated again and compared with what was billed for it
 * (its invoice plus adjustment lines already issued for it); the
 * differences are billed on the account's next invoice as ADJUSTMENT lines
 * that name the original period and the kind of line they correct.
 *
 * Lines are matched on (kind, meter, pricing, migration, sku, dim2, unit
 * price), where an adjustment line counts as the kind it adjusts. Quantity
 * and amount are exact differences of the matched sums; a key whose
 * differences are both zero gives no line. Output is in canonical order. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rate_int.h"

typedef struct side {
    const tally_line *line;
    tally_line_kind kind; /* the kind it bills or adjusts */
    int sign;             /* +1 rated now, -1 already billed */
} side;

static tally_line_kind effective_kind(const tally_line *l)
{
    return l->kind == TALLY_LINE_ADJUSTMENT ? l->adjusts : l->kind;
}

/* Canonical order on the effective kind. */
static int side_cmp(const side *a, const side *b)
{
    tally_line x = *a->line, y = *b->line;

    x.kind = a->kind;
    y.kind = b->kind;
    return rate_line_cmp(&x, &y);
}

static int cmp_side(const void *a, const void *b)
{
    return side_cmp(a, b);
}

/* Sums the group s[0..n) into an adjustment line; false if all zero. */
static tally_err sum_group(const side *s, size_t n, const char *period, tally_line *out,
                           bool *nonzero)
{
    __int128 qty = 0, q;
    int64_t amount = 0;

    for (size_t i = 0; i < n; i++) {
        const tally_line *l = s[i].line;
        bool bad = s[i].sign > 0 ? tally_money_add(amount, l->amount_minor, &amount) != TALLY_OK
                                 : tally_money_sub(amount, l->amount_minor, &amount) != TALLY_OK;
        bad = bad || (s[i].sign > 0 ? __builtin_add_overflow(qty, l->quantity, &q)
                                    : __builtin_sub_overflow(qty, l->quantity, &q));
        if (bad)
            return TALLY_OVERFLOW;
        qty = q;
    }
    *nonzero = qty != 0 || amount != 0;
    memset(out, 0, sizeof *out);
    out->kind = TALLY_LINE_ADJUSTMENT;
    out->adjusts = s[0].kind;
    out->meter = s[0].line->meter;
    out->pricing = s[0].line->pricing;
    out->migration = s[0].line->migration;
    memcpy(out->sku, s[0].line->sku, sizeof out->sku);
    out->sku[sizeof out->sku - 1] = '\0';
    memcpy(out->dim2, s[0].line->dim2, sizeof out->dim2);
    out->dim2[sizeof out->dim2 - 1] = '\0';
    out->unit_price_nano = s[0].line->unit_price_nano;
    out->quantity = qty;
    out->amount_minor = amount;
    snprintf(out->original_period, sizeof out->original_period, "%s", period ? period : "");
    return TALLY_OK;
}

static tally_err merge(const side *s, size_t n, const char *period, tally_line *out, size_t *n_out)
{
    size_t k = 0;
    tally_err err;

    for (size_t i = 0, j; i < n; i = j) {
        bool nonzero;

        for (j = i + 1; j < n && side_cmp(&s[i], &s[j]) == 0;)
            j++;
        if ((err = sum_group(s + i, j - i, period, &out[k], &nonzero)) != TALLY_OK)
            return err;
        if (nonzero)
            k++;
    }
    *n_out = k;
    return TALLY_OK;
}

tally_err tally_lines_diff(const tally_line *now, size_t n_now, const tally_line *billed,
                           size_t n_billed, const char *original_period, tally_line **out,
                           size_t *n_out)
{
    size_t n;
    side *s;
    tally_line *lines;
    tally_err err;

    assert(out != NULL && n_out != NULL);
    *out = NULL;
    *n_out = 0;
    if (__builtin_add_overflow(n_now, n_billed, &n) || n > SIZE_MAX / sizeof *lines)
        return TALLY_NOMEM;
    s = calloc(n + 1, sizeof *s);
    lines = calloc(n + 1, sizeof *lines);
    if (s == NULL || lines == NULL) {
        err = TALLY_NOMEM;
        goto out_free;
    }
    for (size_t i = 0; i < n_now; i++)
        s[i] = (side){&now[i], effective_kind(&now[i]), +1};
    for (size_t i = 0; i < n_billed; i++)
        s[n_now + i] = (side){&billed[i], effective_kind(&billed[i]), -1};
    qsort(s, n, sizeof *s, cmp_side);
    if ((err = merge(s, n, original_period, lines, n_out)) != TALLY_OK)
        goto out_free;
    *out = lines;
    lines = NULL;
out_free:
    if (err != TALLY_OK)
        *n_out = 0;
    free(lines);
    free(s);
    return err;
}
