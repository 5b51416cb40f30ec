/* Hostile clients of the HTTP server (issue 14, items 8-11), over loopback
 * with raw sockets: a head sent one byte at a time, requests libevent would
 * answer with its own HTML page, HEAD and absolute-form targets, repeated
 * Authorization headers, file descriptors running out, and an account
 * flooding the ingest endpoint. Each test bounds its own time. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "test_http.h"

static http_fixture fx;
static http_fixture lim; /* test_out_of_fds's server, stopped by teardown if the test fails */

static int setup(void **state)
{
    (void)state;
    setenv("TALLY_NOW", "2026-04-02T00:00:00Z", 1);
    fx_ledger(&fx, "http-hostile");
    static const char *const extra[] = {
        "--timeout", "5", "--header-timeout", "1", "--ingest-rate", "2", "--ingest-burst",
        "10",        NULL};
    fx_start(&fx, extra);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (lim.pid > 0)
        stop_pid(lim.pid);
    fx_stop(&fx);
    return 0;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int connect_to(const char *addr)
{
    char host[64];
    snprintf(host, sizeof host, "%s", addr);
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

/* Reads what fd sends until it closes or ms pass; true if it closed. */
static bool read_until_close(int fd, tally_buf *out, int ms)
{
    char buf[4096];
    for (int waited = 0; waited < ms; waited += 50) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) != 1)
            continue;
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0)
            return true;
        assert_int_equal(tally_buf_append(out, buf, (size_t)n), TALLY_OK);
    }
    return false;
}

/* Sends req on a new connection and returns the answer's status; the
 * whole answer (head and body) is in out. */
static int raw_exchange(const char *req, size_t len, tally_buf *out)
{
    int fd = connect_to(fx.addr);
    tally_buf_init(out, 0);
    size_t sent = 0;
    while (sent < len) {
        ssize_t n = send(fd, req + sent, len - sent, MSG_NOSIGNAL);
        if (n <= 0)
            break; /* the server may answer and close before all is sent */
        sent += (size_t)n;
    }
    bool closed = read_until_close(fd, out, 5000);
    close(fd);
    if (!closed)
        fail_msg("no close after: %.60s", req);
    if (!out->data || strncmp(out->data, "HTTP/1.1 ", 9) != 0)
        fail_msg("no answer to: %.60s", req);
    return (int)strtol(out->data + 9, NULL, 10);
}

/* A JSON error body with Content-Type application/json and no HTML. */
static void assert_json_error(const tally_buf *b)
{
    assert_contains(b, "Content-Type: application/json");
    assert_contains(b, "\r\n\r\n{\"error\":{\"code\":");
    assert_null(strstr(b->data, "<html"));
    assert_null(strstr(b->data, "<HTML"));
}

/* Item 8: a head sent one byte every 200 ms is cut off at the 1 s deadline
 * with a 408, although every byte arrives well within the 5 s timeout. */
static void test_head_deadline(void **state)
{
    (void)state;
    static const char head[] = "GET /healthz HTTP/1.1\r\nHost: slow-client.example\r\n\r\n";
    int fd = connect_to(fx.addr);
    int64_t start = now_ms();
    bool cut = false;
    for (size_t i = 0; i < sizeof head - 1 && !cut; i++) {
        if (send(fd, head + i, 1, MSG_NOSIGNAL) != 1)
            cut = true;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 200) == 1)
            cut = true;
    }
    assert_true(cut); /* answered before the head was complete */
    tally_buf out;
    tally_buf_init(&out, 0);
    assert_true(read_until_close(fd, &out, 5000));
    close(fd);
    int64_t took = now_ms() - start;
    assert_true(took < 4500);
    assert_non_null(out.data);
    assert_int_equal(strncmp(out.data, "HTTP/1.1 408 ", 13), 0);
    assert_json_error(&out);
    tally_buf_release(&out);
    assert_healthy(&fx);
}

/* Item 10: what libevent 2.1 answers with its own HTML page gets JSON. */
static void test_json_errors(void **state)
{
    (void)state;
    static const struct {
        const char *req;
        int status;
    } cases[] = {
        {"TRACE / HTTP/1.1\r\nHost: x\r\n\r\n", 501},
        {"CONNECT example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n", 501},
        {"get /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 501},
        {"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n", 505},
        {"GET /healthz HTXP/1.1\r\nHost: x\r\n\r\n", 400},
        {"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400},
        {"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n[]",
         400},
        {"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
         "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
         400},
        {"POST /v1/events HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
        {"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n", 413},
        {"GET /healthz HTTP/1.1\r\n Folded: header\r\n\r\n", 400},
        {"GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\n"
         "Authorization: Bearer b\r\n\r\n",
         400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tally_buf out;
        int status = raw_exchange(cases[i].req, strlen(cases[i].req), &out);
        if (status != cases[i].status)
            fail_msg("%.40s: %d, want %d", cases[i].req, status, cases[i].status);
        assert_json_error(&out);
        tally_buf_release(&out);
    }
    /* A 100 KB path, and a head over 16 KB in headers. */
    tally_buf big;
    tally_buf_init(&big, 0);
    assert_int_equal(tally_buf_puts(&big, "GET /"), TALLY_OK);
    for (int i = 0; i < 100 * 1024; i++)
        assert_int_equal(tally_buf_append(&big, "a", 1), TALLY_OK);
    assert_int_equal(tally_buf_puts(&big, " HTTP/1.1\r\nHost: x\r\n\r\n"), TALLY_OK);
    tally_buf out;
    assert_int_equal(raw_exchange(big.data, big.len, &out), 414);
    assert_json_error(&out);
    tally_buf_release(&out);
    tally_buf_reset(&big);
    assert_int_equal(tally_buf_puts(&big, "GET /healthz HTTP/1.1\r\n"), TALLY_OK);
    for (int i = 0; i < 400; i++)
        assert_int_equal(tally_buf_printf(&big, "X-Filler-%d: %050d\r\n", i, i), TALLY_OK);
    assert_int_equal(tally_buf_puts(&big, "\r\n"), TALLY_OK);
    assert_int_equal(raw_exchange(big.data, big.len, &out), 431);
    assert_json_error(&out);
    tally_buf_release(&out);
    tally_buf_release(&big);
    assert_healthy(&fx);
}

/* Item 10: HEAD on GET routes, absolute-form targets, HTTP/1.0, and a good
 * request pipelined before a bad one gets its own answer first. */
static void test_head_absolute_pipelined(void **state)
{
    (void)state;
    tally_buf out;
    static const char head[] = "HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert_int_equal(raw_exchange(head, sizeof head - 1, &out), 200);
    assert_contains(&out, "Content-Length: 16\r\n");
    assert_int_equal(strstr(out.data, "\r\n\r\n")[4], '\0'); /* no body */
    tally_buf_release(&out);
    static const char abs_form[] =
        "GET http://127.0.0.1/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    assert_int_equal(raw_exchange(abs_form, sizeof abs_form - 1, &out), 200);
    assert_contains(&out, "{\"status\":\"ok\"}");
    tally_buf_release(&out);
    static const char abs_auth[] =
        "GET http://127.0.0.1/v1/accounts/acme/balance HTTP/1.1\r\nHost: x\r\n"
        "Connection: close\r\n\r\n";
    assert_int_equal(raw_exchange(abs_auth, sizeof abs_auth - 1, &out), 401);
    tally_buf_release(&out);
    static const char http10[] = "GET /healthz HTTP/1.0\r\n\r\n";
    int fd = connect_to(fx.addr);
    assert_int_equal(send(fd, http10, sizeof http10 - 1, 0), (ssize_t)(sizeof http10 - 1));
    tally_buf_init(&out, 0);
    assert_true(read_until_close(fd, &out, 5000)); /* HTTP/1.0: closed after the answer */
    close(fd);
    assert_contains(&out, "{\"status\":\"ok\"}");
    tally_buf_release(&out);
    static const char piped[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                                "TRACE / HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_int_equal(raw_exchange(piped, sizeof piped - 1, &out), 200);
    char *second = strstr(out.data, "HTTP/1.1 501 ");
    assert_non_null(second);
    assert_true(second > strstr(out.data, "{\"status\":\"ok\"}"));
    tally_buf_release(&out);
}

/* Item 9: with RLIMIT_NOFILE at 40, 80 connections exhaust the server's
 * descriptors. Its stderr stays small (rate-limited warnings, accepting
 * paused) and it serves again once the connections close. */
static void test_out_of_fds(void **state)
{
    (void)state;
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "ulimit -n 40 && exec '%s' --db '%s' serve --listen 127.0.0.1:0",
             TALLY_BINARY, fx.db);
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    lim = fx;
    lim.pid = spawn_first_line(fx.dir, "serve-nofile", argv, lim.addr, sizeof lim.addr);
    int fds[80];
    for (size_t i = 0; i < 80; i++)
        fds[i] = connect_to(lim.addr); /* the kernel's backlog takes what accept cannot */
    usleep(1500 * 1000);
    char err_path[700];
    snprintf(err_path, sizeof err_path, "%s/serve-nofile.err", fx.dir);
    struct stat st;
    assert_int_equal(stat(err_path, &st), 0);
    tally_buf err;
    tally_buf_init(&err, 0);
    assert_int_equal(tu_read_file(err_path, &err), 0);
    if (st.st_size > 4096)
        fail_msg("stderr grew to %lld bytes in 1.5 s", (long long)st.st_size);
    assert_contains(&err, "Too many open files");
    tally_buf_release(&err);
    for (size_t i = 0; i < 80; i++)
        close(fds[i]);
    int status = 0;
    for (int i = 0; i < 50 && status != 200; i++) {
        usleep(100 * 1000);
        http_answer a;
        status = http_get(&lim, &a, "/healthz", NULL);
        http_done(&a);
    }
    assert_int_equal(status, 200);
    fx_stop(&lim);
}

typedef struct key_seen {
    int64_t ids[4];
    size_t n_rows, n_ids;
} key_seen;

static tally_err note_key(void *ctx, const tally_quarantine_row *q)
{
    key_seen *k = ctx;
    k->n_rows++;
    for (size_t i = 0; i < k->n_ids; i++)
        if (k->ids[i] == q->key_id)
            return TALLY_OK;
    if (k->n_ids < 4)
        k->ids[k->n_ids++] = q->key_id;
    return TALLY_OK;
}

/* Ten events that do not decode. */
static void bad_events(char *out, size_t cap)
{
    size_t at = 0;
    out[at++] = '[';
    for (int i = 0; i < 10; i++)
        at += (size_t)snprintf(out + at, cap - at, "%s{\"bad\":%d}", i ? "," : "", i);
    snprintf(out + at, cap - at, "]");
}

/* Item 11: a key over its rate gets 429 with Retry-After, others do not;
 * /metrics counts the 429s, and quarantined rows name the key that sent
 * them. */
static void test_ingest_rate_limit(void **state)
{
    (void)state;
    char body[512];
    bad_events(body, sizeof body);
    http_answer a;
    assert_int_equal(http_send(&fx, &a, "POST", "/v1/events", fx.ingest, body), 200);
    assert_contains(&a.body, "quarantined");
    http_done(&a);
    assert_int_equal(http_send(&fx, &a, "POST", "/v1/events", fx.ingest, "[{\"bad\":1}]"), 429);
    assert_contains(&a.headers, "Retry-After: 1");
    assert_contains(&a.body, "\"code\":\"rate_limited\"");
    http_done(&a);
    /* Another key has its own bucket. */
    assert_int_equal(http_send(&fx, &a, "POST", "/v1/events", fx.admin, body), 200);
    http_done(&a);
    assert_int_equal(http_get(&fx, &a, "/metrics", NULL), 200);
    assert_contains(&a.body, "tally_http_rate_limited_total 1\n");
    http_done(&a);
    usleep(1100 * 1000); /* two tokens back at 2 a second */
    assert_int_equal(http_send(&fx, &a, "POST", "/v1/events", fx.ingest, "[{\"bad\":2}]"), 200);
    http_done(&a);
    tally_ledger *l = NULL;
    char why[256];
    assert_int_equal(tally_ledger_open(fx.db, &l, why, sizeof why), TALLY_OK);
    key_seen k = {0};
    assert_int_equal(tally_ledger_quarantine_each(l, "http:", note_key, &k), TALLY_OK);
    tally_ledger_close(l);
    assert_int_equal(k.n_rows, 21);
    assert_int_equal(k.n_ids, 2); /* the ingest key and the admin key, never none */
    assert_true(k.ids[0] > 0 && k.ids[1] > 0 && k.ids[0] != k.ids[1]);
}

/* Item 12: a report by day over more than the limit says the limit. */
static void test_usage_by_day_limit(void **state)
{
    (void)state;
    http_answer a;
    assert_int_equal(http_get(&fx, &a,
                              "/v1/accounts/acme/usage?from=2024-01-01T00:00:00Z"
                              "&to=2026-01-01T00:00:00Z&by=day",
                              fx.acme),
                     400);
    assert_contains(&a.body, "\"code\":\"range_too_long\"");
    assert_contains(&a.body, "at most 400 days");
    http_done(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_head_deadline),           cmocka_unit_test(test_json_errors),
        cmocka_unit_test(test_head_absolute_pipelined), cmocka_unit_test(test_out_of_fds),
        cmocka_unit_test(test_ingest_rate_limit),       cmocka_unit_test(test_usage_by_day_limit),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
