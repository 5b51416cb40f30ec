/* The HTTP API's parsers on their own (server/parse.c, server/route.c):
 * percent-decoding, query strings, the split of an events array and route
 * matching, with the bad input each must refuse. */
#include <string.h>

#include "../../server/server_int.h"
#include "testutil.h"

static void test_pct_decode(void **state)
{
    (void)state;
    char out[16];
    assert_int_equal(srv_pct_decode("a%2Fb+c", 7, false, out, sizeof out), TALLY_OK);
    assert_string_equal(out, "a/b+c");
    assert_int_equal(srv_pct_decode("a%2fb+c", 7, true, out, sizeof out), TALLY_OK);
    assert_string_equal(out, "a/b c");
    assert_int_equal(srv_pct_decode("", 0, true, out, sizeof out), TALLY_OK);
    assert_string_equal(out, "");
    static const char *const bad[] = {"%", "%2", "%zz", "%00", "a%0Ab", "\x01", "%7f", "%g0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(srv_pct_decode(bad[i], strlen(bad[i]), false, out, sizeof out),
                         TALLY_PARSE);
    assert_int_equal(srv_pct_decode("0123456789abcdef", 16, false, out, sizeof out),
                     TALLY_TOO_LARGE);
    assert_int_equal(srv_pct_decode("x", 1, false, out, 0), TALLY_TOO_LARGE);
}

static void test_query_parse(void **state)
{
    (void)state;
    char from[32], to[32];
    srv_qparam p[] = {{"from", from, sizeof from, false}, {"to", to, sizeof to, false}};
    const char *why = NULL;
    const char *q = "to=2026-04-01T00:00:00%2B08:00&&from=x+y&";
    assert_int_equal(srv_query_parse(q, strlen(q), p, 2, &why), TALLY_OK);
    assert_true(p[0].seen && p[1].seen);
    assert_string_equal(from, "x y");
    assert_string_equal(to, "2026-04-01T00:00:00+08:00");
    q = "from=";
    assert_int_equal(srv_query_parse(q, strlen(q), p, 2, &why), TALLY_OK);
    assert_true(p[0].seen && !p[1].seen);
    assert_string_equal(from, "");
    static const char *const bad[] = {"from",
                                      "x=1",
                                      "from=1&from=2",
                                      "from=%zz",
                                      "fro=1",
                                      "from=1&to=%00",
                                      "=1",
                                      "from=0123456789012345678901234567890123"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        why = NULL;
        assert_int_not_equal(srv_query_parse(bad[i], strlen(bad[i]), p, 2, &why), TALLY_OK);
        assert_non_null(why);
        assert_true(why[0] != '\0');
    }
    assert_int_equal(srv_query_parse("a=1", 3, NULL, 0, &why), TALLY_PARSE);
    assert_int_equal(srv_query_parse("", 0, NULL, 0, &why), TALLY_OK);
}

static void test_array_split(void **state)
{
    (void)state;
    srv_span sp[4];
    size_t n = 0;
    const char *why = NULL;
    const char *body = " [ {\"a\":\"],}\\\"[\"} ,\n[1,[2]] , \"x\" ]\r\n";
    assert_int_equal(srv_json_array_split(body, strlen(body), sp, 4, &n, &why), TALLY_OK);
    assert_int_equal(n, 3);
    assert_memory_equal(body + sp[0].off, "{\"a\":\"],}\\\"[\"}", sp[0].len);
    assert_int_equal(sp[0].len, strlen("{\"a\":\"],}\\\"[\"}"));
    assert_memory_equal(body + sp[1].off, "[1,[2]]", sp[1].len);
    assert_memory_equal(body + sp[2].off, "\"x\"", sp[2].len);
    assert_int_equal(srv_json_array_split("[]", 2, sp, 4, &n, &why), TALLY_OK);
    assert_int_equal(n, 0);
    assert_int_equal(srv_json_array_split("[1,2,3,4,5]", 11, sp, 4, &n, &why), TALLY_TOO_LARGE);
    static const char *const bad[] = {
        "",     "{}",      "[",        "[1",          "[1,",   "[1,]", "[,1]",
        "[1]x", "[1] [2]", "[\"]",     "[{]}",        "[[1}]", "[}",   "]",
        "[1]]", "\"[1]\"", "[\"\\\"]", "[{\"a\":[}]", "null",  "  ",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        why = NULL;
        if (srv_json_array_split(bad[i], strlen(bad[i]), sp, 4, &n, &why) != TALLY_PARSE)
            fail_msg("accepted %s", bad[i]);
        assert_non_null(why);
    }
    /* Bytes after a NUL are still looked at: the length is what counts. */
    assert_int_equal(srv_json_array_split("[1]\0", 4, sp, 4, &n, &why), TALLY_PARSE);
    char deep[200];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    assert_int_equal(srv_json_array_split(deep, sizeof deep, sp, 4, &n, &why), TALLY_PARSE);
}

static srv_outcome dummy(srv_call *c)
{
    (void)c;
    return SRV_ANSWERED;
}

static const srv_route table[] = {
    {"GET", "/a/{x}/b", dummy, SRV_PUBLIC},
    {"PUT", "/a/{x}/b", dummy, SRV_ADMIN},
    {"POST", "/a", dummy, SRV_ANY_KEY},
    {"GET", "/c/{x}/{y}", dummy, SRV_PUBLIC},
};

static srv_match match(const char *method, const char *path, const srv_route **r,
                       char params[SRV_MAX_PARAMS][SRV_PARAM_MAX], size_t *n, char *allow)
{
    return srv_route_match(table, sizeof table / sizeof *table, method, path, strlen(path), r,
                           params, n, allow, 48);
}

static void test_route_match(void **state)
{
    (void)state;
    const srv_route *r = NULL;
    char params[SRV_MAX_PARAMS][SRV_PARAM_MAX], allow[48];
    size_t n = 0;
    assert_int_equal(match("PUT", "/a/x%2Fy/b", &r, params, &n, allow), SRV_MATCH_OK);
    assert_ptr_equal(r, &table[1]);
    assert_int_equal(n, 1);
    assert_string_equal(params[0], "x/y");
    assert_int_equal(match("GET", "/c/1/2", &r, params, &n, allow), SRV_MATCH_OK);
    assert_int_equal(n, 2);
    assert_string_equal(params[1], "2");
    assert_int_equal(match("DELETE", "/a/x/b", &r, params, &n, allow), SRV_MATCH_NO_METHOD);
    assert_string_equal(allow, "GET, PUT");
    assert_null(r);
    assert_int_equal(match("GET", "/a", &r, params, &n, allow), SRV_MATCH_NO_METHOD);
    assert_string_equal(allow, "POST");
    static const char *const missing[] = {"/",    "",   "a",    "/a/",      "/a//b", "/a/x/b/",
                                          "/a/x", "/A", "/c/1", "/c/1/2/3", "//a"};
    for (size_t i = 0; i < sizeof missing / sizeof *missing; i++)
        if (match("GET", missing[i], &r, params, &n, allow) != SRV_MATCH_NO_ROUTE)
            fail_msg("matched %s", missing[i]);
    assert_int_equal(match("GET", "/a/%zz/b", &r, params, &n, allow), SRV_MATCH_BAD_PATH);
    assert_int_equal(match("GET", "/a/%00/b", &r, params, &n, allow), SRV_MATCH_BAD_PATH);
    char long_path[400];
    memset(long_path, 'x', sizeof long_path);
    memcpy(long_path, "/a/", 3);
    memcpy(long_path + sizeof long_path - 3, "/b", 3);
    assert_int_equal(match("GET", long_path, &r, params, &n, allow), SRV_MATCH_BAD_PATH);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pct_decode),
        cmocka_unit_test(test_query_parse),
        cmocka_unit_test(test_array_split),
        cmocka_unit_test(test_route_match),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
