/* The one mapping of errors to HTTP statuses (server/respond.c,
 * srv_http_status): bad input 4xx, retriable 503, fatal 500, for every code. */
#include <string.h>

#include "../../server/server_int.h"
#include "testutil.h"

static const tally_err all_codes[] = {
#define ALL_CODES(name, value, cls, msg) TALLY_##name,
    TALLY_ERRORS(ALL_CODES)
#undef ALL_CODES
};

static void test_status_follows_class(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof all_codes / sizeof *all_codes; i++) {
        tally_err e = all_codes[i];
        const char *code = NULL;
        int status = srv_http_status(e, &code);
        assert_non_null(code);
        assert_true(code[0] != '\0');
        if (tally_err_is_input(e) && (status < 400 || status > 499))
            fail_msg("bad input %s answers %d", tally_err_name(e), status);
        if (tally_err_is_retriable(e) && status != 503)
            fail_msg("retriable %s answers %d", tally_err_name(e), status);
        if ((tally_err_is_fatal(e) || e == TALLY_OK) && status != 500)
            fail_msg("%s answers %d", tally_err_name(e), status);
    }
}

static void test_documented_statuses(void **state)
{
    (void)state;
    static const struct {
        tally_err e;
        int status;
        const char *code;
    } want[] = {
        {TALLY_NOT_FOUND, 404, "not_found"},
        {TALLY_INVAL, 400, "bad_request"},
        {TALLY_PARSE, 400, "bad_request"},
        {TALLY_RANGE, 400, "bad_request"},
        {TALLY_OVERFLOW, 400, "overflow"},
        {TALLY_TOO_LARGE, 413, "too_large"},
        {TALLY_UNKNOWN_CURRENCY, 400, "unknown_currency"},
        {TALLY_CURRENCY_MISMATCH, 409, "currency_mismatch"},
        {TALLY_NO_PRICE, 409, "no_price"},
        {TALLY_FINALIZED, 409, "finalized"},
        {TALLY_EXISTS, 409, "exists"},
        {TALLY_EXISTS_DIFFERENT, 409, "conflict"},
        {TALLY_AUTH, 403, "forbidden"},
        {TALLY_BUSY, 503, "busy"},
        {TALLY_STALE, 503, "busy"},
        {TALLY_NOMEM, 503, "unavailable"},
        {TALLY_IO, 503, "unavailable"},
        {TALLY_KAFKA, 503, "unavailable"},
        {TALLY_DB, 500, "internal"},
        {TALLY_TAMPERED, 500, "internal"},
        {TALLY_INTERNAL, 500, "internal"},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const char *code = NULL;
        int status = srv_http_status(want[i].e, &code);
        if (status != want[i].status || strcmp(code, want[i].code) != 0)
            fail_msg("%s: %d %s, want %d %s", tally_err_name(want[i].e), status, code,
                     want[i].status, want[i].code);
    }
    const char *code = NULL;
    assert_int_equal(srv_http_status((tally_err)-999, &code), 500);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_follows_class),
        cmocka_unit_test(test_documented_statuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
