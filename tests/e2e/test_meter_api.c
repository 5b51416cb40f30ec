/* In-process checks of include/tally/meter.h: the embedded broker's options
 * and fault-injection commands (good and bad), and the meter's option
 * checks and lifecycle, including a short run against an empty topic. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "tally/broker.h"
#include "tally/meter.h"

static void test_broker_options(void **state)
{
    (void)state;
    char why[256];
    tally_broker *b = (tally_broker *)1;
    tally_broker_opts bad[] = {{.brokers = 17}, {.partitions = -1}, {.port = 70000}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        why[0] = '\0';
        assert_int_equal(tally_broker_create(&bad[i], &b, why, sizeof why), TALLY_INVAL);
        assert_null(b);
        assert_true(why[0] != '\0');
    }
    tally_broker_destroy(NULL);
}

static void test_broker_control(void **state)
{
    (void)state;
    char why[256];
    tally_broker *b = NULL;
    tally_broker_opts o = {.brokers = 2, .topic = "events", .partitions = 2};
    assert_int_equal(tally_broker_create(&o, &b, why, sizeof why), TALLY_OK);
    const char *boot = tally_broker_bootstrap(b);
    assert_non_null(strstr(boot, "127.0.0.1:"));
    assert_non_null(strchr(boot, ',')); /* two brokers, no forwarder */

    static const char *const good[] = {
        "error Fetch 3 NOT_LEADER_FOR_PARTITION",
        "error 8 1 RD_KAFKA_RESP_ERR_NOT_COORDINATOR",
        "error heartbeat 2 27",
        "clear Fetch",
        "down 2",
        "up 2",
        "rtt 1 50",
        "rtt 1 0",
        "topic more 3",
        "  down   1  ",
        "up 1\n",
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        why[0] = '\0';
        if (tally_broker_control(b, good[i], why, sizeof why) != TALLY_OK)
            fail_msg("'%s' refused: %s", good[i], why);
    }
    static const char *const bad[] = {
        "",
        "   ",
        "bogus",
        "error Fetch",
        "error Fetch 0 UNKNOWN",
        "error Fetch 2 NO_SUCH",
        "error NoSuchApi 1 UNKNOWN",
        "down",
        "down 3",
        "down 0",
        "down x",
        "up 1 2",
        "rtt 1 -5",
        "topic t 0",
        "topic t 999999",
        "error Fetch 1 UNKNOWN extra words here",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        why[0] = '\0';
        if (tally_broker_control(b, bad[i], why, sizeof why) != TALLY_PARSE)
            fail_msg("'%s' accepted", bad[i]);
        assert_true(why[0] != '\0');
    }
    char longline[600];
    memset(longline, 'x', sizeof longline - 1);
    longline[sizeof longline - 1] = '\0';
    assert_int_equal(tally_broker_control(b, longline, why, sizeof why), TALLY_PARSE);
    /* The topic exists already (KAFKA), a name that is too long is refused. */
    assert_int_equal(tally_broker_topic_create(b, "events", 1), TALLY_KAFKA);
    assert_int_equal(tally_broker_topic_create(b, "", 1), TALLY_INVAL);
    assert_int_equal(tally_broker_topic_create(b, "x", 0), TALLY_INVAL);
    tally_broker_destroy(b);
}

static tally_ledger *fresh_ledger(const char *tag)
{
    char path[600], why[256];
    snprintf(path, sizeof path, "%s/meter.db", tu_tmpdir(tag));
    tally_ledger *l = NULL;
    if (tally_ledger_open(path, &l, why, sizeof why) != TALLY_OK)
        fail_msg("cannot open %s: %s", path, why);
    return l;
}

static void test_consumer_options(void **state)
{
    (void)state;
    tally_ledger *l = fresh_ledger("meter-api-opts");
    char why[256], longtopic[300];
    memset(longtopic, 't', sizeof longtopic - 1);
    longtopic[sizeof longtopic - 1] = '\0';
    tally_consumer_opts bad[] = {
        {.topic = "usage"},
        {.brokers = "127.0.0.1:1"},
        {.brokers = "127.0.0.1:1", .topic = ""},
        {.brokers = "127.0.0.1:1", .topic = longtopic},
        {.brokers = "127.0.0.1:1", .topic = "usage", .batch_events = -1},
        {.brokers = "127.0.0.1:1", .topic = "usage", .batch_events = 2000000},
        {.brokers = "127.0.0.1:1", .topic = "usage", .batch_ms = -5},
        {.brokers = "127.0.0.1:1", .topic = "usage", .until_idle_ms = -1},
        {.brokers = "127.0.0.1:1", .topic = "usage", .session_timeout_ms = 10},
        {.brokers = "127.0.0.1:1", .topic = "usage", .session_timeout_ms = 2999},
        {.brokers = "127.0.0.1:1", .topic = "usage", .group = ""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tally_consumer *c = (tally_consumer *)1;
        why[0] = '\0';
        assert_int_equal(tally_consumer_create(l, &bad[i], &c, why, sizeof why), TALLY_INVAL);
        assert_null(c);
        assert_true(why[0] != '\0');
    }
    tally_consumer *c = (tally_consumer *)1;
    assert_int_equal(tally_consumer_create(NULL, &bad[0], &c, why, sizeof why), TALLY_INVAL);
    tally_consumer_destroy(NULL);
    tally_ledger_close(l);
}

/* Joins, finds nothing, and returns once idle; then a stop flag that is
 * already set returns at once. Nothing is written. */
static void test_consumer_idle_run(void **state)
{
    (void)state;
    char why[256];
    tally_broker *b = NULL;
    tally_broker_opts bo = {.partitions = 2};
    assert_int_equal(tally_broker_create(&bo, &b, why, sizeof why), TALLY_OK);
    tally_ledger *l = fresh_ledger("meter-api-run");
    tally_consumer_opts o = {.brokers = tally_broker_bootstrap(b),
                             .topic = "usage",
                             .group = "api",
                             .dlq_topic = "usage-dlq",
                             .until_idle_ms = 500};
    tally_consumer *c = NULL;
    assert_int_equal(tally_consumer_create(l, &o, &c, why, sizeof why), TALLY_OK);
    assert_int_equal(tally_consumer_run(c, NULL, NULL, NULL), TALLY_OK);
    tally_consumer_stats st;
    tally_consumer_stats_get(c, &st);
    assert_int_equal(st.messages, 0);
    assert_int_equal(st.batches, 0);
    assert_int_equal(st.rebalances, 1);
    assert_int_equal(st.partitions, 2);
    assert_int_equal(st.lag, 0);
    assert_int_equal(st.first_ms, -1);
    tally_consumer_destroy(c);

    volatile sig_atomic_t stop = 1;
    o.until_idle_ms = 0;
    assert_int_equal(tally_consumer_create(l, &o, &c, why, sizeof why), TALLY_OK);
    assert_int_equal(tally_consumer_run(c, &stop, NULL, NULL), TALLY_OK);
    tally_consumer_destroy(c);
    tally_ledger_close(l);
    tally_broker_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_broker_options),
        cmocka_unit_test(test_broker_control),
        cmocka_unit_test(test_consumer_options),
        cmocka_unit_test(test_consumer_idle_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
