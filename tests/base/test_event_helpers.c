/* Tests for the pure helpers that base/include/tally/event.h declares: RFC 3339
 * times (base/time.c), meter and pricing names (base/names.c) and the
 * 128-bit hash (base/hash.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tally/event.h"

static void test_time_parse(void **state)
{
    static const struct {
        const char *s;
        int64_t t;
    } good[] = {
        {"1970-01-01T00:00:00Z", 0},
        {"2000-02-29T00:00:00Z", 951782400},
        {"2024-02-29T23:59:59Z", 1709251199},
        {"0000-01-01T00:00:00Z", -62167219200LL},
        {"9999-12-31T23:59:59Z", 253402300799LL},
        {"0000-01-01T00:00:00+00:01", -62167219260LL},
        {"1969-12-31T23:59:59.999Z", -1},
        {"2026-03-01T20:00:00.250+08:00", 1772366400},
        {"2026-03-01T12:00:00-23:59", 1772366400 + 86340},
    };
    static const char *const bad[] = {
        "",
        "2026-03-01",
        "2026-03-01T12:00Z",
        "2026-13-01T00:00:00Z",
        "2026-00-01T00:00:00Z",
        "2026-04-31T00:00:00Z",
        "1900-02-29T00:00:00Z",
        "2026-03-00T00:00:00Z",
        "2026-03-01T24:00:00Z",
        "2026-03-01T12:60:00Z",
        "2026-03-01T12:00:60Z",
        "2026-03-01T12:00:00+23:60",
        "2026-03-01T12:00:00+0800",
        "2026-03-01T12:00:00 Z",
        "2026-03-01T12:00:00Zx",
        "+2026-03-01T12:00:00Z",
        "20260301T120000Z",
        "2026-3-01T12:00:00Z",
        "2026-03-01T12:00:00.+08:00",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int64_t t = 12345;
        assert_int_equal(tally_time_parse(good[i].s, strlen(good[i].s), &t), TALLY_OK);
        assert_int_equal(t, good[i].t);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t t;
        if (tally_time_parse(bad[i], strlen(bad[i]), &t) != TALLY_PARSE)
            fail_msg("accepted %s", bad[i]);
    }
    int64_t t;
    assert_int_equal(tally_time_parse("2026-03-01T12:00:00Z", 19, &t), TALLY_PARSE);
    assert_int_equal(tally_time_parse(NULL, 0, &t), TALLY_PARSE);
}

static void test_time_format(void **state)
{
    char buf[32];
    assert_int_equal(tally_time_format(0, buf, sizeof buf), TALLY_OK);
    assert_string_equal(buf, "1970-01-01T00:00:00Z");
    assert_int_equal(tally_time_format(-1, buf, sizeof buf), TALLY_OK);
    assert_string_equal(buf, "1969-12-31T23:59:59Z");
    assert_int_equal(tally_time_format(253402300799LL, buf, sizeof buf), TALLY_OK);
    assert_string_equal(buf, "9999-12-31T23:59:59Z");
    assert_int_equal(tally_time_format(-62167219200LL, buf, sizeof buf), TALLY_OK);
    assert_string_equal(buf, "0000-01-01T00:00:00Z");
    assert_int_equal(tally_time_format(253402300800LL, buf, sizeof buf), TALLY_RANGE);
    assert_int_equal(tally_time_format(-62167219201LL, buf, sizeof buf), TALLY_RANGE);
    assert_int_equal(tally_time_format(INT64_MIN, buf, sizeof buf), TALLY_RANGE);
    assert_int_equal(tally_time_format(0, buf, 20), TALLY_TOO_LARGE);
    assert_int_equal(tally_time_format(0, buf, 21), TALLY_OK);
    /* round trip over every day of years 0..9999, at varying times of day */
    for (int64_t t = -62167219200LL; t <= 253402300799LL; t += 3 * 86400 + 3607) {
        int64_t back;
        assert_int_equal(tally_time_format(t, buf, sizeof buf), TALLY_OK);
        assert_int_equal(tally_time_parse(buf, strlen(buf), &back), TALLY_OK);
        assert_int_equal(back, t);
    }
}

static void test_names(void **state)
{
    for (int m = 0; m < TALLY_METER_COUNT; m++) {
        tally_meter back;
        assert_int_equal(tally_meter_from_name(tally_meter_name((tally_meter)m), &back), TALLY_OK);
        assert_int_equal(back, m);
    }
    for (int p = TALLY_PRICING_NONE; p <= TALLY_PRICING_RESERVED; p++) {
        tally_pricing back;
        assert_int_equal(tally_pricing_from_name(tally_pricing_name((tally_pricing)p), &back),
                         TALLY_OK);
        assert_int_equal(back, p);
    }
    assert_string_equal(tally_meter_name(TALLY_METER_TOKENS), "tokens");
    assert_string_equal(tally_pricing_name(TALLY_PRICING_ON_DEMAND), "on_demand");
    assert_string_equal(tally_pricing_name(TALLY_PRICING_NONE), "");
    tally_meter m;
    tally_pricing p;
    assert_int_equal(tally_meter_from_name("gpu", &m), TALLY_NOT_FOUND);
    assert_int_equal(tally_meter_from_name(NULL, &m), TALLY_NOT_FOUND);
    assert_int_equal(tally_pricing_from_name("Spot", &p), TALLY_NOT_FOUND);
    assert_string_equal(tally_meter_name((tally_meter)99), "");
}

static void test_hash_stable(void **state)
{
    /* Pinned values: keys and fingerprints are stored in ledgers, so these
     * must never change. */
    static const struct {
        const char *in;
        uint64_t seed, h0, h1;
    } pinned[] = {
        {"", 0, 0x5efc4e2039b26df4ull, 0xd5415677da617d61ull},
        {"tally", 0, 0x512f86909d613a22ull, 0x2d9a041bd74b7976ull},
        {"0123456789abcdef", 1, 0x9a2b29bdc333cc5dull, 0xefe5092f2ddd5d32ull},
        {"the quick brown fox jumps over the lazy dog, twice over and then some", 42,
         0x2b4800b5923ae2a1ull, 0x535acdef648e838dull},
    };
    for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++) {
        uint64_t h[2];
        tally_hash128(pinned[i].in, strlen(pinned[i].in), pinned[i].seed, h);
        assert_int_equal(h[0], pinned[i].h0);
        assert_int_equal(h[1], pinned[i].h1);
    }
}

static void test_hash_avalanche(void **state)
{
    /* Flipping any one input bit flips close to half the output bits. */
    static const size_t lens[] = {1, 7, 8, 15, 16, 17, 31, 64, 100, 270};
    uint64_t rng = 12345;
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
        unsigned char in[270];
        size_t len = lens[l];
        long flipped = 0, trials = 0;
        for (int rep = 0; rep < 40; rep++) {
            for (size_t i = 0; i < len; i++) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                in[i] = (unsigned char)rng;
            }
            uint64_t a[2], b[2];
            tally_hash128(in, len, 0, a);
            for (size_t bit = 0; bit < len * 8; bit++) {
                in[bit / 8] ^= (unsigned char)(1u << bit % 8);
                tally_hash128(in, len, 0, b);
                in[bit / 8] ^= (unsigned char)(1u << bit % 8);
                flipped += __builtin_popcountll(a[0] ^ b[0]) + __builtin_popcountll(a[1] ^ b[1]);
                trials++;
            }
        }
        /* expected 64 of 128 bits per flip */
        assert_true(flipped > trials * 62 && flipped < trials * 66);
    }
    uint64_t a[2], b[2];
    tally_hash128("abc", 3, 0, a);
    tally_hash128("abc", 3, 1, b);
    assert_memory_not_equal(a, b, sizeof a);
    tally_hash128("abc\0", 4, 0, b);
    assert_memory_not_equal(a, b, sizeof a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_time_parse),     cmocka_unit_test(test_time_format),
        cmocka_unit_test(test_names),          cmocka_unit_test(test_hash_stable),
        cmocka_unit_test(test_hash_avalanche),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
