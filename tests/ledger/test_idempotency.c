/* Idempotent credit grants (schemas/011_idempotency.sql, ledger/idempotency.c):
 * a replayed key answers the first grant and stores nothing, a key reused
 * for another request is refused and stores nothing, and the key is written
 * in the grant's own transaction. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tally/embed.h"
#include "tally/ledger_sql.h"

#define T_MAR1 1772323200 /* 2026-03-01T00:00:00Z */

static tally_ledger *open_with_card(const char *tag)
{
    tally_ledger *l = NULL;
    char path[600];
    snprintf(path, sizeof path, "%s/t.db", tu_tmpdir(tag));
    l = tu_open_priced(path);
    return l;
}

static tally_err first_col(void *ctx, int ncols, const char *const *cols)
{
    long long *out = ctx;
    *out = ncols > 0 && cols[0] ? strtoll(cols[0], NULL, 10) : -1;
    return TALLY_OK;
}

static long long query_int(tally_ledger *l, const char *sql)
{
    long long v = -1;
    if (tally_ledger_query(l, sql, NULL, 0, first_col, &v) != TALLY_OK)
        fail_msg("%s: %s", sql, tally_ledger_errmsg(l));
    return v;
}

/* Rows of the tables a grant writes, as one number each. */
typedef struct counts {
    long long grants, entries, postings, keys, accounts;
} counts;

static counts count(tally_ledger *l)
{
    counts c = {
        .grants = query_int(l, "SELECT count(*) FROM grants"),
        .entries = query_int(l, "SELECT count(*) FROM entries"),
        .postings = query_int(l, "SELECT count(*) FROM postings"),
        .keys = query_int(l, "SELECT count(*) FROM idempotency_keys"),
        .accounts = query_int(l, "SELECT count(*) FROM accounts"),
    };
    return c;
}

static void assert_counts(const counts *a, const counts *b)
{
    assert_int_equal(a->grants, b->grants);
    assert_int_equal(a->entries, b->entries);
    assert_int_equal(a->postings, b->postings);
    assert_int_equal(a->keys, b->keys);
    assert_int_equal(a->accounts, b->accounts);
}

static tally_grant_spec topup(const char *account, int64_t amount_minor, const char *key)
{
    tally_grant_spec g = {.account = account,
                          .kind = TALLY_GRANT_PREPAID,
                          .amount_minor = amount_minor,
                          .priority = 50,
                          .effective_s = T_MAR1,
                          .expires_s = TALLY_TIME_MAX,
                          .scope = "",
                          .idempotency_key = key};
    return g;
}

static void test_replay_same_request(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("idem-replay");
    char why[256] = "";
    int64_t id = 0, again = 0;
    tally_grant_spec g = topup("acme", 10000, "topup-0001");
    assert_int_equal(tally_ledger_grant_add(l, &g, &id, why, sizeof why), TALLY_OK);
    assert_true(id > 0);
    counts before = count(l);
    assert_int_equal(before.grants, 1);
    assert_int_equal(before.keys, 1);
    /* The same request again: the first grant's id, nothing written. */
    assert_int_equal(tally_ledger_grant_add(l, &g, &again, why, sizeof why), TALLY_EXISTS);
    assert_int_equal(again, id);
    assert_non_null(strstr(why, "idempotency key"));
    counts after = count(l);
    assert_counts(&before, &after);
    /* Spelling the defaults out (currency, priority 50, scope NULL) is the
     * same request. */
    tally_grant_spec same = g;
    same.currency = "CNY";
    same.scope = NULL;
    again = 0;
    assert_int_equal(tally_ledger_grant_add(l, &same, &again, why, sizeof why), TALLY_EXISTS);
    assert_int_equal(again, id);
    after = count(l);
    assert_counts(&before, &after);
    /* Another key is another grant. */
    tally_grant_spec other = topup("acme", 10000, "topup-0002");
    assert_int_equal(tally_ledger_grant_add(l, &other, &again, why, sizeof why), TALLY_OK);
    assert_true(again != id);
    assert_int_equal(query_int(l, "SELECT count(*) FROM grants"), 2);
    /* Without a key, nothing is remembered and every call grants. */
    tally_grant_spec plain = topup("acme", 10000, NULL);
    assert_int_equal(tally_ledger_grant_add(l, &plain, &again, why, sizeof why), TALLY_OK);
    assert_int_equal(tally_ledger_grant_add(l, &plain, &again, why, sizeof why), TALLY_OK);
    assert_int_equal(query_int(l, "SELECT count(*) FROM grants"), 4);
    assert_int_equal(query_int(l, "SELECT count(*) FROM idempotency_keys"), 2);
    tu_assert_conservation(l);
    tally_ledger_close(l);
}

/* An effective time the caller filled in with "now" is not part of the
 * request: a retry a few seconds later is the same request. One the client
 * gave is. */
static void test_defaulted_effective(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("idem-effective");
    char why[256] = "";
    int64_t id = 0, again = 0;
    tally_grant_spec g = topup("acme", 500, "k-now");
    g.effective_defaulted = true;
    assert_int_equal(tally_ledger_grant_add(l, &g, &id, why, sizeof why), TALLY_OK);
    g.effective_s += 5;
    assert_int_equal(tally_ledger_grant_add(l, &g, &again, why, sizeof why), TALLY_EXISTS);
    assert_int_equal(again, id);
    /* The client naming that time itself is a different request. */
    g.effective_defaulted = false;
    assert_int_equal(tally_ledger_grant_add(l, &g, &again, why, sizeof why),
                     TALLY_EXISTS_DIFFERENT);
    tally_grant_spec given = topup("acme", 500, "k-given");
    assert_int_equal(tally_ledger_grant_add(l, &given, &id, why, sizeof why), TALLY_OK);
    given.effective_s += 5;
    assert_int_equal(tally_ledger_grant_add(l, &given, &again, why, sizeof why),
                     TALLY_EXISTS_DIFFERENT);
    assert_int_equal(query_int(l, "SELECT count(*) FROM grants"), 2);
    tally_ledger_close(l);
}

static void test_mismatch_stores_nothing(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("idem-mismatch");
    char why[256] = "";
    int64_t id = 0;
    tally_grant_spec g = topup("acme", 10000, "topup-0001");
    assert_int_equal(tally_ledger_grant_add(l, &g, &id, why, sizeof why), TALLY_OK);
    counts before = count(l);
    /* Each field of the request, changed alone, is a different request. */
    tally_grant_spec variants[9];
    for (size_t i = 0; i < 9; i++)
        variants[i] = g;
    variants[0].amount_minor = 10001;
    variants[1].kind = TALLY_GRANT_TRIAL;
    variants[2].priority = 49;
    variants[3].effective_s = T_MAR1 + 1;
    variants[4].expires_s = T_MAR1 + 86400;
    variants[5].scope = "sku=h100";
    variants[6].account = "globex"; /* keys are one space across accounts */
    variants[7].effective_defaulted = true;
    variants[8].account = "acme2";
    for (size_t i = 0; i < 9; i++) {
        int64_t out = -7;
        why[0] = '\0';
        if (tally_ledger_grant_add(l, &variants[i], &out, why, sizeof why) !=
            TALLY_EXISTS_DIFFERENT)
            fail_msg("variant %zu was not refused: %s", i, why);
        assert_int_equal(out, -7);
        assert_non_null(strstr(why, "different request"));
        counts after = count(l); /* not even the new account */
        assert_counts(&before, &after);
    }
    assert_int_equal(query_int(l, "SELECT count(*) FROM accounts WHERE id = 'globex'"), 0);
    /* The original still replays. */
    int64_t again = 0;
    assert_int_equal(tally_ledger_grant_add(l, &g, &again, why, sizeof why), TALLY_EXISTS);
    assert_int_equal(again, id);
    tu_assert_conservation(l);
    tally_ledger_close(l);
}

static void test_bad_keys(void **state)
{
    (void)state;
    char long_key[TALLY_IDEMPOTENCY_KEY_MAX + 2];
    memset(long_key, 'k', sizeof long_key - 1);
    long_key[sizeof long_key - 1] = '\0'; /* 256 characters */
    static const char *const bad[] = {"", "has space", "tab\there", "nl\n", "caf\xc3\xa9", "\x7f"};
    assert_false(tally_idempotency_key_ok(NULL));
    assert_false(tally_idempotency_key_ok(long_key));
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_false(tally_idempotency_key_ok(bad[i]));
    tally_ledger *l = open_with_card("idem-bad-keys");
    char why[256] = "";
    int64_t id = 0;
    counts before = count(l);
    tally_grant_spec g = topup("acme", 100, long_key);
    assert_int_equal(tally_ledger_grant_add(l, &g, &id, why, sizeof why), TALLY_INVAL);
    assert_non_null(strstr(why, "idempotency key"));
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        g.idempotency_key = bad[i];
        assert_int_equal(tally_ledger_grant_add(l, &g, &id, why, sizeof why), TALLY_INVAL);
    }
    counts after = count(l);
    assert_counts(&before, &after);
    /* 255 characters, and every visible ASCII character, are fine. */
    long_key[TALLY_IDEMPOTENCY_KEY_MAX] = '\0';
    assert_true(tally_idempotency_key_ok(long_key));
    g.idempotency_key = long_key;
    assert_int_equal(tally_ledger_grant_add(l, &g, &id, why, sizeof why), TALLY_OK);
    char all[0x7f - 0x21 + 1];
    for (int c = 0x21; c < 0x7f; c++)
        all[c - 0x21] = (char)c;
    all[sizeof all - 1] = '\0';
    g.idempotency_key = all;
    assert_int_equal(tally_ledger_grant_add(l, &g, &id, why, sizeof why), TALLY_OK);
    assert_int_equal(query_int(l, "SELECT count(*) FROM idempotency_keys"), 2);
    tally_ledger_close(l);
}

/* A refused request leaves no key behind: the client may fix it and send
 * it again under the same key. */
static void test_refused_leaves_no_key(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("idem-refused");
    char why[256] = "";
    int64_t id = 0;
    tally_grant_spec g = topup("acme", 100000000001LL, "k-1"); /* 1,000,000,000.01 CNY */
    counts before = count(l);
    assert_int_equal(tally_ledger_grant_add(l, &g, &id, why, sizeof why), TALLY_RANGE);
    g.amount_minor = -5;
    assert_int_equal(tally_ledger_grant_add(l, &g, &id, why, sizeof why), TALLY_INVAL);
    g.amount_minor = 100;
    g.currency = "USD";
    assert_int_equal(tally_ledger_grant_add(l, &g, &id, why, sizeof why), TALLY_CURRENCY_MISMATCH);
    counts after = count(l); /* not even the account */
    assert_counts(&before, &after);
    g.currency = NULL;
    assert_int_equal(tally_ledger_grant_add(l, &g, &id, why, sizeof why), TALLY_OK);
    assert_int_equal(query_int(l, "SELECT count(*) FROM idempotency_keys"), 1);
    tally_ledger_close(l);
}

/* The key is written in the grant's transaction: when storing the key
 * fails, the grant and its postings are not stored either. */
static void test_key_and_grant_atomic(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("idem-atomic");
    char why[256] = "";
    int64_t id = 0;
    tally_grant_spec first = topup("acme", 100, "k-0");
    assert_int_equal(tally_ledger_grant_add(l, &first, &id, why, sizeof why), TALLY_OK);
    counts before = count(l);
    /* A temporary trigger (this connection only, not in the schema) makes
     * the key's insert fail after the grant's rows were written. */
    assert_int_equal(tally_ledger_exec(l, "CREATE TEMP TRIGGER fail_key BEFORE INSERT ON "
                                          "main.idempotency_keys BEGIN SELECT RAISE(ABORT, "
                                          "'injected'); END"),
                     TALLY_OK);
    tally_grant_spec g = topup("acme", 200, "k-1");
    assert_int_not_equal(tally_ledger_grant_add(l, &g, &id, why, sizeof why), TALLY_OK);
    assert_non_null(strstr(why, "injected"));
    counts after = count(l);
    assert_counts(&before, &after);
    assert_int_equal(tally_ledger_exec(l, "DROP TRIGGER temp.fail_key"), TALLY_OK);
    assert_int_equal(tally_ledger_grant_add(l, &g, &id, why, sizeof why), TALLY_OK);
    /* Keys are immutable, like the grants they name. */
    assert_int_not_equal(tally_ledger_exec(l, "UPDATE idempotency_keys SET grant_id = 1"),
                         TALLY_OK);
    assert_int_not_equal(tally_ledger_exec(l, "DELETE FROM idempotency_keys"), TALLY_OK);
    assert_int_equal(query_int(l, "SELECT count(*) FROM idempotency_keys"), 2);
    tu_assert_conservation(l);
    tally_ledger_close(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_same_request),     cmocka_unit_test(test_defaulted_effective),
        cmocka_unit_test(test_mismatch_stores_nothing), cmocka_unit_test(test_bad_keys),
        cmocka_unit_test(test_refused_leaves_no_key),   cmocka_unit_test(test_key_and_grant_atomic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
