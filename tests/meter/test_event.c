/* Tests for event decoding (meter/event.c). The pure helpers event.h also
 * declares are tested in tests/rating/test_event_helpers.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tally/buf.h"
#include "tally/event.h"

/* 2026-04-01T00:00:00Z: the clock for every decode below. */
#define NOW_S 1775001600LL

/* ---- Building messages ---------------------------------------------------- */

typedef struct kv {
    const char *key, *value; /* value is raw JSON text */
} kv;

static const kv accelerator_data[] = {{"instance", "\"i-0a1b\""}, {"sku", "\"h100-80g\""},
                                      {"pricing", "\"spot\""},    {"cards", "8"},
                                      {"seconds", "60"},          {"migration", "false"}};
static const kv storage_data[] = {
    {"volume", "\"vol-1\""}, {"class", "\"ssd\""}, {"bytes", "1000000000"}, {"seconds", "3600"}};
static const kv traffic_data[] = {{"resource", "\"i-0a1b\""},
                                  {"direction", "\"egress\""},
                                  {"scope", "\"internet\""},
                                  {"bytes", "123456"}};
static const kv tokens_data[] = {
    {"model", "\"qwen-72b\""}, {"kind", "\"output\""}, {"tokens", "4096"}};

typedef struct type_case {
    const char *type;
    const kv *data;
    size_t n;
} type_case;

static const type_case types[] = {
    {"accelerator.usage", accelerator_data, 6},
    {"storage.usage", storage_data, 4},
    {"traffic.usage", traffic_data, 4},
    {"tokens.usage", tokens_data, 3},
};

static const kv attributes[] = {
    {"specversion", "\"1.0\""},
    {"id", "\"evt-000001\""},
    {"source", "\"//hosts/cn-north-1/node-7\""},
    {"type", NULL}, /* from the type case */
    {"subject", "\"acct-1\""},
    {"time", "\"2026-03-31T12:00:00Z\""},
    {"data", NULL}, /* built from the type case */
};

static void put(tally_buf *b, const char *s)
{
    assert_int_equal(tally_buf_puts(b, s), TALLY_OK);
}

/* Appends an object of the pairs in base with key replaced by value (value
 * NULL: key left out; key not in base: appended). */
static void put_object(tally_buf *b, const kv *base, size_t n, const char *key, const char *value,
                       const char *const *fill)
{
    bool seen = false;
    put(b, "{");
    for (size_t i = 0; i < n; i++) {
        const char *v = base[i].value ? base[i].value : fill[i];
        if (key && strcmp(base[i].key, key) == 0) {
            seen = true;
            if (!value)
                continue;
            v = value;
        }
        assert_int_equal(tally_buf_printf(b, "%s\"%s\":%s", b->data[b->len - 1] == '{' ? "" : ",",
                                          base[i].key, v),
                         TALLY_OK);
    }
    if (key && !seen && value)
        assert_int_equal(
            tally_buf_printf(b, "%s\"%s\":%s", b->data[b->len - 1] == '{' ? "" : ",", key, value),
            TALLY_OK);
    put(b, "}");
}

/* A message of type t with one attribute and one data field overridden. */
static const char *message(int t, const char *akey, const char *aval, const char *dkey,
                           const char *dval)
{
    static tally_buf out, data;
    char type[64];
    tally_buf_release(&out);
    tally_buf_release(&data);
    tally_buf_init(&out, 0);
    tally_buf_init(&data, 0);
    put_object(&data, types[t].data, types[t].n, dkey, dval, NULL);
    snprintf(type, sizeof type, "\"%s\"", types[t].type);
    const char *fill[] = {NULL, NULL, NULL, type, NULL, NULL, data.data};
    put_object(&out, attributes, 7, akey, aval, fill);
    return out.data;
}

/* Decodes a copy of m in a buffer of exactly its length, so the sanitizer
 * catches any read past the end. */
static tally_err decode_n(const char *m, size_t len, tally_event *ev, tally_reject *rej)
{
    char *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    memcpy(copy, m, len);
    memset(rej, 0, sizeof *rej);
    tally_err err = tally_event_decode(copy, len, NOW_S, ev, rej);
    free(copy);
    return err;
}

static tally_err decode(const char *m, tally_event *ev, tally_reject *rej)
{
    return decode_n(m, strlen(m), ev, rej);
}

static void expect_ok(const char *m, tally_event *ev)
{
    tally_reject rej;
    tally_err err = decode(m, ev, &rej);
    if (err != TALLY_OK)
        fail_msg("rejected %s (%s): %s", rej.reason, rej.detail, m);
}

static void expect_reject(const char *m, const char *reason)
{
    tally_event ev;
    tally_reject rej;
    tally_err err = decode(m, &ev, &rej);
    if (err != TALLY_PARSE || strcmp(rej.reason, reason) != 0)
        fail_msg("want %s, got %d %s (%s) for %s", reason, err, rej.reason, rej.detail, m);
    assert_true(rej.detail[0] != '\0');
}

static char *repeat(char c, size_t n)
{
    static char buf[TALLY_EVENT_MAX_BYTES + 2];
    assert_true(n < sizeof buf);
    memset(buf, c, n);
    buf[n] = '\0';
    return buf;
}

/* Writes a JSON string of n bytes of c, quotes included, into dst. */
static const char *quoted(char *dst, size_t cap, char c, size_t n)
{
    assert_true(n + 3 <= cap);
    dst[0] = '"';
    memset(dst + 1, c, n);
    dst[n + 1] = '"';
    dst[n + 2] = '\0';
    return dst;
}

/* ---- Valid events ------------------------------------------------------------ */

static void test_accelerator(void **state)
{
    tally_event ev;
    expect_ok(message(0, NULL, NULL, NULL, NULL), &ev);
    assert_int_equal(ev.meter, TALLY_METER_ACCELERATOR);
    assert_int_equal(ev.pricing, TALLY_PRICING_SPOT);
    assert_false(ev.migration);
    assert_int_equal(ev.time_s, NOW_S - 12 * 3600);
    assert_int_equal(ev.seconds, 60);
    assert_int_equal(ev.weight, 8);
    assert_string_equal(ev.id, "evt-000001");
    assert_string_equal(ev.source, "//hosts/cn-north-1/node-7");
    assert_string_equal(ev.account, "acct-1");
    assert_string_equal(ev.resource, "i-0a1b");
    assert_string_equal(ev.dim, "h100-80g");
    assert_string_equal(ev.dim2, "");

    expect_ok(message(0, NULL, NULL, "migration", "true"), &ev);
    assert_true(ev.migration);
    expect_ok(message(0, NULL, NULL, "pricing", "\"on_demand\""), &ev);
    assert_int_equal(ev.pricing, TALLY_PRICING_ON_DEMAND);
    expect_ok(message(0, NULL, NULL, "pricing", "\"reserved\""), &ev);
    assert_int_equal(ev.pricing, TALLY_PRICING_RESERVED);
}

static void test_defaults(void **state)
{
    tally_event ev;
    const char *m = "{\"specversion\":\"1.0\",\"id\":\"a\",\"source\":\"s\",\"type\":"
                    "\"accelerator.usage\",\"subject\":\"acct\",\"time\":\"2026-03-01T00:00:00Z\","
                    "\"data\":{\"instance\":\"i\",\"sku\":\"a100-40g\",\"pricing\":\"on_demand\"}}";
    expect_ok(m, &ev);
    assert_int_equal(ev.weight, 1);
    assert_int_equal(ev.seconds, 1);
    assert_false(ev.migration);

    expect_ok(message(1, NULL, NULL, "seconds", NULL), &ev);
    assert_int_equal(ev.meter, TALLY_METER_STORAGE);
    assert_int_equal(ev.seconds, 1);
    assert_int_equal(ev.weight, 1000000000);
    assert_string_equal(ev.resource, "vol-1");
    assert_string_equal(ev.dim, "ssd");
    assert_int_equal(ev.pricing, TALLY_PRICING_NONE);
}

static void test_instants(void **state)
{
    tally_event ev;
    expect_ok(message(2, NULL, NULL, NULL, NULL), &ev);
    assert_int_equal(ev.meter, TALLY_METER_TRAFFIC);
    assert_int_equal(ev.seconds, 0);
    assert_int_equal(ev.weight, 123456);
    assert_string_equal(ev.resource, "i-0a1b");
    assert_string_equal(ev.dim, "internet");
    assert_string_equal(ev.dim2, "egress");
    assert_int_equal(ev.pricing, TALLY_PRICING_NONE);

    expect_ok(message(3, NULL, NULL, "kind", "\"input\""), &ev);
    assert_int_equal(ev.meter, TALLY_METER_TOKENS);
    assert_int_equal(ev.seconds, 0);
    assert_int_equal(ev.weight, 4096);
    assert_string_equal(ev.resource, "qwen-72b");
    assert_string_equal(ev.dim, "qwen-72b");
    assert_string_equal(ev.dim2, "input");

    expect_ok(message(2, NULL, NULL, "bytes", "0"), &ev); /* zero is a quantity too */
    assert_int_equal(ev.weight, 0);
}

static void test_integer_strings(void **state)
{
    tally_event a, b;
    expect_ok(message(0, NULL, NULL, "cards", "\"8\""), &a);
    assert_int_equal(a.weight, 8);
    expect_ok(message(0, NULL, NULL, NULL, NULL), &b);
    assert_int_equal(tally_event_fingerprint(&a), tally_event_fingerprint(&b));
    /* INT64_MAX parses (it is not bad_field), but is above SPEC's 10^18 */
    expect_reject(message(2, NULL, NULL, "bytes", "\"9223372036854775807\""), "out_of_range");
    expect_reject(message(2, NULL, NULL, "bytes", "9223372036854775807"), "out_of_range");
    expect_ok(message(2, NULL, NULL, "bytes", "\"999999999999999999\""), &a);
    assert_int_equal(a.weight, 999999999999999999LL);
    expect_ok(message(3, NULL, NULL, "tokens", "\"0\""), &a);
    assert_int_equal(a.weight, 0);
    expect_ok(message(3, NULL, NULL, "tokens", "\"\\u0034\\u0032\""), &a); /* "42" escaped */
    assert_int_equal(a.weight, 42);
}

static void test_time_offsets(void **state)
{
    static const struct {
        const char *time;
        int64_t utc_s;
    } cases[] = {
        {"\"2026-04-01T01:00:00+08:00\"", NOW_S - 7 * 3600},
        {"\"2026-03-31T17:00:00Z\"", NOW_S - 7 * 3600},
        {"\"2026-03-31T11:30:00-05:30\"", NOW_S - 7 * 3600},
        {"\"2026-03-31T17:00:00.999999999Z\"", NOW_S - 7 * 3600},
        {"\"2026-03-31t17:00:00.5z\"", NOW_S - 7 * 3600},
        {"\"2026-03-31T17:00:00+00:00\"", NOW_S - 7 * 3600},
        {"\"2026-03-31T17:00:00-00:00\"", NOW_S - 7 * 3600},
        {"\"2026-04-01T00:05:00Z\"", NOW_S + 300}, /* exactly the allowed skew */
        {"\"2000-01-01T00:00:00Z\"", 946684800},   /* the earliest allowed (1970 is bad_time) */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tally_event ev;
        expect_ok(message(3, "time", cases[i].time, NULL, NULL), &ev);
        assert_int_equal(ev.time_s, cases[i].utc_s);
    }
}

/* ---- Identity ------------------------------------------------------------------ */

static void test_fingerprint_reserialised(void **state)
{
    tally_event a, b;
    expect_ok(message(0, NULL, NULL, NULL, NULL), &a);
    const char *copies[] = {
        "{ \"data\" : { \"migration\" : false, \"seconds\" : \"60\", \"cards\" : 8 ,"
        "\"pricing\":\"spot\", \"sku\":\"h100-80g\", \"instance\":\"i-0a1b\", \"extra\": [1, {}]},"
        "\r\n\t\"time\":\"2026-03-31T20:00:00+08:00\", \"subject\":\"acct-1\","
        "\"type\":\"accelerator.usage\", \"source\":\"//other/source\", \"id\":\"another-id\","
        "\"specversion\":\"1.0\", \"datacontenttype\":\"application/json\" }\n",
        "{\"specversion\":\"1.0\",\"id\":\"x\",\"source\":\"y\",\"type\":\"accelerator.usage\","
        "\"subject\":\"\\u0061cct-1\",\"time\":\"2026-03-31T12:00:00.750Z\",\"data\":{"
        "\"instance\":\"i-0a1b\",\"sku\":\"h100\\u002d80g\",\"pricing\":\"spot\",\"cards\":"
        "\"8\",\"seconds\":60}}",
    };
    for (size_t i = 0; i < sizeof copies / sizeof copies[0]; i++) {
        expect_ok(copies[i], &b);
        assert_int_equal(tally_event_fingerprint(&a), tally_event_fingerprint(&b));
        assert_memory_not_equal(a.key, b.key, sizeof a.key);
    }
}

/* The key and both content hashes are stored in ledgers: their values for
 * one event never change (these are what every earlier version stored). */
static void test_hashes_stable(void **state)
{
    (void)state;
    static const char msg[] =
        "{\"specversion\":\"1.0\",\"id\":\"evt-abc\",\"source\":\"//gpu-hosts/h1\","
        "\"type\":\"accelerator.usage\",\"subject\":\"acct-1\",\"time\":"
        "\"2026-03-01T00:00:00Z\",\"data\":{\"instance\":\"ins-1\",\"sku\":\"a100-40g\","
        "\"pricing\":\"on_demand\",\"cards\":1,\"seconds\":10}}";
    tally_event ev;
    expect_ok(msg, &ev);
    assert_int_equal(tally_event_fingerprint(&ev), (uint64_t)-372365158308885781LL);
    assert_int_equal(ev.untimed, 0x434f89f64902024dULL);
    assert_int_equal(tally_event_fingerprint(&ev), tally_event_fingerprint(&ev));
    assert_int_equal(ev.untimed, tally_event_untimed_hash(&ev));
    tally_event later = ev;
    later.time_s += 10;
    assert_int_not_equal(tally_event_fingerprint(&later), tally_event_fingerprint(&ev));
    assert_int_equal(tally_event_untimed_hash(&later), ev.untimed);
}

static void test_fingerprint_changes(void **state)
{
    static const struct {
        int type;
        const char *akey, *aval, *dkey, *dval;
    } changes[] = {
        {0, "subject", "\"acct-2\"", NULL, NULL},
        {0, "time", "\"2026-03-31T12:00:01Z\"", NULL, NULL},
        {0, NULL, NULL, "instance", "\"i-0a1c\""},
        {0, NULL, NULL, "sku", "\"h100-80G\""},
        {0, NULL, NULL, "pricing", "\"on_demand\""},
        {0, NULL, NULL, "cards", "9"},
        {0, NULL, NULL, "seconds", "61"},
        {0, NULL, NULL, "migration", "true"},
        {1, NULL, NULL, NULL, NULL},
        {2, NULL, NULL, NULL, NULL},
        {2, NULL, NULL, "direction", "\"ingress\""},
        {3, NULL, NULL, NULL, NULL},
        {3, NULL, NULL, "kind", "\"input\""},
    };
    uint64_t seen[sizeof changes / sizeof changes[0] + 1];
    tally_event ev;
    expect_ok(message(0, NULL, NULL, NULL, NULL), &ev);
    seen[0] = tally_event_fingerprint(&ev);
    for (size_t i = 0; i < sizeof changes / sizeof changes[0]; i++) {
        expect_ok(message(changes[i].type, changes[i].akey, changes[i].aval, changes[i].dkey,
                          changes[i].dval),
                  &ev);
        seen[i + 1] = tally_event_fingerprint(&ev);
        for (size_t j = 0; j <= i; j++)
            if (seen[j] == seen[i + 1])
                fail_msg("change %zu has the fingerprint of case %zu", i, j);
    }
}

static void test_key(void **state)
{
    tally_event a, b;
    expect_ok(message(0, "id", "\"ab\"", NULL, NULL), &a);
    expect_ok(message(0, "source", "\"x\"", NULL, NULL), &b);
    assert_memory_not_equal(a.key, b.key, sizeof a.key);
    /* ("ab", "c") and ("a", "bc") are different keys */
    expect_ok("{\"specversion\":\"1.0\",\"source\":\"ab\",\"id\":\"c\",\"type\":\"tokens.usage\","
              "\"subject\":\"s\",\"time\":\"2026-03-01T00:00:00Z\",\"data\":{\"model\":\"m\","
              "\"kind\":\"input\",\"tokens\":1}}",
              &a);
    expect_ok("{\"specversion\":\"1.0\",\"source\":\"a\",\"id\":\"bc\",\"type\":\"tokens.usage\","
              "\"subject\":\"s\",\"time\":\"2026-03-01T00:00:00Z\",\"data\":{\"model\":\"m\","
              "\"kind\":\"input\",\"tokens\":1}}",
              &b);
    assert_memory_not_equal(a.key, b.key, sizeof a.key);
    assert_int_equal(tally_event_fingerprint(&a), tally_event_fingerprint(&b));
    /* the same (source, id) with other content: same key, other fingerprint */
    expect_ok(message(0, NULL, NULL, "cards", "1"), &a);
    expect_ok(message(0, NULL, NULL, "cards", "2"), &b);
    assert_memory_equal(a.key, b.key, sizeof a.key);
    assert_int_not_equal(tally_event_fingerprint(&a), tally_event_fingerprint(&b));
}

static int cmp_key(const void *x, const void *y)
{
    const uint64_t *a = x, *b = y;
    if (a[0] != b[0])
        return a[0] < b[0] ? -1 : 1;
    return a[1] < b[1] ? -1 : a[1] > b[1];
}

static void test_key_unique(void **state)
{
    enum { N = 20000 };
    uint64_t(*keys)[2] = calloc(N, sizeof *keys);
    assert_non_null(keys);
    for (int i = 0; i < N; i++) {
        char m[512];
        tally_event ev;
        snprintf(m, sizeof m,
                 "{\"specversion\":\"1.0\",\"source\":\"//node-%d\",\"id\":\"%d\",\"type\":"
                 "\"tokens.usage\",\"subject\":\"s\",\"time\":\"2026-03-01T00:00:00Z\",\"data\":"
                 "{\"model\":\"m\",\"kind\":\"input\",\"tokens\":1}}",
                 i / 100, i % 100 + (i / 100 % 3) * 10);
        expect_ok(m, &ev);
        memcpy(keys[i], ev.key, sizeof ev.key);
    }
    qsort(keys, N, sizeof *keys, cmp_key);
    for (int i = 1; i < N; i++)
        assert_true(cmp_key(keys[i - 1], keys[i]) != 0);
    free(keys);
}

/* ---- Bounds ---------------------------------------------------------------------- */

static void test_string_bounds(void **state)
{
    static const struct {
        int type;
        bool attr;
        const char *key;
        size_t max;
    } bounds[] = {
        {0, true, "id", TALLY_ID_MAX - 1},        {0, true, "source", TALLY_ID_MAX - 1},
        {0, true, "subject", TALLY_NAME_MAX - 1}, {0, false, "instance", TALLY_NAME_MAX - 1},
        {0, false, "sku", TALLY_NAME_MAX - 1},    {1, false, "volume", TALLY_NAME_MAX - 1},
        {1, false, "class", TALLY_NAME_MAX - 1},  {2, false, "resource", TALLY_NAME_MAX - 1},
        {3, false, "model", TALLY_NAME_MAX - 1},
    };
    for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++) {
        char reason[64], ok[300], over[300];
        tally_event ev;
        quoted(ok, sizeof ok, 'x', bounds[i].max);
        quoted(over, sizeof over, 'x', bounds[i].max + 1);
        snprintf(reason, sizeof reason, "bad_field:%s", bounds[i].key);
        int t = bounds[i].type;
        const char *k = bounds[i].key;
        expect_ok(bounds[i].attr ? message(t, k, ok, NULL, NULL) : message(t, NULL, NULL, k, ok),
                  &ev);
        expect_reject(bounds[i].attr ? message(t, k, over, NULL, NULL)
                                     : message(t, NULL, NULL, k, over),
                      reason);
    }
    /* length counts decoded bytes: 63 x "\u00e9" is 126 bytes, 64 is 128 */
    tally_buf b;
    tally_buf_init(&b, 0);
    put(&b, "\"");
    for (int i = 0; i < 63; i++)
        put(&b, "\\u00e9");
    put(&b, "\"");
    tally_event ev;
    expect_ok(message(0, "id", b.data, NULL, NULL), &ev);
    assert_int_equal(strlen(ev.id), 126);
    b.len--;
    put(&b, "\\u00e9\"");
    expect_reject(message(0, "id", b.data, NULL, NULL), "bad_field:id");
    tally_buf_release(&b);
}

static void test_message_size(void **state)
{
    tally_event ev;
    tally_reject rej;
    const char *base = message(2, NULL, NULL, NULL, NULL);
    size_t pad = TALLY_EVENT_MAX_BYTES - strlen(base) - strlen(",\"pad\":\"\"");
    char *m = malloc(TALLY_EVENT_MAX_BYTES + 2);
    assert_non_null(m);
    int n = snprintf(m, TALLY_EVENT_MAX_BYTES + 2, "%.*s,\"pad\":\"%s\"}", (int)strlen(base) - 1,
                     base, repeat('p', pad));
    assert_int_equal(n, TALLY_EVENT_MAX_BYTES);
    assert_int_equal(decode(m, &ev, &rej), TALLY_OK);
    n = snprintf(m, TALLY_EVENT_MAX_BYTES + 2, "%.*s,\"pad\":\"%s\"}", (int)strlen(base) - 1, base,
                 repeat('p', pad + 1));
    assert_int_equal(n, TALLY_EVENT_MAX_BYTES + 1);
    assert_int_equal(decode(m, &ev, &rej), TALLY_TOO_LARGE);
    assert_string_equal(rej.reason, "too_large");
    free(m);
}

/* ---- Rejections ---------------------------------------------------------------- */

typedef struct bad_case {
    int type;
    const char *akey, *aval, *dkey, *dval;
    const char *reason;
} bad_case;

static const bad_case bad_attributes[] = {
    {0, "specversion", NULL, NULL, NULL, "missing:specversion"},
    {0, "specversion", "\"0.3\"", NULL, NULL, "bad_specversion"},
    {0, "specversion", "1.0", NULL, NULL, "bad_specversion"},
    {0, "specversion", "\"1.0 \"", NULL, NULL, "bad_specversion"},
    {0, "type", NULL, NULL, NULL, "missing:type"},
    {0, "type", "7", NULL, NULL, "bad_field:type"},
    {0, "type", "\"gpu.usage\"", NULL, NULL, "unknown_type"},
    {0, "type", "\"Accelerator.usage\"", NULL, NULL, "unknown_type"},
    {0, "type", "\"accelerator.usage.but.with.a.long.tail\"", NULL, NULL, "unknown_type"},
    {0, "type", "\"\"", NULL, NULL, "unknown_type"},
    {0, "id", NULL, NULL, NULL, "missing:id"},
    {0, "id", "42", NULL, NULL, "bad_field:id"},
    {0, "id", "\"\"", NULL, NULL, "bad_field:id"},
    {0, "id", "\"a\\u0000b\"", NULL, NULL, "bad_field:id"},
    {0, "source", NULL, NULL, NULL, "missing:source"},
    {0, "source", "null", NULL, NULL, "bad_field:source"},
    {0, "subject", NULL, NULL, NULL, "missing:subject"},
    {0, "subject", "\"acct\\n1\"", NULL, NULL, "bad_field:subject"},
    {0, "subject", "[\"acct\"]", NULL, NULL, "bad_field:subject"},
    {0, "subject", "\" acct\"", NULL, NULL, "bad_field:subject"},
    {0, "subject", "\"acct \"", NULL, NULL, "bad_field:subject"},
    {0, "subject", "\" \"", NULL, NULL, "bad_field:subject"},
    {0, "time", NULL, NULL, NULL, "missing:time"},
    {0, "time", "1774958400", NULL, NULL, "bad_time"},
    {0, "time", "\"2026-02-29T00:00:00Z\"", NULL, NULL, "bad_time"},
    {0, "time", "\"2026-03-31 12:00:00Z\"", NULL, NULL, "bad_time"},
    {0, "time", "\"2026-03-31T12:00:00\"", NULL, NULL, "bad_time"},
    {0, "time", "\"2026-03-31T12:00:60Z\"", NULL, NULL, "bad_time"},
    {0, "time", "\"2026-03-31T12:00:00+24:00\"", NULL, NULL, "bad_time"},
    {0, "time", "\"2026-03-31T12:00:00.Z\"", NULL, NULL, "bad_time"},
    {0, "time", "\"2026-04-01T00:05:01Z\"", NULL, NULL, "bad_time"},
    {0, "time", "\"2026-04-01T08:05:01+08:00\"", NULL, NULL, "bad_time"},
    {0, "time", "\"9999-12-31T23:59:59Z\"", NULL, NULL, "bad_time"},
    {0, "time", "\"1969-12-31T23:59:59Z\"", NULL, NULL, "bad_time"},
    {0, "time", "\"1970-01-01T00:00:00Z\"", NULL, NULL, "bad_time"},
    {0, "time", "\"0001-01-01T00:00:00Z\"", NULL, NULL, "bad_time"},
    {0, "time", "\"1999-12-31T23:59:59Z\"", NULL, NULL, "bad_time"},
    {0, "time", "\"2000-01-01T07:59:59+08:00\"", NULL, NULL, "bad_time"},
    {0, "data", NULL, NULL, NULL, "missing:data"},
    {0, "data", "null", NULL, NULL, "bad_field:data"},
    {0, "data", "[{}]", NULL, NULL, "bad_field:data"},
    {0, "data", "{}", NULL, NULL, "missing:instance"},
};

static const bad_case bad_fields[] = {
    {0, NULL, NULL, "instance", NULL, "missing:instance"},
    {0, NULL, NULL, "instance", "\"\"", "bad_field:instance"},
    {0, NULL, NULL, "sku", NULL, "missing:sku"},
    {0, NULL, NULL, "sku", "5", "bad_field:sku"},
    {0, NULL, NULL, "pricing", NULL, "missing:pricing"},
    {0, NULL, NULL, "pricing", "\"ondemand\"", "bad_field:pricing"},
    {0, NULL, NULL, "pricing", "\"\"", "bad_field:pricing"},
    {0, NULL, NULL, "pricing", "\"spot-instance-pricing-x\"", "bad_field:pricing"},
    {0, NULL, NULL, "cards", "0", "bad_field:cards"},
    {0, NULL, NULL, "cards", "-1", "bad_field:cards"},
    {0, NULL, NULL, "cards", "-0", "bad_field:cards"},
    {0, NULL, NULL, "cards", "1.5", "bad_field:cards"},
    {0, NULL, NULL, "cards", "1.0", "bad_field:cards"},
    {0, NULL, NULL, "cards", "1e2", "bad_field:cards"},
    {0, NULL, NULL, "cards", "\"+1\"", "bad_field:cards"},
    {0, NULL, NULL, "cards", "\"01\"", "bad_field:cards"},
    {0, NULL, NULL, "cards", "\" 1\"", "bad_field:cards"},
    {0, NULL, NULL, "cards", "\"\"", "bad_field:cards"},
    {0, NULL, NULL, "cards", "\"1.5\"", "bad_field:cards"},
    {0, NULL, NULL, "cards", "9223372036854775808", "bad_field:cards"},
    {0, NULL, NULL, "cards", "\"99999999999999999999\"", "bad_field:cards"},
    {0, NULL, NULL, "cards", "65537", "out_of_range"},
    {0, NULL, NULL, "cards", "\"65537\"", "out_of_range"},
    {0, NULL, NULL, "cards", "9223372036854775807", "out_of_range"},
    {0, NULL, NULL, "cards", "true", "bad_field:cards"},
    {0, NULL, NULL, "cards", "null", "bad_field:cards"},
    {0, NULL, NULL, "seconds", "0", "bad_field:seconds"},
    {0, NULL, NULL, "seconds", "3601", "bad_field:seconds"},
    {0, NULL, NULL, "migration", "\"true\"", "bad_field:migration"},
    {0, NULL, NULL, "migration", "1", "bad_field:migration"},
    {1, NULL, NULL, "volume", NULL, "missing:volume"},
    {1, NULL, NULL, "class", NULL, "missing:class"},
    {1, NULL, NULL, "bytes", NULL, "missing:bytes"},
    {1, NULL, NULL, "bytes", "-5", "bad_field:bytes"},
    {1, NULL, NULL, "bytes", "1000000000000000001", "out_of_range"},
    {1, NULL, NULL, "bytes", "9223372036854775807", "out_of_range"},
    {1, NULL, NULL, "seconds", "86401", "bad_field:seconds"},
    {2, NULL, NULL, "resource", NULL, "missing:resource"},
    {2, NULL, NULL, "direction", NULL, "missing:direction"},
    {2, NULL, NULL, "direction", "\"up\"", "bad_field:direction"},
    {2, NULL, NULL, "scope", NULL, "missing:scope"},
    {2, NULL, NULL, "scope", "\"external\"", "bad_field:scope"},
    {2, NULL, NULL, "bytes", NULL, "missing:bytes"},
    {2, NULL, NULL, "bytes", "{}", "bad_field:bytes"},
    {2, NULL, NULL, "bytes", "\"1000000000000000001\"", "out_of_range"},
    {3, NULL, NULL, "model", NULL, "missing:model"},
    {3, NULL, NULL, "kind", NULL, "missing:kind"},
    {3, NULL, NULL, "kind", "\"Input\"", "bad_field:kind"},
    {3, NULL, NULL, "tokens", NULL, "missing:tokens"},
    {3, NULL, NULL, "tokens", "\"x\"", "bad_field:tokens"},
    {3, NULL, NULL, "tokens", "1000000000001", "out_of_range"},
};

static void run_bad(const bad_case *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        expect_reject(message(c[i].type, c[i].akey, c[i].aval, c[i].dkey, c[i].dval), c[i].reason);
}

static void test_bad_attributes(void **state)
{
    run_bad(bad_attributes, sizeof bad_attributes / sizeof bad_attributes[0]);
}

static void test_bad_fields(void **state)
{
    run_bad(bad_fields, sizeof bad_fields / sizeof bad_fields[0]);
}

/* The limits themselves are fine: 2000-01-01T00:00:00Z, 65,536 cards,
 * 10^18 bytes, 10^12 tokens, and inner white space in a subject. */
static void test_limits(void **state)
{
    tally_event ev;
    expect_ok(message(0, "time", "\"2000-01-01T00:00:00Z\"", NULL, NULL), &ev);
    assert_int_equal(ev.time_s, TALLY_TIME_MIN_S);
    expect_ok(message(0, "subject", "\"acme ai\"", NULL, NULL), &ev);
    assert_string_equal(ev.account, "acme ai");
    expect_ok(message(0, NULL, NULL, "cards", "65536"), &ev);
    assert_int_equal(ev.weight, TALLY_CARDS_MAX);
    expect_ok(message(1, NULL, NULL, "bytes", "1000000000000000000"), &ev);
    assert_int_equal(ev.weight, TALLY_BYTES_MAX);
    expect_ok(message(2, NULL, NULL, "bytes", "\"1000000000000000000\""), &ev);
    assert_int_equal(ev.weight, TALLY_BYTES_MAX);
    expect_ok(message(3, NULL, NULL, "tokens", "1000000000000"), &ev);
    assert_int_equal(ev.weight, TALLY_TOKENS_MAX);
}

static void test_unknown_ignored(void **state)
{
    tally_event ev;
    expect_ok(message(0, "traceparent", "\"00-abc-01\"", "gpu_util", "[0.5, {\"x\": null}]"), &ev);
    expect_ok(message(0, "data",
                      "{\"instance\":\"i\",\"sku\":\"s\",\"pricing\":\"spot\","
                      "\"tokens\":\"not a number\",\"kind\":7}",
                      NULL, NULL),
              &ev);
    /* a field of another type is ignored, not interpreted */
    assert_int_equal(ev.weight, 1);
}

#define BRACKETS "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"

static void test_unknown_limit(void **state)
{
    tally_buf b;
    tally_event ev;
    const char *ok = message(0, NULL, NULL, NULL, NULL);
    for (int n = 64; n <= 65; n++) {
        tally_buf_init(&b, 0);
        assert_int_equal(tally_buf_printf(&b, "%.*s", (int)strlen(ok) - 1, ok), TALLY_OK);
        for (int i = 0; i < n; i++)
            assert_int_equal(tally_buf_printf(&b, ",\"x%d\":%d", i, i), TALLY_OK);
        put(&b, "}");
        if (n == 64)
            expect_ok(b.data, &ev);
        else
            expect_reject(b.data, "bad_json");
        tally_buf_release(&b);
    }
}

static void test_bad_json(void **state)
{
    const char *ok = message(0, NULL, NULL, NULL, NULL);
    char m[1024];
    const char *cases[] = {
        "",
        " ",
        "[]",
        "\"event\"",
        "{",
        "{\"specversion\":\"1.0\"",
        "{\"specversion\":\"1.0\",}",
        "{'specversion':'1.0'}",
        "{\"specversion\":\"1.0\",\"id\":\"a\",\"id\":\"b\"}",
        "{\"specversion\":\"1.0\",\"id\":\"a\",\"\\u0069d\":\"b\"}",
        "{\"x\":1,\"y\":2,\"x\":3}",
        "{\"data\":{\"sku\":\"a\",\"sku\":\"a\"}}",
        "{\"data\":{\"u\":1,\"u\":1}}",
        "{\"x\\u00e9\":1,\"x\xc3\xa9\":2}", /* the same key, spelt two ways */
        "{\"data\":{\"\\u0073ku\":\"a\",\"sku\":\"b\"}}",
        "{\"id\":\"a\x01\"}",
        "{\"id\":\"a\\x\"}",
        "{\"id\":\"\xc3\x28\"}",
        "{\"id\":\"\xed\xa0\x80\"}",
        "{\"id\":\"\\udc00\"}",
        "{\"n\":01}",
        "{\"n\":1.}",
        "{\"n\":+1}",
        "{\"n\":NaN}",
        "{\"n\":True}",
        "{\"n\":[1,]}",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_reject(cases[i], "bad_json");
    snprintf(m, sizeof m, "%s x", ok); /* trailing garbage */
    expect_reject(m, "bad_json");
    snprintf(m, sizeof m, "%s%s", ok, ok); /* two documents */
    expect_reject(m, "bad_json");
    /* bad JSON wins over a missing attribute found before it */
    snprintf(m, sizeof m, "{\"data\":{},\"x\":[}");
    expect_reject(m, "bad_json");
    tally_event ev;
    tally_reject rej;
    assert_int_equal(decode_n("{\"n\":1}\0", 8, &ev, &rej), TALLY_PARSE); /* NUL is not space */
    assert_string_equal(rej.reason, "bad_json");
    /* nesting: 32 levels of values are fine (the event, "deep", 30 arrays
     * and the 1 inside them), 33 are not */
    snprintf(m, sizeof m, "%.*s,\"deep\":%.30s1%.30s}", (int)strlen(ok) - 1, ok, BRACKETS,
             &BRACKETS[40]);
    expect_ok(m, &ev);
    snprintf(m, sizeof m, "%.*s,\"deep\":%.31s1%.31s}", (int)strlen(ok) - 1, ok, BRACKETS,
             &BRACKETS[40]);
    expect_reject(m, "bad_json");
}

/* ---- Robustness ------------------------------------------------------------------ */

static bool known_reason(const char *r)
{
    static const char *const exact[] = {"bad_json",     "too_large", "bad_specversion",
                                        "unknown_type", "bad_time",  "out_of_range"};
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (strcmp(r, exact[i]) == 0)
            return true;
    return (strncmp(r, "missing:", 8) == 0 && r[8]) || (strncmp(r, "bad_field:", 10) == 0 && r[10]);
}

static void test_truncations(void **state)
{
    for (int t = 0; t < 4; t++) {
        const char *m = message(t, NULL, NULL, NULL, NULL);
        size_t len = strlen(m);
        for (size_t n = 0; n < len; n++) {
            tally_event ev;
            tally_reject rej;
            assert_int_equal(decode_n(m, n, &ev, &rej), TALLY_PARSE);
            assert_string_equal(rej.reason, "bad_json");
        }
    }
}

static void test_mutations(void **state)
{
    static const char alphabet[] = "{}[]\",:\\ 0123456789-+.eEtrufalsn\x00\x01\x7f\x80\xc3\xff";
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    char m[1024];
    long ok = 0, rejected = 0;
    for (int iter = 0; iter < 200000; iter++) {
        const char *base = message(iter % 4, NULL, NULL, NULL, NULL);
        size_t len = strlen(base);
        memcpy(m, base, len);
        int edits = 1 + iter % 4;
        for (int e = 0; e < edits; e++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            size_t at = (size_t)(rng >> 8) % len;
            char c = rng & 1 ? alphabet[(rng >> 40) % (sizeof alphabet - 1)] : (char)(rng >> 32);
            switch ((rng >> 1) % 3) {
            case 0: /* replace */
                m[at] = c;
                break;
            case 1: /* insert */
                if (len + 1 < sizeof m) {
                    memmove(m + at + 1, m + at, len - at);
                    m[at] = c;
                    len++;
                }
                break;
            default: /* delete */
                if (len > 1) {
                    memmove(m + at, m + at + 1, len - at - 1);
                    len--;
                }
            }
        }
        tally_event ev;
        tally_reject rej;
        tally_err err = decode_n(m, len, &ev, &rej);
        if (err == TALLY_OK) {
            ok++;
        } else {
            assert_int_equal(err, TALLY_PARSE);
            if (!known_reason(rej.reason))
                fail_msg("unknown reason '%s'", rej.reason);
            assert_true(rej.detail[0] != '\0');
            rejected++;
        }
    }
    assert_true(ok > 0 && rejected > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accelerator),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_instants),
        cmocka_unit_test(test_integer_strings),
        cmocka_unit_test(test_time_offsets),
        cmocka_unit_test(test_fingerprint_reserialised),
        cmocka_unit_test(test_hashes_stable),
        cmocka_unit_test(test_fingerprint_changes),
        cmocka_unit_test(test_key),
        cmocka_unit_test(test_key_unique),
        cmocka_unit_test(test_string_bounds),
        cmocka_unit_test(test_message_size),
        cmocka_unit_test(test_bad_attributes),
        cmocka_unit_test(test_bad_fields),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_unknown_ignored),
        cmocka_unit_test(test_unknown_limit),
        cmocka_unit_test(test_bad_json),
        cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_mutations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
