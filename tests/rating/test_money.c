/* Tests for rating/money.c and rating/currency.c: the price book's worked
 * examples, the decimal grammar with its exact error reasons, overflow edges,
 * allocation, formatting round trips, and a randomized comparison of the
 * checked __int128 arithmetic against OpenSSL's arbitrary-precision BIGNUM.
 * One file past the usual size because tests mirror modules: it is mostly
 * tables of cases for the one money module. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/bn.h>

#include "testutil.h"

#include "tally/money.h"

typedef unsigned __int128 u128;

#define I128_MAX    ((__int128)(((u128)1 << 127) - 1))
#define I128_MIN    (-I128_MAX - 1)
#define NANO(units) ((int64_t)(units)*TALLY_PRICE_SCALE)

/* ---- deterministic randomness (splitmix64) ---- */

#define DEFAULT_SEED 0x7a11e5eedULL

static uint64_t rng_state;

static uint64_t rng(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void rng_seed(const char *what)
{
    const char *env = getenv("TALLY_MONEY_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 0) : DEFAULT_SEED;
    rng_state = seed;
    printf("%s: seed 0x%" PRIx64 " (set TALLY_MONEY_SEED to change)\n", what, seed);
}

/* A value of a random bit length in [0, bits] (bits <= 127), sign chosen
 * when signed_ok. */
static __int128 rand_bits(int bits, bool signed_ok)
{
    u128 v = ((u128)rng() << 64) | rng();
    int len = (int)(rng() % (uint64_t)(bits + 1));
    v = len == 0 ? 0 : v >> (128 - len);
    __int128 s = (__int128)v;
    return signed_ok && (rng() & 1) ? -s : s;
}

/* Whole milliseconds: integers only, as everywhere in Tally. */
static int64_t elapsed_ms(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (int64_t)(t1.tv_sec - t0->tv_sec) * 1000 + (t1.tv_nsec - t0->tv_nsec) / 1000000;
}

static const char *i128_str(__int128 v)
{
    static char buf[4][48];
    static int slot;
    char *b = buf[slot++ & 3];
    if (tally_i128_format(v, b, sizeof buf[0]) != TALLY_OK)
        return "?";
    return b;
}

/* ---- the price book's worked examples ---- */

static int64_t price(const char *s)
{
    int64_t nano = 0;
    const char *why = NULL;
    assert_int_equal(tally_price_parse(s, strlen(s), false, &nano, &why), TALLY_OK);
    return nano;
}

static void assert_amount(int64_t minor, int digits, const char *want)
{
    char buf[32];
    assert_int_equal(tally_amount_format(minor, digits, buf, sizeof buf), TALLY_OK);
    assert_string_equal(buf, want);
}

static void test_pricebook_a100(void **state)
{
    /* 8 cards for 9,432 s = 75,456 card-seconds at 1.90 per card-hour */
    int64_t amount = 0;
    assert_int_equal(price("1.90"), 1900000000);
    assert_int_equal(tally_money_extend(8 * 9432, price("1.90"), 3600, 2, &amount), TALLY_OK);
    assert_int_equal(amount, 3982); /* 39.824 -> 39.82 */
    assert_amount(amount, 2, "39.82");
}

static void test_pricebook_tpu_trial(void **state)
{
    int64_t amount = 0, due = 0, left = 0;
    assert_int_equal(tally_money_extend(5 * 3600, price("1.90"), 3600, 2, &amount), TALLY_OK);
    assert_int_equal(amount, 950);
    assert_amount(amount, 2, "9.50");
    /* the 10.00 trial voucher covers it all and keeps 0.50 */
    int64_t voucher = 1000, used = amount < voucher ? amount : voucher;
    assert_int_equal(tally_money_sub(amount, used, &due), TALLY_OK);
    assert_int_equal(tally_money_sub(voucher, used, &left), TALLY_OK);
    assert_amount(due, 2, "0.00");
    assert_amount(left, 2, "0.50");
}

static void test_pricebook_spot(void **state)
{
    /* 11:30-12:00 at 0.50, 12:00-12:30 at 0.80 */
    int64_t a = 0, b = 0, total = 0;
    assert_int_equal(tally_money_extend(1800, price("0.50"), 3600, 2, &a), TALLY_OK);
    assert_int_equal(tally_money_extend(1800, price("0.80"), 3600, 2, &b), TALLY_OK);
    assert_int_equal(a, 25);
    assert_int_equal(b, 40);
    assert_int_equal(tally_money_add(a, b, &total), TALLY_OK);
    assert_amount(total, 2, "0.65");

    /* the same through exact parts summed and rounded once */
    __int128 na = 0, nb = 0;
    int64_t once = 0;
    assert_int_equal(tally_money_exact(1800, price("0.50"), 2, &na), TALLY_OK);
    assert_int_equal(tally_money_exact(1800, price("0.80"), 2, &nb), TALLY_OK);
    assert_int_equal(tally_money_div_round(na + nb, tally_money_denominator(3600), &once),
                     TALLY_OK);
    assert_int_equal(once, 65);
}

static void test_pricebook_h100_minimum(void **state)
{
    /* 20 s billed as the 60 s minimum: 2.58 / 60 = 0.043 -> 0.04 */
    int64_t amount = -1;
    assert_int_equal(tally_money_extend(60, price("2.58"), 3600, 2, &amount), TALLY_OK);
    assert_int_equal(amount, 4);
    assert_amount(amount, 2, "0.04");
}

static void test_pricebook_storage_tokens(void **state)
{
    /* 500 GB for one day at 0.0006 per GB-day; quantity in byte-seconds,
     * one GB-day = 10^9 bytes x 86,400 s */
    int64_t amount = 0;
    __int128 byte_s = (__int128)500000000000LL * 86400;
    assert_int_equal(price("0.0006"), 600000);
    assert_int_equal(
        tally_money_extend(byte_s, price("0.0006"), 86400LL * 1000000000LL, 2, &amount), TALLY_OK);
    assert_int_equal(amount, 30);
    assert_amount(amount, 2, "0.30");
    /* 1,234,567 output tokens at 8.00 per million = 9.876536 -> 9.88 */
    assert_int_equal(tally_money_extend(1234567, price("8.00"), 1000000, 2, &amount), TALLY_OK);
    assert_int_equal(amount, 988);
}

/* ---- parsing: every refusal with its code and reason ---- */

static const struct bad_case {
    const char *s;
    size_t len; /* 0: strlen(s) */
    bool allow_negative;
    tally_err err;
    const char *why;
} bad_prices[] = {
    {"1.2.3", 0, true, TALLY_PARSE, "more than one decimal point"},
    {"1..2", 0, true, TALLY_PARSE, "more than one decimal point"},
    {"1e5", 0, true, TALLY_PARSE, "exponent notation is not allowed"},
    {"1E5", 0, true, TALLY_PARSE, "exponent notation is not allowed"},
    {"1.5e-3", 0, true, TALLY_PARSE, "exponent notation is not allowed"},
    {"-1e5", 0, false, TALLY_PARSE, "exponent notation is not allowed"},
    {" 1", 0, true, TALLY_PARSE, "whitespace is not allowed"},
    {"1 ", 0, true, TALLY_PARSE, "whitespace is not allowed"},
    {"1\t", 0, true, TALLY_PARSE, "whitespace is not allowed"},
    {"1\n", 0, true, TALLY_PARSE, "whitespace is not allowed"},
    {"- 1", 0, true, TALLY_PARSE, "whitespace is not allowed"},
    {"-0.5", 0, false, TALLY_RANGE, "negative amount not allowed"},
    {"-0", 0, false, TALLY_RANGE, "negative amount not allowed"},
    {"0.1234567891", 0, true, TALLY_RANGE, "more than 9 fractional digits"},
    {"0.1234567890", 0, true, TALLY_RANGE, "more than 9 fractional digits"},
    {"", 0, true, TALLY_PARSE, "empty"},
    {"1.", 0, true, TALLY_PARSE, "digits required on both sides of the point"},
    {".5", 0, true, TALLY_PARSE, "digits required on both sides of the point"},
    {".", 0, true, TALLY_PARSE, "digits required on both sides of the point"},
    {"-.5", 0, true, TALLY_PARSE, "digits required on both sides of the point"},
    {"+1", 0, true, TALLY_PARSE, "sign '+' is not allowed"},
    {"1+", 0, true, TALLY_PARSE, "sign '+' is not allowed"},
    {"-", 0, true, TALLY_PARSE, "no digits after the sign"},
    {"--1", 0, true, TALLY_PARSE, "sign '-' is only allowed first"},
    {"1-", 0, true, TALLY_PARSE, "sign '-' is only allowed first"},
    {"abc", 0, true, TALLY_PARSE, "unexpected character"},
    {"1,000", 0, true, TALLY_PARSE, "unexpected character"},
    {"0x10", 0, true, TALLY_PARSE, "unexpected character"},
    {"1\0", 2, true, TALLY_PARSE, "unexpected character"},
    {"9223372037", 0, true, TALLY_OVERFLOW, "value too large"},
    {"9223372036.854775808", 0, true, TALLY_OVERFLOW, "value too large"},
    {"-9223372036.854775809", 0, true, TALLY_OVERFLOW, "value too large"},
    {"99999999999999999999999999999999999999999999", 0, true, TALLY_OVERFLOW, "value too large"},
};

static void test_price_parse_errors(void **state)
{
    for (size_t i = 0; i < sizeof bad_prices / sizeof bad_prices[0]; i++) {
        const struct bad_case *c = &bad_prices[i];
        size_t len = c->len ? c->len : strlen(c->s);
        int64_t out = 12345;
        const char *why = NULL;
        tally_err e = tally_price_parse(c->s, len, c->allow_negative, &out, &why);
        if (e != c->err || !why || strcmp(why, c->why) != 0)
            fail_msg("\"%s\": got %s (%s), want %s (%s)", c->s, tally_err_name(e),
                     why ? why : "NULL", tally_err_name(c->err), c->why);
        assert_int_equal(out, 12345); /* untouched on error */
    }
    /* why may be NULL */
    int64_t out = 0;
    assert_int_equal(tally_price_parse("1.2.3", 5, true, &out, NULL), TALLY_PARSE);
    assert_int_equal(tally_price_parse(NULL, 0, true, &out, NULL), TALLY_PARSE);
    assert_int_equal(tally_price_parse(NULL, 3, true, &out, NULL), TALLY_INVAL);
    assert_int_equal(tally_price_parse("1", 1, true, NULL, NULL), TALLY_INVAL);
}

static const struct good_case {
    const char *s;
    int64_t nano;
} good_prices[] = {
    {"0", 0},
    {"-0", 0},
    {"12", NANO(12)},
    {"0.5", 500000000},
    {"1.90", 1900000000},
    {"1.900000001", 1900000001},
    {"0.000000001", 1},
    {"-0.000000001", -1},
    {"0.0006", 600000},
    {"-2.58", -2580000000},
    {"007.50", 7500000000},
    {"0000000000000000000000000000000001.5", 1500000000},
    {"9223372036.854775807", INT64_MAX},
    {"9223372036", 9223372036000000000},
    {"-9223372036.854775808", INT64_MIN},
};

static void test_price_parse_ok(void **state)
{
    for (size_t i = 0; i < sizeof good_prices / sizeof good_prices[0]; i++) {
        int64_t out = 0;
        const char *why = NULL;
        tally_err e =
            tally_price_parse(good_prices[i].s, strlen(good_prices[i].s), true, &out, &why);
        if (e != TALLY_OK || out != good_prices[i].nano)
            fail_msg("\"%s\": got %s (%s) %" PRId64, good_prices[i].s, tally_err_name(e),
                     why ? why : "", out);
    }
    /* exactly len bytes are read: "1.905" cut to "1.90" */
    int64_t out = 0;
    assert_int_equal(tally_price_parse("1.905", 4, false, &out, NULL), TALLY_OK);
    assert_int_equal(out, 1900000000);
}

static void test_amount_parse(void **state)
{
    static const struct {
        const char *s;
        int digits;
        bool neg;
        tally_err err;
        int64_t minor;
        const char *why;
    } cases[] = {
        {"39.82", 2, false, TALLY_OK, 3982, NULL},
        {"100", 2, false, TALLY_OK, 10000, NULL},
        {"0.05", 2, false, TALLY_OK, 5, NULL},
        {"-1.5", 2, true, TALLY_OK, -150, NULL},
        {"-0.05", 2, true, TALLY_OK, -5, NULL},
        {"120", 0, false, TALLY_OK, 120, NULL},
        {"1.5", 3, false, TALLY_OK, 1500, NULL},
        {"92233720368547758.07", 2, false, TALLY_OK, INT64_MAX, NULL},
        {"-92233720368547758.08", 2, true, TALLY_OK, INT64_MIN, NULL},
        {"9223372036854775807", 0, false, TALLY_OK, INT64_MAX, NULL},
        {"92233720368547758.08", 2, false, TALLY_OVERFLOW, 0, "value too large"},
        {"9223372036854775808", 0, true, TALLY_OVERFLOW, 0, "value too large"},
        {"39.824", 2, false, TALLY_RANGE, 0, "more fractional digits than the currency has"},
        {"120.0", 0, false, TALLY_RANGE, 0, "more fractional digits than the currency has"},
        {"-1.5", 2, false, TALLY_RANGE, 0, "negative amount not allowed"},
        {"1.2.3", 2, true, TALLY_PARSE, 0, "more than one decimal point"},
        {"1e5", 2, true, TALLY_PARSE, 0, "exponent notation is not allowed"},
        {" 1", 2, true, TALLY_PARSE, 0, "whitespace is not allowed"},
        {"", 2, true, TALLY_PARSE, 0, "empty"},
        {"1.", 2, true, TALLY_PARSE, 0, "digits required on both sides of the point"},
        {"+1", 2, true, TALLY_PARSE, 0, "sign '+' is not allowed"},
        {"1", -1, true, TALLY_INVAL, 0, "unsupported number of minor digits"},
        {"1", 10, true, TALLY_INVAL, 0, "unsupported number of minor digits"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t out = 777;
        const char *why = NULL;
        tally_err e = tally_amount_parse(cases[i].s, strlen(cases[i].s), cases[i].digits,
                                         cases[i].neg, &out, &why);
        bool ok = e == cases[i].err &&
                  (e ? why && strcmp(why, cases[i].why) == 0 && out == 777 : out == cases[i].minor);
        if (!ok)
            fail_msg("\"%s\"/%d: got %s (%s) %" PRId64, cases[i].s, cases[i].digits,
                     tally_err_name(e), why ? why : "", out);
    }
}

/* ---- formatting ---- */

static void test_amount_format(void **state)
{
    assert_amount(3982, 2, "39.82");
    assert_amount(-5, 2, "-0.05");
    assert_amount(120, 0, "120");
    assert_amount(-120, 0, "-120");
    assert_amount(0, 2, "0.00");
    assert_amount(0, 0, "0");
    assert_amount(5, 3, "0.005");
    assert_amount(-100, 2, "-1.00");
    assert_amount(INT64_MAX, 2, "92233720368547758.07");
    assert_amount(INT64_MIN, 2, "-92233720368547758.08");
    assert_amount(INT64_MIN, 0, "-9223372036854775808");

    char buf[8];
    assert_int_equal(tally_amount_format(3982, 2, buf, 6), TALLY_OK); /* "39.82" + NUL */
    assert_string_equal(buf, "39.82");
    memset(buf, 'x', sizeof buf);
    assert_int_equal(tally_amount_format(3982, 2, buf, 5), TALLY_TOO_LARGE);
    assert_string_equal(buf, ""); /* never a truncated number */
    assert_int_equal(tally_amount_format(1, 2, buf, 0), TALLY_TOO_LARGE);
    assert_int_equal(tally_amount_format(1, 2, NULL, 0), TALLY_TOO_LARGE);
    assert_int_equal(tally_amount_format(1, -1, buf, sizeof buf), TALLY_INVAL);
    assert_int_equal(tally_amount_format(1, 10, buf, sizeof buf), TALLY_INVAL);
}

static void assert_price_fmt(int64_t nano, int min_frac, const char *want)
{
    char buf[32];
    assert_int_equal(tally_price_format(nano, min_frac, buf, sizeof buf), TALLY_OK);
    assert_string_equal(buf, want);
}

static void test_price_format(void **state)
{
    assert_price_fmt(1900000000, 2, "1.90");
    assert_price_fmt(1900000000, 0, "1.9");
    assert_price_fmt(1900000000, 9, "1.900000000");
    assert_price_fmt(1900000001, 2, "1.900000001");
    assert_price_fmt(600000, 2, "0.0006");
    assert_price_fmt(1, 0, "0.000000001");
    assert_price_fmt(-1, 2, "-0.000000001");
    assert_price_fmt(0, 0, "0");
    assert_price_fmt(0, 2, "0.00");
    assert_price_fmt(NANO(7), 0, "7");
    assert_price_fmt(-NANO(7), 2, "-7.00");
    assert_price_fmt(INT64_MAX, 2, "9223372036.854775807");
    assert_price_fmt(INT64_MIN, 0, "-9223372036.854775808");

    char buf[8];
    assert_int_equal(tally_price_format(1900000000, 2, buf, 5), TALLY_OK);
    assert_string_equal(buf, "1.90");
    assert_int_equal(tally_price_format(1900000000, 2, buf, 4), TALLY_TOO_LARGE);
    assert_string_equal(buf, "");
    assert_int_equal(tally_price_format(1, -1, buf, sizeof buf), TALLY_INVAL);
    assert_int_equal(tally_price_format(1, 10, buf, sizeof buf), TALLY_INVAL);
}

static void test_i128_format(void **state)
{
    char buf[48];
    static const struct {
        __int128 v;
        const char *s;
    } cases[] = {
        {0, "0"},
        {7, "7"},
        {-7, "-7"},
        {INT64_MAX, "9223372036854775807"},
        {(__int128)INT64_MIN - 1, "-9223372036854775809"},
        {(__int128)1 << 100, "1267650600228229401496703205376"},
        {I128_MAX, "170141183460469231731687303715884105727"},
        {I128_MIN, "-170141183460469231731687303715884105728"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(tally_i128_format(cases[i].v, buf, sizeof buf), TALLY_OK);
        assert_string_equal(buf, cases[i].s);
    }
    assert_int_equal(tally_i128_format(-123, buf, 5), TALLY_OK);
    assert_string_equal(buf, "-123");
    assert_int_equal(tally_i128_format(-123, buf, 4), TALLY_TOO_LARGE);
    assert_string_equal(buf, "");
    assert_int_equal(tally_i128_format(0, NULL, 0), TALLY_TOO_LARGE);
    assert_int_equal(tally_i128_format(I128_MIN, buf, 41), TALLY_OK);
    assert_int_equal(tally_i128_format(I128_MIN, buf, 40), TALLY_TOO_LARGE);
}

/* parse(format(x)) == x for random amounts and prices */
static void test_format_roundtrip(void **state)
{
    rng_seed("format round trip");
    char buf[48];
    for (int i = 0; i < 200000; i++) {
        int64_t x = (int64_t)rand_bits(63, true), back = 0;
        if (i < 2)
            x = i ? INT64_MIN : INT64_MAX;
        int digits = (int)(rng() % 10), min_frac = (int)(rng() % 10);
        const char *why = NULL;
        assert_int_equal(tally_amount_format(x, digits, buf, sizeof buf), TALLY_OK);
        tally_err e = tally_amount_parse(buf, strlen(buf), digits, true, &back, &why);
        if (e || back != x)
            fail_msg("amount %" PRId64 "/%d -> \"%s\" -> %s %" PRId64, x, digits, buf,
                     tally_err_name(e), back);
        assert_int_equal(tally_price_format(x, min_frac, buf, sizeof buf), TALLY_OK);
        e = tally_price_parse(buf, strlen(buf), true, &back, &why);
        if (e || back != x)
            fail_msg("price %" PRId64 "/%d -> \"%s\" -> %s %" PRId64, x, min_frac, buf,
                     tally_err_name(e), back);
        /* between min_frac and 9 fractional digits, no zero past min_frac */
        const char *dot = strchr(buf, '.');
        int frac = dot ? (int)strlen(dot + 1) : 0;
        assert_true(frac >= min_frac && frac <= 9);
        if (frac > min_frac)
            assert_true(buf[strlen(buf) - 1] != '0');
    }
}

/* ---- arithmetic edges ---- */

static void test_div_round(void **state)
{
    static const struct {
        __int128 num, den;
        tally_err err;
        int64_t q;
    } cases[] = {
        {5, 10, TALLY_OK, 1},
        {-5, 10, TALLY_OK, -1}, /* half away from zero */
        {4, 10, TALLY_OK, 0},
        {-4, 10, TALLY_OK, 0},
        {15, 10, TALLY_OK, 2},
        {-15, 10, TALLY_OK, -2},
        {14, 10, TALLY_OK, 1},
        {-16, 10, TALLY_OK, -2},
        {0, 7, TALLY_OK, 0},
        {1, 3, TALLY_OK, 0},
        {2, 3, TALLY_OK, 1},
        {-2, 3, TALLY_OK, -1},
        {(__int128)INT64_MAX * 2, 2, TALLY_OK, INT64_MAX},
        {(__int128)INT64_MAX * 2 + 1, 2, TALLY_OVERFLOW, 0}, /* rounds to 2^63 */
        {(__int128)INT64_MIN * 2, 2, TALLY_OK, INT64_MIN},
        {(__int128)INT64_MIN * 2 + 1, 2, TALLY_OK, INT64_MIN}, /* -2^63 + 0.5 */
        {(__int128)INT64_MIN * 2 - 1, 2, TALLY_OVERFLOW, 0},
        {(__int128)INT64_MAX + 1, 1, TALLY_OVERFLOW, 0},
        {I128_MAX, 1, TALLY_OVERFLOW, 0},
        {I128_MIN, 1, TALLY_OVERFLOW, 0},
        {I128_MIN, I128_MAX, TALLY_OK, -1},
        {I128_MAX, I128_MAX, TALLY_OK, 1},
        /* den near 2^127: 2|r| would not fit */
        {(__int128)1 << 126, I128_MAX, TALLY_OK, 1},
        {((__int128)1 << 126) - 1, I128_MAX, TALLY_OK, 0},
        {-((__int128)1 << 126), I128_MAX, TALLY_OK, -1},
        {I128_MAX - 1, I128_MAX, TALLY_OK, 1},
        {1, 0, TALLY_INVAL, 0},
        {1, -5, TALLY_INVAL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t q = 4242;
        tally_err e = tally_money_div_round(cases[i].num, cases[i].den, &q);
        if (e != cases[i].err || (e == TALLY_OK && q != cases[i].q) || (e && q != 4242))
            fail_msg("%s / %s: got %s %" PRId64, i128_str(cases[i].num), i128_str(cases[i].den),
                     tally_err_name(e), q);
    }
    assert_int_equal(tally_money_div_round(1, 1, NULL), TALLY_INVAL);
}

static void test_extend_edges(void **state)
{
    int64_t out = 0;
    __int128 num = 0;
    const int64_t one = NANO(1);
    /* the int64 boundary of the result */
    assert_int_equal(tally_money_extend(INT64_MAX, one, 1, 0, &out), TALLY_OK);
    assert_int_equal(out, INT64_MAX);
    assert_int_equal(tally_money_extend(INT64_MIN, one, 1, 0, &out), TALLY_OK);
    assert_int_equal(out, INT64_MIN);
    assert_int_equal(tally_money_extend(INT64_MAX, one, 100, 2, &out), TALLY_OK);
    assert_int_equal(out, INT64_MAX);
    assert_int_equal(tally_money_extend((__int128)INT64_MAX + 1, one, 1, 0, &out), TALLY_OVERFLOW);
    assert_int_equal(tally_money_extend(INT64_MIN, -one, 1, 0, &out), TALLY_OVERFLOW);
    assert_int_equal(tally_money_extend(INT64_MAX, one, 1, 2, &out), TALLY_OVERFLOW);
    assert_int_equal(tally_money_extend(1, INT64_MIN, 1, 0, &out), TALLY_OK);
    assert_int_equal(out, -9223372037); /* -9223372036.854775808 rounds away from zero */
    assert_int_equal(tally_money_extend(-1, INT64_MIN, 1, 0, &out), TALLY_OK);
    assert_int_equal(out, 9223372037);
    /* rounding pushes past INT64_MAX: (INT64_MAX + 0.5) units */
    assert_int_equal(tally_money_extend((__int128)INT64_MAX * 2 + 1, 500000000, 1, 0, &out),
                     TALLY_OVERFLOW);
    assert_int_equal(tally_money_extend((__int128)INT64_MAX * 2, 500000000, 1, 0, &out), TALLY_OK);
    assert_int_equal(out, INT64_MAX);
    /* the exact numerator overflows __int128 even where the quotient is
     * small: extend is exact-then-round, so it reports the overflow */
    assert_int_equal(tally_money_extend((__int128)1 << 100, (int64_t)1 << 30, INT64_MAX, 0, &out),
                     TALLY_OVERFLOW);
    assert_int_equal(tally_money_exact((__int128)1 << 100, (int64_t)1 << 30, 0, &num),
                     TALLY_OVERFLOW);
    assert_int_equal(tally_money_exact(I128_MAX, -1, 0, &num), TALLY_OK);
    assert_true(num == -I128_MAX);
    assert_int_equal(tally_money_exact(I128_MAX, -1, 1, &num), TALLY_OVERFLOW);
    assert_int_equal(tally_money_exact(I128_MIN, 1, 0, &num), TALLY_OK);
    assert_true(num == I128_MIN);
    assert_int_equal(tally_money_exact(I128_MIN, -1, 0, &num), TALLY_OVERFLOW);
    assert_int_equal(tally_money_exact(I128_MIN / 1000, 1, 3, &num), TALLY_OK);
    assert_int_equal(tally_money_exact(I128_MIN / 1000 - 1, 1, 3, &num), TALLY_OVERFLOW);
    assert_int_equal(tally_money_exact(0, INT64_MIN, 3, &num), TALLY_OK);
    assert_true(num == 0);
    /* bad arguments */
    assert_int_equal(tally_money_extend(1, one, 0, 2, &out), TALLY_INVAL);
    assert_int_equal(tally_money_extend(1, one, -3600, 2, &out), TALLY_INVAL);
    assert_int_equal(tally_money_extend(1, one, 3600, -1, &out), TALLY_INVAL);
    assert_int_equal(tally_money_extend(1, one, 3600, 10, &out), TALLY_INVAL);
    assert_int_equal(tally_money_exact(1, one, 2, NULL), TALLY_INVAL);
    assert_true(tally_money_denominator(3600) == (__int128)3600 * 1000000000);
    assert_true(tally_money_denominator(INT64_MAX) == (__int128)INT64_MAX * 1000000000);
}

static void test_add_sub(void **state)
{
    int64_t out = 99;
    assert_int_equal(tally_money_add(INT64_MAX - 1, 1, &out), TALLY_OK);
    assert_int_equal(out, INT64_MAX);
    out = 99;
    assert_int_equal(tally_money_add(INT64_MAX, 1, &out), TALLY_OVERFLOW);
    assert_int_equal(out, 99); /* untouched */
    assert_int_equal(tally_money_add(INT64_MIN, -1, &out), TALLY_OVERFLOW);
    assert_int_equal(tally_money_add(INT64_MIN, INT64_MAX, &out), TALLY_OK);
    assert_int_equal(out, -1);
    assert_int_equal(tally_money_sub(INT64_MIN + 1, 1, &out), TALLY_OK);
    assert_int_equal(out, INT64_MIN);
    out = 99;
    assert_int_equal(tally_money_sub(INT64_MIN, 1, &out), TALLY_OVERFLOW);
    assert_int_equal(tally_money_sub(0, INT64_MIN, &out), TALLY_OVERFLOW);
    assert_int_equal(tally_money_sub(-1, INT64_MIN, &out), TALLY_OK);
    assert_int_equal(out, INT64_MAX);
    assert_int_equal(tally_money_add(1, 1, NULL), TALLY_INVAL);
    assert_int_equal(tally_money_sub(1, 1, NULL), TALLY_INVAL);
}

/* ---- allocation ---- */

static void check_alloc(int64_t total, const int64_t *w, size_t n, const int64_t *want)
{
    int64_t out[16];
    assert_true(n <= 16);
    assert_int_equal(tally_money_allocate(total, w, n, out), TALLY_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(out[i], want[i]);
}

static void test_allocate_fixed(void **state)
{
    check_alloc(100, (int64_t[]){1, 1, 1}, 3, (int64_t[]){34, 33, 33});
    check_alloc(2, (int64_t[]){1, 1, 1}, 3, (int64_t[]){1, 1, 0});
    check_alloc(3, (int64_t[]){0, 1, 0, 1}, 4, (int64_t[]){0, 2, 0, 1});
    check_alloc(7, (int64_t[]){0, 5}, 2, (int64_t[]){0, 7});
    check_alloc(0, (int64_t[]){3, 4}, 2, (int64_t[]){0, 0});
    check_alloc(10, (int64_t[]){1, 2, 3, 4}, 4, (int64_t[]){1, 2, 3, 4});
    check_alloc(1, (int64_t[]){1, 3}, 2, (int64_t[]){0, 1});
    check_alloc(5, (int64_t[]){3, 1, 1}, 3, (int64_t[]){3, 1, 1});
    check_alloc(1000, (int64_t[]){950, 50}, 2, (int64_t[]){950, 50});
    check_alloc(4, (int64_t[]){1, 1, 1}, 3, (int64_t[]){2, 1, 1});
    /* the largest remainder wins over a lower index */
    check_alloc(1, (int64_t[]){1, 2}, 2, (int64_t[]){0, 1});
    /* extremes: no overflow anywhere */
    check_alloc(INT64_MAX, (int64_t[]){INT64_MAX, INT64_MAX, INT64_MAX}, 3,
                (int64_t[]){INT64_MAX / 3 + 1, INT64_MAX / 3, INT64_MAX / 3});
    check_alloc(INT64_MAX, (int64_t[]){1, INT64_MAX}, 2, (int64_t[]){1, INT64_MAX - 1});
    check_alloc(INT64_MAX, (int64_t[]){0, 0, 9}, 3, (int64_t[]){0, 0, INT64_MAX});

    /* out may be the weights array */
    int64_t w[3] = {1, 1, 1};
    assert_int_equal(tally_money_allocate(100, w, 3, w), TALLY_OK);
    assert_int_equal(w[0], 34);
    assert_int_equal(w[1] + w[2], 66);

    int64_t out[3] = {0};
    assert_int_equal(tally_money_allocate(-1, (int64_t[]){1, 1}, 2, out), TALLY_INVAL);
    assert_int_equal(tally_money_allocate(5, (int64_t[]){1, -1}, 2, out), TALLY_INVAL);
    assert_int_equal(tally_money_allocate(5, (int64_t[]){0, 0}, 2, out), TALLY_INVAL);
    assert_int_equal(tally_money_allocate(5, (int64_t[]){1}, 0, out), TALLY_INVAL);
    assert_int_equal(tally_money_allocate(5, NULL, 2, out), TALLY_INVAL);
    assert_int_equal(tally_money_allocate(5, (int64_t[]){1}, 1, NULL), TALLY_INVAL);
}

/* A plain reference: floors, then one unit at a time to the largest
 * remainder, lowest index first. */
static void alloc_reference(int64_t total, const int64_t *w, size_t n, int64_t *out)
{
    __int128 sum = 0, rem[16], left = total;
    bool got[16] = {false};
    for (size_t i = 0; i < n; i++)
        sum += w[i];
    for (size_t i = 0; i < n; i++) {
        out[i] = (int64_t)((__int128)total * w[i] / sum);
        rem[i] = (__int128)total * w[i] % sum;
        left -= out[i];
    }
    for (; left > 0; left--) {
        size_t best = n;
        for (size_t i = 0; i < n; i++) {
            if (!got[i] && (best == n || rem[i] > rem[best]))
                best = i;
        }
        got[best] = true;
        out[best]++;
    }
}

static void test_allocate_random(void **state)
{
    rng_seed("allocation");
    for (int iter = 0; iter < 20000; iter++) {
        size_t n = 1 + rng() % 16;
        int wbits = (int)(rng() % 64), tbits = (int)(rng() % 64);
        int64_t w[16], out[16], want[16], total = (int64_t)rand_bits(tbits, false);
        __int128 wsum = 0;
        for (size_t i = 0; i < n; i++) {
            w[i] = rng() % 4 == 0 ? 0 : (int64_t)rand_bits(wbits, false);
            if (rng() % 8 == 0 && i > 0)
                w[i] = w[i - 1]; /* equal weights: ties */
            wsum += w[i];
        }
        if (wsum == 0)
            w[rng() % n] = 1;
        assert_int_equal(tally_money_allocate(total, w, n, out), TALLY_OK);
        alloc_reference(total, w, n, want);
        __int128 got = 0;
        for (size_t i = 0; i < n; i++) {
            got += out[i];
            if (out[i] != want[i])
                fail_msg("iteration %d part %zu: got %" PRId64 ", want %" PRId64, iter, i, out[i],
                         want[i]);
        }
        assert_true(got == total);
    }
}

/* ---- the randomized comparison with OpenSSL BIGNUM ---- */

struct bn_ref {
    BN_CTX *ctx;
    BIGNUM *a, *b, *num, *den, *q, *r, *t, *i128_min, *i128_max, *i64_min, *i64_max;
};

static void bn_set_i128(BIGNUM *bn, __int128 v)
{
    unsigned char bytes[16];
    u128 m = v < 0 ? (u128)0 - (u128)v : (u128)v;
    for (int i = 15; i >= 0; i--) {
        bytes[i] = (unsigned char)(m & 0xff);
        m >>= 8;
    }
    if (!BN_bin2bn(bytes, 16, bn))
        fail_msg("BN_bin2bn");
    BN_set_negative(bn, v < 0);
}

static void bn_ref_init(struct bn_ref *z)
{
    z->ctx = BN_CTX_new();
    BIGNUM **all[] = {&z->a, &z->b,        &z->num,      &z->den,     &z->q,      &z->r,
                      &z->t, &z->i128_min, &z->i128_max, &z->i64_min, &z->i64_max};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        *all[i] = BN_new();
        assert_non_null(*all[i]);
    }
    assert_non_null(z->ctx);
    bn_set_i128(z->i128_min, I128_MIN);
    bn_set_i128(z->i128_max, I128_MAX);
    bn_set_i128(z->i64_min, INT64_MIN);
    bn_set_i128(z->i64_max, INT64_MAX);
}

static void bn_ref_free(struct bn_ref *z)
{
    BIGNUM *all[] = {z->a, z->b,        z->num,      z->den,     z->q,      z->r,
                     z->t, z->i128_min, z->i128_max, z->i64_min, z->i64_max};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        BN_free(all[i]);
    BN_CTX_free(z->ctx);
}

/* z->q = num / den rounded half away from zero (den > 0). BN_div truncates
 * toward zero and gives the remainder num's sign. */
static void bn_round(struct bn_ref *z)
{
    if (!BN_div(z->q, z->r, z->num, z->den, z->ctx) || !BN_lshift1(z->t, z->r))
        fail_msg("BN_div");
    if (BN_ucmp(z->t, z->den) >= 0 &&
        !(BN_is_negative(z->num) ? BN_sub_word(z->q, 1) : BN_add_word(z->q, 1)))
        fail_msg("BN_add_word");
}

static bool bn_fits_i64(const struct bn_ref *z, const BIGNUM *v)
{
    return BN_cmp(v, z->i64_max) <= 0 && BN_cmp(v, z->i64_min) >= 0;
}

/* What extend must return, computed without __int128 products: z->num gets
 * qty * price * 10^digits and z->q the rounded quotient. Returns
 * TALLY_OVERFLOW when the numerator leaves __int128 or the amount int64. */
static tally_err bn_extend(struct bn_ref *z, __int128 qty, int64_t price_nano, int64_t divisor,
                           int digits)
{
    static const BN_ULONG tens[] = {1, 10, 100, 1000};
    bn_set_i128(z->a, qty);
    bn_set_i128(z->b, price_nano);
    if (!BN_mul(z->num, z->a, z->b, z->ctx) || !BN_mul_word(z->num, tens[digits]))
        fail_msg("BN_mul");
    if (BN_cmp(z->num, z->i128_max) > 0 || BN_cmp(z->num, z->i128_min) < 0)
        return TALLY_OVERFLOW;
    if (!BN_set_word(z->den, (BN_ULONG)divisor) || !BN_mul_word(z->den, 1000000000))
        fail_msg("BN_set_word");
    bn_round(z);
    return bn_fits_i64(z, z->q) ? TALLY_OK : TALLY_OVERFLOW;
}

struct draw {
    __int128 qty;
    int64_t price, divisor;
    int digits;
    bool half;     /* qty * price * 10^d / den is exactly n + 1/2 */
    int64_t round; /* then: the expected amount */
};

static int64_t rand_price(void)
{
    static const int64_t fixed[] = {0, 1, -1, 1900000000, 600000, INT64_MAX, INT64_MIN, 500000000};
    switch (rng() % 5) {
    case 0:
        return (int64_t)(rng() % 100000) * 10000000; /* "123.45" style */
    case 1:
        return (int64_t)(rng() % ((uint64_t)1 << 40));
    case 2:
        return fixed[rng() % (sizeof fixed / sizeof fixed[0])];
    default:
        return (int64_t)rand_bits(63, true);
    }
}

static int64_t rand_divisor(void)
{
    static const int64_t fixed[] = {1, 60, 3600,           86400,         1000000,
                                    3, 7,  86400000000000, 3600000000000, INT64_MAX};
    if (rng() % 2)
        return fixed[rng() % (sizeof fixed / sizeof fixed[0])];
    int64_t d = (int64_t)rand_bits(63, false);
    return d > 0 ? d : 1;
}

static __int128 rand_qty(void)
{
    static const __int128 fixed[] = {
        0,        1,       -1, INT64_MAX, INT64_MIN, (__int128)1 << 100, -((__int128)1 << 100),
        I128_MAX, I128_MIN};
    switch (rng() % 5) {
    case 0:
        return (__int128)(rng() % 1000000) * (rng() % 4 ? 1 : -1);
    case 1:
        return rand_bits(48, true);
    case 2:
        return fixed[rng() % (sizeof fixed / sizeof fixed[0])];
    default:
        return rand_bits(101, true);
    }
}

/* A case exactly halfway between two amounts: with divisor = p * k,
 * qty = (2m + 1) * k * 5 * 10^(8 - d) makes the quotient (2m + 1) / 2. */
static void draw_half(struct draw *c)
{
    static const int64_t tens[] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};
    int64_t p = 1 + (int64_t)(rng() % (1u << 20)), k = 1 + (int64_t)(rng() % (1u << 20));
    int64_t m = (int64_t)(rng() % ((uint64_t)1 << 40));
    bool neg = rng() & 1;
    c->price = p;
    c->divisor = p * k;
    c->qty = (__int128)(2 * m + 1) * k * 5 * tens[8 - c->digits];
    c->half = true;
    c->round = m + 1;
    switch (rng() % 3) { /* just below or above the half */
    case 0:
        c->qty -= 1;
        c->half = false;
        break;
    case 1:
        c->qty += 1;
        c->half = false;
        break;
    }
    if (neg) {
        c->qty = -c->qty;
        c->round = -c->round;
    }
}

static void draw_case(struct draw *c)
{
    c->digits = (int)(rng() % 4);
    c->half = false;
    c->round = 0;
    if (rng() % 8 == 0) {
        draw_half(c);
        return;
    }
    c->qty = rand_qty();
    c->price = rand_price();
    c->divisor = rand_divisor();
}

/* Checks extend and exact on one case; returns extend's result. */
static tally_err check_case(struct bn_ref *z, const struct draw *c, long i)
{
    int64_t got = 0x5eed;
    __int128 num = 0;
    tally_err want = bn_extend(z, c->qty, c->price, c->divisor, c->digits);
    tally_err e = tally_money_extend(c->qty, c->price, c->divisor, c->digits, &got);
    tally_err ex = tally_money_exact(c->qty, c->price, c->digits, &num);
    bool ok = e == want;
    if (ok && ex == TALLY_OK) {
        bn_set_i128(z->t, num);
        ok = BN_cmp(z->t, z->num) == 0;
    } else if (ok) {
        ok = ex == TALLY_OVERFLOW &&
             (BN_cmp(z->num, z->i128_max) > 0 || BN_cmp(z->num, z->i128_min) < 0);
    }
    if (ok && want == TALLY_OK) {
        bn_set_i128(z->t, got);
        ok = BN_cmp(z->t, z->q) == 0 && (!c->half || got == c->round);
    }
    if (!ok) {
        char *q = BN_bn2dec(z->q);
        fail_msg("case %ld: qty %s price %" PRId64 " divisor %" PRId64 " digits %d: got %s %" PRId64
                 ", want %s %s",
                 i, i128_str(c->qty), c->price, c->divisor, c->digits, tally_err_name(e), got,
                 tally_err_name(want), q ? q : "?");
    }
    return e;
}

static void test_extend_vs_bignum(void **state)
{
    const long cases = 1000000;
    struct bn_ref z;
    struct timespec t0;
    long overflows = 0, halves = 0;
    bn_ref_init(&z);
    rng_seed("extend vs BIGNUM");
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < cases; i++) {
        struct draw c;
        draw_case(&c);
        overflows += check_case(&z, &c, i) != TALLY_OK;
        halves += c.half;
    }
    printf("extend vs BIGNUM: %ld cases (%ld overflow, %ld exactly half) in %" PRId64 " ms\n",
           cases, overflows, halves, elapsed_ms(&t0));
    /* each kind of outcome must be well represented */
    assert_true(overflows > cases / 20 && overflows < cases - cases / 5);
    assert_true(halves > cases / 50);
    bn_ref_free(&z);
}

/* div_round on random numerators and denominators over the whole range */
static void test_div_round_vs_bignum(void **state)
{
    struct bn_ref z;
    bn_ref_init(&z);
    rng_seed("div_round vs BIGNUM");
    for (long i = 0; i < 200000; i++) {
        __int128 num = rand_bits(127, true), den = rand_bits(127, false);
        if (den == 0)
            den = 1;
        int64_t got = 0;
        tally_err e = tally_money_div_round(num, den, &got);
        bn_set_i128(z.num, num);
        bn_set_i128(z.den, den);
        bn_round(&z);
        bool fits = bn_fits_i64(&z, z.q);
        bool ok = fits ? e == TALLY_OK : e == TALLY_OVERFLOW;
        if (ok && fits) {
            bn_set_i128(z.t, got);
            ok = BN_cmp(z.t, z.q) == 0;
        }
        if (!ok)
            fail_msg("%s / %s: got %s %" PRId64, i128_str(num), i128_str(den), tally_err_name(e),
                     got);
    }
    bn_ref_free(&z);
}

/* ---- currencies ---- */

static void test_currency_find(void **state)
{
    static const struct {
        const char *code;
        int digits;
    } known[] = {
        {"CNY", 2}, {"USD", 2}, {"EUR", 2}, {"GBP", 2}, {"JPY", 0}, {"KRW", 0}, {"HKD", 2},
        {"SGD", 2}, {"CHF", 2}, {"AUD", 2}, {"CAD", 2}, {"INR", 2}, {"TWD", 2}, {"KWD", 3},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        const tally_currency *c = tally_currency_find(known[i].code);
        assert_non_null(c);
        assert_string_equal(c->code, known[i].code);
        assert_int_equal(c->minor_digits, known[i].digits);
        assert_ptr_equal(c, tally_currency_find(known[i].code)); /* static */
    }
    static const char *unknown[] = {"cny", "Cny", "CN", "CNYX", "", "XXX", "C1Y", " CNY", "CNY "};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
        assert_null(tally_currency_find(unknown[i]));
    assert_null(tally_currency_find(NULL));

    /* a JPY price line: 3 cards x 1 h at 40 per card-hour */
    const tally_currency *jpy = tally_currency_find("JPY");
    int64_t amount = 0;
    assert_int_equal(tally_money_extend(3 * 3600, NANO(40), 3600, jpy->minor_digits, &amount),
                     TALLY_OK);
    assert_amount(amount, jpy->minor_digits, "120");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pricebook_a100),
        cmocka_unit_test(test_pricebook_tpu_trial),
        cmocka_unit_test(test_pricebook_spot),
        cmocka_unit_test(test_pricebook_h100_minimum),
        cmocka_unit_test(test_pricebook_storage_tokens),
        cmocka_unit_test(test_price_parse_errors),
        cmocka_unit_test(test_price_parse_ok),
        cmocka_unit_test(test_amount_parse),
        cmocka_unit_test(test_amount_format),
        cmocka_unit_test(test_price_format),
        cmocka_unit_test(test_i128_format),
        cmocka_unit_test(test_format_roundtrip),
        cmocka_unit_test(test_div_round),
        cmocka_unit_test(test_extend_edges),
        cmocka_unit_test(test_add_sub),
        cmocka_unit_test(test_allocate_fixed),
        cmocka_unit_test(test_allocate_random),
        cmocka_unit_test(test_extend_vs_bignum),
        cmocka_unit_test(test_div_round_vs_bignum),
        cmocka_unit_test(test_currency_find),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
