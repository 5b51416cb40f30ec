/* The HTTP API end to end: every endpoint on a real `tally serve` (events
 * ingested directly into the ledger), driven with curl. */
#include "test_http.h"

static http_fixture fx;

#define T0 "2026-03-01T10:00:00Z"

static int setup(void **state)
{
    (void)state;
    setenv("TALLY_NOW", "2026-04-02T00:00:00Z", 1); /* inherited by tally and tally serve */
    fx_ledger(&fx, "http-api");
    fx_start(&fx, NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fx_stop(&fx);
    return 0;
}

static void test_healthz(void **state)
{
    (void)state;
    http_answer a;
    assert_int_equal(http_get(&fx, &a, "/healthz", NULL), 200);
    assert_string_equal(a.body.data, "{\"status\":\"ok\"}\n");
    assert_contains(&a.headers, "Content-Type: application/json");
    assert_contains(&a.headers, "X-Request-Id: ");
    http_done(&a);
}

/* Posts body with auth and asserts the status. */
static void post_events(http_answer *a, const char *auth, const char *body, int want)
{
    assert_int_equal(http_send(&fx, a, "POST", "/v1/events", auth, body), want);
}

static void test_events_direct(void **state)
{
    (void)state;
    char e1[512], e2[512], e3[512], e1x[512], body[2400];
    event_json(e1, sizeof e1, "e1", "acme", "h100", T0, 8, 3600);
    event_json(e2, sizeof e2, "e2", "globex", "a100-40g", T0, 1, 3600);
    event_json(e3, sizeof e3, "e3", "acme", "no-such-sku", T0, 1, 60);
    event_json(e1x, sizeof e1x, "e1", "acme", "h100", T0, 4, 3600); /* e1, other content */
    snprintf(body, sizeof body, "[%s, %s,\n %s, {\"specversion\":\"1.0\"}, 42]", e1, e2, e3);
    http_answer a;
    post_events(&a, fx.admin, body, 200);
    assert_contains(&a.body, "\"request_id\":");
    assert_contains(&a.body, "{\"index\":0,\"id\":\"e1\",\"status\":\"accepted\"}");
    assert_contains(&a.body, "{\"index\":1,\"id\":\"e2\",\"status\":\"accepted\"}");
    assert_contains(
        &a.body,
        "{\"index\":2,\"id\":\"e3\",\"status\":\"quarantined\",\"reason\":\"unknown_sku\"}");
    assert_contains(&a.body, "{\"index\":3,\"status\":\"quarantined\",\"reason\":\"missing:");
    assert_contains(&a.body, "{\"index\":4,\"status\":\"quarantined\",\"reason\":\"bad_json\"}");
    http_done(&a);
    /* Again: a duplicate; same key with other content: a conflict. */
    snprintf(body, sizeof body, "[%s,%s]", e1, e1x);
    post_events(&a, fx.ingest, body, 200);
    assert_contains(&a.body, "{\"index\":0,\"id\":\"e1\",\"status\":\"duplicate\"}");
    assert_contains(&a.body,
                    "{\"index\":1,\"id\":\"e1\",\"status\":\"conflict\",\"reason\":\"conflict\"}");
    http_done(&a);
    post_events(&a, fx.ingest, "[]", 200);
    assert_contains(&a.body, "\"results\":[]");
    http_done(&a);
    /* NDJSON is not accepted: the body is one JSON array. */
    snprintf(body, sizeof body, "%s\n%s\n", e1, e2);
    post_events(&a, fx.admin, body, 400);
    assert_contains(&a.body, "\"code\":\"bad_json\"");
    http_done(&a);
}

static void test_usage(void **state)
{
    (void)state;
    http_answer a;
    const char *base = "/v1/accounts/acme/usage?from=2026-03-01T00:00:00Z&to=2026-04-01T00:00:00Z";
    assert_int_equal(http_get(&fx, &a, base, fx.acme), 200);
    assert_contains(&a.body, "\"account\":\"acme\"");
    assert_contains(&a.body, "\"key\":\"h100\"");
    assert_contains(&a.body, "\"amount\":\"20.64\""); /* 8 cards x 1 h x 2.58 */
    http_done(&a);
    char path[256];
    snprintf(path, sizeof path, "%s&by=day", base);
    assert_int_equal(http_get(&fx, &a, path, fx.acme), 200);
    assert_contains(&a.body, "2026-03-01");
    http_done(&a);
    snprintf(path, sizeof path, "%s&by=meter", base);
    assert_int_equal(http_get(&fx, &a, path, fx.admin), 200);
    assert_contains(&a.body, "accelerator");
    http_done(&a);
    /* Offsets must be percent-encoded: a raw '+' is a space in a query. */
    assert_int_equal(http_get(&fx, &a,
                              "/v1/accounts/acme/usage?from=2026-03-01T08:00:00%2B08:00"
                              "&to=2026-04-01T00:00:00Z",
                              fx.acme),
                     200);
    http_done(&a);
    static const char *const bad[] = {
        "/v1/accounts/acme/usage",
        "/v1/accounts/acme/usage?from=2026-03-01T00:00:00Z",
        "/v1/accounts/acme/usage?from=2026-04-01T00:00:00Z&to=2026-03-01T00:00:00Z",
        "/v1/accounts/acme/usage?from=yesterday&to=2026-03-01T00:00:00Z",
        "/v1/accounts/acme/usage?from=2026-03-01T08:00:00+08:00&to=2026-04-01T00:00:00Z",
        "/v1/accounts/acme/usage?from=2026-03-01T00:00:00Z&to=2026-04-01T00:00:00Z&by=week",
        "/v1/accounts/acme/usage?from=2026-03-01T00:00:00Z&to=2026-04-01T00:00:00Z&x=1",
        "/v1/accounts/acme/usage?from=2026-03-01T00:00:00Z&from=2026-03-01T00:00:00Z&to=x",
        "/v1/accounts/acme/usage?from=%zz&to=2026-04-01T00:00:00Z",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (http_get(&fx, &a, bad[i], fx.acme) != 400)
            fail_msg("%s: %d %s", bad[i], a.status, a.body.data);
        assert_contains(&a.body, "\"code\":\"bad_query\"");
        http_done(&a);
    }
}

static void test_credits_and_balance(void **state)
{
    (void)state;
    http_answer a;
    assert_int_equal(http_send(&fx, &a, "POST", "/v1/accounts/acme/credits", fx.admin,
                               "{\"amount\":\"10.00\",\"kind\":\"trial\",\"priority\":10,"
                               "\"effective_at\":\"2026-03-01T00:00:00Z\","
                               "\"expires_at\":\"2026-03-31T00:00:00Z\"}"),
                     201);
    assert_contains(&a.body, "\"grant_id\":");
    assert_contains(&a.body, "\"amount\":\"10.00\",\"currency\":\"CNY\"");
    http_done(&a);
    assert_int_equal(http_send(&fx, &a, "POST", "/v1/accounts/acme/credits", fx.admin,
                               "{\"amount\":\"500\",\"kind\":\"coupon\",\"currency\":\"CNY\","
                               "\"scope\":\"sku=a100-40g|h100,pricing=reserved\"}"),
                     201);
    http_done(&a);
    assert_int_equal(http_get(&fx, &a, "/v1/accounts/acme/balance", fx.acme), 200);
    assert_contains(&a.body, "\"account\":\"acme\"");
    assert_contains(&a.body, "\"kind\":\"trial\"");
    assert_contains(&a.body, "\"kind\":\"coupon\"");
    http_done(&a);
    static const struct {
        const char *body;
        int status;
        const char *code;
    } bad[] = {
        {"{\"amount\":10,\"kind\":\"trial\"}", 400, "bad_field"},
        {"{\"amount\":10.5,\"kind\":\"trial\"}", 400, "bad_field"},
        {"{\"amount\":\"1.234\",\"kind\":\"trial\"}", 400, "bad_field"},
        {"{\"amount\":\"-5\",\"kind\":\"trial\"}", 400, "bad_field"},
        {"{\"amount\":\"0\",\"kind\":\"trial\"}", 400, "bad_field"},
        {"{\"amount\":\"1e3\",\"kind\":\"trial\"}", 400, "bad_field"},
        {"{\"amount\":\"10\",\"kind\":\"gift\"}", 400, "bad_field"},
        {"{\"amount\":\"10\"}", 400, "missing_field"},
        {"{\"kind\":\"trial\"}", 400, "missing_field"},
        {"{\"amount\":\"10\",\"kind\":\"trial\",\"amout\":\"1\"}", 400, "unknown_field"},
        {"{\"amount\":\"10\",\"kind\":\"trial\",\"priority\":\"high\"}", 400, "bad_field"},
        {"{\"amount\":\"10\",\"kind\":\"trial\",\"effective_at\":\"2026-03-02T00:00:00Z\","
         "\"expires_at\":\"2026-03-01T00:00:00Z\"}",
         400, "bad_field"},
        {"{\"amount\":\"10\",\"kind\":\"trial\",\"scope\":\"color=red\"}", 400, "bad_field"},
        {"{\"amount\":\"10\",\"kind\":\"trial\",\"currency\":\"XXX\"}", 400, "unknown_currency"},
        {"{\"amount\":\"10\",\"kind\":\"trial\",\"currency\":\"USD\"}", 409, "currency_mismatch"},
        {"{\"amount\":\"10\",\"kind\":", 400, "bad_json"},
        {"[\"amount\"]", 400, "bad_json"},
        {"", 400, "bad_json"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (http_send(&fx, &a, "POST", "/v1/accounts/acme/credits", fx.admin, bad[i].body) !=
            bad[i].status)
            fail_msg("%s: %d %s", bad[i].body, a.status, a.body.data);
        assert_contains(&a.body, bad[i].code);
        http_done(&a);
    }
    /* The error quotes 64 bytes of an unknown key: never half a character
     * (the answer would not be valid JSON). 63 bytes, then a 3-byte one. */
    char body[160], key[80];
    memset(key, 'k', 63);
    snprintf(key + 63, sizeof key - 63, "\xE2\x82\xAC");
    snprintf(body, sizeof body, "{\"amount\":\"10\",\"kind\":\"trial\",\"%s\":\"1\"}", key);
    assert_int_equal(http_send(&fx, &a, "POST", "/v1/accounts/acme/credits", fx.admin, body), 400);
    assert_contains(&a.body, "unknown_field");
    if (!tu_valid_utf8(a.body.data, a.body.len))
        fail_msg("not UTF-8: %s", a.body.data);
    http_done(&a);
    assert_healthy(&fx);
}

/* SPEC section 4: a grant is at most 1,000,000,000.00 in major units. A
 * grant of 92233720368547758.07 used to be stored; from the next grant on,
 * sums of grants overflowed: HTTP grants answered 500 and `tally verify`
 * failed forever. */
static void test_grant_bound(void **state)
{
    (void)state;
    const char *path = "/v1/accounts/whale/credits";
    http_answer a, before, after;
    assert_int_equal(
        http_send(&fx, &a, "POST", path, fx.admin, "{\"amount\":\"100\",\"kind\":\"goodwill\"}"),
        201);
    http_done(&a);
    assert_int_equal(http_get(&fx, &before, "/v1/accounts/whale/balance", fx.admin), 200);
    static const char *const too_big[] = {"92233720368547758.07", "1000000000.01"};
    for (size_t i = 0; i < 2; i++) {
        char body[128];
        snprintf(body, sizeof body, "{\"amount\":\"%s\",\"kind\":\"goodwill\"}", too_big[i]);
        if (http_send(&fx, &a, "POST", path, fx.admin, body) != 400)
            fail_msg("%s: %d %s", too_big[i], a.status, a.body.data);
        assert_contains(&a.body, "a grant is at most 1000000000.00 CNY");
        http_done(&a);
    }
    /* Nothing was stored, and later grants, up to the bound, still work. */
    assert_int_equal(http_get(&fx, &after, "/v1/accounts/whale/balance", fx.admin), 200);
    assert_string_equal(before.body.data, after.body.data);
    http_done(&before);
    http_done(&after);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(http_send(&fx, &a, "POST", path, fx.admin,
                                   "{\"amount\":\"1000000000.00\",\"kind\":\"goodwill\"}"),
                         201);
        http_done(&a);
    }
    tally_buf out;
    tally_buf_init(&out, 0);
    fx_tally_ok(&fx, &out, "verify");
    assert_contains(&out, "ok:");
    tally_buf_release(&out);
}

static void test_spot_prices(void **state)
{
    (void)state;
    http_answer a;
    assert_int_equal(http_send(&fx, &a, "PUT", "/v1/spot-prices/rtx4090", fx.admin,
                               "{\"price\":\"0.55\",\"from\":\"2026-03-15T00:00:00+08:00\"}"),
                     200);
    assert_string_equal(
        a.body.data,
        "{\"sku\":\"rtx4090\",\"price\":\"0.55\",\"from\":\"2026-03-14T16:00:00Z\"}\n");
    http_done(&a);
    static const struct {
        const char *path, *body;
        int status;
    } bad[] = {
        {"/v1/spot-prices/h100", "{\"price\":\"1\",\"from\":\"2026-03-01T00:00:00Z\"}", 409},
        {"/v1/spot-prices/nope", "{\"price\":\"1\",\"from\":\"2026-03-01T00:00:00Z\"}", 404},
        {"/v1/spot-prices/rtx4090", "{\"price\":0.5,\"from\":\"2026-03-01T00:00:00Z\"}", 400},
        {"/v1/spot-prices/rtx4090", "{\"price\":\"0.5\"}", 400},
        {"/v1/spot-prices/rtx4090", "{\"price\":\"-1\",\"from\":\"2026-03-01T00:00:00Z\"}", 400},
        /* Over tally_price_max_nano (100,000.00 per card-hour). */
        {"/v1/spot-prices/rtx4090", "{\"price\":\"100000.01\",\"from\":\"2026-03-01T00:00:00Z\"}",
         400},
        {"/v1/spot-prices/rtx4090",
         "{\"price\":\"0.1234567891\",\"from\":\"2026-03-01T00:00:00Z\"}", 400},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (http_send(&fx, &a, "PUT", bad[i].path, fx.admin, bad[i].body) != bad[i].status)
            fail_msg("%s %s: %d %s", bad[i].path, bad[i].body, a.status, a.body.data);
        assert_contains(&a.body, "\"error\"");
        http_done(&a);
    }
}

/* The id of the first invoice in a list answer. */
static void first_invoice_id(const tally_buf *b, char *out, size_t cap)
{
    const char *p = strstr(b->data, "\"invoice_id\":\"");
    assert_non_null(p);
    p += strlen("\"invoice_id\":\"");
    const char *q = strchr(p, '"');
    assert_non_null(q);
    snprintf(out, cap, "%.*s", (int)(q - p), p);
}

static void test_invoices(void **state)
{
    (void)state;
    tally_buf out;
    tally_buf_init(&out, 0);
    fx_tally_ok(&fx, &out, "invoice run --period 2026-03 --finalize >/dev/null");
    tally_buf_release(&out);
    http_answer a;
    assert_int_equal(http_get(&fx, &a, "/v1/accounts/acme/invoices", fx.acme), 200);
    assert_contains(&a.body, "{\"account\":\"acme\",\"invoices\":[");
    char id[64], path[160];
    first_invoice_id(&a.body, id, sizeof id);
    http_done(&a);
    snprintf(path, sizeof path, "/v1/invoices/%s", id);
    assert_int_equal(http_get(&fx, &a, path, fx.acme), 200);
    assert_contains(&a.body, "\"account\":\"acme\"");
    assert_contains(&a.body, "\"signature\"");
    http_done(&a);
    snprintf(path, sizeof path, "/v1/invoices/%s?format=csv", id);
    assert_int_equal(http_get(&fx, &a, path, fx.admin), 200);
    assert_contains(&a.headers, "Content-Type: text/csv");
    http_done(&a);
    snprintf(path, sizeof path, "/v1/invoices/%s?format=html", id);
    assert_int_equal(http_get(&fx, &a, path, fx.acme), 200);
    assert_contains(&a.headers, "Content-Type: text/html");
    assert_contains(&a.body, "<html");
    http_done(&a);
    snprintf(path, sizeof path, "/v1/invoices/%s?format=pdf", id);
    assert_int_equal(http_get(&fx, &a, path, fx.acme), 400);
    http_done(&a);
    assert_int_equal(http_get(&fx, &a, "/v1/invoices/INV-2026-999999", fx.admin), 404);
    http_done(&a);
}

static void test_routes_and_methods(void **state)
{
    (void)state;
    http_answer a;
    assert_int_equal(http_get(&fx, &a, "/v1/nope", fx.admin), 404);
    assert_contains(&a.body, "\"code\":\"not_found\"");
    http_done(&a);
    assert_int_equal(http_get(&fx, &a, "/healthz/", NULL), 404);
    http_done(&a);
    assert_int_equal(http_send(&fx, &a, "POST", "/healthz", NULL, "{}"), 405);
    assert_contains(&a.headers, "Allow: GET");
    http_done(&a);
    assert_int_equal(http_send(&fx, &a, "DELETE", "/v1/accounts/acme/credits", fx.admin, ""), 405);
    assert_contains(&a.headers, "Allow: POST");
    http_done(&a);
    assert_int_equal(http_get(&fx, &a, "/v1/events", fx.admin), 405);
    assert_contains(&a.headers, "Allow: POST");
    http_done(&a);
    assert_int_equal(http_get(&fx, &a, "/v1/accounts/ac%zzme/balance", fx.acme), 400);
    http_done(&a);
    assert_int_equal(http_get(&fx, &a, "/v1/accounts/ac%00me/balance", fx.acme), 400);
    http_done(&a);
    assert_healthy(&fx);
}

static void test_metrics(void **state)
{
    (void)state;
    http_answer a;
    assert_int_equal(http_get(&fx, &a, "/metrics", NULL), 200);
    assert_contains(&a.headers, "Content-Type: text/plain; version=0.0.4");
    assert_contains(&a.body, "tally_http_events_total{result=\"accepted\"} 2\n");
    assert_contains(&a.body, "tally_http_events_total{result=\"duplicate\"} 1\n");
    assert_contains(&a.body, "tally_http_events_total{result=\"conflict\"} 1\n");
    assert_contains(&a.body, "tally_ledger_quarantined_total{reason=\"unknown_sku\"} 1\n");
    assert_contains(&a.body, "tally_ledger_quarantined_total{reason=\"bad_json\"} 1\n");
    assert_contains(&a.body, "tally_ledger_quarantined_total{reason=\"conflict\"} 1\n");
    assert_contains(&a.body, "tally_batch_commit_seconds_count 2\n");
    assert_contains(&a.body, "tally_batch_commit_seconds_bucket{le=\"+Inf\"} 2\n");
    assert_contains(&a.body, "# tally_consumer_lag: not reported");
    http_done(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_healthz),     cmocka_unit_test(test_events_direct),
        cmocka_unit_test(test_usage),       cmocka_unit_test(test_credits_and_balance),
        cmocka_unit_test(test_grant_bound), cmocka_unit_test(test_spot_prices),
        cmocka_unit_test(test_invoices),    cmocka_unit_test(test_routes_and_methods),
        cmocka_unit_test(test_metrics),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
