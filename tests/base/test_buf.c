/* Tests for base/buf.c: growth, the size cap (a failed append leaves the
 * buffer as it was), NUL termination, and the JSON, CSV and HTML escapers. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>

#include "testutil.h"

#include "tally/buf.h"
#include "tally/utf8.h"

/* Under ASan, let an impossible allocation fail with NULL, as libc's does,
 * instead of aborting: test_huge_cap asks for one on purpose. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}

/* Asserts the buffer holds exactly want (len bytes) followed by a NUL. */
static void assert_buf(const tally_buf *b, const char *want)
{
    assert_non_null(b->data);
    assert_int_equal(b->len, strlen(want));
    assert_memory_equal(b->data, want, b->len);
    assert_int_equal(b->data[b->len], '\0');
    assert_true(b->len < b->alloc);
}

static void test_init_release(void **state)
{
    tally_buf b;
    tally_buf_init(&b, 0);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, TALLY_BUF_DEFAULT_CAP);
    tally_buf_release(&b); /* releasing an unused buffer is fine */
    tally_buf_reset(&b);   /* and so is resetting one */
    assert_null(b.data);

    /* an empty append still yields a C string */
    tally_buf_init(&b, 16);
    assert_int_equal(b.cap, 16);
    assert_int_equal(tally_buf_append(&b, "", 0), TALLY_OK);
    assert_buf(&b, "");
    tally_buf_release(&b);
    assert_null(b.data);
    assert_int_equal(b.len, 0);

    /* usable again after init */
    tally_buf_init(&b, 0);
    assert_int_equal(tally_buf_puts(&b, "again"), TALLY_OK);
    assert_buf(&b, "again");
    tally_buf_release(&b);
}

static void test_append_grow(void **state)
{
    tally_buf b;
    tally_buf_init(&b, 0);
    assert_int_equal(tally_buf_puts(&b, "abc"), TALLY_OK);
    assert_int_equal(tally_buf_append(&b, "de\0f", 4), TALLY_OK); /* NUL bytes are data */
    assert_int_equal(b.len, 7);
    assert_memory_equal(b.data, "abcde\0f", 8);

    /* many appends across several reallocations keep every byte */
    tally_buf_reset(&b);
    for (int i = 0; i < 20000; i++) {
        char c = (char)('a' + i % 26);
        assert_int_equal(tally_buf_append(&b, &c, 1), TALLY_OK);
    }
    assert_int_equal(b.len, 20000);
    for (int i = 0; i < 20000; i++)
        assert_int_equal(b.data[i], 'a' + i % 26);
    assert_int_equal(b.data[20000], '\0');

    /* reset keeps the memory and yields "" */
    size_t alloc = b.alloc;
    char *data = b.data;
    tally_buf_reset(&b);
    assert_buf(&b, "");
    assert_int_equal(b.alloc, alloc);
    assert_ptr_equal(b.data, data);
    tally_buf_release(&b);
}

static void test_printf(void **state)
{
    tally_buf b;
    tally_buf_init(&b, 0);
    assert_int_equal(tally_buf_printf(&b, "%d-%s", 42, "x"), TALLY_OK);
    assert_int_equal(tally_buf_printf(&b, "%s", ""), TALLY_OK);
    assert_int_equal(tally_buf_printf(&b, "/%05d", 7), TALLY_OK);
    assert_buf(&b, "42-x/00007");

    /* longer than the first allocation */
    char big[1000];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(tally_buf_printf(&b, "[%s]", big), TALLY_OK);
    assert_int_equal(b.len, 10 + 1001);
    assert_int_equal(b.data[b.len - 1], ']');
    assert_int_equal(b.data[b.len], '\0');
    tally_buf_release(&b);

    tally_buf_init(&b, 0);
    assert_int_equal(tally_buf_printf(&b, "%s", ""), TALLY_OK);
    assert_buf(&b, "");
    tally_buf_release(&b);
}

/* The plain conversions, formatted without stdio, give what snprintf gives;
 * a format with flags, width or precision still goes to vsnprintf. */
static void test_printf_like_snprintf(void **state)
{
    static const long long lls[] = {0, 1, -1, 9, 10, -10, 1234567890123LL, LLONG_MAX, LLONG_MIN};
    static const int ints[] = {0, 7, -7, INT_MAX, INT_MIN};
    char want[256];
    for (size_t i = 0; i < sizeof lls / sizeof *lls; i++)
        for (size_t j = 0; j < sizeof ints / sizeof *ints; j++) {
            tally_buf b;
            tally_buf_init(&b, 0);
            long long v = lls[i];
            int d = ints[j];
            assert_int_equal(tally_buf_printf(&b, "a%lldb%dc%s%%%zu|%u|%lu|%llu|%ld|", v, d, "xy",
                                              (size_t)v, (unsigned)d, (unsigned long)v,
                                              (unsigned long long)v, (long)v),
                             TALLY_OK);
            snprintf(want, sizeof want, "a%lldb%dc%s%%%zu|%u|%lu|%llu|%ld|", v, d, "xy", (size_t)v,
                     (unsigned)d, (unsigned long)v, (unsigned long long)v, (long)v);
            assert_buf(&b, want);
            tally_buf_release(&b);
        }
    tally_buf b;
    tally_buf_init(&b, 0);
    assert_int_equal(tally_buf_printf(&b, "%04d|%02X|%.*s|%5s|%-3d|%%", 7, 10, 2, "abc", "z", 4),
                     TALLY_OK);
    assert_buf(&b, "0007|0A|ab|    z|4  |%");
    assert_int_equal(tally_buf_printf(&b, "%s", ""), TALLY_OK);
    assert_buf(&b, "0007|0A|ab|    z|4  |%");
    /* plain pieces before a conversion that is not: formatted once, whole */
    assert_int_equal(tally_buf_printf(&b, "x%sy%d%%z%04d", "s", 1, 2), TALLY_OK);
    assert_buf(&b, "0007|0A|ab|    z|4  |%xsy1%z0002");
    tally_buf_release(&b);
    /* a plain format past the cap leaves the buffer as it was */
    tally_buf_init(&b, 6);
    assert_int_equal(tally_buf_printf(&b, "%d", 123), TALLY_OK);
    assert_int_equal(tally_buf_printf(&b, "x%sy%d", "ab", 5), TALLY_TOO_LARGE);
    assert_buf(&b, "123");
    tally_buf_release(&b);
}

/* Text that just fits the allocation, and text one byte longer (formatted
 * again after it grows), come out whole. */
static void test_printf_at_the_edge(void **state)
{
    for (size_t extra = 0; extra < 4; extra++) {
        tally_buf b;
        tally_buf_init(&b, 0);
        assert_int_equal(tally_buf_puts(&b, "x"), TALLY_OK);
        size_t alloc = b.alloc,
               want = alloc - b.len - 2 + extra; /* room - 1 is the most that fits */
        char s[1024];
        assert_true(want < sizeof s);
        memset(s, 'a', want);
        s[want] = '\0';
        assert_int_equal(tally_buf_printf(&b, "%s", s), TALLY_OK);
        assert_int_equal(b.len, 1 + want);
        assert_int_equal(b.data[0], 'x');
        assert_int_equal(b.data[b.len - 1], 'a');
        assert_int_equal(b.data[b.len], '\0');
        assert_int_equal(strspn(b.data + 1, "a"), want);
        if (extra <= 1)
            assert_int_equal(b.alloc, alloc);
        else
            assert_true(b.alloc > alloc);
        tally_buf_release(&b);
    }
}

/* Every appender refuses to pass the cap and leaves the buffer unchanged. */
static void test_cap(void **state)
{
    tally_buf b;
    tally_buf_init(&b, 8);
    assert_int_equal(tally_buf_puts(&b, "12345"), TALLY_OK);
    assert_int_equal(tally_buf_puts(&b, "6789"), TALLY_TOO_LARGE);
    assert_buf(&b, "12345");
    assert_int_equal(tally_buf_printf(&b, "%d", 6789), TALLY_TOO_LARGE);
    assert_buf(&b, "12345");
    assert_int_equal(tally_buf_append(&b, "x", SIZE_MAX), TALLY_TOO_LARGE);
    assert_buf(&b, "12345");
    assert_int_equal(tally_buf_json_str(&b, "ab"), TALLY_TOO_LARGE); /* "ab" needs 4 */
    assert_buf(&b, "12345");
    assert_int_equal(tally_buf_csv_field(&b, "a,b"), TALLY_TOO_LARGE);
    assert_buf(&b, "12345");
    assert_int_equal(tally_buf_html(&b, "a<b"), TALLY_TOO_LARGE);
    assert_buf(&b, "12345");
    assert_int_equal(tally_buf_html(&b, "abcd"), TALLY_TOO_LARGE);
    assert_buf(&b, "12345");
    /* exactly up to the cap is allowed */
    assert_int_equal(tally_buf_puts(&b, "678"), TALLY_OK);
    assert_buf(&b, "12345678");
    assert_int_equal(tally_buf_append(&b, "", 0), TALLY_OK);
    assert_int_equal(tally_buf_puts(&b, "9"), TALLY_TOO_LARGE);
    assert_buf(&b, "12345678");
    tally_buf_release(&b);

    tally_buf_init(&b, 7);
    assert_int_equal(tally_buf_json_str(&b, "a\"b\""), TALLY_TOO_LARGE); /* needs 8 */
    assert_true(b.len == 0);
    assert_int_equal(tally_buf_json_str(&b, "ab\ncd"), TALLY_TOO_LARGE);
    assert_true(b.len == 0);
    assert_int_equal(tally_buf_json_str(&b, "abc"), TALLY_OK);
    assert_buf(&b, "\"abc\"");
    tally_buf_release(&b);
}

/* A cap near SIZE_MAX must not let the size arithmetic wrap. */
static void test_huge_cap(void **state)
{
    tally_buf b;
    tally_buf_init(&b, SIZE_MAX);
    assert_int_equal(tally_buf_puts(&b, "x"), TALLY_OK);
    tally_err e = tally_buf_append(&b, "y", SIZE_MAX - 1);
    assert_true(e == TALLY_TOO_LARGE || e == TALLY_NOMEM);
    assert_buf(&b, "x");
    e = tally_buf_append(&b, "y", SIZE_MAX / 2);
    assert_true(e == TALLY_TOO_LARGE || e == TALLY_NOMEM);
    assert_buf(&b, "x");
    tally_buf_release(&b);
}

static void assert_json(const char *in, const char *want)
{
    tally_buf b;
    tally_buf_init(&b, 0);
    assert_int_equal(tally_buf_json_str(&b, in), TALLY_OK);
    assert_buf(&b, want);
    tally_buf_release(&b);
}

static void test_json_str(void **state)
{
    assert_json("", "\"\"");
    assert_json("plain", "\"plain\"");
    assert_json("a\"b", "\"a\\\"b\"");
    assert_json("back\\slash", "\"back\\\\slash\"");
    assert_json("l1\nl2\r\t", "\"l1\\nl2\\r\\t\"");
    assert_json("\x01\x1f\b\f", "\"\\u0001\\u001f\\u0008\\u000c\"");
    assert_json("del\x7f", "\"del\x7f\"");                   /* not a control character in JSON */
    assert_json("元/€", "\"元/€\"");                         /* UTF-8 passes through */
    assert_json("</script>", "\"</script>\"");               /* '/' needs no escape */
    assert_json("\xF0\x9F\x98\x80", "\"\xF0\x9F\x98\x80\""); /* four bytes */
    /* A byte that does not begin a valid character becomes U+FFFD, so the
     * output stays valid JSON whatever a message quotes: a lead byte cut
     * from its character, a lone continuation byte, an overlong form, a
     * surrogate, a character past U+10FFFF, a sequence cut by the end. */
    assert_json("a\xC3,b", "\"a\xEF\xBF\xBD,b\"");
    assert_json("\x80", "\"\xEF\xBF\xBD\"");
    assert_json("\xC0\xAF", "\"\xEF\xBF\xBD\xEF\xBF\xBD\"");
    assert_json("\xED\xA0\x80", "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");
    assert_json("\xF4\x90\x80\x80", "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");
    assert_json("\xE2\x82", "\"\xEF\xBF\xBD\xEF\xBF\xBD\"");

    /* appends after what is there */
    tally_buf b;
    tally_buf_init(&b, 0);
    assert_int_equal(tally_buf_puts(&b, "{\"k\":"), TALLY_OK);
    assert_int_equal(tally_buf_json_str(&b, "v"), TALLY_OK);
    assert_buf(&b, "{\"k\":\"v\"");
    tally_buf_release(&b);
}

/* tally_utf8_cut: at most max bytes, never inside a character. */
static void test_utf8_cut(void **state)
{
    (void)state;
    const char *e3 = "\xC3\xA9\xC3\xA9\xC3\xA9"; /* three 2-byte characters */
    assert_int_equal(tally_utf8_cut(e3, 6), 6);
    assert_int_equal(tally_utf8_cut(e3, 5), 4);
    assert_int_equal(tally_utf8_cut(e3, 4), 4);
    assert_int_equal(tally_utf8_cut(e3, 1), 0);
    assert_int_equal(tally_utf8_cut(e3, 64), 6);
    assert_int_equal(tally_utf8_cut("\xF0\x9F\x98\x80x", 3), 0);
    assert_int_equal(tally_utf8_cut("ab\xE2\x82\xAC", 4), 2);
    assert_int_equal(tally_utf8_cut("abcdef", 3), 3);
    char empty[8] = "";
    assert_int_equal(tally_utf8_cut(empty, 3), 0);
    for (size_t n = 0; n <= 6; n++) { /* every cut is valid UTF-8 */
        tally_buf b;
        tally_buf_init(&b, 0);
        char cut[8];
        snprintf(cut, sizeof cut, "%.*s", tally_utf8_cut(e3, n), e3);
        assert_int_equal(tally_buf_json_str(&b, cut), TALLY_OK);
        assert_null(strstr(b.data, "\xEF\xBF\xBD"));
        tally_buf_release(&b);
    }
}

static void assert_csv(const char *in, const char *want)
{
    tally_buf b;
    tally_buf_init(&b, 0);
    assert_int_equal(tally_buf_csv_field(&b, in), TALLY_OK);
    assert_buf(&b, want);
    tally_buf_release(&b);
}

static void test_csv_field(void **state)
{
    assert_csv("", "");
    assert_csv("39.82", "39.82");
    assert_csv("a b", "a b");
    assert_csv("a,b", "\"a,b\"");
    assert_csv("say \"hi\"", "\"say \"\"hi\"\"\"");
    assert_csv("\"", "\"\"\"\"");
    assert_csv("l1\nl2", "\"l1\nl2\"");
    assert_csv("cr\r", "\"cr\r\"");
}

static void assert_html(const char *in, const char *want)
{
    tally_buf b;
    tally_buf_init(&b, 0);
    assert_int_equal(tally_buf_html(&b, in), TALLY_OK);
    assert_buf(&b, want);
    tally_buf_release(&b);
}

static void test_html(void **state)
{
    assert_html("", "");
    assert_html("plain 39.82", "plain 39.82");
    assert_html("<a href=\"x\">Tom & Jerry's</a>",
                "&lt;a href=&quot;x&quot;&gt;Tom &amp; Jerry&#39;s&lt;/a&gt;");
    assert_html("&amp;", "&amp;amp;");
}

/* tally_fmt: the whole text or an error, never a cut value. */
static void test_fmt(void **state)
{
    (void)state;
    char b[8];
    assert_int_equal(tally_fmt(b, sizeof b, "%s:%d", "ab", 42), TALLY_OK);
    assert_string_equal(b, "ab:42");
    assert_int_equal(tally_fmt(b, sizeof b, "%s", "1234567"), TALLY_OK); /* exactly fits */
    assert_string_equal(b, "1234567");
    assert_int_equal(tally_fmt(b, sizeof b, "%s", "12345678"), TALLY_TOO_LARGE);
    assert_string_equal(b, "");
    assert_int_equal(tally_fmt(b, 1, "%s", ""), TALLY_OK);
    assert_int_equal(tally_fmt(b, 1, "x"), TALLY_TOO_LARGE);
    assert_int_equal(tally_fmt(b, 0, "x"), TALLY_INVAL);
}

/* The printf-free digits give what snprintf gives, at the ends of each
 * range and at every power of ten and of two. */
static void test_digits(void **state)
{
    (void)state;
    uint64_t u[200];
    size_t n = 0;
    u[n++] = 0;
    u[n++] = UINT64_MAX;
    for (uint64_t p = 1; p <= UINT64_MAX / 10; p *= 10) {
        u[n++] = p - 1;
        u[n++] = p;
    }
    for (int b = 0; b < 64; b++)
        u[n++] = (uint64_t)1 << b;
    for (size_t i = 0; i < n; i++) {
        char got[32], want[32];
        size_t len = tally_dec_u64(got, u[i]);
        snprintf(want, sizeof want, "%llu", (unsigned long long)u[i]);
        assert_int_equal(len, strlen(want));
        assert_memory_equal(got, want, len);
        len = tally_hex64(got, u[i]);
        snprintf(want, sizeof want, "%016llx", (unsigned long long)u[i]);
        assert_int_equal(len, 16);
        assert_memory_equal(got, want, 16);
        int64_t signs[2] = {(int64_t)u[i], -(int64_t)(u[i] & INT64_MAX)};
        for (int k = 0; k < 2; k++) {
            len = tally_dec_i64(got, signs[k]);
            snprintf(want, sizeof want, "%lld", (long long)signs[k]);
            assert_int_equal(len, strlen(want));
            assert_memory_equal(got, want, len);
        }
    }
    char got[32];
    assert_int_equal(tally_dec_i64(got, INT64_MIN), 20);
    assert_memory_equal(got, "-9223372036854775808", 20);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_release),
        cmocka_unit_test(test_append_grow),
        cmocka_unit_test(test_printf),
        cmocka_unit_test(test_printf_at_the_edge),
        cmocka_unit_test(test_printf_like_snprintf),
        cmocka_unit_test(test_cap),
        cmocka_unit_test(test_huge_cap),
        cmocka_unit_test(test_json_str),
        cmocka_unit_test(test_utf8_cut),
        cmocka_unit_test(test_csv_field),
        cmocka_unit_test(test_html),
        cmocka_unit_test(test_fmt),
        cmocka_unit_test(test_digits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
