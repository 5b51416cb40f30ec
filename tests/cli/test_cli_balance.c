/* tally account set's limits, tally balance and tally admission from the
 * command line (SPEC section 9): bad limits are exit 2 and store nothing
 * (not even the new account they named); a trial account that runs out is
 * exhausted with its events in order; admission exits 0 when the balance
 * pays, 3 when it falls short, 2 for an unknown SKU or pricing. */
#include <stdio.h>
#include <string.h>

#include "testutil.h"

static char dir[512];

static int setup(void **state)
{
    (void)state;
    setenv("TALLY_NOW", "2026-03-20T00:00:00Z", 1);
    snprintf(dir, sizeof dir, "%s", tu_tmpdir("cli-balance"));
    char path[700];
    snprintf(path, sizeof path, "%s/usage.ndjson", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return 1;
    /* 2 h of an H100 at 2.58: 5.16 */
    for (int h = 0; h < 2; h++)
        fprintf(f,
                "{\"specversion\":\"1.0\",\"id\":\"e%d\",\"source\":\"host-1\","
                "\"type\":\"accelerator.usage\",\"subject\":\"trial\","
                "\"time\":\"2026-03-19T1%d:00:00Z\",\"data\":{\"instance\":\"i-1\","
                "\"sku\":\"h100\",\"pricing\":\"on_demand\",\"cards\":1,\"seconds\":3600}}\n",
                h, h);
    fclose(f);
    return tu_tally(NULL, "--db '%s/t.db' init >/dev/null", dir);
}

static int run(tally_buf *out, const char *args)
{
    tally_buf_reset(out);
    return tu_tally(out, "--db '%s/t.db' %s 2>&1", dir, args);
}

static void test_bad_limits_store_nothing(void **state)
{
    (void)state;
    tally_buf out;
    tally_buf_init(&out, 0);
    const char *bad[] = {
        "account set newbie --low-balance -5 --stop-at 0", "account set newbie --low-balance 1.234",
        "account set newbie --stop-at 1000000000.01",      "account set newbie --release-after -1",
        "account set newbie --release-after 3661d",        "account set newbie --low-balance ten",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(run(&out, bad[i]), 2);
        assert_int_equal(run(&out, "balance newbie"), 2); /* never created */
        assert_non_null(strstr(out.data, "unknown account"));
    }
    assert_int_equal(run(&out, "account set newbie --low-balance 5 --release-after 12h"), 0);
    assert_int_equal(run(&out, "balance newbie"), 0);
    assert_non_null(strstr(out.data, "\"low_balance\":\"5.00\""));
    assert_non_null(strstr(out.data, "\"release_after_seconds\":43200"));
    assert_int_equal(run(&out, "account set newbie --stop-at 6"), 2); /* above the low mark */
    assert_int_equal(run(&out, "balance newbie"), 0);
    assert_non_null(strstr(out.data, "\"stop_at\":\"0.00\""));
    tally_buf_release(&out);
}

static void test_trial_runs_out(void **state)
{
    (void)state;
    tally_buf out;
    tally_buf_init(&out, 0);
    assert_int_equal(
        run(&out, "credit grant trial 5.00 --kind trial --effective 2026-03-01T00:00:00Z"), 0);
    assert_int_equal(run(&out, "account set trial --low-balance 2.00"), 0);
    assert_int_equal(run(&out, "admission trial --sku h100 --cards 1 --hours 1"), 0);
    assert_non_null(strstr(out.data, "\"allowed\":true"));
    char ingest[800];
    snprintf(ingest, sizeof ingest, "ingest '%s/usage.ndjson'", dir);
    assert_int_equal(run(&out, ingest), 0);
    assert_int_equal(run(&out, "balance trial"), 0);
    assert_non_null(strstr(out.data, "\"running_charges\":\"5.16\""));
    assert_non_null(strstr(out.data, "\"balance\":\"-0.16\""));
    assert_non_null(strstr(out.data, "\"state\":\"exhausted\""));
    assert_int_equal(run(&out, "admission trial --sku h100 --cards 8 --hours 1"), 3);
    assert_non_null(strstr(out.data, "\"shortfall\":\"20.80\""));
    assert_int_equal(run(&out, "admission trial --sku nope --cards 1 --hours 1"), 2);
    assert_int_equal(run(&out, "admission trial --sku h100 --cards 1 --hours 1 --pricing spot"), 2);
    assert_int_equal(run(&out, "admission trial --sku h100 --cards 1 --hours 0"), 2);
    char sql[900];
    snprintf(sql, sizeof sql,
             "sqlite3 '%s/t.db' \"SELECT group_concat(event_id, ' ') FROM (SELECT event_id FROM "
             "outbox ORDER BY id)\"",
             dir);
    tally_buf_reset(&out);
    assert_int_equal(tu_sh(&out, "%s", sql), 0);
    assert_non_null(strstr(out.data, "balance.low:trial:1 balance.exhausted:trial:2 "
                                     "account.suspend:trial:3"));
    assert_int_equal(run(&out, "credit grant trial 50 --kind prepaid"), 0);
    assert_int_equal(run(&out, "balance trial"), 0);
    assert_non_null(strstr(out.data, "\"balance\":\"49.84\""));
    assert_non_null(strstr(out.data, "\"state\":\"ok\""));
    tally_buf_reset(&out);
    assert_int_equal(tu_sh(&out, "%s", sql), 0);
    assert_non_null(strstr(out.data, "account.suspend:trial:3 balance.recovered:trial:4 "
                                     "account.resume:trial:5"));
    assert_int_equal(run(&out, "verify"), 0);
    tally_buf_release(&out);
}

/* Limits refused together with other settings store none of them. */
static void test_refused_limits_keep_the_rest(void **state)
{
    (void)state;
    tally_buf out;
    tally_buf_init(&out, 0);
    assert_int_equal(run(&out, "account set keeper --low-balance 5"), 0);
    assert_int_equal(run(&out, "account set keeper --timezone Asia/Shanghai --stop-at 5"), 2);
    assert_int_equal(run(&out, "account set keeper --name B --release-after -1d"), 2);
    char sql[900];
    snprintf(sql, sizeof sql,
             "sqlite3 '%s/t.db' \"SELECT timezone || '/' || name FROM accounts WHERE id = "
             "'keeper'\"",
             dir);
    tally_buf_reset(&out);
    assert_int_equal(tu_sh(&out, "%s", sql), 0);
    assert_non_null(strstr(out.data, "UTC/"));
    assert_null(strstr(out.data, "/B"));
    tally_buf_release(&out);
}

/* Usage written with balances off leaves them stale: verify names the
 * account, and tally balance --rebuild brings them back. */
static void test_rebuild(void **state)
{
    (void)state;
    tally_buf out;
    tally_buf_init(&out, 0);
    char cmd[1200];
    assert_int_equal(run(&out, "credit grant stale 1.00 --kind trial --effective "
                               "2026-03-01T00:00:00Z"),
                     0);
    tally_buf_reset(&out);
    snprintf(cmd, sizeof cmd,
             "sed 's/\"trial\"/\"stale\"/; s/\"e\\([0-9]\\)\"/\"s\\1\"/' '%s/usage.ndjson' "
             "| TALLY_NO_BALANCES=1 '%s' --db '%s/t.db' ingest - 2>&1",
             dir, TALLY_BINARY, dir);
    assert_int_equal(tu_sh(&out, "%s", cmd), 0);
    assert_non_null(strstr(out.data, "accepted=2"));
    assert_int_equal(run(&out, "verify"), 1);
    assert_non_null(strstr(out.data, "balance of account stale"));
    assert_int_equal(run(&out, "balance --rebuild"), 0);
    assert_int_equal(run(&out, "verify"), 0);
    assert_int_equal(run(&out, "balance stale"), 0);
    assert_non_null(strstr(out.data, "\"running_charges\":\"5.16\""));
    tally_buf_release(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_limits_store_nothing),
        cmocka_unit_test(test_refused_limits_keep_the_rest),
        cmocka_unit_test(test_trial_runs_out),
        cmocka_unit_test(test_rebuild),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
