/* Inputs the fuzzers turned up, kept as regression tests.
 *
 * fuzz_event: JSON's non-numbers. json-c, even in strict mode, takes NaN,
 * Infinity and -Infinity as values; RFC 8259 does not, and neither does
 * Tally: an event carrying one is quarantined as bad_json, wherever the
 * token stands. json-c also takes single-quoted strings and keys ('id').
 * The fuzz target's differential check lists both as json-c leniencies
 * (fuzz/json_differential.h), and the inputs below pin Tally's answer. */
#include <string.h>

#include "testutil.h"
#include "tally/event.h"

#define NOW_S 1775001600 /* 2026-04-01T00:00:00Z */

static void check_bad_json(const char *const *inputs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        tally_event ev;
        tally_reject rej;
        memset(&rej, 0, sizeof rej);
        tally_err e = tally_event_decode(inputs[i], strlen(inputs[i]), NOW_S, &ev, &rej);
        if (e != TALLY_PARSE || strcmp(rej.reason, "bad_json") != 0)
            fail_msg("%s: %s / '%s'", inputs[i], tally_err_name(e), rej.reason);
    }
}

static void test_non_numbers_are_bad_json(void **state)
{
    (void)state;
    static const char *const inputs[] = {
        "NaN",
        "Infinity",
        "-Infinity",
        "[NaN]",
        "{\"a\":-Infinity}",
        "{\"specversion\":\"1.0\",\"id\":\"n1\",\"source\":\"//h\",\"type\":\"accelerator.usage\","
        "\"subject\":\"acme\",\"time\":\"2026-03-01T00:00:00Z\",\"data\":{\"instance\":\"i\","
        "\"sku\":\"h100\",\"pricing\":\"on_demand\",\"cards\":NaN}}",
        "{\"specversion\":\"1.0\",\"id\":\"n2\",\"source\":\"//h\",\"type\":\"tokens.usage\","
        "\"subject\":\"acme\",\"time\":\"2026-03-01T00:00:00Z\",\"data\":{\"model\":\"m\","
        "\"kind\":\"input\",\"tokens\":Infinity}}",
    };
    check_bad_json(inputs, sizeof inputs / sizeof *inputs);
}

static void test_single_quotes_are_bad_json(void **state)
{
    (void)state;
    static const char *const inputs[] = {
        "{'specversion':\"1.0\"}",
        "{\"specversion\":'1.0'}",
        /* the fuzz finding: a key opened with ' and closed with " */
        "{\"specversion\":\"1.0\",'id\":\"evt//hosts/cnorth-2/node\",\"type':\"tokens.usage\","
        "\"data\":{\"tokens\":4095}}",
    };
    check_bad_json(inputs, sizeof inputs / sizeof *inputs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_non_numbers_are_bad_json),
        cmocka_unit_test(test_single_quotes_are_bad_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
