/* Refusals of the CLI from issue 14, item 12: each is bad input (exit 2),
 * says what is wrong, and stores nothing. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* A --db that names no ledger (a typo, or no --db where ./tally.db is
 * missing): every command that reads or writes a ledger refuses it (exit 1,
 * as tally verify does) and creates nothing there. Ingesting into a new,
 * empty ledger used to exit 0 with every event quarantined as no_price. An
 * empty file is no ledger either (SQLite would make it a new one), and a
 * directory is one only with its main.db. Only init creates one. */
static void test_missing_ledger(void **state)
{
    (void)state;
    static const char *const cmds[] = {
        /* FILE: a file that exists */
        "ingest FILE",
        "meter --brokers 127.0.0.1:1 --topic t --until-idle 1",
        "serve --listen 127.0.0.1:0",
        "publish --brokers 127.0.0.1:1",
        "balance acme",
        "usage acme --from 2026-03-01T00:00:00Z --to 2026-04-01T00:00:00Z",
        "invoice run --period 2026-03",
        "ratecard load FILE",
        "account set acme",
        "credit grant acme 10 --kind coupon",
        "spot set h100 1.00 --from 2026-03-01T00:00:00Z",
        "apikey list",
        "admission acme --sku h100 --cards 1 --hours 1",
        "commit add acme --sku h100 --cards 1 --from 2026-03-01T00:00:00Z --to "
        "2026-04-01T00:00:00Z",
        "verify",
    };
    tally_buf out;
    tally_buf_init(&out, 0);
    char missing[700], empty_dir[700], file[700], cmd[1600];
    snprintf(file, sizeof file, "'%s/usage.ndjson'", dir);
    snprintf(missing, sizeof missing, "%s/typo.db", dir);
    snprintf(empty_dir, sizeof empty_dir, "%s/empty-dir", dir);
    assert_int_equal(mkdir(empty_dir, 0755), 0);
    char empty_file[700];
    snprintf(empty_file, sizeof empty_file, "%s/empty.db", dir);
    FILE *ef = fopen(empty_file, "w");
    assert_non_null(ef);
    fclose(ef);
    const char *paths[] = {missing, empty_dir, empty_file};
    for (size_t p = 0; p < sizeof paths / sizeof *paths; p++)
        for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
            const char *f = strstr(cmds[i], "FILE");
            snprintf(cmd, sizeof cmd, "%.*s%s", f ? (int)(f - cmds[i]) : (int)strlen(cmds[i]),
                     cmds[i], f ? file : "");
            tally_buf_reset(&out);
            int rc = tu_tally(&out, "--db '%s' %s 2>&1", paths[p], cmd);
            if (rc != 1 || !strstr(out.data ? out.data : "", "no ledger at "))
                fail_msg("'%s' on %s: exit %d, said: %s", cmd, paths[p], rc,
                         out.data ? out.data : "");
        }
    assert_int_equal(access(missing, F_OK), -1);
    struct stat sb;
    assert_int_equal(stat(empty_file, &sb), 0);
    assert_int_equal(sb.st_size, 0); /* nothing written into it either */
    char main_db[800];
    snprintf(main_db, sizeof main_db, "%s/main.db", empty_dir);
    assert_int_equal(access(main_db, F_OK), -1);
    snprintf(main_db, sizeof main_db, "%s.publish-lock", missing);
    assert_int_equal(access(main_db, F_OK), -1);
    /* init makes one, and the command then runs */
    assert_int_equal(tu_tally(NULL, "--db '%s' init >/dev/null", missing), 0);
    assert_int_equal(tu_tally(NULL, "--db '%s' apikey list >/dev/null", missing), 0);
    tally_buf_release(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_apikey_unknown_account),
        cmocka_unit_test(test_usage_by_day_limit),
        cmocka_unit_test(test_void_twice),
        cmocka_unit_test(test_missing_ledger),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
