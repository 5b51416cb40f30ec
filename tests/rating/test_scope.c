/* Credit scopes: parsing with precise errors, and matching (rating/scope.c). */
#include <stdio.h>
#include <string.h>

#include "testutil.h"

#include "tally/rating.h"

#define ACC TALLY_METER_ACCELERATOR
#define OD  TALLY_PRICING_ON_DEMAND
#define RES TALLY_PRICING_RESERVED

static void parse_ok(const char *expr, tally_scope *s)
{
    const char *why = NULL;
    tally_err err = tally_scope_parse(expr, s, &why);
    if (err != TALLY_OK)
        fail_msg("'%s': %s", expr, why ? why : "?");
}

/* Parses expr expecting failure with a reason containing want. */
static void parse_bad(const char *expr, const char *want)
{
    tally_scope s;
    const char *why = NULL;

    memset(&s, 0x5a, sizeof s);
    assert_int_equal(tally_scope_parse(expr, &s, &why), TALLY_PARSE);
    assert_non_null(why);
    if (strstr(why, want) == NULL)
        fail_msg("'%s': got '%s', want '%s'", expr, why, want);
    assert_int_equal(s.n_terms, 0); /* nothing half-parsed is left */
}

static void valid_scopes(void **state)
{
    tally_scope s;

    parse_ok("", &s);
    assert_int_equal(s.n_terms, 0);
    parse_ok("sku=a100-40g|a100-80g|h100,pricing=reserved", &s);
    assert_int_equal(s.n_terms, 2);
    assert_string_equal(s.terms[0].key, "sku");
    assert_int_equal(s.terms[0].n_values, 3);
    assert_string_equal(s.terms[0].values[2], "h100");
    assert_string_equal(s.terms[1].key, "pricing");
    assert_string_equal(s.terms[1].values[0], "reserved");
    parse_ok("meter=accelerator|storage|traffic|tokens", &s);
    assert_int_equal(s.terms[0].n_values, 4);
    parse_ok("pricing=on_demand|spot|reserved,meter=accelerator,sku=cpu-container", &s);
    assert_int_equal(s.n_terms, 3);
    parse_ok("sku=a|b|c|d|e|f|g|h", &s); /* the most values a term may hold */
    assert_int_equal(s.terms[0].n_values, TALLY_SCOPE_MAX_VALUES);
    assert_int_equal(tally_scope_parse(NULL, &s, NULL), TALLY_OK);
    assert_int_equal(s.n_terms, 0);
}

static void invalid_scopes(void **state)
{
    char big[256];

    parse_bad("=h100", "empty key");
    parse_bad("sku=h100,=x", "empty key");
    parse_bad("model=llama", "unknown key");
    parse_bad("SKU=h100", "unknown key");
    parse_bad("averyveryverylongkey=1", "unknown key");
    parse_bad("sku=", "empty value");
    parse_bad("sku=a||b", "empty value");
    parse_bad("sku=a|", "empty value");
    parse_bad("sku=|a", "empty value");
    parse_bad("sku=h100,", "empty term");
    parse_bad(",sku=h100", "empty term");
    parse_bad("sku=h100,,pricing=spot", "empty term");
    parse_bad("sku", "no '='");
    parse_bad("sku:h100", "no '='");
    parse_bad("sku=h100;pricing=spot", "unexpected character");
    parse_bad("sku=h100=x", "unexpected character");
    parse_bad("sku=h 100", "whitespace");
    parse_bad("sku=h100, pricing=spot", "whitespace");
    parse_bad("sku=a|b|c|d|e|f|g|h|i", "too many values");
    parse_bad("meter=gpu", "unknown meter");
    parse_bad("pricing=free", "unknown pricing");
    memset(big, 'x', sizeof big);
    memcpy(big, "sku=", 4);
    big[4 + TALLY_NAME_MAX] = '\0';
    parse_bad(big, "too long");
}

/* A key may repeat (terms are ANDed), up to TALLY_SCOPE_MAX_TERMS terms. */
static void term_limits(void **state)
{
    char expr[512] = "";
    size_t n = 0;
    tally_scope s;

    for (int i = 0; i < TALLY_SCOPE_MAX_TERMS; i++)
        n += (size_t)snprintf(expr + n, sizeof expr - n, "%ssku=s%d|x", i ? "," : "", i);
    parse_ok(expr, &s);
    assert_int_equal(s.n_terms, TALLY_SCOPE_MAX_TERMS);
    assert_true(tally_scope_matches(&s, ACC, "x", OD));   /* every term holds x */
    assert_false(tally_scope_matches(&s, ACC, "s0", OD)); /* only the first holds s0 */
    snprintf(expr + n, sizeof expr - n, ",pricing=spot");
    parse_bad(expr, "too many terms");

    parse_ok("sku=a|b,sku=b|c", &s);
    assert_true(tally_scope_matches(&s, ACC, "b", OD));
    assert_false(tally_scope_matches(&s, ACC, "a", OD));
    assert_false(tally_scope_matches(&s, ACC, "c", OD));
}

static void matching(void **state)
{
    tally_scope s;

    parse_ok("", &s);
    assert_true(tally_scope_matches(&s, ACC, "h100", OD));
    assert_true(tally_scope_matches(&s, TALLY_METER_STORAGE, "ssd", TALLY_PRICING_NONE));
    assert_true(tally_scope_matches(NULL, ACC, "h100", OD));

    parse_ok("sku=a100-40g|a100-80g|h100,pricing=reserved", &s);
    assert_true(tally_scope_matches(&s, ACC, "h100", RES));
    assert_true(tally_scope_matches(&s, ACC, "a100-80g", RES));
    assert_false(tally_scope_matches(&s, ACC, "h100", OD));
    assert_false(tally_scope_matches(&s, ACC, "rtx4090", RES));
    assert_false(tally_scope_matches(&s, ACC, NULL, RES));

    parse_ok("meter=storage|traffic", &s);
    assert_true(tally_scope_matches(&s, TALLY_METER_STORAGE, "ssd", TALLY_PRICING_NONE));
    assert_true(tally_scope_matches(&s, TALLY_METER_TRAFFIC, "internet", TALLY_PRICING_NONE));
    assert_false(tally_scope_matches(&s, ACC, "h100", OD));
    assert_false(tally_scope_matches(&s, TALLY_METER_TOKENS, "m", TALLY_PRICING_NONE));

    /* a pricing term never matches charges that have no pricing */
    parse_ok("pricing=spot", &s);
    assert_false(tally_scope_matches(&s, TALLY_METER_STORAGE, "ssd", TALLY_PRICING_NONE));
    assert_true(tally_scope_matches(&s, ACC, "rtx4090", TALLY_PRICING_SPOT));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(valid_scopes),
        cmocka_unit_test(invalid_scopes),
        cmocka_unit_test(term_limits),
        cmocka_unit_test(matching),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
