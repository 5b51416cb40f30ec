/* Exact money: currencies, decimal prices and amounts, one rounding rule.
 *
 * Amounts are int64_t counts of a currency's minor unit (fen, cent, yen).
 * Prices are int64_t counts of 10^-9 of a major unit per price unit
 * ("nano"), so "1.90" is 1900000000. Products are formed in __int128 and
 * every overflow is reported as TALLY_OVERFLOW, never wrapped. Rounding is
 * half-up (half away from zero for negatives), applied once per line.
 * No floating point is used anywhere. */
#ifndef TALLY_MONEY_H
#define TALLY_MONEY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tally/err.h"

#define TALLY_PRICE_DIGITS 9
#define TALLY_PRICE_SCALE  1000000000LL

typedef struct tally_currency {
    const char *code; /* ISO 4217, e.g. "CNY" */
    int minor_digits; /* 2 for CNY/USD, 0 for JPY/KRW */
} tally_currency;

/* The currency with this ISO 4217 code (exactly three upper-case letters),
 * or NULL if Tally does not know it. The result is static. */
const tally_currency *tally_currency_find(const char *code);

/* SPEC section 4: a credit grant is at most 1,000,000,000.00 in major units,
 * so that no sum of grants, balances or postings that the ledger keeps in
 * int64 minor units comes near overflow. */
#define TALLY_GRANT_MAX_MAJOR 1000000000LL

/* TALLY_GRANT_MAX_MAJOR in c's minor units (10^9 x 10^minor_digits). */
int64_t tally_grant_max_minor(const tally_currency *c);

/* Parses a decimal string of exactly len bytes ("12", "0.5", "1.900000001")
 * into nano units. Accepts digits with at most one '.', at most 9 fractional
 * digits, and a leading '-' only when allow_negative. Rejects whitespace,
 * signs '+', exponents, empty parts ("1.", ".5") and values past INT64.
 * On error *why (if not NULL) points to a static one-line reason.
 * Errors: TALLY_PARSE (malformed), TALLY_RANGE (negative not allowed, too
 * many digits), TALLY_OVERFLOW (does not fit). */
TALLY_MUST_CHECK tally_err tally_price_parse(const char *s, size_t len, bool allow_negative,
                                             int64_t *out_nano, const char **why);

/* Writes a nano price as a decimal string with at least min_frac and at most
 * 9 fractional digits (trailing zeros beyond min_frac are dropped): 1900000000
 * with min_frac 2 is "1.90". Errors: TALLY_TOO_LARGE if cap is too small. */
TALLY_MUST_CHECK tally_err tally_price_format(int64_t nano, int min_frac, char *buf, size_t cap);

/* Parses an amount in major units ("39.82", "-1.5", "100") into minor units of
 * a currency with minor_digits digits; more fractional digits than the
 * currency has is TALLY_RANGE (amounts are never silently rounded).
 * Same grammar and errors as tally_price_parse. */
TALLY_MUST_CHECK tally_err tally_amount_parse(const char *s, size_t len, int minor_digits,
                                              bool allow_negative, int64_t *out_minor,
                                              const char **why);

/* Writes minor units as a major-unit decimal string with exactly
 * minor_digits fractional digits: 3982 -> "39.82", -5 -> "-0.05", JPY 120 ->
 * "120". Errors: TALLY_TOO_LARGE if cap is too small. */
TALLY_MUST_CHECK tally_err tally_amount_format(int64_t minor, int minor_digits, char *buf,
                                               size_t cap);

/* round_half_up(num / den) for den > 0, into an int64_t.
 * Errors: TALLY_INVAL (den <= 0), TALLY_OVERFLOW. */
TALLY_MUST_CHECK tally_err tally_money_div_round(__int128 num, __int128 den, int64_t *out);

/* The rounded amount of qty price units where a price unit is unit_divisor
 * quantity units: round_half_up(qty * price_nano * 10^minor_digits /
 * (unit_divisor * 10^9)). Example: 75456 card-seconds at 1.90 per card-hour
 * (divisor 3600), CNY -> 3982. qty and price may be negative.
 * Errors: TALLY_INVAL (divisor <= 0), TALLY_OVERFLOW. */
TALLY_MUST_CHECK tally_err tally_money_extend(__int128 qty, int64_t price_nano,
                                              int64_t unit_divisor, int minor_digits,
                                              int64_t *out_minor);

/* The exact, unrounded numerator of that product on the common denominator
 * tally_money_denominator(unit_divisor): lets a caller sum
 * several exact parts and round once. Errors: TALLY_OVERFLOW. */
TALLY_MUST_CHECK tally_err tally_money_exact(__int128 qty, int64_t price_nano, int minor_digits,
                                             __int128 *out_num);
__int128 tally_money_denominator(int64_t unit_divisor);

/* Checked a + b and a - b. Errors: TALLY_OVERFLOW. */
TALLY_MUST_CHECK tally_err tally_money_add(int64_t a, int64_t b, int64_t *out);
TALLY_MUST_CHECK tally_err tally_money_sub(int64_t a, int64_t b, int64_t *out);

/* Splits total (>= 0) over n parts in proportion to weights (each >= 0, not
 * all zero) by the largest-remainder method: out[i] sums exactly to total;
 * ties in remainder go to the lower index. Errors: TALLY_INVAL, TALLY_OVERFLOW. */
TALLY_MUST_CHECK tally_err tally_money_allocate(int64_t total, const int64_t *weights, size_t n,
                                                int64_t *out);

/* Formats a signed 128-bit integer in decimal. Errors: TALLY_TOO_LARGE. */
TALLY_MUST_CHECK tally_err tally_i128_format(__int128 v, char *buf, size_t cap);

#endif
