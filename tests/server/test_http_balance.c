/* Prepaid balances over HTTP (SPEC sections 7 and 9) on a real `tally
 * serve`: GET /v1/accounts/{id}/admission (its query, its keys, HEAD, 200
 * and 402), a trial account driven to exhausted by usage sent with an
 * ingest key and back by a prepaid top-up (balance states and outbox events
 * in order), a balance read that has to refresh first, and /metrics'
 * accounts per state and outbox events per type (checked by promtool). */
#include "test_http.h"
#include "../../ledger/ledger_int.h"
#include "../../server/server_int.h"

static http_fixture fx;

#define NOW "2026-04-02T00:00:00Z"

static int setup(void **state)
{
    (void)state;
    setenv("TALLY_NOW", NOW, 1); /* inherited by tally and tally serve */
    fx_ledger(&fx, "http-balance");
    tally_buf out;
    tally_buf_init(&out, 0);
    /* trial1: a 10.00 trial voucher, low below 5.00, stopped at 0.00. The
     * grant comes first: it creates the account (limits alone do not), and
     * limits on an account without credits would make it exhausted at once. */
    fx_tally_ok(&fx, &out,
                "credit grant trial1 10.00 --kind trial --effective 2026-04-01T00:00:00Z "
                ">/dev/null");
    fx_tally_ok(&fx, &out, "account set trial1 --low-balance 5 --stop-at 0 >/dev/null");
    tally_buf_release(&out);
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

/* The types of the account's outbox events in order, comma-separated, read
 * with the sqlite3 shell beside the running server. */
static void outbox_types(const char *account, tally_buf *out)
{
    tally_buf_reset(out);
    int rc = tu_sh(out,
                   "sqlite3 -readonly '%s' \"SELECT coalesce(group_concat(type, ','), '') FROM "
                   "(SELECT type FROM outbox WHERE subject = '%s' ORDER BY id)\"",
                   fx.db, account);
    assert_int_equal(rc, 0);
    trim_newline(out);
}

/* POSTs one accelerator event for account with the ingest key. */
static void post_usage(const char *id, const char *account, const char *time, int cards,
                       int seconds)
{
    char ev[512], body[600];
    event_json(ev, sizeof ev, id, account, "h100", time, cards, seconds);
    snprintf(body, sizeof body, "[%s]", ev);
    http_answer a;
    assert_int_equal(http_send(&fx, &a, "POST", "/v1/events", fx.ingest, body), 200);
    assert_contains(&a.body, "\"status\":\"accepted\"");
    http_done(&a);
}

static void test_admission_query(void **state)
{
    (void)state;
    const char *base = "/v1/accounts/acme/admission";
    /* acme has no grant and no limits: billed in arrears, always allowed. */
    expect("/v1/accounts/acme/admission?sku=h100&cards=8&hours=1", fx.acme, 200,
           "{\"allowed\":true,\"account\":\"acme\",\"currency\":\"CNY\",\"sku\":\"h100\","
           "\"pricing\":\"on_demand\",\"cards\":8,\"billed_cards\":8,\"hours\":\"1\",\"unit_"
           "price\":\"2.58\","
           "\"cost\":\"20.64\"");
    expect("/v1/accounts/acme/admission?hours=0.5&pricing=spot&cards=2&sku=rtx4090", fx.admin, 200,
           "\"pricing\":\"spot\",\"cards\":2,\"billed_cards\":2,\"hours\":\"0.5\",\"unit_price\":"
           "\"0.50\"");
    expect("/v1/accounts/acme/admission?sku=h100&cards=1&hours=1&pricing=reserved", fx.acme, 200,
           "\"unit_price\":\"2.58\"" /* no commitment: overage at on-demand */);
    static const struct {
        const char *query, *why;
    } bad[] = {
        {"", "missing query parameters"},
        {"?sku=h100&cards=1", "missing query parameters"},
        {"?sku=h100&hours=1", "missing query parameters"},
        {"?cards=1&hours=1", "missing query parameters"},
        {"?sku=&cards=1&hours=1", "sku must not be empty"},
        {"?sku=nope&cards=1&hours=1", "unknown SKU \\\"nope\\\""},
        {"?sku=h100&cards=1&hours=1&pricing=spot", "has no such pricing today (pricing spot)"},
        {"?sku=tpu-v4-64&cards=1&hours=1&pricing=reserved", "(pricing reserved)"},
        {"?sku=h100&cards=1&hours=1&pricing=none", "pricing must be on_demand, spot or reserved"},
        {"?sku=h100&cards=1&hours=1&pricing=cheap", "pricing must be on_demand, spot or reserved"},
        {"?sku=h100&cards=0&hours=1", "cards must be a whole number from 1 to 65536"},
        {"?sku=h100&cards=65537&hours=1", "cards must be"},
        {"?sku=h100&cards=-1&hours=1", "cards must be"},
        {"?sku=h100&cards=1.5&hours=1", "cards must be"},
        {"?sku=h100&cards=01&hours=1", "cards must be"},
        {"?sku=h100&cards=%2B1&hours=1", "cards must be"},
        {"?sku=h100&cards=99999999999999999999&hours=1", "cards must be"},
        {"?sku=h100&cards=1&hours=0", "hours must be"},
        {"?sku=h100&cards=1&hours=-1", "hours must be"},
        {"?sku=h100&cards=1&hours=1e3", "hours must be"},
        {"?sku=h100&cards=1&hours=8784.000000001", "hours must be"},
        {"?sku=h100&cards=1&hours=8785", "hours must be"},
        {"?sku=h100&cards=1&hours=", "hours must be"},
        {"?sku=h100&cards=1&hours=1&x=1", "unknown query parameter"},
        {"?sku=h100&cards=1&hours=1&account=globex", "unknown query parameter"},
        {"?sku=h100&sku=a100-40g&cards=1&hours=1", "repeated"},
        {"?sku=h100&cards=1&cards=2&hours=1", "repeated"},
        {"?sku=h100&cards=1&hours=1&pricing=spot&pricing=spot", "repeated"},
        {"?sku=h%zz&cards=1&hours=1", NULL},
    };
    char path[256];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(path, sizeof path, "%s%s", base, bad[i].query);
        expect(path, fx.acme, 400, "\"code\":\"bad_query\"");
        if (bad[i].why)
            expect(path, fx.acme, 400, bad[i].why);
    }
    /* The longest hours the SPEC allows is fine. */
    expect("/v1/accounts/acme/admission?sku=h100&cards=1&hours=8784", fx.acme, 200,
           "\"hours\":\"8784\"");
}

/* Keys as on the balance endpoint: an account key sees its own account
 * only (another's is the 404 of one that does not exist), admin keys see
 * every account, ingest keys only send events (403), no key is 401. */
static void test_admission_keys(void **state)
{
    (void)state;
    const char *q = "?sku=h100&cards=1&hours=1";
    char mine[128], theirs[128], missing[128];
    snprintf(mine, sizeof mine, "/v1/accounts/acme/admission%s", q);
    snprintf(theirs, sizeof theirs, "/v1/accounts/globex/admission%s", q);
    snprintf(missing, sizeof missing, "/v1/accounts/nosuch/admission%s", q);
    expect(mine, fx.acme, 200, "\"allowed\":true");
    expect(theirs, fx.globex, 200, "\"account\":\"globex\"");
    expect(theirs, fx.admin, 200, "\"account\":\"globex\"");
    http_answer a, b;
    assert_int_equal(http_get(&fx, &a, theirs, fx.acme), 404);
    assert_int_equal(http_get(&fx, &b, missing, fx.admin), 404);
    assert_string_equal(a.body.data, b.body.data);
    http_done(&a);
    http_done(&b);
    /* Hidden before the query is looked at: no way to probe with bad input. */
    expect("/v1/accounts/globex/admission?bogus=1", fx.acme, 404, "\"code\":\"not_found\"");
    expect(mine, fx.ingest, 403, "an ingest key can only send events");
    expect("/v1/accounts/acme/balance", fx.ingest, 403, "an ingest key can only send events");
    expect(mine, NULL, 401, "missing Authorization");
    assert_int_equal(http_send(&fx, &a, "POST", mine, fx.admin, "{}"), 405);
    assert_contains(&a.headers, "Allow: GET");
    http_done(&a);
}

/* HEAD: the GET's status and headers, no body. */
static void expect_head(const char *path, const char *auth, int status)
{
    tally_buf out;
    tally_buf_init(&out, 0);
    int rc = tu_sh(&out, "curl -sS --max-time 20 -I -H 'Authorization: %s' 'http://%s%s'", auth,
                   fx.addr, path);
    assert_int_equal(rc, 0);
    char line[32];
    snprintf(line, sizeof line, "HTTP/1.1 %d ", status);
    if (strncmp(out.data, line, strlen(line)) != 0)
        fail_msg("HEAD %s: %s", path, out.data);
    assert_contains(&out, "Content-Type: application/json");
    assert_contains(&out, "Content-Length: ");
    const char *end = strstr(out.data, "\r\n\r\n");
    assert_non_null(end);
    assert_int_equal(end[4], '\0');
    tally_buf_release(&out);
}

/* SPEC section 9 end to end: usage from a host drives a trial account low,
 * then exhausted; the outbox holds the crossings in order; admission is
 * refused with the shortfall; a prepaid top-up recovers and resumes it. */
static void test_spend_control(void **state)
{
    (void)state;
    tally_buf types;
    tally_buf_init(&types, 0);
    const char *bal = "/v1/accounts/trial1/balance";
    const char *adm = "/v1/accounts/trial1/admission?sku=h100&cards=1&hours=1";
    expect(bal, fx.admin, 200, "\"balance\":\"10.00\",\"state\":\"ok\",\"spend_control\":true");
    expect(adm, fx.admin, 200, "\"allowed\":true");
    outbox_types("trial1", &types);
    assert_string_equal(types.data, "");
    /* 2 cards x 1 h x 2.58 = 5.16: 4.84 left, below the low mark. */
    post_usage("t-1", "trial1", "2026-04-01T22:00:00Z", 2, 3600);
    expect(bal, fx.admin, 200, "\"balance\":\"4.84\",\"state\":\"low\"");
    outbox_types("trial1", &types);
    assert_string_equal(types.data, "balance.low");
    /* Another 5.16: -0.32, at or below the stop mark. */
    post_usage("t-2", "trial1", "2026-04-01T23:00:00Z", 2, 3600);
    expect(bal, fx.admin, 200,
           "\"running_charges\":\"10.32\",\"credits_available\":\"0.00\",\"balance\":\"-0.32\","
           "\"state\":\"exhausted\"");
    outbox_types("trial1", &types);
    assert_string_equal(types.data, "balance.low,balance.exhausted,account.suspend");
    tally_buf susp;
    tally_buf_init(&susp, 0);
    assert_int_equal(tu_sh(&susp,
                           "sqlite3 -readonly '%s' \"SELECT CAST(payload AS TEXT) FROM outbox "
                           "WHERE type = 'account.suspend' AND subject = 'trial1'\"",
                           fx.db),
                     0);
    assert_contains(&susp, "\"instances\":[{\"instance\":\"i-trial1\",\"sku\":\"h100\"}]");
    tally_buf_release(&susp);
    /* Before the top-up: 2.58 does not fit in -0.32 above 0.00. */
    expect(adm, fx.admin, 402,
           "{\"allowed\":false,\"account\":\"trial1\",\"currency\":\"CNY\",\"sku\":\"h100\"");
    expect(adm, fx.admin, 402,
           "\"cost\":\"2.58\",\"balance\":\"-0.32\",\"stop_at\":\"0.00\","
           "\"balance_after\":\"-2.90\",\"shortfall\":\"2.90\"}");
    expect_head(adm, fx.admin, 402);
    http_answer a;
    assert_int_equal(http_send(&fx, &a, "POST", "/v1/accounts/trial1/credits", fx.admin,
                               "{\"amount\":\"100.00\",\"kind\":\"prepaid\"}"),
                     201);
    http_done(&a);
    expect(bal, fx.admin, 200, "\"balance\":\"99.68\",\"state\":\"ok\"");
    outbox_types("trial1", &types);
    assert_string_equal(types.data, "balance.low,balance.exhausted,account.suspend,"
                                    "balance.recovered,account.resume");
    expect(adm, fx.admin, 200, "\"allowed\":true");
    expect(adm, fx.admin, 200,
           "\"balance\":\"99.68\",\"stop_at\":\"0.00\",\"balance_after\":"
           "\"97.10\"}");
    expect_head(adm, fx.admin, 200);
    tally_buf_release(&types);
}

/* A grant that expired since the balance was last refreshed makes the
 * balance due: the read refreshes it in a write transaction of its own.
 * That used to run inside the read snapshot of every GET and answered 500
 * ("cannot start a transaction within a transaction"). */
static void test_balance_due_refresh(void **state)
{
    (void)state;
    static const char *const paths[] = {
        "/v1/accounts/globex/balance",
        "/v1/accounts/globex/admission?sku=h100&cards=1&hours=1",
    };
    for (size_t i = 0; i < 2; i++) {
        /* Granted on 03-01 (tally's clock), expired on 03-10: due at NOW. */
        int rc = tu_sh(NULL,
                       "TALLY_NOW=2026-03-01T00:00:00Z '%s' --db '%s' credit grant globex 10.00 "
                       "--kind trial --effective 2026-03-01T00:00:00Z --expires "
                       "2026-03-10T00:00:00Z >/dev/null",
                       TALLY_BINARY, fx.db);
        assert_int_equal(rc, 0);
        /* Under spend control now (a grant of its own), with nothing left. */
        expect(paths[i], fx.globex, i ? 402 : 200, "\"balance\":\"0.00\"");
    }
    assert_healthy(&fx);
}

/* The value of one /metrics line ("name{labels} "), or -1 when absent. */
static long long metric(const tally_buf *b, const char *line)
{
    char want[200];
    snprintf(want, sizeof want, "\n%s ", line);
    const char *p = strstr(b->data, want);
    return p ? strtoll(p + strlen(want), NULL, 10) : -1;
}

static bool have_promtool(void)
{
    return tu_sh(NULL, "command -v promtool >/dev/null 2>&1") == 0;
}

/* promtool's lint of a /metrics body: exit 0 and nothing printed. */
static void promtool_check(const tally_buf *b)
{
    char path[700];
    snprintf(path, sizeof path, "%s/metrics.txt", fx.dir);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(b->data, 1, b->len, fp), b->len);
    fclose(fp);
    tally_buf out;
    tally_buf_init(&out, 0);
    int rc = tu_sh(&out, "promtool check metrics < '%s' 2>&1", path);
    if (rc != 0 || out.len)
        fail_msg("promtool check metrics: exit %d: %s", rc, out.data ? out.data : "");
    tally_buf_release(&out);
}

/* After test_spend_control: three accounts, all ok; trial1's five events,
 * all pending; then, once stamped sent, none pending and the same totals. */
static void test_metrics(void **state)
{
    (void)state;
    TU_REQUIRE_TOOL(have_promtool(), "promtool");
    http_answer a;
    assert_int_equal(http_get(&fx, &a, "/metrics", NULL), 200);
    promtool_check(&a.body);
    assert_contains(&a.body, "# TYPE tally_accounts gauge\n");
    assert_contains(&a.body, "# TYPE tally_outbox_events_total counter\n");
    assert_contains(&a.body, "# TYPE tally_outbox_events_pending gauge\n");
    assert_int_equal(metric(&a.body, "tally_accounts{state=\"ok\"}"), 3);
    assert_int_equal(metric(&a.body, "tally_accounts{state=\"low\"}"), 0);
    assert_int_equal(metric(&a.body, "tally_accounts{state=\"exhausted\"}"), 0);
    static const char *const five[] = {"balance.low", "balance.exhausted", "account.suspend",
                                       "balance.recovered", "account.resume"};
    static const char *const none[] = {"invoice.finalized", "invoice.voided", "creditnote.issued",
                                       "ledger.head",       "volume.release", "other"};
    char line[128];
    for (size_t i = 0; i < 5; i++) {
        snprintf(line, sizeof line, "tally_outbox_events_total{type=\"%s\"}", five[i]);
        assert_int_equal(metric(&a.body, line), 1);
        snprintf(line, sizeof line, "tally_outbox_events_pending{type=\"%s\"}", five[i]);
        assert_int_equal(metric(&a.body, line), 1);
    }
    for (size_t i = 0; i < 6; i++) {
        snprintf(line, sizeof line, "tally_outbox_events_total{type=\"%s\"}", none[i]);
        assert_int_equal(metric(&a.body, line), 0);
        snprintf(line, sizeof line, "tally_outbox_events_pending{type=\"%s\"}", none[i]);
        assert_int_equal(metric(&a.body, line), 0);
    }
    /* No series per account. */
    assert_null(strstr(a.body.data, "trial1"));
    http_done(&a);
    /* As tally publish would once the broker acknowledged them. */
    assert_int_equal(
        tu_sh(NULL, "sqlite3 '%s' 'UPDATE outbox SET sent_at = 1 WHERE sent_at IS NULL'", fx.db),
        0);
    assert_int_equal(http_get(&fx, &a, "/metrics", NULL), 200);
    for (size_t i = 0; i < 5; i++) {
        snprintf(line, sizeof line, "tally_outbox_events_total{type=\"%s\"}", five[i]);
        assert_int_equal(metric(&a.body, line), 1);
        snprintf(line, sizeof line, "tally_outbox_events_pending{type=\"%s\"}", five[i]);
        assert_int_equal(metric(&a.body, line), 0);
    }
    http_done(&a);
}

static void on_reply(void *arg, const tally_http_response *resp)
{
    tally_buf *out = arg;
    assert_int_equal(resp->status, 200);
    assert_int_equal(tally_buf_append(out, resp->body.data, resp->body.len), TALLY_OK);
}

/* Types without a label of their own share "other": the series stay
 * bounded whatever the outbox holds (tally_server_handle, no socket). */
static void test_metrics_other_types(void **state)
{
    (void)state;
    tally_ledger *l = NULL;
    char why[256] = "";
    assert_int_equal(tally_ledger_open(fx.db, &l, why, sizeof why), TALLY_OK);
    static const char *const odd[] = {"future.type", "weird\"type\n", "balance.low.v2"};
    for (size_t i = 0; i < 3; i++) {
        char id[64];
        snprintf(id, sizeof id, "odd:%zu", i);
        assert_int_equal(ledger_begin(l), TALLY_OK);
        assert_int_equal(ledger_outbox_add(l, odd[i], "acct-x", id, "{}", 2), TALLY_OK);
        assert_int_equal(ledger_commit(l), TALLY_OK);
    }
    tally_ledger_close(l);
    tally_server_opts o = {.db_path = fx.db};
    tally_server *s = NULL;
    assert_int_equal(tally_server_create(&o, &s, why, sizeof why), TALLY_OK);
    for (int round = 0; round < 2; round++) { /* counted once, not once per scrape */
        tally_buf body;
        tally_buf_init(&body, 0);
        tally_http_request req = {.method = "GET", .uri = "/metrics"};
        tally_server_handle(s, &req, on_reply, &body);
        assert_int_equal(metric(&body, "tally_outbox_events_total{type=\"other\"}"), 3);
        assert_int_equal(metric(&body, "tally_outbox_events_pending{type=\"other\"}"), 3);
        assert_int_equal(metric(&body, "tally_outbox_events_total{type=\"balance.low\"}"), 1);
        assert_null(strstr(body.data, "future"));
        assert_null(strstr(body.data, "weird"));
        tally_buf_release(&body);
    }
    tally_server_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_admission_query),     cmocka_unit_test(test_admission_keys),
        cmocka_unit_test(test_spend_control),       cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_metrics_other_types), cmocka_unit_test(test_balance_due_refresh),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
