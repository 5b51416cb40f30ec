/* Exactly once through broker faults: while a meter consumes a stream
 * produced slice by slice, the embedded broker fails JoinGroup, SyncGroup,
 * Fetch, OffsetCommit and Heartbeat requests (the last forces a rebalance),
 * takes a broker down and back up, and slows another. None of it may change
 * what the ledger holds: it must equal a clean ingest of the same events.
 * Also checks the broker's control channel and its --port forwarder. */
#include <netinet/in.h>
#include <sys/socket.h>

#include "meter_e2e.h"

#define SLICES 6

static void produce_slice(e2e_broker *b, const char *kv, int i)
{
    char part[700];
    snprintf(part, sizeof part, "%s.%d", kv, i);
    e2e_produce(b, "usage", part);
}

/* Produces a slice in the background (kcat waits while a leader is down). */
static pid_t produce_slice_async(e2e_broker *b, const char *kv, int i, const char *dir)
{
    char part[700], log[700];
    snprintf(part, sizeof part, "%s.%d", kv, i);
    snprintf(log, sizeof log, "%s/kcat.log", dir);
    const char *argv[] = {"/usr/bin/env", "kcat",  "-P",  "-l", "-b", b->bootstrap,
                          "-t",           "usage", "-K:", part, NULL};
    return e2e_spawn(argv, log, NULL, NULL);
}

/* Waits until the ledger's offsets cover at least `messages`. */
static void wait_progress(const char *db, long messages, const char *log)
{
    int64_t until = e2e_ms() + 45000;
    while (e2e_count(db, "SELECT coalesce(sum(next_offset), 0) FROM offsets") < messages) {
        if (e2e_ms() > until)
            fail_msg("the meter is stuck before offset %ld (see %s)", messages, log);
        e2e_sleep_ms(50);
    }
}

static void test_faults_change_nothing(void **state)
{
    (void)state;
    TU_REQUIRE_TOOL(e2e_have_kcat(), "kcat");
    char dir[512], kv[600], nd[600], db[600], clean[600], log[600], blog[600];
    snprintf(dir, sizeof dir, "%s", tu_tmpdir("meter-faults"));
    snprintf(kv, sizeof kv, "%s/stream.kv", dir);
    snprintf(nd, sizeof nd, "%s/stream.ndjson", dir);
    snprintf(db, sizeof db, "%s/meter.db", dir);
    snprintf(clean, sizeof clean, "%s/clean.db", dir);
    snprintf(log, sizeof log, "%s/meter.log", dir);
    snprintf(blog, sizeof blog, "%s/broker.log", dir);

    e2e_stream st;
    e2e_stream_write(kv, nd, 12000, 150, 11, &st);
    e2e_split(kv, SLICES, st.messages);
    e2e_broker b;
    e2e_broker_start(&b, 8, blog);
    assert_int_equal(tu_tally(NULL, "--db '%s' init >/dev/null", db), 0);

    e2e_broker_ctl(&b, "error JoinGroup 2 COORDINATOR_NOT_AVAILABLE");
    e2e_broker_ctl(&b, "error SyncGroup 1 REBALANCE_IN_PROGRESS");
    const char *extra[] = {"--batch-events", "100",       "--batch-ms", "20",
                           "--dlq-topic",    "usage-dlq", NULL};
    pid_t m = e2e_meter(db, &b, "faults-group", log, extra);
    long per = (st.messages + SLICES - 1) / SLICES;
    produce_slice(&b, kv, 0);
    wait_progress(db, 1, log);
    /* Each fault is injected while the meter is consuming a fresh slice. */
    e2e_broker_ctl(&b, "error Fetch 10 NOT_LEADER_FOR_PARTITION");
    e2e_broker_ctl(&b, "error OffsetCommit 5 NOT_COORDINATOR");
    produce_slice(&b, kv, 1);
    wait_progress(db, 2 * per, log);
    e2e_broker_ctl(&b, "error Heartbeat 3 REBALANCE_IN_PROGRESS");
    produce_slice(&b, kv, 2);
    wait_progress(db, 3 * per, log);
    e2e_broker_ctl(&b, "down 2");
    pid_t producer = produce_slice_async(&b, kv, 3, dir);
    e2e_sleep_ms(2000);
    e2e_broker_ctl(&b, "up 2");
    assert_int_equal(e2e_wait(producer, 30000), 0);
    wait_progress(db, 4 * per, log);
    e2e_broker_ctl(&b, "rtt 1 300");
    produce_slice(&b, kv, 4);
    wait_progress(db, 5 * per, log);
    e2e_broker_ctl(&b, "rtt 1 0");
    produce_slice(&b, kv, 5);
    wait_progress(db, st.messages, log);
    assert_int_equal(e2e_stop(m, SIGTERM, 20000), 0);

    tally_buf out;
    tally_buf_init(&out, 0);
    assert_int_equal(tu_sh(&out, "grep -h '^messages=' '%s'", log), 0);
    print_message("%s", out.data);
    assert_non_null(strstr(out.data, "stale=0"));
    assert_null(strstr(out.data, "rebalances=1 ")); /* the heartbeat errors forced one more */
    tally_buf_release(&out);
    e2e_assert_stream(db, &st);
    e2e_clean_ingest(clean, nd);
    e2e_assert_same_usage(db, clean);
    e2e_assert_same_invoices(db, clean, dir);
    assert_int_equal(e2e_dlq_origins(&b), st.poison);
    e2e_broker_stop(&b);
}

/* A loopback port that is free now: bind port 0, note it, let it go. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET};
    socklen_t len = sizeof sin;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof sin), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
    close(fd);
    return ntohs(sin.sin_port);
}

static void test_broker_control_and_port(void **state)
{
    (void)state;
    TU_REQUIRE_TOOL(e2e_have_kcat(), "kcat");
    char dir[512], blog[600], line[256];
    snprintf(dir, sizeof dir, "%s", tu_tmpdir("meter-broker"));
    snprintf(blog, sizeof blog, "%s/broker.log", dir);
    int port = free_port();
    char sport[16];
    snprintf(sport, sizeof sport, "%d", port);
    const char *argv[] = {TALLY_BINARY, "broker", "--port", sport, "--partitions", "3", NULL};
    e2e_broker b = {0};
    b.pid = e2e_spawn(argv, blog, &b.ctl, &b.out);
    if (!e2e_read_line(b.out, b.bootstrap, sizeof b.bootstrap, 20000))
        fail_msg("no bootstrap line (port %d busy?)", port);
    snprintf(line, sizeof line, "127.0.0.1:%d", port);
    assert_string_equal(b.bootstrap, line);
    /* Clients bootstrap through the forwarder. */
    tally_buf out;
    tally_buf_init(&out, 0);
    assert_int_equal(tu_sh(&out, "kcat -L -b '%s' -t usage 2>&1", b.bootstrap), 0);
    assert_non_null(strstr(out.data, "3 partitions"));
    tally_buf_release(&out);
    /* Bad commands are answered with an error, and it keeps serving. */
    static const char *const bad[] = {"error Fetch x UNKNOWN", "down 9", "frobnicate",
                                      "error Fetch 1 NO_SUCH_ERROR", ""};
    for (size_t i = 0; i + 1 < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(write(b.ctl, bad[i], strlen(bad[i])), (ssize_t)strlen(bad[i]));
        assert_int_equal(write(b.ctl, "\n", 1), 1);
        assert_true(e2e_read_line(b.out, line, sizeof line, 5000));
        assert_true(strncmp(line, "error: ", 7) == 0);
    }
    e2e_broker_ctl(&b, "topic extra 2");
    e2e_broker_ctl(&b, "down 1");
    e2e_broker_ctl(&b, "up 1");
    e2e_broker_stop(&b); /* SIGTERM: exit 0 */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_broker_control_and_port, e2e_teardown),
        cmocka_unit_test_teardown(test_faults_change_nothing, e2e_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
