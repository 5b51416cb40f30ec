/* Tests for the records of a dedupe window's content (ledger/run_codec.c):
 * random sequences come back exactly, coding is canonical (what was decoded
 * codes to the same bytes), a host's periodic reports cost a byte each, and
 * bytes that no coder writes are refused without reading past their end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "../../ledger/run_codec_int.h"

#define T0 1772323200LL /* 2026-03-01T00:00:00Z */

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Codes n records into out; returns the bytes written. */
static size_t encode_all(const rc_rec *recs, size_t n, uint8_t *out)
{
    size_t len = rc_encode(recs, n, out);
    assert_true(len >= (n + 2) / 3 && len <= n * RC_REC_MAX);
    return len;
}

/* Decodes all of p; returns the records decoded, or -1 if p is not a whole
 * number of records (or holds more than cap). */
static long decode_all(const uint8_t *p, size_t len, rc_rec *out, size_t cap)
{
    rc_state st;
    rc_init(&st);
    size_t at = 0, n = 0;
    while (at < len) {
        rc_rec g[RC_GROUP_MAX];
        size_t k, used = rc_decode(&st, p + at, len - at, g, &k);
        if (used == 0)
            return -1;
        assert_true(used <= len - at && k >= 1 && k <= RC_GROUP_MAX);
        if (k > cap - n)
            return -1;
        memcpy(out + n, g, k * sizeof g[0]);
        at += used;
        n += k;
    }
    return (long)n;
}

/* A random time: steps of a few seconds, repeats, jumps back and far, and
 * the extremes of int64. */
static int64_t next_time(uint64_t *s, int64_t t)
{
    switch (rnd(s) % 8) {
    case 0:
        return t;
    case 1:
        return (int64_t)((uint64_t)t - rnd(s) % 100000); /* wraps at the extremes */
    case 2:
        return (int64_t)rnd(s);
    case 3:
        return rnd(s) % 2 ? INT64_MAX : INT64_MIN;
    default:
        return (int64_t)((uint64_t)t + 10);
    }
}

static void test_round_trip(void **state)
{
    (void)state;
    enum { N = 480 };
    static rc_rec recs[N], back[N];
    static uint8_t buf[N * RC_REC_MAX], again[N * RC_REC_MAX];
    uint64_t s = 0x9E3779B97F4A7C15ULL;
    for (int round = 0; round < 2000; round++) {
        size_t n = 1 + rnd(&s) % N;
        uint64_t kinds = 1 + rnd(&s) % 40; /* a few contents, or many */
        int64_t t = T0;
        for (size_t i = 0; i < n; i++) {
            recs[i].hash = (rnd(&s) % kinds * 0x1000193ULL + 7) & RC_HASH_MASK;
            t = next_time(&s, t);
            recs[i].t = t;
        }
        size_t len = encode_all(recs, n, buf);
        assert_int_equal(decode_all(buf, len, back, N), (long)n);
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(back[i].hash, recs[i].hash);
            assert_int_equal(back[i].t, recs[i].t);
        }
        assert_int_equal(encode_all(back, n, again), len); /* canonical */
        assert_memory_equal(buf, again, len);
    }
}

/* A window that grows at its end is coded as it grows: after each chunk of
 * new records, every header that takes fewer records than are there is
 * coded for good, and the rest is coded from the state they left. The
 * bytes are rc_encode's of all the records: a header looks at no record
 * past the first it does not take. */
static void test_grows_at_end(void **state)
{
    (void)state;
    enum { N = 480 };
    static rc_rec recs[N];
    static uint8_t whole[N * RC_REC_MAX], grown[N * RC_REC_MAX];
    uint64_t s = 77;
    for (int round = 0; round < 2000; round++) {
        size_t n = 1 + rnd(&s) % N;
        uint64_t kinds = 1 + rnd(&s) % 12;
        int64_t t = T0;
        for (size_t i = 0; i < n; i++) {
            recs[i].hash = (rnd(&s) % kinds * 0x1000193ULL + 7) & RC_HASH_MASK;
            t = rnd(&s) % 3 ? (int64_t)((uint64_t)t + 10) : next_time(&s, t); /* mostly on time */
            recs[i].t = t;
        }
        size_t len = encode_all(recs, n, whole);
        rc_state st;
        rc_init(&st);
        size_t fin = 0, coded = 0;
        for (size_t have = 0; have < n;) {
            have += 1 + rnd(&s) % 5;
            if (have > n)
                have = n;
            while (have > fin) {
                rc_state t2 = st;
                size_t used, k = rc_encode_head(&t2, recs + fin, have - fin, grown + coded, &used);
                if (used == have - fin)
                    break;
                st = t2;
                coded += k;
                fin += used;
            }
        }
        coded += rc_encode_from(&st, recs + fin, n - fin, grown + coded);
        assert_int_equal(coded, len);
        assert_memory_equal(grown, whole, len);
    }
}

/* A host's four instances, each reporting every 10 s in an order that
 * varies: after each instance's first two reports, a byte for three. */
static void test_periodic_host(void **state)
{
    (void)state;
    enum { N = 480 };
    rc_rec recs[N];
    uint8_t buf[N * RC_REC_MAX];
    int64_t next[4] = {T0, T0, T0 + 3, T0 + 7};
    uint64_t s = 42;
    for (size_t i = 0; i < N; i++) {
        int k = (int)(rnd(&s) % 4);
        recs[i] = (rc_rec){0xABCDEF000000ULL + (uint64_t)k, next[k]};
        next[k] += 10;
    }
    size_t len = encode_all(recs, N, buf);
    assert_true(len <= N / 3 + 4 * (1 + 6 + 5) + 4 * 2 + 2);
    rc_rec back[N];
    assert_int_equal(decode_all(buf, len, back, N), N);
}

/* Records are grouped greedily: three short ones to a byte, else two,
 * else one; new entries at their predicted times share a header. Other
 * groupings of the same records decode too, and code back to the greedy
 * bytes. */
static void test_groups(void **state)
{
    (void)state;
    enum { N = 16 };
    rc_rec recs[N], back[N];
    uint8_t buf[N * RC_REC_MAX], again[N * RC_REC_MAX];
    /* four new entries at T0: the first with its time (12 bytes), the
     * other three sharing a header (19) */
    for (int i = 0; i < 4; i++)
        recs[i] = (rc_rec){0x100 + (uint64_t)i, T0};
    /* each again 10 s later (2 bytes each, with the step), then twice on
     * time: eight short records, in a triple, a triple and a pair */
    for (int i = 4; i < N; i++)
        recs[i] = (rc_rec){0x100 + (uint64_t)(i % 4), T0 + 10 * (i / 4)};
    size_t len = encode_all(recs, N, buf);
    assert_int_equal(len, 12 + 19 + 8 + 3);
    assert_int_equal(buf[12], 0x4e); /* a new entry and two more */
    assert_int_equal(buf[len - 3] & 0xc0, 0xc0);
    assert_int_equal(buf[len - 2] & 0xc0, 0xc0);
    assert_int_equal(buf[len - 1] & 0xc0, 0x80);
    assert_int_equal(decode_all(buf, len, back, N), N);
    assert_memory_equal(back, recs, sizeof recs);
    /* the last eight as single bytes instead: the same records, and they
     * code back to the grouped bytes */
    size_t head = len - 3, alt = head;
    memcpy(again, buf, head);
    rc_state st;
    rc_init(&st);
    for (size_t at = 0; at < head;) {
        rc_rec g[RC_GROUP_MAX];
        size_t k, used = rc_decode(&st, buf + at, head - at, g, &k);
        assert_true(used > 0);
        at += used;
    }
    for (int i = 8; i < N; i++) { /* the entry's place in the list, as a coder finds it */
        uint8_t j = 0;
        while (st.hash[j] != recs[i].hash)
            j++;
        again[alt++] = j;
        rc_rec g[RC_GROUP_MAX];
        size_t k;
        assert_int_equal(rc_decode(&st, &j, 1, g, &k), 1);
    }
    assert_int_equal(decode_all(again, alt, back, N), N);
    assert_memory_equal(back, recs, sizeof recs);
    assert_int_equal(encode_all(back, N, buf), len);
}

/* Each a record no coder writes: refused. */
static void test_refused(void **state)
{
    (void)state;
    static const struct {
        uint8_t bytes[24];
        size_t len;
        const char *why;
    } cases[] = {
        {{0x00}, 1, "an entry the list does not hold"},
        {{0x0f}, 1, "code 15"},
        {{0x2e, 1, 2, 3, 4, 5, 6}, 7, "a group of two new entries cut short"},
        {{0x3e, 1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 7, 0x02}, 14, "a group with a time"},
        {{0x0e, 1, 2, 3, 4, 5, 6, 0x20}, 8, "a group of old entries"},
        {{0x0e, 1, 2, 3, 4, 5, 6, 0x81}, 8, "a pair naming an entry the list does not hold"},
        {{0x0e, 1, 2, 3, 4, 5, 6, 0xc4}, 8, "a triple naming an entry the list does not hold"},
        {{0x4e, 1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6}, 13, "a group whose two new entries are one"},
        {{0x0e, 1, 2, 3, 4, 5}, 6, "a hash cut short"},
        {{0x1e, 1, 2, 3, 4, 5, 6}, 7, "a time flag with no time"},
        {{0x1e, 1, 2, 3, 4, 5, 6, 0x80}, 8, "a time cut short"},
        {{0x1e, 1, 2, 3, 4, 5, 6, 0x00}, 8, "a zero step with the flag"},
        {{0x1e, 1, 2, 3, 4, 5, 6, 0x82, 0x00}, 9, "a time not in its shortest form"},
        {{0x1e, 1, 2, 3, 4, 5, 6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02},
         17,
         "a time past 64 bits"},
        {{0x0e, 1, 2, 3, 4, 5, 6, 0x0e, 1, 2, 3, 4, 5, 6}, 14, "the same entry twice as new"},
        {{0x0e, 1, 2, 3, 4, 5, 6, 0x01}, 8, "the second entry of a list of one"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        rc_rec back[4];
        if (decode_all(cases[i].bytes, cases[i].len, back, 4) != -1)
            fail_msg("taken: %s", cases[i].why);
    }
    /* and the largest record there is, taken */
    static const uint8_t max[] = {0x1e, 1,    2,    3,    4,    5,    6,    0xff, 0xff,
                                  0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    rc_rec r;
    assert_int_equal(decode_all(max, sizeof max, &r, 1), 1);
    assert_int_equal(r.t, INT64_MIN);
}

/* Bytes changed or cut at random decode to something or to nothing, never
 * past their end (the sanitizer build checks the reads). */
static void test_mutations(void **state)
{
    (void)state;
    enum { N = 64 };
    rc_rec recs[N], back[N];
    uint8_t buf[N * RC_REC_MAX], *copy = malloc(sizeof buf);
    assert_non_null(copy);
    uint64_t s = 7;
    for (int round = 0; round < 5000; round++) {
        int64_t t = T0;
        for (size_t i = 0; i < N; i++) {
            recs[i].hash = rnd(&s) % 6 & RC_HASH_MASK;
            t = next_time(&s, t);
            recs[i].t = t;
        }
        size_t len = encode_all(recs, N, buf);
        size_t cut = 1 + rnd(&s) % len;
        memcpy(copy, buf, cut);
        copy[rnd(&s) % cut] ^= (uint8_t)(1u << rnd(&s) % 8);
        uint8_t *tail = malloc(cut); /* exactly cut bytes, so a read past is caught */
        assert_non_null(tail);
        memcpy(tail, copy, cut);
        (void)decode_all(tail, cut, back, N);
        free(tail);
    }
    free(copy);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),    cmocka_unit_test(test_grows_at_end),
        cmocka_unit_test(test_periodic_host), cmocka_unit_test(test_groups),
        cmocka_unit_test(test_refused),       cmocka_unit_test(test_mutations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
