/* Prepaid balances over HTTP (SPEC sections 7 and 9) on a real `tally
 * serve`: a balance read that has to refresh first. */
#include "test_http.h"

static http_fixture fx;

#define NOW "2026-04-02T00:00:00Z"

static int setup(void **state)
{
    (void)state;
    setenv("TALLY_NOW", NOW, 1); /* inherited by tally and tally serve */
    fx_ledger(&fx, "http-balance");
    fx_start(&fx, NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fx_stop(&fx);
    return 0;
}

/* GET path with auth; asserts the status and, when want is not NULL, that
 * the body contains it. */
static void expect(const char *path, const char *auth, int status, const char *want)
{
    http_answer a;
    if (http_get(&fx, &a, path, auth) != status)
        fail_msg("GET %s: %d, want %d: %s", path, a.status, status, a.body.data);
    if (want)
        assert_contains(&a.body, want);
    http_done(&a);
}

/* A grant that expired since the balance was last refreshed makes the
 * balance due: the read refreshes it in a write transaction of its own.
 * That used to run inside the read snapshot of every GET and answered 500
 * ("cannot start a transaction within a transaction"). */
static void test_balance_due_refresh(void **state)
{
    (void)state;
    static const char *const paths[] = {"/v1/accounts/globex/balance"};
    for (size_t i = 0; i < 1; i++) {
        /* Granted on 03-01 (tally's clock), expired on 03-10: due at NOW. */
        int rc = tu_sh(NULL,
                       "TALLY_NOW=2026-03-01T00:00:00Z '%s' --db '%s' credit grant globex 10.00 "
                       "--kind trial --effective 2026-03-01T00:00:00Z --expires "
                       "2026-03-10T00:00:00Z >/dev/null",
                       TALLY_BINARY, fx.db);
        assert_int_equal(rc, 0);
        /* Under spend control now (a grant of its own), with nothing left. */
        expect(paths[i], fx.globex, 200, "\"balance\":\"0.00\"");
    }
    assert_healthy(&fx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_balance_due_refresh),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
