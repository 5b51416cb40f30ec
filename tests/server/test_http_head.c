/* The request-head check on its own (server/head.c): what it accepts, the
 * status it refuses each bad head with, and where a head ends. */
#include <string.h>

#include "../../server/server_int.h"
#include "testutil.h"

static int check(const char *head, srv_head *h)
{
    return srv_head_check(head, strlen(head), h);
}

static void test_accepts(void **state)
{
    (void)state;
    srv_head h;
    assert_int_equal(check("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", &h), 0);
    assert_false(h.close);
    assert_int_equal(check("POST /v1/events HTTP/1.1\r\nContent-Length: 12\r\n"
                           "Connection: close\r\n\r\n",
                           &h),
                     0);
    assert_int_equal(h.content_length, 12);
    assert_true(h.close);
    assert_int_equal(check("GET / HTTP/1.0\n\n", &h), 0); /* bare LF lines */
    assert_true(h.close);                                 /* 1.0 without keep-alive */
    assert_int_equal(check("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &h), 0);
    assert_false(h.close);
    assert_int_equal(check("POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n", &h), 0);
    assert_true(h.chunked);
    assert_int_equal(check("GET http://x/healthz HTTP/1.1\r\n\r\n", &h), 0);
}

static void test_refuses(void **state)
{
    (void)state;
    static const struct {
        const char *head;
        int status;
    } cases[] = {
        {"TRACE / HTTP/1.1\r\n\r\n", 501},
        {"CONNECT x:443 HTTP/1.1\r\n\r\n", 501},
        {"get / HTTP/1.1\r\n\r\n", 501},
        {"GETS / HTTP/1.1\r\n\r\n", 501},
        {"GET / HTTP/9.9\r\n\r\n", 505},
        {"GET / HTTP/2\r\n\r\n", 505},
        {"GET / FTP/1.1\r\n\r\n", 400},
        {"GET /\r\n\r\n", 400},
        {"GET  / HTTP/1.1\r\n\r\n", 400},
        {"GET / HTTP/1.1 extra\r\n\r\n", 400},
        {"GET /a\x01 HTTP/1.1\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nno colon\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\n folded: x\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nContent-Length:\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n", 413},
        {"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
        {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
         501},
        {"GET / HTTP/1.1\r\nAuthorization: a\r\nauthorization: b\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nIdempotency-Key: a\r\nidempotency-key: a\r\n\r\n", 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        srv_head h;
        int got = check(cases[i].head, &h);
        if (got != cases[i].status)
            fail_msg("case %zu (%.30s): %d, want %d", i, cases[i].head, got, cases[i].status);
        assert_non_null(h.code);
        assert_true(h.msg[0] != '\0');
    }
    char target[SRV_MAX_TARGET + 32] = "GET /";
    memset(target + 5, 'a', SRV_MAX_TARGET);
    memcpy(target + 5 + SRV_MAX_TARGET, " HTTP/1.1\r\n\r\n", 14);
    srv_head h;
    assert_int_equal(check(target, &h), 414);
}

static void test_head_end(void **state)
{
    (void)state;
    assert_int_equal(srv_head_end("GET / HTTP/1.1\r\n\r\nbody", 22), 18);
    assert_int_equal(srv_head_end("GET / HTTP/1.1\n\nbody", 20), 16);
    assert_int_equal(srv_head_end("GET / HTTP/1.1\r\nHost: x\r\n", 25), 0);
    assert_int_equal(srv_head_end("GET / HTTP/1.1\r\n\r", 17), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts),
        cmocka_unit_test(test_refuses),
        cmocka_unit_test(test_head_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
