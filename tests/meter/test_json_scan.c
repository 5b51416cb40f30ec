/* Tests for the meter's strict JSON scanner (meter/json_scan.c), including a
 * differential check against json-c (fuzz/json_differential.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../fuzz/json_differential.h"
#include "../../meter/meter_int.h"
#include "tally/buf.h"

/* Validates a copy of buf[0..len) of exactly that size, so the sanitizer
 * catches any read past the end. */
static bool valid_n(const char *buf, size_t len, json_scan *s)
{
    char *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    memcpy(copy, buf, len);
    bool ok = json_scan_document(s, copy, len);
    free(copy);
    return ok;
}

static bool valid(const char *doc)
{
    json_scan s;
    return valid_n(doc, strlen(doc), &s);
}

static void test_valid(void **state)
{
    static const char *const docs[] = {
        "{}",
        " { } ",
        "[]",
        "0",
        "-0",
        "1.5e-3",
        "-12.0E+7",
        "123456789012345678901234567890",
        "true",
        "false",
        "null",
        "\"\"",
        "\"a\\\"b\\\\c\\/d\\be\\ff\\ng\\rh\\ti\"",
        "\"\\u00e9\\u4e2d\\ud83d\\ude00\"",
        "\"\\u0000\"",
        "\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\xef\xbf\xbf\"",
        "\"\x7f\"",
        "{\"a\":[1,{\"b\":null},\"c\",[]],\"d\":{}}",
        "\t\r\n[ 1 , 2 ]\n",
        "{\"a\":1,\"a\":2}", /* duplicates are the caller's business */
    };
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++)
        if (!valid(docs[i]))
            fail_msg("rejected %s", docs[i]);
}

static void test_invalid(void **state)
{
    static const struct {
        const char *doc;
        const char *err;
    } docs[] = {
        {"", "value expected"},
        {" ", "value expected"},
        {"{", "unterminated object"},
        {"[", "value expected"},
        {"[1", "unterminated array"},
        {"{\"a\"", "unterminated object"},
        {"{\"a\" 1}", "expected ':' after key"},
        {"{\"a\":", "value expected"},
        {"{\"a\":1,}", "expected a string key"},
        {"[1,]", "invalid value"},
        {"{a:1}", "expected a string key"},
        {"[1 2]", "expected ',' or ']' in array"},
        {"{\"a\":1 \"b\":2}", "expected ',' or '}' in object"},
        {"{} {}", "unexpected data after the document"},
        {"\"abc", "unterminated string"},
        {"\"a\x01\"", "control character in string"},
        {"\"a\tb\"", "control character in string"},
        {"\"\\x\"", "invalid escape in string"},
        {"\"\\u12\"", "invalid \\u escape in string"},
        {"\"\\uD800\"", "lone surrogate in \\u escape"},
        {"\"\\uDC00\\uD800\"", "lone surrogate in \\u escape"},
        {"\"\\uD800\\u0041\"", "lone surrogate in \\u escape"},
        {"\"\xc0\x80\"", "invalid UTF-8 in string"},
        {"\"\xc3\"", "invalid UTF-8 in string"},
        {"\"\xe0\x9f\xbf\"", "invalid UTF-8 in string"},
        {"\"\xed\xa0\x80\"", "invalid UTF-8 in string"},
        {"\"\xf4\x90\x80\x80\"", "invalid UTF-8 in string"},
        {"\"\xf5\x80\x80\x80\"", "invalid UTF-8 in string"},
        {"\"\xff\"", "invalid UTF-8 in string"},
        {"01", "leading zero in number"},
        {"-", "digit expected after '-'"},
        {"-a", "digit expected after '-'"},
        {"+1", "invalid value"},
        {"1.", "digit expected after '.' in number"},
        {".5", "invalid value"},
        {"1e", "digit expected in exponent"},
        {"1e+", "digit expected in exponent"},
        {"NaN", "invalid value"},
        {"True", "invalid value"},
        {"nul", "invalid value"},
        {"'a'", "invalid value"},
        {"\xef\xbb\xbf{}", "invalid value"}, /* no byte order mark */
        {"\f{}", "invalid value"},
    };
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        json_scan s;
        if (valid_n(docs[i].doc, strlen(docs[i].doc), &s))
            fail_msg("accepted %s", docs[i].doc);
        if (strcmp(s.err, docs[i].err) != 0)
            fail_msg("%s: want '%s', got '%s'", docs[i].doc, docs[i].err, s.err);
    }
    json_scan s;
    assert_false(valid_n("{}\0", 3, &s)); /* NUL is not white space */
    assert_int_equal(s.err_at, 2);
}

/* d nested arrays, or objects {"k": ...}, around inner (which may be ""). */
static void nest(tally_buf *b, int d, bool objects, const char *inner)
{
    tally_buf_reset(b);
    for (int i = 0; i < d; i++)
        assert_int_equal(tally_buf_puts(b, objects ? (i + 1 < d || *inner ? "{\"k\":" : "{") : "["),
                         TALLY_OK);
    assert_int_equal(tally_buf_puts(b, inner), TALLY_OK);
    for (int i = 0; i < d; i++)
        assert_int_equal(tally_buf_puts(b, objects ? "}" : "]"), TALLY_OK);
}

static void test_depth(void **state)
{
    /* every value counts as a level, the document's value being level 1 */
    static const struct {
        int containers;
        const char *inner;
        bool ok;
    } cases[] = {
        {JSON_MAX_DEPTH, "", true},
        {JSON_MAX_DEPTH + 1, "", false},
        {JSON_MAX_DEPTH - 1, "1", true},
        {JSON_MAX_DEPTH, "1", false},
        {JSON_MAX_DEPTH - 1, "\"s\"", true},
        {JSON_MAX_DEPTH, "\"s\"", false},
        {200, "", false},
    };
    tally_buf b;
    tally_buf_init(&b, 0);
    for (int objects = 0; objects < 2; objects++) {
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            json_scan s;
            nest(&b, cases[i].containers, objects, cases[i].inner);
            bool ok = valid_n(b.data, b.len, &s);
            if (ok != cases[i].ok)
                fail_msg("%s: want %d, got %d (%s)", b.data, cases[i].ok, ok, ok ? "" : s.err);
            if (!ok)
                assert_string_equal(s.err, "nesting too deep");
            assert_null(jd_compare(b.data, b.len));
        }
    }
    tally_buf_release(&b);
}

static void test_members(void **state)
{
    const char *doc = " {\"a\" : \"x\\ny\" , \"b\":[1,{\"c\":2}], \"d\":-1.5e3,\"e\":{}} ";
    json_scan s;
    json_val key, v;
    bool first = true;
    json_scan_init(&s, doc, strlen(doc));
    assert_int_equal(json_scan_peek(&s), '{');
    assert_true(json_scan_object_begin(&s, 1));
    static const struct {
        const char *key;
        json_kind kind;
        const char *text;
    } want[] = {
        {"a", JSON_STRING, "x\\ny"},
        {"b", JSON_ARRAY, "[1,{\"c\":2}]"},
        {"d", JSON_NUMBER, "-1.5e3"},
        {"e", JSON_OBJECT, "{}"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_int_equal(json_scan_member(&s, &first, &key), 1);
        assert_int_equal(key.type, JSON_STRING);
        assert_int_equal(key.len, strlen(want[i].key));
        assert_memory_equal(key.p, want[i].key, key.len);
        assert_true(json_scan_value(&s, 2, &v));
        assert_int_equal(v.type, want[i].kind);
        assert_int_equal(v.len, strlen(want[i].text));
        assert_memory_equal(v.p, want[i].text, v.len);
    }
    assert_true(v.len > 0);
    assert_int_equal(json_scan_member(&s, &first, &key), 0);
    assert_true(json_scan_finish(&s));

    /* errors are sticky */
    json_scan_init(&s, "{\"a\" 1}", 7);
    first = true;
    assert_true(json_scan_object_begin(&s, 1));
    assert_int_equal(json_scan_member(&s, &first, &key), -1);
    assert_string_equal(s.err, "expected ':' after key");
    assert_int_equal(s.err_at, 5);
    assert_int_equal(json_scan_member(&s, &first, &key), -1);
    assert_false(json_scan_value(&s, 2, &v));
    assert_false(json_scan_finish(&s));
    assert_int_equal(json_scan_peek(&s), 0);
    assert_string_equal(s.err, "expected ':' after key");
}

/* The value of a one-string document. */
static json_val string_of(json_scan *s, const char *doc)
{
    json_val v;
    json_scan_init(s, doc, strlen(doc));
    assert_true(json_scan_value(s, 1, &v));
    assert_int_equal(v.type, JSON_STRING);
    return v;
}

static void test_decode(void **state)
{
    static const struct {
        const char *doc, *bytes;
        size_t len;
    } cases[] = {
        {"\"plain\"", "plain", 5},
        {"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\/\b\f\n\r\t", 8},
        {"\"\\u0041\\u00e9\\u4E2D\"", "A\xc3\xa9\xe4\xb8\xad", 6},
        {"\"\\ud83d\\ude00!\"", "\xf0\x9f\x98\x80!", 5},
        {"\"\\udbff\\udfff\"", "\xf4\x8f\xbf\xbf", 4},
        {"\"a\\u0000b\"", "a\0b", 3},
        {"\"\\u07ff\\u0800\"", "\xdf\xbf\xe0\xa0\x80", 5},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_scan s;
        json_val v = string_of(&s, cases[i].doc);
        char out[32];
        size_t n = json_str_decode(&v, out, sizeof out);
        assert_int_equal(n, cases[i].len);
        assert_memory_equal(out, cases[i].bytes, n);
        /* a short buffer gets what fits, and the full length */
        memset(out, '#', sizeof out);
        assert_int_equal(json_str_decode(&v, out, 2), cases[i].len);
        assert_memory_equal(out, cases[i].bytes, cases[i].len < 2 ? cases[i].len : 2);
        assert_int_equal(out[2], '#');
    }
}

static void test_equal(void **state)
{
    json_scan s1, s2;
    json_val a = string_of(&s1, "\"abc\""), b = string_of(&s2, "\"a\\u0062c\"");
    assert_true(json_str_equal(&a, &b));
    assert_true(json_str_equal(&b, &a));
    b = string_of(&s2, "\"a\\u0062\"");
    assert_false(json_str_equal(&a, &b));
    b = string_of(&s2, "\"abcd\"");
    assert_false(json_str_equal(&a, &b));
    a = string_of(&s1, "\"\\ud83d\\ude00\"");
    b = string_of(&s2, "\"\xf0\x9f\x98\x80\"");
    assert_true(json_str_equal(&a, &b));
    a = string_of(&s1, "\"\"");
    b = string_of(&s2, "\"\"");
    assert_true(json_str_equal(&a, &b));
}

static void test_prefixes(void **state)
{
    const char *doc = "{\"a\":[1,-2.5e+3,true,false,null,\"\\u00e9\\n\xc3\xa9\"],\"b\":{\"c\":{}}}";
    size_t len = strlen(doc);
    assert_true(valid(doc));
    for (size_t n = 0; n < len; n++) {
        json_scan s;
        assert_false(valid_n(doc, n, &s));
        assert_true(s.err_at <= n);
    }
}

/* ---- Differential check against json-c --------------------------------------- */

static uint64_t rng_state = 0x853c49e6748fea9bull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void check_agree(const char *buf, size_t len)
{
    const char *why = jd_compare(buf, len);
    if (why)
        fail_msg("%s: %.*s", why, (int)len, buf);
}

/* The differences fuzzing found: json-c accepts these, the scanner does not
 * (RFC 8259 forbids them), and the differential check allows exactly that. */
static void test_jsonc_leniencies(void **state)
{
    static const char *const docs[] = {
        "[00]",          "[-01]", "[01.5]",   "[01e1]",         "[-.5]",
        "[1.]",          "[0.]",  "[\"\t\"]", "[\"\xc0\x80\"]", "[\"\xed\xa0\x80\"]",
        "[\"\\ud800\"]",
    };
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        assert_false(valid(docs[i]));
        assert_true(jd_jsonc_accepts(docs[i], strlen(docs[i])));
        assert_null(jd_compare(docs[i], strlen(docs[i])));
    }
    /* and not more: json-c refuses these too */
    static const char *const both[] = {"[012]", "[-]", "[.5]", "[\"\xff\"]"};
    for (size_t i = 0; i < sizeof both / sizeof both[0]; i++) {
        assert_false(valid(both[i]));
        assert_false(jd_jsonc_accepts(both[i], strlen(both[i])));
    }
}

/* Every string of up to 5 bytes over JSON's structural alphabet. */
static void test_differential_exhaustive(void **state)
{
    static const char alphabet[] = "[]{}\",:0-1.e\\ut";
    const size_t k = sizeof alphabet - 1;
    char buf[8];
    for (size_t len = 1; len <= 5; len++) {
        size_t total = 1;
        for (size_t i = 0; i < len; i++)
            total *= k;
        for (size_t x = 0; x < total; x++) {
            size_t y = x;
            for (size_t i = 0; i < len; i++, y /= k)
                buf[i] = alphabet[y % k];
            check_agree(buf, len);
        }
    }
}

/* A random JSON value of at most `depth` levels into b. */
static void gen_value(tally_buf *b, int depth)
{
    static const char *const scalars[] = {
        "0",
        "-0",
        "12",
        "-3.25",
        "1e9",
        "2E-3",
        "0.5e+1",
        "true",
        "false",
        "null",
        "\"\"",
        "\"x\"",
        "\"\\u00e9\\\\\\\"\"",
        "\"\xe4\xb8\xad\"",
        "\"\\ud83d\\ude00\"",
        "18446744073709551616",
        "-9223372036854775809",
        "1.7976931348623157e308",
    };
    static const char *const spaces[] = {"", "", "", " ", "\n", "\t", "\r\n  "};
    unsigned r = (unsigned)rnd();
    const char *sp = spaces[(r >> 8) % 7];
    if (depth <= 1 || r % 4 == 0) {
        assert_int_equal(tally_buf_printf(b, "%s%s", scalars[(r >> 4) % 18], sp), TALLY_OK);
        return;
    }
    bool object = r % 4 == 1;
    int n = (int)((r >> 12) % 4);
    assert_int_equal(tally_buf_puts(b, object ? "{" : "["), TALLY_OK);
    for (int i = 0; i < n; i++) {
        if (i > 0)
            assert_int_equal(tally_buf_printf(b, ",%s", sp), TALLY_OK);
        if (object)
            assert_int_equal(tally_buf_printf(b, "\"k%d\"%s:%s", i, sp, sp), TALLY_OK);
        gen_value(b, depth - 1);
    }
    assert_int_equal(tally_buf_puts(b, object ? "}" : "]"), TALLY_OK);
}

/* Random valid documents, then random edits of them: json-c and the scanner
 * must agree on every one (bar json-c's known leniencies). */
static void test_differential_random(void **state)
{
    static const char edits[] = "{}[]\",:\\ 0123456789-+.eEtrufalsnu\x00\x01\x1f\x7f\x80\xbf\xc3"
                                "\xed\xf0\xff";
    tally_buf b;
    tally_buf_init(&b, 0);
    for (int iter = 0; iter < 30000; iter++) {
        tally_buf_reset(&b);
        gen_value(&b, 1 + (int)(rnd() % 6));
        if (iter % 2 == 0) {
            assert_true(valid(b.data));
            check_agree(b.data, b.len);
            continue;
        }
        for (int e = 0; e < 1 + iter % 3 && b.len > 0; e++) {
            uint64_t r = rnd();
            size_t at = (size_t)(r >> 16) % b.len;
            char c = edits[(r >> 40) % (sizeof edits - 1)];
            if (r % 3 == 0)
                b.data[at] = c;
            else if (r % 3 == 1)
                memmove(b.data + at, b.data + at + 1, b.len-- - at - 1);
            else if (tally_buf_append(&b, "", 1) == TALLY_OK) {
                memmove(b.data + at + 1, b.data + at, b.len - at - 1);
                b.data[at] = c;
            }
        }
        check_agree(b.data, b.len);
    }
    tally_buf_release(&b);
}

/* What json-c writes, in each of its styles, the scanner reads. */
static void test_reads_jsonc_output(void **state)
{
    static const int styles[] = {JSON_C_TO_STRING_PLAIN, JSON_C_TO_STRING_SPACED,
                                 JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_PRETTY_TAB,
                                 JSON_C_TO_STRING_NOSLASHESCAPE};
    tally_buf b;
    tally_buf_init(&b, 0);
    for (int iter = 0; iter < 2000; iter++) {
        tally_buf_reset(&b);
        assert_int_equal(tally_buf_puts(&b, "["), TALLY_OK);
        gen_value(&b, 6);
        assert_int_equal(tally_buf_puts(&b, "]"), TALLY_OK);
        json_object *o = json_tokener_parse(b.data);
        assert_non_null(o);
        for (size_t i = 0; i < sizeof styles / sizeof styles[0]; i++) {
            const char *text = json_object_to_json_string_ext(o, styles[i]);
            if (!valid(text))
                fail_msg("rejected json-c's %s", text);
        }
        json_object_put(o);
    }
    tally_buf_release(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_depth),
        cmocka_unit_test(test_members),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_equal),
        cmocka_unit_test(test_prefixes),
        cmocka_unit_test(test_jsonc_leniencies),
        cmocka_unit_test(test_differential_exhaustive),
        cmocka_unit_test(test_differential_random),
        cmocka_unit_test(test_reads_jsonc_output),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
