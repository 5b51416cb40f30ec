/* Tests for base/err.c and base/log.c: every error code has one class
 * (bad input, retriable, fatal), a name and a message; the log callback gets
 * each line once, with its level and facility, and nothing without one. */
#include <stdio.h>
#include <string.h>

#include "testutil.h"

#include "tally/err.h"
#include "tally/log.h"

static const struct {
    tally_err e;
    tally_err_class cls;
} expected[] = {
    {TALLY_OK, TALLY_ERR_CLASS_NONE},
    {TALLY_INVAL, TALLY_ERR_CLASS_INPUT},
    {TALLY_NOMEM, TALLY_ERR_CLASS_RETRIABLE},
    {TALLY_IO, TALLY_ERR_CLASS_RETRIABLE},
    {TALLY_DB, TALLY_ERR_CLASS_FATAL},
    {TALLY_KAFKA, TALLY_ERR_CLASS_RETRIABLE},
    {TALLY_PARSE, TALLY_ERR_CLASS_INPUT},
    {TALLY_RANGE, TALLY_ERR_CLASS_INPUT},
    {TALLY_TOO_LARGE, TALLY_ERR_CLASS_INPUT},
    {TALLY_NOT_FOUND, TALLY_ERR_CLASS_INPUT},
    {TALLY_EXISTS, TALLY_ERR_CLASS_INPUT},
    {TALLY_EXISTS_DIFFERENT, TALLY_ERR_CLASS_INPUT},
    {TALLY_OVERFLOW, TALLY_ERR_CLASS_INPUT},
    {TALLY_NO_PRICE, TALLY_ERR_CLASS_INPUT},
    {TALLY_UNKNOWN_CURRENCY, TALLY_ERR_CLASS_INPUT},
    {TALLY_CURRENCY_MISMATCH, TALLY_ERR_CLASS_INPUT},
    {TALLY_FINALIZED, TALLY_ERR_CLASS_INPUT},
    {TALLY_STALE, TALLY_ERR_CLASS_RETRIABLE},
    {TALLY_TAMPERED, TALLY_ERR_CLASS_FATAL},
    {TALLY_BUSY, TALLY_ERR_CLASS_RETRIABLE},
    {TALLY_CRYPTO, TALLY_ERR_CLASS_FATAL},
    {TALLY_AUTH, TALLY_ERR_CLASS_INPUT},
    {TALLY_UNSUPPORTED, TALLY_ERR_CLASS_FATAL},
    {TALLY_INTERNAL, TALLY_ERR_CLASS_FATAL},
};

/* Every code in the X-macro list, so a new code cannot go untested. */
static const tally_err all_codes[] = {
#define ALL_CODES(name, value, cls, msg) TALLY_##name,
    TALLY_ERRORS(ALL_CODES)
#undef ALL_CODES
};

static void test_every_code_is_classified(void **state)
{
    (void)state;
    size_t n = sizeof all_codes / sizeof *all_codes;
    assert_int_equal(n, sizeof expected / sizeof *expected);
    for (size_t i = 0; i < n; i++) {
        tally_err e = all_codes[i];
        size_t j = 0;
        while (j < n && expected[j].e != e)
            j++;
        if (j == n)
            fail_msg("%s has no expected class in this test", tally_err_name(e));
        if (tally_err_class_of(e) != expected[j].cls)
            fail_msg("%s is %s, want %s", tally_err_name(e),
                     tally_err_class_name(tally_err_class_of(e)),
                     tally_err_class_name(expected[j].cls));
        /* exactly one predicate holds for each failure, none for OK */
        int holds = tally_err_is_input(e) + tally_err_is_retriable(e) + tally_err_is_fatal(e);
        assert_int_equal(holds, e == TALLY_OK ? 0 : 1);
        assert_true(strcmp(tally_err_name(e), "UNKNOWN") != 0);
        assert_true(strcmp(tally_err_str(e), "unknown error") != 0);
    }
}

static void test_predicates(void **state)
{
    (void)state;
    assert_true(tally_err_is_input(TALLY_PARSE));
    assert_false(tally_err_is_retriable(TALLY_PARSE));
    assert_true(tally_err_is_retriable(TALLY_BUSY));
    assert_false(tally_err_is_fatal(TALLY_BUSY));
    assert_true(tally_err_is_fatal(TALLY_TAMPERED));
    assert_false(tally_err_is_input(TALLY_OK));
    assert_false(tally_err_is_fatal(TALLY_OK));
}

static void test_unknown_value_is_fatal(void **state)
{
    (void)state;
    tally_err bogus = (tally_err)-999;
    assert_int_equal(tally_err_class_of(bogus), TALLY_ERR_CLASS_FATAL);
    assert_true(tally_err_is_fatal(bogus));
    assert_string_equal(tally_err_name(bogus), "UNKNOWN");
    assert_string_equal(tally_err_class_name((tally_err_class)42), "fatal");
    assert_string_equal(tally_err_class_name(TALLY_ERR_CLASS_RETRIABLE), "retriable");
}

typedef struct seen {
    int calls;
    tally_log_level level;
    char fac[32];
    char line[TALLY_LOG_LINE_MAX + 8];
} seen;

static void record(void *opaque, tally_log_level level, const char *fac, const char *line)
{
    seen *s = opaque;
    s->calls++;
    s->level = level;
    snprintf(s->fac, sizeof s->fac, "%s", fac);
    snprintf(s->line, sizeof s->line, "%s", line);
}

static void test_log_callback(void **state)
{
    (void)state;
    seen s = {0};
    tally_log(TALLY_LOG_ERR, "serve", "dropped %d", 1); /* no callback: nothing happens */
    tally_log_set_cb(record, &s);
    tally_log(TALLY_LOG_WARNING, "meter", "partition %d: %s", 3, "lost");
    assert_int_equal(s.calls, 1);
    assert_int_equal(s.level, TALLY_LOG_WARNING);
    assert_string_equal(s.fac, "meter");
    assert_string_equal(s.line, "partition 3: lost");
    tally_log(TALLY_LOG_INFO, NULL, "no facility");
    assert_int_equal(s.calls, 2);
    assert_string_equal(s.fac, "");
    tally_log_set_cb(NULL, NULL);
    tally_log(TALLY_LOG_ERR, "serve", "after clearing");
    assert_int_equal(s.calls, 2);
    assert_string_equal(tally_log_level_name(TALLY_LOG_ERR), "error");
    assert_string_equal(tally_log_level_name(TALLY_LOG_DEBUG), "debug");
}

static void test_log_long_line_is_marked(void **state)
{
    (void)state;
    seen s = {0};
    char big[TALLY_LOG_LINE_MAX * 2];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    tally_log_set_cb(record, &s);
    tally_log(TALLY_LOG_ERR, "ledger", "%s", big);
    tally_log_set_cb(NULL, NULL);
    size_t n = strlen(s.line);
    assert_int_equal(n, TALLY_LOG_LINE_MAX - 1);
    assert_string_equal(s.line + n - 3, "...");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_code_is_classified), cmocka_unit_test(test_predicates),
        cmocka_unit_test(test_unknown_value_is_fatal),   cmocka_unit_test(test_log_callback),
        cmocka_unit_test(test_log_long_line_is_marked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
