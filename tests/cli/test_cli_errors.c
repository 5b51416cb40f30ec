/* Every configuration command rejects bad input with exit status 2, one line
 * on stderr, and a ledger left exactly as it was. */
#include <stdio.h>
#include <string.h>

#include "testutil.h"

/* One line per table with its row count: the ledger's visible state. */
static void snapshot(const char *db, tally_buf *out)
{
    tally_buf_reset(out);
    int rc = tu_sh(out,
                   "sqlite3 '%s' \"SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY "
                   "name\" | while read t; do printf '%%s ' \"$t\"; sqlite3 '%s' \"SELECT "
                   "count(*) FROM $t\"; done",
                   db, db);
    assert_int_equal(rc, 0);
    assert_true(out->len > 0);
}

static const char *const bad_commands[] = {
    "account set a1 --currency XYZ",
    "account set a1 --timezone Mars/Olympus",
    "account set",
    "spot set rtx4090 abc --from 2026-03-01T00:00:00Z",
    "spot set rtx4090 0.5 --from yesterday",
    "spot set h100 0.5 --from 2026-03-01T00:00:00Z",
    "spot set b200 0.5 --from 2026-03-01T00:00:00Z",
    "spot set rtx4090 100000.01 --from 2026-03-01T00:00:00Z", /* tally_price_max_nano */
    "commit add a1 --sku tpu-v4-64 --cards 1 --from 2026-03-01T00:00:00Z --to "
    "2026-04-01T00:00:00Z",
    "commit add a1 --sku h100 --cards 0 --from 2026-03-01T00:00:00Z --to 2026-04-01T00:00:00Z",
    "commit add a1 --sku h100 --cards 1 --from 2026-04-01T00:00:00Z --to 2026-03-01T00:00:00Z",
    "credit grant a1 10.001 --kind trial",
    "credit grant a1 -5 --kind trial",
    "credit grant a1 10 --kind bogus",
    "credit grant a1 10 --kind coupon --scope sku=",
    "credit grant a1 10 --kind coupon --expires 2020-01-01T00:00:00Z --effective "
    "2021-01-01T00:00:00Z",
    "credit grant a1 10 --kind trial --currency USD",
    "credit grant a1 92233720368547758.07 --kind goodwill", /* SPEC section 4: at most 10^9 */
    "credit grant a1 1000000000.01 --kind goodwill",
    "credit grant a1 1000000001 --kind goodwill --currency JPY",
    "credit grant a1 10 --kind prepaid --idempotency-key ''",
    "credit grant a1 10 --kind prepaid --idempotency-key 'two words'",
    "credit grant a1 -5 --kind prepaid --idempotency-key k-1",
    "ratecard load /nonexistent.json",
    "ingest /nonexistent.ndjson",
    "invoice run --period 2026-13",
    "invoice run",
    "usage a1 --from 2026-03-01T00:00:00Z",
    "nosuchcommand",
    "init --unknown-flag",
};

static void test_bad_input_changes_nothing(void **state)
{
    (void)state;
    const char *dir = tu_tmpdir("cli-errors");
    char db[600];
    snprintf(db, sizeof db, "%s/tally.db", dir);
    assert_int_equal(tu_tally(NULL, "--db '%s' init >/dev/null", db), 0);
    tally_buf before, after, err;
    tally_buf_init(&before, 0);
    tally_buf_init(&after, 0);
    tally_buf_init(&err, 0);
    snapshot(db, &before);
    for (size_t i = 0; i < sizeof bad_commands / sizeof *bad_commands; i++) {
        tally_buf_reset(&err);
        int rc = tu_tally(&err, "--db '%s' %s 2>&1 >/dev/null", db, bad_commands[i]);
        if (rc != 2)
            fail_msg("'%s' exited %d, not 2: %s", bad_commands[i], rc, err.data ? err.data : "");
        if (!err.data || !strchr(err.data, '\n') ||
            (strncmp(err.data, "tally", 5) != 0 && strncmp(err.data, "usage:", 6) != 0))
            fail_msg("'%s' printed no clear error line", bad_commands[i]);
        snapshot(db, &after);
        if (strcmp(before.data, after.data) != 0)
            fail_msg("'%s' changed the ledger:\n%s\nvs\n%s", bad_commands[i], before.data,
                     after.data);
    }
    tally_buf_release(&before);
    tally_buf_release(&after);
    tally_buf_release(&err);
}

/* A grant over the bound used to be stored, and from the next grant on
 * `tally verify` failed with an integer overflow forever. */
static void test_grant_bound_keeps_verify(void **state)
{
    (void)state;
    const char *dir = tu_tmpdir("cli-grant-bound");
    char base[1300];
    snprintf(base, sizeof base, "--db '%s/tally.db' --key '%s/tally.key'", dir, dir);
    assert_int_equal(tu_tally(NULL, "%s init >/dev/null", base), 0);
    assert_int_equal(tu_tally(NULL, "%s keygen >/dev/null", base), 0);
    tally_buf err;
    tally_buf_init(&err, 0);
    assert_int_equal(
        tu_tally(&err, "%s credit grant whale 92233720368547758.07 --kind goodwill 2>&1", base), 2);
    if (!strstr(err.data ? err.data : "", "a grant is at most 1000000000.00 CNY"))
        fail_msg("no clear error: %s", err.data ? err.data : "");
    tally_buf_release(&err);
    for (int i = 0; i < 2; i++)
        assert_int_equal(
            tu_tally(NULL, "%s credit grant whale 1000000000.00 --kind goodwill >/dev/null", base),
            0);
    assert_int_equal(tu_tally(NULL, "%s credit grant whale 5 --kind trial >/dev/null", base), 0);
    assert_int_equal(tu_tally(NULL, "%s verify >/dev/null", base), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_input_changes_nothing),
        cmocka_unit_test(test_grant_bound_keeps_verify),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
