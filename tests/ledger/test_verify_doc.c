/* Tests for ledger/verify_doc.c: the scanner that reads the documents Tally
 * writes must give json-c's answers wherever it answers at all, and leave
 * everything outside its subset to json-c (escapes, duplicates of the
 * members verify reads, exponents, trailing bytes, odd whitespace). Then a
 * few thousand mutations of a real document, each read both ways. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "../../ledger/ledger_int.h"

#define DOC_HEAD                                                                                   \
    "{\"invoice_id\":\"INV-2026-000001\",\"type\":\"invoice\",\"number\":1,\"account\":\"acme\","  \
    "\"currency\":\"USD\",\"status\":\"finalized\",\"period\":{\"label\":\"2026-03\",\"start\":"   \
    "\"2026-03-01T00:00:00Z\",\"timezone\":\"UTC\"},\"lines\":[{\"line\":1,\"kind\":\"usage\","    \
    "\"migration\":false,\"quantity\":\"3600\",\"unit_price\":\"1.90\",\"amount\":\"39.82\","      \
    "\"credits\":[{\"grant_id\":1,\"amount\":\"20.00\"}]},{\"line\":2,\"amount\":\"10.18\","       \
    "\"credits\":[]}],\"subtotal\":\"50.00\",\"credits_applied\":[{\"grant_id\":1,\"kind\":"       \
    "\"trial\",\"amount\":\"20.00\"}],\"total_credits\":\"20.00\",\"amount_due\":\"30.00\""
#define DOC_TAIL                                                                                   \
    ",\"key_id\":\"3b6315b18f55d627\",\"prev_hash\":\"00\",\"hash\":\"ab\",\"signature\":\"cd\"}"

static const char good[] = DOC_HEAD DOC_TAIL;

static void assert_text_equal(vdoc_text a, vdoc_text b, const char *doc)
{
    if (!a.s || !b.s) {
        if (a.s != b.s)
            fail_msg("one reading has a text the other has not: %s", doc);
        return;
    }
    if (a.n != b.n || memcmp(a.s, b.s, a.n) != 0)
        fail_msg("texts '%.*s' and '%.*s' differ: %s", (int)a.n, a.s, (int)b.n, b.s, doc);
}

static void assert_sum_equal(vdoc_sum a, vdoc_sum b, const char *doc)
{
    if (a.ok != b.ok || (a.ok && a.v != b.v))
        fail_msg("sums %d/%lld and %d/%lld differ: %s", a.ok, (long long)a.v, b.ok, (long long)b.v,
                 doc);
}

/* The scanner's reading of doc (when it gives one) is json-c's; returns
 * the scanner's answer. */
static int read_both(const char *doc, size_t len)
{
    vdoc_fields fast, ref;
    bool object = false;
    int r = vdoc_read_fast(doc, len, 2, &fast);
    assert_int_equal(vdoc_read_json_c(doc, len, 2, &ref, &object), TALLY_OK);
    if (r == 1) {
        if (!object)
            fail_msg("the scanner read what json-c finds no object in: %.*s", (int)len, doc);
        assert_text_equal(fast.invoice_id, ref.invoice_id, doc);
        assert_text_equal(fast.type, ref.type, doc);
        assert_text_equal(fast.account, ref.account, doc);
        assert_text_equal(fast.currency, ref.currency, doc);
        assert_text_equal(fast.refers_to, ref.refers_to, doc);
        assert_sum_equal(fast.subtotal, ref.subtotal, doc);
        assert_sum_equal(fast.total_credits, ref.total_credits, doc);
        assert_sum_equal(fast.amount_due, ref.amount_due, doc);
        assert_sum_equal(fast.lines, ref.lines, doc);
        assert_sum_equal(fast.applied, ref.applied, doc);
        assert_int_equal(fast.issued_present, ref.issued_present);
        assert_int_equal(fast.issued_ok, ref.issued_ok);
        if (fast.issued_ok) {
            assert_int_equal(fast.issued, ref.issued);
            assert_int_equal(fast.grant_id, ref.grant_id);
        }
        assert_null(fast.tree);
    } else {
        assert_int_equal(r, -1);
    }
    /* verify's entry point: the scanner's reading, else json-c's */
    vdoc_fields got;
    bool got_object = false;
    assert_int_equal(vdoc_read(doc, len, 2, &got, &got_object), TALLY_OK);
    assert_int_equal(got_object, object);
    if (object) {
        assert_text_equal(got.account, ref.account, doc);
        assert_sum_equal(got.lines, ref.lines, doc);
        assert_int_equal(got.issued_ok, ref.issued_ok);
    }
    assert_true(r == 1 ? got.tree == NULL : got.tree != NULL || !object);
    vdoc_release(&got);
    vdoc_release(&ref);
    return r;
}

static int read_str(const char *doc)
{
    return read_both(doc, strlen(doc));
}

static void test_subset_read_like_json_c(void **state)
{
    (void)state;
    static const char *const in[] = {
        good,
        DOC_HEAD
        ",\"credit_issued\":{\"kind\":\"adjustment\",\"amount\":\"5.00\",\"grant_id\":7}" DOC_TAIL,
        DOC_HEAD ",\"credit_issued\":{\"kind\":\"adjustment\",\"amount\":\"-5.00\",\"grant_id\":-"
                 "7}" DOC_TAIL,
        DOC_HEAD ",\"credit_issued\":{\"kind\":\"adjustment\",\"amount\":\"5.00\",\"grant_id\":7."
                 "0}" DOC_TAIL,
        DOC_HEAD ",\"credit_issued\":{\"kind\":\"adjustment\",\"amount\":\"5.00\",\"grant_id\":"
                 "\"7\"}" DOC_TAIL,
        DOC_HEAD
        ",\"credit_issued\":{\"kind\":\"coupon\",\"amount\":\"5.00\",\"grant_id\":7}" DOC_TAIL,
        DOC_HEAD ",\"credit_issued\":{\"amount\":\"5.00\",\"grant_id\":7}" DOC_TAIL,
        DOC_HEAD
        ",\"credit_issued\":{\"kind\":\"adjustment\",\"amount\":5,\"grant_id\":7}" DOC_TAIL,
        DOC_HEAD ",\"credit_issued\":null" DOC_TAIL,
        DOC_HEAD ",\"credit_issued\":[1]" DOC_TAIL,
        DOC_HEAD ",\"credit_issued\":\"x\"" DOC_TAIL,
        DOC_HEAD ",\"refers_to\":\"INV-2026-000001\"" DOC_TAIL,
        DOC_HEAD ",\"refers_to\":null" DOC_TAIL,
        "{}",
        " {\"lines\":{},\"credits_applied\":[1,\"2\",null,{\"amount\":null}]} ",
        "{\"lines\":[{\"amount\":\"1.00\"},{\"amount\":\"x\"}],\"subtotal\":true}",
        "{\"lines\":[{\"amount\":\"92233720368547758.07\"},{\"amount\":\"0.01\"}]}",
        "{\"lines\":[],\"credits_applied\":[],\"subtotal\":\"0\",\"invoice_id\":\"\"}",
        "{\"lines\" : [ { \"amount\" : \"1.5\" } ] ,\n\t\"amount_due\":\"-1.25\"\r}",
        "{\"a\":[[[[[[[[[[[[1]]]]]]]]]]]],\"lines\":[{\"x\":{\"amount\":\"9.99\"},\"amount\":\"1\"}"
        "]}",
        "{\"subtotal\":\"1.234\",\"total_credits\":\"1.\",\"amount_due\":\"+1\"}",
        "{\"account\":12,\"currency\":false,\"type\":[],\"invoice_id\":{}}",
        "{\"n\":-0,\"m\":123456789012345678,\"k\":0.5}",
    };
    for (size_t i = 0; i < sizeof in / sizeof *in; i++)
        if (read_str(in[i]) != 1)
            fail_msg("outside the subset: %s", in[i]);
}

/* What the scanner does not take on: json-c reads it (or finds no object). */
static void test_outside_the_subset(void **state)
{
    (void)state;
    static const char *const in[] = {
        DOC_HEAD ",\"subtotal\":\"0.00\"" DOC_TAIL,                /* a member read, twice */
        "{\"lines\":[{\"amount\":\"1.00\",\"amount\":\"2.00\"}]}", /* the same inside a line */
        "{\"credit_issued\":{\"kind\":\"adjustment\",\"kind\":\"x\"}}",
        "{\"account\":\"a\\u0063me\"}", /* escapes */
        "{\"acc\\u006funt\":\"acme\"}",
        "{\"account\":\"acm\xc3\xa9\"}", /* bytes above 127 */
        "{\"account\":\"ac\tme\"}",      /* a control character */
        "{\"n\":1e5}",                   /* exponents */
        "{\"n\":1234567890123456789}",   /* 19 digits */
        "{\"n\":01}",                    /* a leading zero */
        "{\"n\":.5}",
        "{\"n\":1.}",
        "{\"n\":-}",
        "{\"a\":1}x", /* bytes after the object */
        "{\"a\":1}{}",
        "{\"a\":1,}", /* json-c is lenient where RFC 8259 is not */
        "{\"a\":[1,]}",
        "{'a':1}",
        "{a:1}",
        "{\"a\":True}",
        "{\"a\":nul}",
        "{\"a\"\f:1}",
        "{\"a\":1",
        "{\"a\":\"1}",
        "[1]",
        "",
        "{\"a\":[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]}", /* deeper than 16 */
    };
    for (size_t i = 0; i < sizeof in / sizeof *in; i++)
        if (read_str(in[i]) != -1)
            fail_msg("read by the scanner: %s", in[i]);
    /* a NUL inside */
    static const char nul[] = "{\"account\":\"ac\0me\"}";
    assert_int_equal(read_both(nul, sizeof nul - 1), -1);
}

static uint32_t next(uint32_t *s)
{
    *s = *s * 1103515245u + 12345u;
    return *s >> 8;
}

/* Thousands of documents one to three edits away from a real one: the
 * scanner agrees with json-c on every one it reads, and reads some. */
static void test_mutations_agree(void **state)
{
    (void)state;
    static const char bytes[] = "{}[]\":,.-0123456789eE \\tnulrsa\x01\x80";
    uint32_t seed = 15;
    size_t n_read = 0, n_left = 0;
    char doc[sizeof good + 64];
    for (int round = 0; round < 6000; round++) {
        size_t len = sizeof good - 1;
        memcpy(doc, good, len);
        int edits = 1 + (int)(next(&seed) % 3);
        for (int e = 0; e < edits; e++) {
            size_t at = next(&seed) % len;
            switch (next(&seed) % 4) {
            case 0: /* delete */
                memmove(doc + at, doc + at + 1, len - at - 1);
                len--;
                break;
            case 1: /* insert */
                if (len + 1 < sizeof doc) {
                    memmove(doc + at + 1, doc + at, len - at);
                    doc[at] = bytes[next(&seed) % (sizeof bytes - 1)];
                    len++;
                }
                break;
            case 2: /* replace */
                doc[at] = bytes[next(&seed) % (sizeof bytes - 1)];
                break;
            default: { /* a member's text again, elsewhere */
                size_t from = next(&seed) % len, n = 1 + next(&seed) % 24;
                if (from + n <= len && len + n < sizeof doc) {
                    char tmp[32];
                    memcpy(tmp, doc + from, n);
                    memmove(doc + at + n, doc + at, len - at);
                    memcpy(doc + at, tmp, n);
                    len += n;
                }
            }
            }
        }
        doc[len] = '\0';
        if (read_both(doc, len) == 1)
            n_read++;
        else
            n_left++;
    }
    assert_true(n_read > 100); /* the comparison was made */
    assert_true(n_left > 100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_subset_read_like_json_c),
        cmocka_unit_test(test_outside_the_subset),
        cmocka_unit_test(test_mutations_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
