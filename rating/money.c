/* Exact money: decimal strings in and out, checked products in __int128,
 * one rounding rule (half away from zero) and largest-remainder allocation.
 * Integers only; every overflow is reported, none wraps. */
#include "tally/money.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The most fractional digits a scale may have: prices use 9, and a
 * currency's minor unit never needs more. */
#define SCALE_MAX 9

typedef unsigned __int128 u128;

static const int64_t pow10_i64[SCALE_MAX + 1] = {
    1LL, 10LL, 100LL, 1000LL, 10000LL, 100000LL, 1000000LL, 10000000LL, 100000000LL, 1000000000LL,
};

/* A syntactically valid decimal string, split into its parts. */
struct decimal {
    bool neg;
    const char *int_digits;
    size_t int_len;
    const char *frac_digits;
    size_t frac_len;
};

/* Why a character that is neither a digit nor the first '.' is refused. */
static const struct {
    const char *chars;
    const char *why;
} refusals[] = {
    {".", "more than one decimal point"},       {" \t\n\r\v\f", "whitespace is not allowed"},
    {"+", "sign '+' is not allowed"},           {"-", "sign '-' is only allowed first"},
    {"eE", "exponent notation is not allowed"},
};

static tally_err fail(const char **why, tally_err e, const char *reason)
{
    if (why)
        *why = reason;
    return e;
}

static const char *refusal(char c)
{
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
        /* memchr, not strchr: a NUL byte must not match the terminator */
        if (memchr(refusals[i].chars, c, strlen(refusals[i].chars)))
            return refusals[i].why;
    }
    return "unexpected character";
}

/* Checks the grammar -?digits(.digits)? and splits s into d. */
static tally_err scan_decimal(const char *s, size_t len, struct decimal *d, const char **why)
{
    if (len == 0)
        return fail(why, TALLY_PARSE, "empty");
    size_t start = s[0] == '-' ? 1 : 0;
    size_t dot = len; /* len means "no point seen" */
    for (size_t i = start; i < len; i++) {
        if (s[i] >= '0' && s[i] <= '9')
            continue;
        if (s[i] == '.' && dot == len) {
            dot = i;
            continue;
        }
        return fail(why, TALLY_PARSE, refusal(s[i]));
    }
    d->neg = start == 1;
    d->int_digits = s + start;
    d->int_len = dot - start;
    d->frac_digits = dot < len ? s + dot + 1 : s + len;
    d->frac_len = dot < len ? len - dot - 1 : 0;
    if (dot < len && (d->int_len == 0 || d->frac_len == 0))
        return fail(why, TALLY_PARSE, "digits required on both sides of the point");
    if (d->int_len == 0)
        return fail(why, TALLY_PARSE, "no digits after the sign");
    return TALLY_OK;
}

/* The value of d in units of 10^-scale (d has at most scale fractional
 * digits). Leading zeros are harmless: the running value is checked
 * against the limit after every digit, so it never exceeds 2^67. */
static tally_err decimal_value(const struct decimal *d, int scale, int64_t *out, const char **why)
{
    const u128 limit = d->neg ? (u128)INT64_MAX + 1 : (u128)INT64_MAX;
    u128 v = 0;
    for (size_t i = 0; i < d->int_len; i++) {
        v = v * 10 + (u128)(d->int_digits[i] - '0');
        if (v > limit)
            return fail(why, TALLY_OVERFLOW, "value too large");
    }
    u128 frac = 0;
    for (size_t i = 0; i < d->frac_len; i++)
        frac = frac * 10 + (u128)(d->frac_digits[i] - '0');
    v = v * (u128)pow10_i64[scale] + frac * (u128)pow10_i64[(size_t)scale - d->frac_len];
    if (v > limit)
        return fail(why, TALLY_OVERFLOW, "value too large");
    /* -(v - 1) - 1 reaches INT64_MIN without a signed overflow */
    *out = d->neg ? -(int64_t)(v - (v > 0)) - (v > 0) : (int64_t)v;
    return TALLY_OK;
}

static tally_err parse_scaled(const char *s, size_t len, bool allow_negative, int scale,
                              const char *too_many, int64_t *out, const char **why)
{
    struct decimal d;
    if ((!s && len) || !out)
        return fail(why, TALLY_INVAL, "no string or no result to parse into");
    tally_err e = scan_decimal(s, len, &d, why);
    if (e)
        return e;
    if (d.neg && !allow_negative)
        return fail(why, TALLY_RANGE, "negative amount not allowed");
    if (d.frac_len > (size_t)scale)
        return fail(why, TALLY_RANGE, too_many);
    return decimal_value(&d, scale, out, why);
}

tally_err tally_price_parse(const char *s, size_t len, bool allow_negative, int64_t *out_nano,
                            const char **why)
{
    return parse_scaled(s, len, allow_negative, TALLY_PRICE_DIGITS, "more than 9 fractional digits",
                        out_nano, why);
}

tally_err tally_amount_parse(const char *s, size_t len, int minor_digits, bool allow_negative,
                             int64_t *out_minor, const char **why)
{
    if (minor_digits < 0 || minor_digits > SCALE_MAX)
        return fail(why, TALLY_INVAL, "unsupported number of minor digits");
    return parse_scaled(s, len, allow_negative, minor_digits,
                        "more fractional digits than the currency has", out_minor, why);
}

/* Writes v / 10^scale with its first `shown` fractional digits; the caller
 * drops only digits that are zero. On failure buf holds "" so that a
 * truncated number can never be used. */
static tally_err format_scaled(int64_t v, int scale, int shown, char *buf, size_t cap)
{
    if (!buf || cap == 0)
        return TALLY_TOO_LARGE;
    uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    uint64_t unit = (uint64_t)pow10_i64[scale];
    uint64_t frac = (mag % unit) / (uint64_t)pow10_i64[scale - shown];
    const char *sign = v < 0 ? "-" : "";
    int n;
    if (shown == 0)
        n = snprintf(buf, cap, "%s%" PRIu64, sign, mag / unit);
    else
        n = snprintf(buf, cap, "%s%" PRIu64 ".%0*" PRIu64, sign, mag / unit, shown, frac);
    if (n < 0 || (size_t)n >= cap) {
        buf[0] = '\0';
        return TALLY_TOO_LARGE;
    }
    return TALLY_OK;
}

tally_err tally_price_format(int64_t nano, int min_frac, char *buf, size_t cap)
{
    if (min_frac < 0 || min_frac > TALLY_PRICE_DIGITS)
        return TALLY_INVAL;
    uint64_t mag = nano < 0 ? (uint64_t)0 - (uint64_t)nano : (uint64_t)nano;
    uint64_t frac = mag % (uint64_t)TALLY_PRICE_SCALE;
    int shown = TALLY_PRICE_DIGITS;
    while (shown > min_frac && frac % 10 == 0) {
        frac /= 10;
        shown--;
    }
    return format_scaled(nano, TALLY_PRICE_DIGITS, shown, buf, cap);
}

tally_err tally_amount_format(int64_t minor, int minor_digits, char *buf, size_t cap)
{
    if (minor_digits < 0 || minor_digits > SCALE_MAX)
        return TALLY_INVAL;
    return format_scaled(minor, minor_digits, minor_digits, buf, cap);
}

tally_err tally_money_div_round(__int128 num, __int128 den, int64_t *out)
{
    if (den <= 0 || !out)
        return TALLY_INVAL;
    __int128 q = num / den; /* truncates toward zero */
    __int128 r = num % den; /* same sign as num, |r| < den */
    __int128 mag = r < 0 ? -r : r;
    /* |r| >= den / 2 exactly, without forming 2 * |r| (it may not fit);
     * q moves away from zero, and cannot overflow as den >= 2 here */
    if (mag != 0 && mag >= den - mag)
        q += num < 0 ? -1 : 1;
    if (q < INT64_MIN || q > INT64_MAX)
        return TALLY_OVERFLOW;
    *out = (int64_t)q;
    return TALLY_OK;
}

tally_err tally_money_exact(__int128 qty, int64_t price_nano, int minor_digits, __int128 *out_num)
{
    if (minor_digits < 0 || minor_digits > SCALE_MAX || !out_num)
        return TALLY_INVAL;
    /* |qty * price| <= |qty * price * 10^d|, so checking each step loses no
     * product that would fit */
    __int128 num;
    if (__builtin_mul_overflow(qty, (__int128)price_nano, &num) ||
        __builtin_mul_overflow(num, (__int128)pow10_i64[minor_digits], &num))
        return TALLY_OVERFLOW;
    *out_num = num;
    return TALLY_OK;
}

__int128 tally_money_denominator(int64_t unit_divisor)
{
    /* |unit_divisor| < 2^63 and 10^9 < 2^30: always fits */
    return (__int128)unit_divisor * TALLY_PRICE_SCALE;
}

tally_err tally_money_extend(__int128 qty, int64_t price_nano, int64_t unit_divisor,
                             int minor_digits, int64_t *out_minor)
{
    if (unit_divisor <= 0)
        return TALLY_INVAL;
    __int128 num;
    tally_err e = tally_money_exact(qty, price_nano, minor_digits, &num);
    if (e)
        return e;
    return tally_money_div_round(num, tally_money_denominator(unit_divisor), out_minor);
}

tally_err tally_money_add(int64_t a, int64_t b, int64_t *out)
{
    int64_t sum;
    if (!out)
        return TALLY_INVAL;
    if (__builtin_add_overflow(a, b, &sum))
        return TALLY_OVERFLOW;
    *out = sum;
    return TALLY_OK;
}

tally_err tally_money_sub(int64_t a, int64_t b, int64_t *out)
{
    int64_t diff;
    if (!out)
        return TALLY_INVAL;
    if (__builtin_sub_overflow(a, b, &diff))
        return TALLY_OVERFLOW;
    *out = diff;
    return TALLY_OK;
}

/* Largest-remainder allocation. Part i's exact share is total * w_i / W;
 * its floor is q_i and its remainder r_i = total * w_i - q_i * W (0 <= r_i <
 * W, all on the same denominator, so remainders compare directly). The k
 * units the floors leave go to the k largest remainders, lower index first
 * on ties. No scratch memory: q_i and r_i are recomputed from the weights
 * (total * w_i < 2^126 and W < 2^127 fit in __int128), and the threshold
 * remainder is found by bisection. out may alias weights: the last pass
 * reads w_i before it writes out[i]. */

static void share(int64_t total, int64_t w, __int128 wsum, __int128 *q, __int128 *r)
{
    __int128 num = (__int128)total * w;
    *q = num / wsum;
    *r = num % wsum;
}

static size_t count_at_least(int64_t total, const int64_t *weights, size_t n, __int128 wsum,
                             __int128 t)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) {
        __int128 q, r;
        share(total, weights[i], wsum, &q, &r);
        c += r >= t;
    }
    return c;
}

/* The greatest remainder t that at least k parts reach (k >= 1). Since the
 * remainders sum to k * W and each is below W, more than k are nonzero, so
 * t >= 1 and parts with a zero weight never receive a unit. */
static __int128 threshold(int64_t total, const int64_t *weights, size_t n, __int128 wsum, size_t k)
{
    __int128 lo = 1, hi = wsum - 1;
    while (lo < hi) {
        __int128 mid = lo + (hi - lo + 1) / 2;
        if (count_at_least(total, weights, n, wsum, mid) >= k)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

tally_err tally_money_allocate(int64_t total, const int64_t *weights, size_t n, int64_t *out)
{
    if (total < 0 || n == 0 || !weights || !out)
        return TALLY_INVAL;
    __int128 wsum = 0, floors = 0;
    for (size_t i = 0; i < n; i++) {
        if (weights[i] < 0)
            return TALLY_INVAL;
        wsum += weights[i]; /* n * 2^63 < 2^127 */
    }
    if (wsum == 0)
        return TALLY_INVAL;
    for (size_t i = 0; i < n; i++) {
        __int128 q, r;
        share(total, weights[i], wsum, &q, &r);
        floors += q;
    }
    size_t k = (size_t)(total - floors); /* < n: each remainder is below one unit */
    __int128 t = k ? threshold(total, weights, n, wsum, k) : wsum;
    size_t ties = k ? k - count_at_least(total, weights, n, wsum, t + 1) : 0;
    for (size_t i = 0; i < n; i++) {
        __int128 q, r;
        share(total, weights[i], wsum, &q, &r);
        bool extra = r > t || (r == t && ties > 0);
        if (r == t && ties > 0)
            ties--;
        out[i] = (int64_t)q + extra;
    }
    return TALLY_OK;
}

tally_err tally_i128_format(__int128 v, char *buf, size_t cap)
{
    char tmp[41]; /* 39 digits, a sign, a NUL */
    size_t pos = sizeof tmp;
    u128 mag = v < 0 ? (u128)0 - (u128)v : (u128)v;
    tmp[--pos] = '\0';
    do {
        tmp[--pos] = (char)('0' + (int)(mag % 10));
        mag /= 10;
    } while (mag);
    if (v < 0)
        tmp[--pos] = '-';
    size_t len = sizeof tmp - pos; /* including the NUL */
    if (!buf || cap < len) {
        if (buf && cap)
            buf[0] = '\0';
        return TALLY_TOO_LARGE;
    }
    memcpy(buf, tmp + pos, len);
    return TALLY_OK;
}
