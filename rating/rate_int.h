/* Internals of tally_rate_period(), shared by rating/rate*.c only.
 *
 * Rating works in three steps:
 *   1. every charge becomes "pieces": a quantity over a span of seconds that
 *      lies in one rate card, one spot price and one credit epoch, with its
 *      exact (unrounded) value on the common denominator of its meter.
 *      Pieces are summed as they come into "cells", one per (line key,
 *      epoch), in a hash table: memory and time grow with the number of
 *      lines, not with the number of usage records;
 *   2. cells are sorted by line key and merged into lines, each rounded
 *      once, keeping the exact value per epoch;
 *   3. grants pay lines from those per-epoch exact values.
 *
 * Epochs are the spans between consecutive grant window boundaries inside
 * the period (plus the period's own edges): every grant window is a whole
 * number of epochs, so what a grant may pay of a line is the sum of that
 * line's exact value over the epochs of its window. */
#ifndef TALLY_RATE_INT_H
#define TALLY_RATE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tally/rating.h"

/* One priced slice of a line, or (in the cell table) the sum of all slices
 * of one line key in one epoch. Strings are borrowed from the input. */
typedef struct rate_piece {
    tally_line_kind kind;
    tally_meter meter;
    tally_pricing pricing;
    bool migration;
    const char *sku;  /* sku, storage class, traffic scope, token model */
    const char *dim2; /* traffic direction, token kind; "" otherwise */
    int64_t price_nano;
    size_t epoch;
    __int128 qty;             /* base units */
    __int128 num;             /* exact value on tally_money_denominator(divisor) */
    uint32_t sku_id, dim2_id; /* interned names (cells only) */
} rate_piece;

/* Interned names: each distinct string gets a small dense id, so hot
 * comparisons and hashes work on integers. Keys are borrowed. */
typedef struct rate_names {
    const char **keys;
    uint32_t *ids;
    size_t cap, n;
} rate_names;

typedef struct rate_ctx {
    const tally_rating_input *in;
    char *why;
    size_t cap;
    /* Cut points strictly inside the period: card changes and epoch
     * boundaries, sorted, unique. */
    int64_t *cuts;
    size_t n_cuts;
    /* Epoch i is [epochs[i], epochs[i + 1]) with epochs[n_epochs] = end. */
    int64_t *epochs;
    size_t n_epochs;
    /* Spot points sorted by (sku, from_s, position in the input). */
    const tally_spot_point **spot;
    size_t n_spot;
    rate_names names;
    /* Open-addressed cells; a slot is free while its sku is NULL. */
    rate_piece *cells;
    size_t n_cells, cap_cells;
    /* Built lines (usage lines first, then extra lines) and, for each usage
     * line, its exact value per epoch: line_num[l * n_epochs + e]. */
    tally_line *lines;
    size_t n_lines, n_usage_lines;
    __int128 *line_num;
    tally_credit_use *credits;
    size_t n_credits, cap_credits;
} rate_ctx;

/* Records why rating failed (first failure wins). Returns err. */
tally_err rate_fail(rate_ctx *c, tally_err err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* rate_cells.c: interned names and the cell table. */
/* The id of s (interned on first sight). Errors: TALLY_NOMEM. */
TALLY_MUST_CHECK tally_err rate_name_id(rate_names *t, const char *s, uint32_t *id);
void rate_names_free(rate_names *t);
/* Adds a finished piece to its cell. Errors: TALLY_NOMEM, TALLY_OVERFLOW. */
TALLY_MUST_CHECK tally_err rate_push_piece(rate_ctx *c, const rate_piece *p);
/* Moves the used cells to the front of c->cells; returns their count. */
size_t rate_cells_compact(rate_ctx *c);

/* rate_split.c: cut points, epochs, spot index, prices, pieces. */
TALLY_MUST_CHECK tally_err rate_prepare(rate_ctx *c);
size_t rate_epoch_of(const rate_ctx *c, int64_t t_s);
/* The unit price of a piece like proto at second t_s. Errors: TALLY_NO_PRICE. */
TALLY_MUST_CHECK tally_err rate_price_at(rate_ctx *c, const rate_piece *proto, int64_t t_s,
                                         int64_t *price_nano);
/* Adds qty base units like proto at second t_s, priced at price_nano. */
TALLY_MUST_CHECK tally_err rate_add_piece(rate_ctx *c, const rate_piece *proto, int64_t t_s,
                                          __int128 qty, int64_t price_nano);
/* Adds weight held over [a, b) (inside the period) like proto, split at cut
 * points and, for spot usage, at the SKU's spot price changes. */
TALLY_MUST_CHECK tally_err rate_add_span(rate_ctx *c, const rate_piece *proto, int64_t a, int64_t b,
                                         int64_t weight);

/* rate_usage.c: intervals, points, commitments and overage. */
TALLY_MUST_CHECK tally_err rate_intervals(rate_ctx *c);
TALLY_MUST_CHECK tally_err rate_points(rate_ctx *c);
TALLY_MUST_CHECK tally_err rate_reserved(rate_ctx *c);

/* rate_minimum.c: minimum billable duration top-ups. */
TALLY_MUST_CHECK tally_err rate_minimums(rate_ctx *c);

/* rate_lines.c: pieces to lines. */
TALLY_MUST_CHECK tally_err rate_build_lines(rate_ctx *c);
int rate_line_cmp(const tally_line *a, const tally_line *b);

/* rate_credits.c: grants paying lines. */
TALLY_MUST_CHECK tally_err rate_apply_credits(rate_ctx *c, int64_t budget_minor);

#endif
