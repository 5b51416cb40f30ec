/* The ingest pipeline (include/tally/pipeline.h): every kind of bad message
 * gets its reason, is quarantined, and never costs the events around it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tally/pipeline.h"
#include "tally/ledger_sql.h"

#define NOW_S 1775001600LL /* 2026-04-01T00:00:00Z */

#define EV(id, time, data)                                                                         \
    "{\"specversion\":\"1.0\",\"id\":\"" id "\",\"source\":\"//h\",\"type\":"                      \
    "\"accelerator.usage\",\"subject\":\"acme\",\"time\":\"" time "\",\"data\":" data "}"
#define GPU(extra) "{\"instance\":\"i-1\",\"sku\":\"a100-40g\",\"pricing\":\"on_demand\"" extra "}"

typedef struct poison_case {
    const char *msg;
    const char *reason; /* "" for an event */
    tally_event_result result;
} poison_case;

static const poison_case stream[] = {
    {EV("g1", "2026-03-10T00:00:00Z", GPU(",\"seconds\":3600")), "", TALLY_RESULT_ACCEPTED},
    {EV("b1", "1969-12-31T23:59:59Z", GPU("")), "bad_time", TALLY_RESULT_QUARANTINED},
    {EV("b2", "0001-01-01T00:00:00Z", GPU("")), "bad_time", TALLY_RESULT_QUARANTINED},
    {EV("b3", "2026-04-01T00:10:00Z", GPU("")), "bad_time", TALLY_RESULT_QUARANTINED},
    {"not json", "bad_json", TALLY_RESULT_QUARANTINED},
    {"{\"specversion\":\"1.0\",\"id\":\"x\"", "bad_json", TALLY_RESULT_QUARANTINED},
    {EV("b4", "2026-03-10T00:00:00Z", GPU(",\"cards\":9223372036854775807")), "out_of_range",
     TALLY_RESULT_QUARANTINED},
    {EV("b5", "2026-03-10T00:00:00Z",
        "{\"instance\":\"i-1\",\"sku\":\"quantum-9000\",\"pricing\":\"on_demand\"}"),
     "unknown_sku", TALLY_RESULT_QUARANTINED},
    {EV("g1", "2026-03-10T00:00:00Z", GPU(",\"seconds\":3600")), "", TALLY_RESULT_DUPLICATE},
    {EV("g1", "2026-03-10T00:00:00Z", GPU(",\"seconds\":60")), "", TALLY_RESULT_CONFLICT},
    {EV("g2", "2026-03-10T01:00:00Z", GPU(",\"seconds\":3600")), "", TALLY_RESULT_ACCEPTED},
};
#define N_STREAM (sizeof stream / sizeof *stream)

static void test_decode_reasons(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_STREAM; i++) {
        tally_decoded d;
        bool ok = tally_pipeline_decode(stream[i].msg, strlen(stream[i].msg), NOW_S, &d);
        assert_int_equal(ok, d.is_event);
        if (stream[i].reason[0] && strcmp(stream[i].reason, "unknown_sku") != 0) {
            if (ok || strcmp(d.u.rej.reason, stream[i].reason) != 0)
                fail_msg("message %zu: want %s, got %s", i, stream[i].reason,
                         ok ? "an event" : d.u.rej.reason);
        } else if (!ok) {
            fail_msg("message %zu rejected: %s", i, d.u.rej.reason);
        }
    }
}

static tally_err reason_row(void *ctx, int ncols, const char *const *cols)
{
    tally_buf *b = ctx;
    return tally_buf_printf(b, "%s|%s\n", cols[0], cols[1]);
}

/* A ledger made by `tally init` (with the fixture rate card). */
static tally_ledger *open_ledger(const char *tag)
{
    char db[600], why[256];
    snprintf(db, sizeof db, "%s/p.db", tu_tmpdir(tag));
    assert_int_equal(tu_tally(NULL, "--db '%s' init >/dev/null", db), 0);
    tally_ledger *l = NULL;
    if (tally_ledger_open(db, &l, why, sizeof why) != TALLY_OK)
        fail_msg("%s", why);
    return l;
}

static void test_stream_never_aborts(void **state)
{
    (void)state;
    char origin[64];
    tally_ledger *l = open_ledger("pipeline");
    tally_pipeline *p = NULL;
    assert_int_equal(tally_pipeline_create(l, 4, &p), TALLY_OK);
    tally_event_result res[N_STREAM];
    size_t done = 0;
    for (size_t i = 0; i < N_STREAM; i++) {
        snprintf(origin, sizeof origin, "test:%zu", i);
        assert_int_equal(
            tally_pipeline_add(p, stream[i].msg, strlen(stream[i].msg), origin, NOW_S, NULL),
            TALLY_OK);
        if (tally_pipeline_full(p) || i + 1 == N_STREAM) {
            size_t n = tally_pipeline_pending(p);
            assert_int_equal(tally_pipeline_commit(p, res + done), TALLY_OK);
            done += n;
        }
    }
    assert_int_equal(done, N_STREAM);
    for (size_t i = 0; i < N_STREAM; i++)
        if (res[i] != stream[i].result)
            fail_msg("message %zu: want %s, got %s", i, tally_event_result_name(stream[i].result),
                     tally_event_result_name(res[i]));
    tally_batch_stats t;
    tally_pipeline_totals(p, &t);
    assert_int_equal(t.accepted, 2);
    assert_int_equal(t.duplicates, 1);
    assert_int_equal(t.conflicts, 1);
    assert_int_equal(t.quarantined, 7);
    tally_buf got;
    tally_buf_init(&got, 0);
    assert_int_equal(tally_ledger_query(l, "SELECT origin, reason FROM quarantine ORDER BY id",
                                        NULL, 0, reason_row, &got),
                     TALLY_OK);
    assert_string_equal(got.data, "test:1|bad_time\ntest:2|bad_time\ntest:3|bad_time\n"
                                  "test:4|bad_json\ntest:5|bad_json\ntest:6|out_of_range\n"
                                  "test:7|unknown_sku\ntest:9|conflict\n");
    tally_buf_release(&got);
    tally_pipeline_destroy(p);
    tally_pipeline_destroy(NULL);
    tally_ledger_close(l);
}

/* A stream of large messages fills a batch by bytes long before any count
 * does: the pipeline says full at 64 MiB, so the caller commits instead of
 * the batch refusing a message at its own 512 MiB bound (a file of 10,000
 * maximal lines used to fail ingest at about line 8,000). */
static void test_full_by_bytes(void **state)
{
    (void)state;
    char origin[64];
    tally_ledger *l = open_ledger("pipeline-bytes");
    tally_pipeline *p = NULL;
    assert_int_equal(tally_pipeline_create(l, 1000000, &p), TALLY_OK);
    static char msg[TALLY_EVENT_MAX_BYTES];
    const size_t pad = TALLY_EVENT_MAX_BYTES - 512;
    size_t i = 0;
    for (; i < 2000 && !tally_pipeline_full(p); i++) {
        int n = snprintf(msg, sizeof msg,
                         "{\"specversion\":\"1.0\",\"id\":\"big-%06zu\",\"source\":\"//h\","
                         "\"type\":\"tokens.usage\",\"subject\":\"acme\",\"time\":"
                         "\"2026-03-10T00:00:00Z\",\"data\":{\"model\":\"qwen-72b\",\"kind\":"
                         "\"input\",\"tokens\":1},\"pad\":\"",
                         i);
        memset(msg + n, 'x', pad);
        memcpy(msg + n + pad, "\"}", 3);
        snprintf(origin, sizeof origin, "test:%zu", i);
        assert_int_equal(tally_pipeline_add(p, msg, strlen(msg), origin, NOW_S, NULL), TALLY_OK);
    }
    assert_true(tally_pipeline_full(p));
    assert_true(i * TALLY_EVENT_MAX_BYTES >= TALLY_PIPELINE_FULL_BYTES);
    assert_true(i <= TALLY_PIPELINE_FULL_BYTES / pad + 1);
    assert_int_equal(tally_pipeline_commit(p, NULL), TALLY_OK);
    assert_false(tally_pipeline_full(p));
    tally_pipeline_destroy(p);
    tally_ledger_close(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_reasons),
        cmocka_unit_test(test_stream_never_aborts),
        cmocka_unit_test(test_full_by_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
