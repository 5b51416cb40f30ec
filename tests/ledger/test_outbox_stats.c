/* Tests for tally_outbox_type_counts (ledger/outbox_stats.c): per-type
 * counts of the events added above an id and of those pending, read in one
 * statement, so that /metrics can count incrementally. */
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "../../ledger/ledger_int.h"
#include "tally/outbox.h"

static tally_ledger *open_fresh(const char *tag)
{
    char path[600], why[256] = "";
    tally_ledger *l = NULL;
    snprintf(path, sizeof path, "%s/t.db", tu_tmpdir(tag));
    if (tally_ledger_open(path, &l, why, sizeof why) != TALLY_OK)
        fail_msg("open: %s", why);
    return l;
}

static void add(tally_ledger *l, const char *type, int n)
{
    char id[64];
    snprintf(id, sizeof id, "%s:acct-1:%d", type, n);
    assert_int_equal(ledger_begin(l), TALLY_OK);
    assert_int_equal(ledger_outbox_add(l, type, "acct-1", id, "{}", 2), TALLY_OK);
    assert_int_equal(ledger_commit(l), TALLY_OK);
}

typedef struct row {
    char type[32];
    int64_t added, pending;
} row;

typedef struct rows {
    size_t n;
    row r[8];
    int stop_after; /* 0: never stop */
} rows;

static tally_err collect(void *ctx, const char *type, int64_t added, int64_t pending)
{
    rows *c = ctx;
    if (c->stop_after && (int)c->n == c->stop_after)
        return TALLY_TOO_LARGE;
    assert_true(c->n < 8);
    snprintf(c->r[c->n].type, sizeof c->r[0].type, "%s", type);
    c->r[c->n].added = added;
    c->r[c->n].pending = pending;
    c->n++;
    return TALLY_OK;
}

static void expect_row(const rows *c, size_t i, const char *type, int64_t added, int64_t pending)
{
    assert_true(i < c->n);
    assert_string_equal(c->r[i].type, type);
    assert_int_equal(c->r[i].added, added);
    assert_int_equal(c->r[i].pending, pending);
}

static void test_counts(void **state)
{
    (void)state;
    tally_ledger *l = open_fresh("outbox-stats");
    rows c = {0};
    int64_t through = -1;
    assert_int_equal(tally_outbox_type_counts(l, 0, collect, &c, &through), TALLY_OK);
    assert_int_equal(c.n, 0);
    assert_int_equal(through, 0);
    add(l, "balance.low", 1);
    add(l, "balance.exhausted", 2);
    add(l, "account.suspend", 3);
    add(l, "balance.low", 4);
    assert_int_equal(tally_outbox_mark_sent(l, 1, 100), TALLY_OK);
    memset(&c, 0, sizeof c);
    assert_int_equal(tally_outbox_type_counts(l, 0, collect, &c, &through), TALLY_OK);
    assert_int_equal(through, 4);
    assert_int_equal(c.n, 3); /* in type order */
    expect_row(&c, 0, "account.suspend", 1, 1);
    expect_row(&c, 1, "balance.exhausted", 1, 1);
    expect_row(&c, 2, "balance.low", 2, 1);
    /* From id 4 on: nothing added; the pending ones still reported. */
    assert_int_equal(tally_outbox_mark_sent(l, 2, 100), TALLY_OK);
    memset(&c, 0, sizeof c);
    assert_int_equal(tally_outbox_type_counts(l, 4, collect, &c, &through), TALLY_OK);
    assert_int_equal(through, 4);
    assert_int_equal(c.n, 2);
    expect_row(&c, 0, "account.suspend", 0, 1);
    expect_row(&c, 1, "balance.low", 0, 1);
    /* All sent, one more added. */
    assert_int_equal(tally_outbox_mark_sent(l, 3, 100), TALLY_OK);
    assert_int_equal(tally_outbox_mark_sent(l, 4, 100), TALLY_OK);
    add(l, "weird\"type", 5);
    memset(&c, 0, sizeof c);
    assert_int_equal(tally_outbox_type_counts(l, 4, collect, &c, &through), TALLY_OK);
    assert_int_equal(through, 5);
    assert_int_equal(c.n, 1);
    expect_row(&c, 0, "weird\"type", 1, 1);
    tally_ledger_close(l);
}

static void test_errors(void **state)
{
    (void)state;
    tally_ledger *l = open_fresh("outbox-stats-errors");
    rows c = {0};
    int64_t through = 7;
    assert_int_equal(tally_outbox_type_counts(NULL, 0, collect, &c, &through), TALLY_INVAL);
    assert_int_equal(tally_outbox_type_counts(l, 0, NULL, &c, &through), TALLY_INVAL);
    assert_int_equal(tally_outbox_type_counts(l, -1, collect, &c, &through), TALLY_INVAL);
    add(l, "a", 1);
    add(l, "b", 2);
    /* The callback's error stops the listing and leaves through_id alone. */
    c.stop_after = 1;
    assert_int_equal(tally_outbox_type_counts(l, 0, collect, &c, &through), TALLY_TOO_LARGE);
    assert_int_equal(c.n, 1);
    assert_int_equal(through, 7);
    assert_int_equal(tally_outbox_type_counts(l, 0, collect, &(rows){0}, NULL), TALLY_OK);
    tally_ledger_close(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
