/* POST /v1/accounts/{id}/credits with Idempotency-Key on a real `tally
 * serve`: a replay answers the first answer byte for byte (plus
 * Idempotent-Replayed: true) and stores nothing; the key with another
 * request is 409; a bad key is 400. */
#include "test_http.h"
#include "tally/ledger_sql.h"

static http_fixture fx;

static int setup(void **state)
{
    (void)state;
    setenv("TALLY_NOW", "2026-04-02T00:00:00Z", 1); /* inherited by tally and tally serve */
    fx_ledger(&fx, "http-idem");
    fx_start(&fx, NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fx_stop(&fx);
    return 0;
}

static tally_err first_col(void *ctx, int ncols, const char *const *cols)
{
    long long *out = ctx;
    *out = ncols > 0 && cols[0] ? strtoll(cols[0], NULL, 10) : -1;
    return TALLY_OK;
}

/* A count read from the ledger the server writes (WAL: readers do not
 * block it). */
static long long query_int(const char *sql)
{
    tally_ledger *l = NULL;
    char why[256] = "";
    if (tally_ledger_open(fx.db, &l, why, sizeof why) != TALLY_OK)
        fail_msg("open: %s", why);
    long long v = -1;
    if (tally_ledger_query(l, sql, NULL, 0, first_col, &v) != TALLY_OK)
        fail_msg("%s: %s", sql, tally_ledger_errmsg(l));
    tally_ledger_close(l);
    return v;
}

static int post_key(http_answer *a, const char *account, const char *key, const char *body)
{
    char path[128], hdr[1100];
    snprintf(path, sizeof path, "/v1/accounts/%s/credits", account);
    snprintf(hdr, sizeof hdr, "Idempotency-Key: %s", key);
    return http_req_hdr(&fx, a, "POST", path, fx.admin, hdr, body, strlen(body));
}

static bool has_header(const http_answer *a, const char *line)
{
    return a->headers.data && strstr(a->headers.data, line) != NULL;
}

static void test_replay_is_byte_identical(void **state)
{
    (void)state;
    const char *body = "{\"amount\":\"250.00\",\"kind\":\"prepaid\"}";
    http_answer first, again;
    assert_int_equal(post_key(&first, "acme", "topup-7f3a", body), 201);
    assert_contains(&first.body, "\"grant_id\":");
    assert_false(has_header(&first, "Idempotent-Replayed"));
    long long grants = query_int("SELECT count(*) FROM grants");
    /* The same request, and the same request written differently (field
     * order, spacing, "250" for "250.00", the default priority spelled
     * out): the first answer, byte for byte. */
    static const char *const same[] = {
        "{\"amount\":\"250.00\",\"kind\":\"prepaid\"}",
        "{ \"kind\": \"prepaid\", \"amount\": \"250\" }",
        "{\"amount\":\"250.0\",\"kind\":\"prepaid\",\"priority\":50,\"currency\":\"CNY\"}",
    };
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        if (post_key(&again, "acme", "topup-7f3a", same[i]) != 201)
            fail_msg("%s: %d %s", same[i], again.status, again.body.data);
        assert_int_equal(again.body.len, first.body.len);
        assert_memory_equal(again.body.data, first.body.data, first.body.len);
        assert_true(has_header(&again, "Idempotent-Replayed: true"));
        http_done(&again);
    }
    assert_int_equal(query_int("SELECT count(*) FROM grants"), grants);
    http_done(&first);
}

static void test_other_request_is_409(void **state)
{
    (void)state;
    const char *body = "{\"amount\":\"100.00\",\"kind\":\"prepaid\"}";
    http_answer a;
    assert_int_equal(post_key(&a, "acme", "k-409", body), 201);
    http_done(&a);
    long long grants = query_int("SELECT count(*) FROM grants");
    long long keys = query_int("SELECT count(*) FROM idempotency_keys");
    static const struct {
        const char *account, *body;
    } others[] = {
        {"acme", "{\"amount\":\"100.01\",\"kind\":\"prepaid\"}"},
        {"acme", "{\"amount\":\"100.00\",\"kind\":\"coupon\"}"},
        {"acme", "{\"amount\":\"100.00\",\"kind\":\"prepaid\",\"priority\":1}"},
        {"acme", "{\"amount\":\"100.00\",\"kind\":\"prepaid\",\"effective_at\":"
                 "\"2026-04-02T00:00:00Z\"}"},
        {"acme", "{\"amount\":\"100.00\",\"kind\":\"prepaid\",\"scope\":\"sku=h100\"}"},
        {"globex", "{\"amount\":\"100.00\",\"kind\":\"prepaid\"}"}, /* keys span accounts */
        {"newco", "{\"amount\":\"100.00\",\"kind\":\"prepaid\"}"},
    };
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
        if (post_key(&a, others[i].account, "k-409", others[i].body) != 409)
            fail_msg("%s %s: %d %s", others[i].account, others[i].body, a.status, a.body.data);
        assert_contains(&a.body, "\"code\":\"conflict\"");
        assert_contains(&a.body, "already used for a different request");
        assert_false(has_header(&a, "Idempotent-Replayed"));
        http_done(&a);
    }
    assert_int_equal(query_int("SELECT count(*) FROM grants"), grants);
    assert_int_equal(query_int("SELECT count(*) FROM idempotency_keys"), keys);
    assert_int_equal(query_int("SELECT count(*) FROM accounts WHERE id = 'newco'"), 0);
    /* The original request still replays. */
    assert_int_equal(post_key(&a, "acme", "k-409", body), 201);
    assert_true(has_header(&a, "Idempotent-Replayed: true"));
    http_done(&a);
}

static void test_bad_keys_and_bodies_are_400(void **state)
{
    (void)state;
    char long_key[257];
    memset(long_key, 'k', 256);
    long_key[256] = '\0';
    const char *body = "{\"amount\":\"10.00\",\"kind\":\"prepaid\"}";
    long long grants = query_int("SELECT count(*) FROM grants");
    http_answer a;
    assert_int_equal(post_key(&a, "acme", long_key, body), 400);
    assert_contains(&a.body, "\"code\":\"bad_idempotency_key\"");
    http_done(&a);
    assert_int_equal(post_key(&a, "acme", "two words", body), 400);
    assert_contains(&a.body, "\"code\":\"bad_idempotency_key\"");
    http_done(&a);
    /* curl's "Name;" sends the header with an empty value. */
    assert_int_equal(http_req_hdr(&fx, &a, "POST", "/v1/accounts/acme/credits", fx.admin,
                                  "Idempotency-Key;", body, strlen(body)),
                     400);
    assert_contains(&a.body, "\"code\":\"bad_idempotency_key\"");
    http_done(&a);
    /* Two Idempotency-Key headers are refused before the handler. */
    assert_int_equal(http_req_hdr(&fx, &a, "POST", "/v1/accounts/acme/credits", fx.admin,
                                  "Idempotency-Key: a' -H 'Idempotency-Key: b", body, strlen(body)),
                     400);
    assert_contains(&a.body, "more than one Idempotency-Key header");
    http_done(&a);
    /* Bad amounts are 400 with a key as without, and store nothing. */
    static const char *const bad[] = {
        "{\"amount\":\"-5\",\"kind\":\"prepaid\"}",
        "{\"amount\":\"1.001\",\"kind\":\"prepaid\"}",
        "{\"amount\":10,\"kind\":\"prepaid\"}",
        "{\"amount\":\"1000000000.01\",\"kind\":\"prepaid\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (post_key(&a, "acme", "k-bad", bad[i]) != 400)
            fail_msg("%s: %d %s", bad[i], a.status, a.body.data);
        http_done(&a);
    }
    assert_int_equal(query_int("SELECT count(*) FROM grants"), grants);
    assert_int_equal(query_int("SELECT count(*) FROM idempotency_keys WHERE key = 'k-bad'"), 0);
    /* 255 characters are fine; the refused key was not used up. */
    long_key[255] = '\0';
    assert_int_equal(post_key(&a, "acme", long_key, body), 201);
    http_done(&a);
    assert_int_equal(post_key(&a, "acme", "k-bad", body), 201);
    assert_false(has_header(&a, "Idempotent-Replayed"));
    http_done(&a);
    assert_int_equal(query_int("SELECT count(*) FROM grants"), grants + 2);
    assert_healthy(&fx);
}

/* The CLI and the API share one key space: a top-up made with `tally credit
 * grant --idempotency-key` and retried over HTTP is the same grant. */
static void test_cli_then_http(void **state)
{
    (void)state;
    tally_buf out;
    tally_buf_init(&out, 0);
    fx_tally_ok(&fx, &out, "credit grant globex 75 --kind prepaid --idempotency-key shared-1");
    trim_newline(&out);
    char want[64];
    snprintf(want, sizeof want, "{\"grant_id\":%s,", out.data);
    tally_buf_release(&out);
    http_answer a;
    assert_int_equal(
        post_key(&a, "globex", "shared-1", "{\"amount\":\"75.00\",\"kind\":\"prepaid\"}"), 201);
    assert_true(has_header(&a, "Idempotent-Replayed: true"));
    if (strncmp(a.body.data, want, strlen(want)) != 0)
        fail_msg("want %s in %s", want, a.body.data);
    http_done(&a);
    tally_buf_init(&out, 0);
    fx_tally_ok(&fx, &out, "verify");
    assert_contains(&out, "ok:");
    tally_buf_release(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_is_byte_identical),
        cmocka_unit_test(test_other_request_is_409),
        cmocka_unit_test(test_bad_keys_and_bodies_are_400),
        cmocka_unit_test(test_cli_then_http),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
