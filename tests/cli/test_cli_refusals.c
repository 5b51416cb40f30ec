/* Refusals of the CLI from issue 14, item 12: each is bad input (exit 2),
 * says what is wrong, and stores nothing. */
#include <stdio.h>
#include <string.h>

#include "testutil.h"

static char dir[512];

static int setup(void **state)
{
    (void)state;
    setenv("TALLY_NOW", "2026-04-02T00:00:00Z", 1);
    snprintf(dir, sizeof dir, "%s", tu_tmpdir("cli-refusals"));
    char path[700];
    snprintf(path, sizeof path, "%s/usage.ndjson", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return 1;
    fputs("{\"specversion\":\"1.0\",\"id\":\"e1\",\"source\":\"host-1\","
          "\"type\":\"accelerator.usage\",\"subject\":\"acme\",\"time\":\"2026-03-01T10:00:00Z\","
          "\"data\":{\"instance\":\"i-1\",\"sku\":\"h100\",\"pricing\":\"on_demand\","
          "\"cards\":1,\"seconds\":3600}}\n",
          f);
    fclose(f);
    return tu_tally(NULL,
                    "--db '%s/t.db' --key '%s/k' init >/dev/null && '%s' --db '%s/t.db' --key "
                    "'%s/k' keygen >/dev/null && '%s' --db '%s/t.db' ingest '%s' >/dev/null",
                    dir, dir, TALLY_BINARY, dir, dir, TALLY_BINARY, dir, path);
}

static int run(tally_buf *out, const char *args)
{
    tally_buf_reset(out);
    return tu_tally(out, "--db '%s/t.db' --key '%s/k' %s 2>&1", dir, dir, args);
}

/* A key for an account that does not exist: exit 2, no key stored. */
static void test_apikey_unknown_account(void **state)
{
    (void)state;
    tally_buf out;
    tally_buf_init(&out, 0);
    assert_int_equal(run(&out, "apikey create --account no-such-account"), 2);
    assert_non_null(strstr(out.data, "'no-such-account' does not exist"));
    assert_null(strstr(out.data, "tly_"));
    assert_int_equal(run(&out, "apikey list"), 0);
    assert_null(strstr(out.data ? out.data : "", "no-such-account"));
    assert_int_equal(run(&out, "apikey create --account acme"), 0); /* acme has usage */
    assert_non_null(strstr(out.data, "tly_"));
    tally_buf_release(&out);
}

/* --by day over more than the limit says the limit. */
static void test_usage_by_day_limit(void **state)
{
    (void)state;
    tally_buf out;
    tally_buf_init(&out, 0);
    assert_int_equal(run(&out, "usage acme --from 2024-01-01T00:00:00Z --to "
                               "2026-01-01T00:00:00Z --by day"),
                     2);
    assert_non_null(strstr(out.data, "at most 400 days"));
    assert_int_equal(run(&out, "usage acme --from 2026-01-01T00:00:00Z --to "
                               "2026-04-01T00:00:00Z --by day"),
                     0);
    tally_buf_release(&out);
}

/* Voiding a void invoice is bad input (exit 2), and the first void stays. */
static void test_void_twice(void **state)
{
    (void)state;
    tally_buf out;
    tally_buf_init(&out, 0);
    assert_int_equal(run(&out, "invoice run --period 2026-03 --finalize"), 0);
    char number[32] = "";
    const char *inv = strstr(out.data, "INV-");
    assert_non_null(inv);
    snprintf(number, sizeof number, "%.15s", inv);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "invoice void %s --reason test", number);
    assert_int_equal(run(&out, cmd), 0);
    assert_int_equal(run(&out, cmd), 2);
    assert_int_equal(run(&out, "verify"), 0);
    tally_buf_release(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_apikey_unknown_account),
        cmocka_unit_test(test_usage_by_day_limit),
        cmocka_unit_test(test_void_twice),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
