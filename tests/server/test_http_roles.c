/* Key roles against a real `tally serve` (SPEC sections 1 and 7, issue 14
 * item 1): a tenant pre-empting a host's event ids. An account key POSTs
 * 1,000 `tokens.usage` events with `tokens: 0` under a host's source and the
 * ids the host will send next; before key roles they were stored, and the
 * host's real events then arrived as conflicts. Now an account key never
 * sends usage (403, nothing stored), an ingest key sends only under its
 * source prefixes, and admins may send anything. */
#include "test_http.h"

static http_fixture fx;
static char gateway[64]; /* ingest key for "//llm/" */

#define N_EVENTS 1000

static int setup(void **state)
{
    (void)state;
    setenv("TALLY_NOW", "2026-04-02T00:00:00Z", 1);
    fx_ledger(&fx, "http-roles");
    fx_key(&fx, "--ingest --source //llm/ --source //batch/", gateway);
    fx_start(&fx, NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fx_stop(&fx);
    return 0;
}

/* A JSON array of n tokens.usage events "tok-<first+i>" from source. */
static char *tokens_body(const char *source, const char *account, int first, int n,
                         long long tokens)
{
    tally_buf b;
    tally_buf_init(&b, 0);
    assert_int_equal(tally_buf_puts(&b, "["), TALLY_OK);
    for (int i = 0; i < n; i++)
        assert_int_equal(
            tally_buf_printf(&b,
                             "%s{\"specversion\":\"1.0\",\"id\":\"tok-%d\","
                             "\"source\":\"%s\",\"type\":\"tokens.usage\","
                             "\"subject\":\"%s\",\"time\":\"2026-03-10T10:%02d:%02dZ\","
                             "\"data\":{\"model\":\"m1\",\"kind\":\"input\","
                             "\"tokens\":%lld}}",
                             i ? "," : "", first + i, source, account, (i / 60) % 60, i % 60,
                             tokens),
            TALLY_OK);
    assert_int_equal(tally_buf_puts(&b, "]"), TALLY_OK);
    return b.data;
}

/* The value of one line of /metrics ("name{labels} value"), or -1. */
static long long metric(const char *line)
{
    http_answer a;
    assert_int_equal(http_get(&fx, &a, "/metrics", NULL), 200);
    const char *p = strstr(a.body.data, line);
    long long v = p ? strtoll(p + strlen(line), NULL, 10) : -1;
    http_done(&a);
    return v;
}

static size_t count(const tally_buf *b, const char *text)
{
    size_t n = 0;
    for (const char *p = b->data; p && (p = strstr(p, text)); p += strlen(text))
        n++;
    return n;
}

static void test_account_key_cannot_preempt(void **state)
{
    (void)state;
    long long events = metric("\ntally_ledger_events ");
    http_answer a;
    /* The attack, by the billed account itself and across tenants. */
    const char *const keys[] = {fx.acme, fx.globex};
    for (size_t k = 0; k < 2; k++) {
        char *body = tokens_body("//llm/gw-1", "acme", 1, N_EVENTS, 0);
        assert_int_equal(http_send(&fx, &a, "POST", "/v1/events", keys[k], body), 403);
        assert_contains(&a.body, "\"code\":\"forbidden\"");
        assert_contains(&a.body, "account keys cannot send usage");
        http_done(&a);
        free(body);
    }
    /* Nothing was stored: no event, no dedupe key, no quarantine row. */
    assert_int_equal(metric("\ntally_ledger_events "), events);
    assert_int_equal(metric("\ntally_http_events_total{result=\"accepted\"} "), 0);
    /* The host's real events then all arrive as new events, none as conflicts. */
    char *body = tokens_body("//llm/gw-1", "acme", 1, N_EVENTS, 1000000);
    assert_int_equal(http_send(&fx, &a, "POST", "/v1/events", gateway, body), 200);
    assert_int_equal(count(&a.body, "\"status\":\"accepted\""), N_EVENTS);
    assert_int_equal(count(&a.body, "\"conflict\""), 0);
    http_done(&a);
    free(body);
    assert_int_equal(metric("\ntally_ledger_events "), events + N_EVENTS);
    /* 10^9 input tokens at 4.00 per million. */
    assert_int_equal(http_get(&fx, &a,
                              "/v1/accounts/acme/usage?from=2026-03-01T00:00:00Z"
                              "&to=2026-04-01T00:00:00Z",
                              fx.acme),
                     200);
    assert_contains(&a.body, "\"quantity\":\"1000000000\"");
    assert_contains(&a.body, "\"amount\":\"4000.00\"");
    http_done(&a);
}

static void test_ingest_key_prefixes(void **state)
{
    (void)state;
    http_answer a;
    char ok[700], other[700], second[700], body[2200];
    event_json_from(ok, sizeof ok, "//llm/gw-2", "p1", "globex", "h100", "2026-03-03T10:00:00Z", 1,
                    3600);
    event_json_from(other, sizeof other, "host-7", "p2", "globex", "h100", "2026-03-03T10:00:00Z",
                    8, 3600);
    event_json_from(second, sizeof second, "//batch/x", "p3", "globex", "h100",
                    "2026-03-03T12:00:00Z", 1, 60);
    snprintf(body, sizeof body, "[%s,%s,%s]", ok, other, second);
    long long events = metric("\ntally_ledger_events ");
    assert_int_equal(http_send(&fx, &a, "POST", "/v1/events", gateway, body), 200);
    assert_contains(&a.body, "{\"index\":0,\"id\":\"p1\",\"status\":\"accepted\"}");
    assert_contains(&a.body, "{\"index\":1,\"id\":\"p2\",\"status\":\"forbidden\","
                             "\"reason\":\"source_not_allowed\"}");
    assert_contains(&a.body, "{\"index\":2,\"id\":\"p3\",\"status\":\"accepted\"}");
    http_done(&a);
    assert_int_equal(metric("\ntally_ledger_events "), events + 2);
    /* Nothing of the refused event was kept: its (source, id) is still free,
     * so the host's own key stores other content under it as new. */
    event_json_from(other, sizeof other, "host-7", "p2", "globex", "h100", "2026-03-03T10:00:00Z",
                    1, 3600);
    snprintf(body, sizeof body, "[%s]", other);
    assert_int_equal(http_send(&fx, &a, "POST", "/v1/events", fx.ingest, body), 200);
    assert_contains(&a.body, "{\"index\":0,\"id\":\"p2\",\"status\":\"accepted\"}");
    http_done(&a);
    /* An admin may send under any source. */
    event_json_from(other, sizeof other, "anything", "p4", "globex", "h100", "2026-03-04T10:00:00Z",
                    1, 60);
    snprintf(body, sizeof body, "[%s]", other);
    assert_int_equal(http_send(&fx, &a, "POST", "/v1/events", fx.admin, body), 200);
    assert_contains(&a.body, "{\"index\":0,\"id\":\"p4\",\"status\":\"accepted\"}");
    http_done(&a);
}

static void test_ingest_key_does_nothing_else(void **state)
{
    (void)state;
    http_answer a;
    const char *const gets[] = {
        "/v1/accounts/acme/balance",
        "/v1/accounts/acme/invoices",
        "/v1/accounts/acme/usage?from=2026-03-01T00:00:00Z&to=2026-04-01T00:00:00Z",
    };
    for (size_t i = 0; i < sizeof gets / sizeof *gets; i++) {
        assert_int_equal(http_get(&fx, &a, gets[i], gateway), 403);
        assert_contains(&a.body, "an ingest key can only send events");
        http_done(&a);
    }
    assert_int_equal(http_send(&fx, &a, "POST", "/v1/accounts/acme/credits", gateway,
                               "{\"amount\":\"1\",\"kind\":\"trial\"}"),
                     403);
    http_done(&a);
    assert_int_equal(http_send(&fx, &a, "PUT", "/v1/spot-prices/h100", gateway,
                               "{\"price\":\"0.01\",\"from\":\"2026-03-01T00:00:00Z\"}"),
                     403);
    http_done(&a);
}

static void test_apikey_list_shows_roles(void **state)
{
    (void)state;
    tally_buf out;
    tally_buf_init(&out, 0);
    fx_tally_ok(&fx, &out, "apikey list");
    assert_contains(&out, "SOURCES");
    assert_contains(&out, " admin ");
    assert_contains(&out, " account acme ");
    assert_contains(&out, " ingest ");
    assert_contains(&out, "//batch/,//llm/\n");
    tally_buf_release(&out);
    /* --source only with --ingest, and --ingest needs one. */
    assert_int_equal(tu_tally(NULL, "--db '%s' apikey create --ingest 2>/dev/null", fx.db), 2);
    assert_int_equal(
        tu_tally(NULL, "--db '%s' apikey create --account a --source x 2>/dev/null", fx.db), 2);
    assert_int_equal(
        tu_tally(NULL, "--db '%s' apikey create --ingest --admin --source x 2>/dev/null", fx.db),
        2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_account_key_cannot_preempt),
        cmocka_unit_test(test_ingest_key_prefixes),
        cmocka_unit_test(test_ingest_key_does_nothing_else),
        cmocka_unit_test(test_apikey_list_shows_roles),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
