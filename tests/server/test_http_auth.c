/* The HTTP API's defences end to end: every authentication failure, every
 * way an account key might reach another account (path, query, body, ids),
 * oversized, truncated and malformed bodies, and slow or idle clients. After
 * each bad request the server must still be healthy. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "test_http.h"

static http_fixture fx;

#define T0 "2026-03-01T10:00:00Z"

static int setup(void **state)
{
    (void)state;
    setenv("TALLY_NOW", "2026-04-02T00:00:00Z", 1);
    fx_ledger(&fx, "http-auth");
    static const char *const extra[] = {"--timeout", "1", NULL};
    fx_start(&fx, extra);
    /* Usage for both tenants, and finalized invoices to ask for by id. */
    char e1[512], e2[512], body[1100];
    event_json(e1, sizeof e1, "a1", "acme", "h100", T0, 1, 3600);
    event_json(e2, sizeof e2, "g1", "globex", "h100", T0, 2, 3600);
    snprintf(body, sizeof body, "[%s,%s]", e1, e2);
    http_answer a;
    assert_int_equal(http_send(&fx, &a, "POST", "/v1/events", fx.admin, body), 200);
    http_done(&a);
    tally_buf out;
    tally_buf_init(&out, 0);
    fx_tally_ok(&fx, &out, "invoice run --period 2026-03 --finalize >/dev/null");
    tally_buf_release(&out);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fx_stop(&fx);
    return 0;
}

static void expect(const char *path, const char *auth, int status, const char *text)
{
    http_answer a;
    if (http_get(&fx, &a, path, auth) != status)
        fail_msg("GET %s with %s: %d %s", path, auth ? auth : "no key", a.status, a.body.data);
    if (text)
        assert_contains(&a.body, text);
    if (status == 401)
        assert_contains(&a.headers, "WWW-Authenticate: Bearer");
    http_done(&a);
}

static void test_auth_failures(void **state)
{
    (void)state;
    const char *p = "/v1/accounts/acme/balance";
    expect(p, NULL, 401, "missing Authorization");
    expect(p, "Basic YWNtZTpwdw==", 401, "malformed");
    expect(p, "Bearer", 401, "malformed");
    expect(p, "Bearer tly_short", 401, "malformed");
    char unknown[80], bad_char[80];
    snprintf(unknown, sizeof unknown, "Bearer tly_%.*s", TALLY_APIKEY_LEN - 4,
             "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA");
    memcpy(bad_char, unknown, sizeof bad_char);
    bad_char[strlen(bad_char) - 1] = '!';
    expect(p, bad_char, 401, "malformed");
    expect(p, unknown, 401, "unknown or revoked");
    expect(p, fx.acme, 200, "\"account\":\"acme\"");
    /* The scheme is case-insensitive (RFC 7235). */
    char lower[80] = "bearer ";
    memcpy(lower + 7, fx.acme + 7, strlen(fx.acme + 7) + 1);
    expect(p, lower, 200, NULL);
    /* A key revoked while the server runs stops working on the next request. */
    char key[64];
    fx_key(&fx, "--account acme", key);
    expect(p, key, 200, NULL);
    tally_buf out;
    tally_buf_init(&out, 0);
    fx_tally_ok(&fx, &out, "apikey list");
    assert_contains(&out, "account acme");
    assert_null(strstr(out.data, key + strlen("Bearer ")));
    tally_buf_reset(&out);
    fx_tally_ok(&fx, &out, "apikey revoke 5"); /* keys 1-4 come from the fixture */
    tally_buf_release(&out);
    expect(p, key, 401, "unknown or revoked");
    assert_int_equal(tu_tally(NULL, "--db '%s' apikey revoke 5 2>/dev/null", fx.db), 2);
    assert_int_equal(tu_tally(NULL, "--db '%s' apikey revoke 99 2>/dev/null", fx.db), 2);
    assert_int_equal(tu_tally(NULL, "--db '%s' apikey create 2>/dev/null", fx.db), 2);
    assert_int_equal(
        tu_tally(NULL, "--db '%s' apikey create --admin --account x 2>/dev/null", fx.db), 2);
    /* Account keys never write credits or prices, not even their own. */
    http_answer a;
    assert_int_equal(http_send(&fx, &a, "POST", "/v1/accounts/acme/credits", fx.acme,
                               "{\"amount\":\"1000\",\"kind\":\"goodwill\"}"),
                     403);
    http_done(&a);
    assert_int_equal(http_send(&fx, &a, "PUT", "/v1/spot-prices/rtx4090", fx.acme,
                               "{\"price\":\"0.01\",\"from\":\"2026-03-01T00:00:00Z\"}"),
                     403);
    http_done(&a);
    assert_int_equal(http_send(&fx, &a, "PUT", "/v1/spot-prices/rtx4090", NULL, "{}"), 401);
    http_done(&a);
    /* Public endpoints need no key. */
    expect("/healthz", NULL, 200, NULL);
    expect("/metrics", NULL, 200, NULL);
}

/* The same bytes as for an account that does not exist. */
static void expect_hidden(const char *path, const char *missing_path)
{
    http_answer a, b;
    assert_int_equal(http_get(&fx, &a, path, fx.acme), 404);
    assert_int_equal(http_get(&fx, &b, missing_path, fx.admin), 404);
    assert_string_equal(a.body.data, b.body.data);
    http_done(&a);
    http_done(&b);
}

static void test_cross_tenant_path_and_query(void **state)
{
    (void)state;
    expect_hidden("/v1/accounts/globex/balance", "/v1/accounts/nosuch/balance");
    expect_hidden("/v1/accounts/globex/invoices", "/v1/accounts/nosuch/invoices");
    expect_hidden("/v1/accounts/globex/usage?from=2026-03-01T00:00:00Z&to=2026-04-01T00:00:00Z",
                  "/v1/accounts/nosuch/usage?from=2026-03-01T00:00:00Z&to=2026-04-01T00:00:00Z");
    expect_hidden("/v1/accounts/glob%65x/balance", "/v1/accounts/nosuch/balance");
    expect("/v1/accounts/globex/balance", fx.admin, 200, "\"account\":\"globex\"");
    /* The account is named by the path only; a query cannot add another. */
    expect("/v1/accounts/acme/balance?account=globex", fx.acme, 400, "unknown query parameter");
    expect("/v1/accounts/acme/balance?x=1&account=globex", fx.acme, 400, NULL);
}

static void test_cross_tenant_invoices(void **state)
{
    (void)state;
    http_answer a;
    assert_int_equal(http_get(&fx, &a, "/v1/accounts/globex/invoices", fx.admin), 200);
    const char *p = strstr(a.body.data, "\"invoice_id\":\"");
    assert_non_null(p);
    char id[64], path[128];
    p += strlen("\"invoice_id\":\"");
    snprintf(id, sizeof id, "%.*s", (int)(strchr(p, '"') - p), p);
    http_done(&a);
    snprintf(path, sizeof path, "/v1/invoices/%s", id);
    expect(path, fx.globex, 200, "\"account\":\"globex\"");
    expect_hidden(path, "/v1/invoices/INV-2026-999999");
    snprintf(path, sizeof path, "/v1/invoices/%s?format=html", id);
    expect_hidden(path, "/v1/invoices/INV-2026-999999");
    expect_hidden("/v1/invoices/draft:globex:2026-03", "/v1/invoices/INV-2026-999999");
}

static void test_cross_tenant_body(void **state)
{
    (void)state;
    const char *usage =
        "/v1/accounts/globex/usage?from=2026-03-01T00:00:00Z&to=2026-04-01T00:00:00Z";
    const char *mine_usage =
        "/v1/accounts/acme/usage?from=2026-03-01T00:00:00Z&to=2026-04-01T00:00:00Z";
    http_answer before, mine_before, a, after;
    assert_int_equal(http_get(&fx, &before, usage, fx.admin), 200);
    assert_int_equal(http_get(&fx, &mine_before, mine_usage, fx.admin), 200);
    char mine[512], theirs[512], body[1100];
    event_json(mine, sizeof mine, "a2", "acme", "h100", "2026-03-02T10:00:00Z", 1, 60);
    event_json(theirs, sizeof theirs, "g2", "globex", "h100", "2026-03-02T10:00:00Z", 64, 3600);
    snprintf(body, sizeof body, "[%s,%s]", mine, theirs);
    /* An account key never sends usage, not even for its own account. */
    assert_int_equal(http_send(&fx, &a, "POST", "/v1/events", fx.acme, body), 403);
    assert_contains(&a.body, "\"code\":\"forbidden\"");
    http_done(&a);
    assert_int_equal(http_get(&fx, &after, usage, fx.admin), 200);
    assert_string_equal(before.body.data, after.body.data);
    http_done(&after);
    assert_int_equal(http_get(&fx, &after, mine_usage, fx.admin), 200);
    assert_string_equal(mine_before.body.data, after.body.data);
    http_done(&after);
    http_done(&before);
    http_done(&mine_before);
    /* Nor may it grant itself or anyone else credits through the body. */
    assert_int_equal(http_send(&fx, &a, "POST", "/v1/accounts/globex/credits", fx.acme,
                               "{\"amount\":\"1\",\"kind\":\"trial\"}"),
                     403);
    http_done(&a);
}

static void test_bad_bodies(void **state)
{
    (void)state;
    http_answer a;
    /* Over 1 MiB: 413 with a JSON error, before any of it is parsed. */
    size_t big = TALLY_HTTP_MAX_BODY + 1;
    char *body = malloc(big);
    assert_non_null(body);
    memset(body, ' ', big);
    body[0] = '[';
    body[big - 1] = ']';
    assert_int_equal(http_req(&fx, &a, "POST", "/v1/events", fx.admin, body, big), 413);
    assert_contains(&a.body, "\"code\":\"too_large\"");
    http_done(&a);
    assert_healthy(&fx);
    /* Far over: evhttp cuts it off without reading it into memory. */
    char *huge = malloc(8 * big);
    assert_non_null(huge);
    memset(huge, ' ', 8 * big);
    assert_int_equal(http_req(&fx, &a, "POST", "/v1/events", fx.admin, huge, 8 * big), 413);
    http_done(&a);
    free(huge);
    assert_healthy(&fx);
    /* 1,001 events: 413, nothing stored. */
    tally_buf many;
    tally_buf_init(&many, 0);
    assert_int_equal(tally_buf_puts(&many, "["), TALLY_OK);
    for (int i = 0; i <= TALLY_HTTP_MAX_EVENTS; i++)
        assert_int_equal(tally_buf_puts(&many, i ? ",{}" : "{}"), TALLY_OK);
    assert_int_equal(tally_buf_puts(&many, "]"), TALLY_OK);
    assert_int_equal(http_req(&fx, &a, "POST", "/v1/events", fx.admin, many.data, many.len), 413);
    assert_contains(&a.body, "too_many_events");
    http_done(&a);
    tally_buf_release(&many);
    free(body);
    static const struct {
        const char *body;
        size_t len;
    } bad[] = {
        {"[{\"specversion\":\"1.0\",\"id\":\"x\"", 0}, /* truncated */
        {"[{\"a\":1}", 0},
        {"[}", 0},
        {"{\"specversion\":\"1.0\"}", 0}, /* an object, not an array */
        {"", 0},
        {"[1,]", 0},
        {"[1] [2]", 0},
        {"[\"unterminated]", 0},
        {"\0\1\2[]\xff", 6},
    };
    char deep[2 * 100 + 1];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    deep[200] = '\0';
    assert_int_equal(http_send(&fx, &a, "POST", "/v1/events", fx.admin, deep), 400);
    assert_contains(&a.body, "nested too deeply");
    http_done(&a);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        size_t len = bad[i].len ? bad[i].len : strlen(bad[i].body);
        if (http_req(&fx, &a, "POST", "/v1/events", fx.admin, bad[i].body, len) != 400)
            fail_msg("body %zu: %d %s", i, a.status, a.body.data);
        assert_contains(&a.body, "\"code\":\"bad_json\"");
        http_done(&a);
        assert_healthy(&fx);
    }
    /* Malformed JSON inside an element is that element's problem only. */
    assert_int_equal(http_send(&fx, &a, "POST", "/v1/events", fx.admin, "[{\"a\":}, \"\\u0000\"]"),
                     200);
    assert_contains(&a.body, "{\"index\":0,\"status\":\"quarantined\",\"reason\":\"bad_json\"}");
    http_done(&a);
    assert_healthy(&fx);
}

/* Connects to the server and returns the socket. */
static int connect_raw(void)
{
    char host[64];
    snprintf(host, sizeof host, "%s", fx.addr);
    char *colon = strrchr(host, ':');
    assert_non_null(colon);
    *colon = '\0';
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)strtol(colon + 1, NULL, 10))};
    assert_int_equal(inet_pton(AF_INET, host, &sa.sin_addr), 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

/* True if the server closes fd within ms (reads and discards any answer). */
static bool closed_within(int fd, int ms)
{
    char buf[4096];
    for (int waited = 0; waited < ms; waited += 100) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) == 1) {
            ssize_t n = recv(fd, buf, sizeof buf, 0);
            if (n <= 0)
                return true;
        }
    }
    return false;
}

static void test_slow_and_idle_clients(void **state)
{
    (void)state;
    int idle = connect_raw(); /* says nothing */
    int slow = connect_raw(); /* never finishes its headers */
    static const char partial[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n";
    assert_int_equal(send(slow, partial, sizeof partial - 1, 0), (ssize_t)(sizeof partial - 1));
    int body = connect_raw(); /* promises a body it does not send */
    static const char post[] =
        "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n[";
    assert_int_equal(send(body, post, sizeof post - 1, 0), (ssize_t)(sizeof post - 1));
    assert_healthy(&fx); /* others are served meanwhile */
    assert_true(closed_within(idle, 5000));
    assert_true(closed_within(slow, 5000));
    assert_true(closed_within(body, 5000));
    close(idle);
    close(slow);
    close(body);
    assert_healthy(&fx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auth_failures),
        cmocka_unit_test(test_cross_tenant_path_and_query),
        cmocka_unit_test(test_cross_tenant_invoices),
        cmocka_unit_test(test_cross_tenant_body),
        cmocka_unit_test(test_bad_bodies),
        cmocka_unit_test(test_slow_and_idle_clients),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
