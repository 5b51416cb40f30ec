/* Names of grant and line kinds, and the units each meter is measured and
 * priced in. Tables indexed by the enums; the names are stored in the ledger
 * and shown on invoices, so they never change. */
#include <string.h>

#include "tally/rating.h"

static const char *const grant_kind_names[TALLY_GRANT_KIND_COUNT] = {
    [TALLY_GRANT_TRIAL] = "trial",       [TALLY_GRANT_COUPON] = "coupon",
    [TALLY_GRANT_PREPAID] = "prepaid",   [TALLY_GRANT_INSURANCE] = "insurance",
    [TALLY_GRANT_GOODWILL] = "goodwill", [TALLY_GRANT_ADJUSTMENT] = "adjustment",
};

static const char *const line_kind_names[TALLY_LINE_KIND_COUNT] = {
    [TALLY_LINE_USAGE] = "usage",         [TALLY_LINE_COMMITMENT] = "commitment",
    [TALLY_LINE_OVERAGE] = "overage",     [TALLY_LINE_MINIMUM] = "minimum",
    [TALLY_LINE_INSURANCE] = "insurance", [TALLY_LINE_ADJUSTMENT] = "adjustment",
};

static const struct meter_unit {
    const char *unit;
    const char *price_unit;
    int64_t divisor; /* base units per price unit */
} meter_units[TALLY_METER_COUNT] = {
    [TALLY_METER_ACCELERATOR] = {"card-second", "card-hour", 3600},
    [TALLY_METER_STORAGE] = {"byte-second", "GB-day", 86400LL * 1000000000LL},
    [TALLY_METER_TRAFFIC] = {"byte", "GB", 1000000000LL},
    [TALLY_METER_TOKENS] = {"token", "million tokens", 1000000LL},
};

/* Index of s in names[0..n), or -1. */
static int lookup(const char *const *names, int n, const char *s)
{
    if (s == NULL)
        return -1;
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -1;
}

/* Out-of-range kinds name themselves "unknown" so that callers may print the
 * result unconditionally. */
const char *tally_grant_kind_name(tally_grant_kind k)
{
    if ((int)k < 0 || k >= TALLY_GRANT_KIND_COUNT)
        return "unknown";
    return grant_kind_names[k];
}

tally_err tally_grant_kind_from_name(const char *s, tally_grant_kind *out)
{
    int i = lookup(grant_kind_names, TALLY_GRANT_KIND_COUNT, s);

    if (i < 0)
        return TALLY_NOT_FOUND;
    *out = (tally_grant_kind)i;
    return TALLY_OK;
}

const char *tally_line_kind_name(tally_line_kind k)
{
    if ((int)k < 0 || k >= TALLY_LINE_KIND_COUNT)
        return "unknown";
    return line_kind_names[k];
}

tally_err tally_line_kind_from_name(const char *s, tally_line_kind *out)
{
    int i = lookup(line_kind_names, TALLY_LINE_KIND_COUNT, s);

    if (i < 0)
        return TALLY_NOT_FOUND;
    *out = (tally_line_kind)i;
    return TALLY_OK;
}

static const struct meter_unit *meter_unit(tally_meter m)
{
    if ((int)m < 0 || m >= TALLY_METER_COUNT)
        return NULL;
    return &meter_units[m];
}

/* Unknown meters: "" units and divisor 0, which the money functions refuse
 * with TALLY_INVAL rather than dividing by it. */
const char *tally_meter_unit(tally_meter m)
{
    const struct meter_unit *u = meter_unit(m);
    return u ? u->unit : "";
}

const char *tally_meter_price_unit(tally_meter m)
{
    const struct meter_unit *u = meter_unit(m);
    return u ? u->price_unit : "";
}

int64_t tally_meter_unit_divisor(tally_meter m)
{
    const struct meter_unit *u = meter_unit(m);
    return u ? u->divisor : 0;
}

/* The highest price per price unit, in minor units of any currency. With
 * these, a month of maximal in-range usage (one event a second on each
 * meter, every quantity at its SPEC section 1 bound) rates to at most
 * 1.76e18 (accelerator), 2.68e18 (traffic) and 2.68e17 (tokens) minor
 * units, under INT64_MAX (9.22e18) together. Storage's line would fit too,
 * but its exact numerator (byte-seconds x nano price x 10^digits) passes
 * __int128 above 0.74 minor units per GB-day for that month: the rating
 * then fails with TALLY_OVERFLOW, never wraps. tests/rating/
 * test_rate_bounds.c rates exactly that month. */
static const int64_t price_max_minor[TALLY_METER_COUNT] = {
    [TALLY_METER_ACCELERATOR] = 10000000, /* 100,000.00 CNY per card-hour */
    [TALLY_METER_STORAGE] = 1000,         /* 10.00 CNY per GB-day */
    [TALLY_METER_TRAFFIC] = 1000,         /* 10.00 CNY per GB */
    [TALLY_METER_TOKENS] = 100000,        /* 1,000.00 CNY per million tokens */
};

int64_t tally_price_max_nano(tally_meter m, int minor_digits)
{
    if ((int)m < 0 || m >= TALLY_METER_COUNT || minor_digits < 0 || minor_digits > 9)
        return 0;
    int64_t nano = price_max_minor[m] * TALLY_PRICE_SCALE; /* at most 10^16 */
    for (int i = 0; i < minor_digits; i++)
        nano /= 10;
    return nano;
}
