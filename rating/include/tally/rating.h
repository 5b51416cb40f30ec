/* Rating: from stored usage to priced, credited invoice lines. Pure C, no I/O.
 *
 * The ledger gathers everything one account needs for one billing period
 * into a tally_rating_input (rate cards, spot points, commitments, usage,
 * grants) and tally_rate_period() turns it into lines, credit applications
 * and totals following SPEC sections 2-5:
 *   - the rate card in force at each second prices that second;
 *   - spot usage is split at every spot price change;
 *   - a commitment bills cards x overlapping seconds at the reserved price,
 *     used or not; reserved usage above the committed cards at a second is
 *     overage at the on-demand price;
 *   - an instance run (usage with no gap longer than the SKU's minimum) that
 *     is shorter than the minimum is topped up to it;
 *   - migration usage is rated, then waived by an insurance line;
 *   - every line is rounded once, half-up; credits pay lines in grant order.
 * Quantities are in base units (card-seconds, byte-seconds, bytes, tokens);
 * a price is per price unit, which is unit_divisor base units. */
#ifndef TALLY_RATING_H
#define TALLY_RATING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tally/err.h"
#include "tally/event.h"
#include "tally/money.h"

#define TALLY_TIME_MAX INT64_MAX /* "no end": open expiry, open commitment */

/* ---- Prices ---------------------------------------------------------------- */

typedef struct tally_sku_price {
    char sku[TALLY_NAME_MAX];
    bool has_on_demand, has_reserved, has_spot;
    int64_t on_demand_nano; /* per card-hour */
    int64_t reserved_nano;  /* per card-hour */
    int64_t min_billable_s; /* 0 = no minimum */
} tally_sku_price;

typedef struct tally_dim_price { /* storage class, token model, traffic scope/direction */
    char dim[TALLY_NAME_MAX];    /* class; token model or "*"; traffic scope */
    char dim2[16];               /* ""; token kind; traffic direction */
    int64_t price_nano;          /* per GB-day; per million tokens; per GB */
} tally_dim_price;

typedef struct tally_spot_point {
    char sku[TALLY_NAME_MAX];
    int64_t from_s;
    int64_t price_nano; /* per card-hour */
} tally_spot_point;

/* One rate card version. Arrays are borrowed by whoever builds it. */
typedef struct tally_ratecard {
    char id[TALLY_NAME_MAX];
    char currency[4];
    int64_t effective_from_s;
    const tally_sku_price *skus;
    size_t n_skus;
    const tally_dim_price *storage; /* per GB-day (10^9 bytes for 86400 s) */
    size_t n_storage;
    const tally_dim_price *traffic; /* per GB (10^9 bytes) */
    size_t n_traffic;
    const tally_dim_price *tokens; /* per million tokens; dim "*" matches any model */
    size_t n_tokens;
} tally_ratecard;

/* The card in force at t_s among n cards sorted by effective_from_s, or NULL. */
const tally_ratecard *tally_ratecard_at(const tally_ratecard *const *cards, size_t n, int64_t t_s);
/* The price entry for a SKU in a card, or NULL. */
const tally_sku_price *tally_ratecard_sku(const tally_ratecard *card, const char *sku);
/* The price of a dimensioned meter (storage, traffic, tokens) in a card.
 * Errors: TALLY_NO_PRICE. */
TALLY_MUST_CHECK tally_err tally_ratecard_dim_price(const tally_ratecard *card, tally_meter m,
                                                    const char *dim, const char *dim2,
                                                    int64_t *price_nano);
/* Whether an event can be priced by the card in force at its time: used to
 * quarantine unknown_sku / no_price at ingest. On failure writes the reason
 * ("unknown_sku" or "no_price") into reason (cap >= 16).
 * Errors: TALLY_NOT_FOUND (unknown sku), TALLY_NO_PRICE. */
TALLY_MUST_CHECK tally_err tally_ratecard_check_event(const tally_ratecard *const *cards, size_t n,
                                                      const tally_event *ev, char *reason,
                                                      size_t cap);

/* ---- Usage, commitments, grants -------------------------------------------- */

/* Accelerator or storage usage: weight (cards or bytes) held over [start, end). */
typedef struct tally_interval {
    tally_meter meter;             /* ACCELERATOR or STORAGE */
    tally_pricing pricing;         /* accelerator only */
    bool migration;                /* accelerator only */
    char resource[TALLY_NAME_MAX]; /* instance or volume */
    char dim[TALLY_NAME_MAX];      /* sku or storage class */
    int64_t weight;                /* cards or bytes */
    int64_t start_s, end_s;
} tally_interval;

/* Traffic or token usage summed over one second. */
typedef struct tally_point {
    tally_meter meter;        /* TRAFFIC or TOKENS */
    char dim[TALLY_NAME_MAX]; /* traffic scope, token model */
    char dim2[16];            /* traffic direction, token kind */
    int64_t t_s;
    int64_t qty; /* bytes or tokens */
} tally_point;

typedef struct tally_commitment {
    int64_t id;
    char sku[TALLY_NAME_MAX];
    int64_t cards;
    int64_t from_s, to_s; /* [from, to) */
} tally_commitment;

typedef enum tally_grant_kind {
    TALLY_GRANT_TRIAL = 0,
    TALLY_GRANT_COUPON,
    TALLY_GRANT_PREPAID,
    TALLY_GRANT_INSURANCE,
    TALLY_GRANT_GOODWILL,
    TALLY_GRANT_ADJUSTMENT, /* what late adjustments owe the customer (SPEC section 4) */
    TALLY_GRANT_KIND_COUNT
} tally_grant_kind;

const char *tally_grant_kind_name(tally_grant_kind k);
TALLY_MUST_CHECK tally_err tally_grant_kind_from_name(const char *s, tally_grant_kind *out);

/* A parsed scope: `key=v1|v2` terms joined by ',' (AND); keys meter, sku,
 * pricing. An empty scope matches everything. Commitment fees and overage
 * count as pricing=reserved. */
#define TALLY_SCOPE_MAX_TERMS  8
#define TALLY_SCOPE_MAX_VALUES 8
typedef struct tally_scope {
    size_t n_terms;
    struct {
        char key[16];
        size_t n_values;
        char values[TALLY_SCOPE_MAX_VALUES][TALLY_NAME_MAX];
    } terms[TALLY_SCOPE_MAX_TERMS];
} tally_scope;

/* Parses a scope expression. On error *why names the problem.
 * Errors: TALLY_PARSE. */
TALLY_MUST_CHECK tally_err tally_scope_parse(const char *expr, tally_scope *out, const char **why);
/* Whether a charge of meter/sku/pricing matches the scope. */
bool tally_scope_matches(const tally_scope *s, tally_meter meter, const char *sku,
                         tally_pricing pricing);

typedef struct tally_grant {
    int64_t id;
    tally_grant_kind kind;
    int priority;            /* lower is used first */
    int64_t effective_s;     /* usage at or after this time may be paid */
    int64_t expires_s;       /* usage before this time may be paid; TALLY_TIME_MAX = never */
    int64_t remaining_minor; /* balance left before this invoice */
    tally_scope scope;
} tally_grant;

/* ---- Invoice lines -------------------------------------------------------- */

typedef enum tally_line_kind {
    TALLY_LINE_USAGE = 0,
    TALLY_LINE_COMMITMENT,
    TALLY_LINE_OVERAGE,
    TALLY_LINE_MINIMUM,
    TALLY_LINE_INSURANCE,
    TALLY_LINE_ADJUSTMENT,
    TALLY_LINE_KIND_COUNT
} tally_line_kind;

const char *tally_line_kind_name(tally_line_kind k);
TALLY_MUST_CHECK tally_err tally_line_kind_from_name(const char *s, tally_line_kind *out);

typedef struct tally_line {
    tally_line_kind kind;
    tally_meter meter;
    tally_pricing pricing;
    bool migration;           /* usage of the insured migration window */
    char sku[TALLY_NAME_MAX]; /* sku, storage class, traffic scope, token model */
    char dim2[16];            /* traffic direction, token kind */
    __int128 quantity;        /* base units */
    int64_t unit_price_nano;  /* per price unit */
    int64_t amount_minor;     /* rounded once, half-up */
    int64_t credited_minor;   /* paid by credits (sum of this line's credit uses) */
    char original_period[8];  /* adjustment lines: "YYYY-MM" of the usage; else "" */
    tally_line_kind adjusts;  /* adjustment lines: the kind of line they correct */
} tally_line;

/* The base unit, price unit and divisor (base units per price unit) of a meter:
 * accelerator "card-second", "card-hour", 3600; storage "byte-second",
 * "GB-day", 86400*10^9; traffic "byte", "GB", 10^9; tokens "token",
 * "million tokens", 10^6. */
const char *tally_meter_unit(tally_meter m);
const char *tally_meter_price_unit(tally_meter m);
int64_t tally_meter_unit_divisor(tally_meter m);

/* The highest price per price unit that a rate card or spot point may carry
 * for meter m in a currency with minor_digits digits, in nano units: 10^7
 * minor units per card-hour, 10^3 per GB-day and per GB, 10^5 per million
 * tokens, whatever the currency. So a month of maximal in-range usage on
 * every meter rates to less than INT64_MAX minor units (SPEC section 3: a
 * larger product would be an overflow error). 0 for an unknown meter. */
int64_t tally_price_max_nano(tally_meter m, int minor_digits);

/* One grant paying part of one line. */
typedef struct tally_credit_use {
    int64_t grant_id;
    tally_grant_kind kind;
    size_t line_index;
    int64_t amount_minor;
} tally_credit_use;

typedef struct tally_rating_input {
    const char *account;
    int minor_digits;                     /* of the account's currency */
    int64_t period_start_s, period_end_s; /* [start, end) in UTC seconds */
    const tally_ratecard *const *cards;   /* sorted by effective_from_s */
    size_t n_cards;
    const tally_spot_point *spot; /* runtime spot points, any order, any sku */
    size_t n_spot;
    /* Usage overlapping [period_start - 1 day, period_end + 1 day), so runs
     * that cross the period's edges are seen whole. Usage outside the period
     * is never billed; a run's minimum top-up belongs to the period in which
     * the run starts. Any order. */
    const tally_interval *intervals;
    size_t n_intervals;
    const tally_point *points; /* usage inside the period, any order */
    size_t n_points;
    const tally_commitment *commitments; /* of this account, any order */
    size_t n_commitments;
    const tally_grant *grants; /* of this account and currency, any order */
    size_t n_grants;
    /* Lines that do not come from usage in the period (adjustments computed by
     * tally_lines_diff); appended after the usage lines and payable by no
     * grant. Borrowed. */
    const tally_line *extra_lines;
    size_t n_extra_lines;
} tally_rating_input;

typedef struct tally_rating_result {
    tally_line *lines; /* canonical order: meter, kind, sku, dim2, pricing, price */
    size_t n_lines;
    tally_credit_use *credits; /* in the order grants were applied */
    size_t n_credits;
    int64_t subtotal_minor;      /* sum of line amounts */
    int64_t total_credits_minor; /* sum of credits; never more than subtotal */
    int64_t amount_due_minor;    /* subtotal - credits + credit_issued; never negative */
    /* When negative adjustment lines net the subtotal below zero, no credit
     * is applied, amount_due is 0 and the customer is owed -subtotal: the
     * caller issues it as a credit grant of kind adjustment (SPEC section 4).
     * Otherwise 0. */
    int64_t credit_issued_minor;
} tally_rating_result;

/* Rates one account's period. Allocates out's arrays; release them with
 * tally_rating_result_release(). On error, *why (cap bytes) names the
 * first usage that could not be priced and out holds nothing.
 * Errors: TALLY_NO_PRICE, TALLY_OVERFLOW, TALLY_NOMEM, TALLY_INVAL. */
TALLY_MUST_CHECK tally_err tally_rate_period(const tally_rating_input *in, tally_rating_result *out,
                                             char *why, size_t cap);
void tally_rating_result_release(tally_rating_result *r);

/* Adjustments for late usage: given the lines a period rates to now and the
 * lines already billed for it (its finalized invoice plus earlier adjustment
 * lines naming it, each as its original kind via `adjusts`), returns
 * adjustment lines with the differences, matched on (kind, meter, pricing,
 * migration, sku, dim2, unit price). Each has kind ADJUSTMENT, adjusts set,
 * original_period set, quantity and amount the exact difference (may be
 * negative). Zero differences produce no line. *out is allocated.
 * Errors: TALLY_NOMEM, TALLY_OVERFLOW. */
TALLY_MUST_CHECK tally_err tally_lines_diff(const tally_line *now, size_t n_now,
                                            const tally_line *billed, size_t n_billed,
                                            const char *original_period, tally_line **out,
                                            size_t *n_out);

#endif
