/* POST /v1/events with --brokers: events are produced to Kafka (the embedded
 * broker) and answered "produced" once delivered; invalid ones are
 * quarantined in the ledger; `tally meter` then brings the produced ones into
 * the ledger, and /metrics reports consumer lag per partition. */
#include "test_http.h"

static http_fixture fx;
static pid_t broker_pid;
static char bootstrap[512];

static int setup(void **state)
{
    (void)state;
    setenv("TALLY_NOW", "2026-04-02T00:00:00Z", 1);
    fx_ledger(&fx, "http-kafka");
    const char *broker[] = {TALLY_BINARY, "broker", "--partitions", "2", NULL};
    broker_pid = spawn_first_line(fx.dir, "broker", broker, bootstrap, sizeof bootstrap);
    const char *extra[] = {"--brokers", bootstrap, "--topic", "usage", NULL};
    fx_start(&fx, extra);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fx_stop(&fx);
    assert_int_equal(stop_pid(broker_pid), 0);
    return 0;
}

/* The sum of the tally_consumer_lag lines of a /metrics answer. */
static long long lag_total(const char *metrics)
{
    long long sum = 0;
    for (const char *p = strstr(metrics, "\ntally_consumer_lag{"); p;
         p = strstr(p + 1, "\ntally_consumer_lag{"))
        sum += strtoll(strchr(p, '}') + 1, NULL, 10);
    return sum;
}

/* Polls /metrics until the lag lines sum to want (watermark queries can
 * time out on a loaded machine); returns the last sum seen. */
static long long wait_for_lag(long long want)
{
    long long lag = -1;
    for (int i = 0; i < 10 && lag != want; i++) {
        http_answer a;
        assert_int_equal(http_get(&fx, &a, "/metrics", NULL), 200);
        lag = lag_total(a.body.data);
        http_done(&a);
        if (lag != want)
            usleep(300000);
    }
    return lag;
}

static void test_produce_then_meter(void **state)
{
    (void)state;
    char e1[512], e2[512], e3[512], body[2000];
    event_json(e1, sizeof e1, "k1", "acme", "h100", "2026-03-05T10:00:00Z", 2, 3600);
    /* Not under the ingest key's prefix "host-": forbidden, never produced. */
    event_json_from(e2, sizeof e2, "rack-9", "k2", "globex", "h100", "2026-03-05T10:00:00Z", 1,
                    3600);
    event_json(e3, sizeof e3, "k3", "acme", "h100", "2026-03-05T11:00:00Z", 2, 3600);
    snprintf(body, sizeof body, "[%s,%s,{\"specversion\":\"0.3\"},%s]", e1, e2, e3);
    http_answer a;
    assert_int_equal(http_send(&fx, &a, "POST", "/v1/events", fx.ingest, body), 200);
    assert_contains(&a.body, "{\"index\":0,\"id\":\"k1\",\"status\":\"produced\"}");
    assert_contains(&a.body, "{\"index\":1,\"id\":\"k2\",\"status\":\"forbidden\"");
    assert_contains(&a.body, "{\"index\":2,\"status\":\"quarantined\",\"reason\":\"");
    assert_contains(&a.body, "{\"index\":3,\"id\":\"k3\",\"status\":\"produced\"}");
    http_done(&a);
    /* Both acme events are keyed by account: one partition holds them. */
    assert_int_equal(wait_for_lag(2), 2);
    assert_int_equal(http_get(&fx, &a, "/metrics", NULL), 200);
    assert_contains(&a.body, "tally_consumer_lag{topic=\"usage\",partition=\"0\"}");
    assert_contains(&a.body, "tally_consumer_lag{topic=\"usage\",partition=\"1\"}");
    assert_contains(&a.body, "tally_http_events_total{result=\"produced\"} 2\n");
    http_done(&a);
    tally_buf out;
    tally_buf_init(&out, 0);
    char args[700];
    snprintf(args, sizeof args, "meter --brokers '%s' --topic usage --until-idle 1 2>/dev/null",
             bootstrap);
    fx_tally_ok(&fx, &out, args);
    assert_contains(&out, "accepted=2");
    tally_buf_release(&out);
    assert_int_equal(http_get(&fx, &a,
                              "/v1/accounts/acme/usage?from=2026-03-01T00:00:00Z"
                              "&to=2026-04-01T00:00:00Z",
                              fx.acme),
                     200);
    assert_contains(&a.body, "\"quantity\":\"14400\""); /* 2 cards x 2 h */
    http_done(&a);
    assert_int_equal(wait_for_lag(0), 0);
    /* globex (an account of the fixture) got nothing: the forbidden event
     * was never produced. */
    assert_int_equal(http_get(&fx, &a,
                              "/v1/accounts/globex/usage?from=2026-03-01T00:00:00Z"
                              "&to=2026-04-01T00:00:00Z",
                              fx.admin),
                     200);
    assert_contains(&a.body, "\"groups\":[]");
    http_done(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_produce_then_meter),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
