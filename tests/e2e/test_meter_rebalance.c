/* Exactly once through rebalances: a meter consumes while the stream is
 * produced slice by slice; a second meter joins the same group (same ledger
 * file) midway, later the first leaves (SIGTERM: it commits, leaves the
 * group, exits 0). Between them the two meters must have committed every
 * message exactly once, and the ledger must equal a clean ingest. */
#include "meter_e2e.h"

#define SLICES 10

static long summary_messages(const char *log)
{
    tally_buf out;
    tally_buf_init(&out, 0);
    int rc = tu_sh(
        &out, "grep -h '^messages=' '%s' | tail -1 | sed 's/messages=\\([0-9]*\\).*/\\1/'", log);
    long n = rc == 0 && out.data ? strtol(out.data, NULL, 10) : -1;
    tally_buf_release(&out);
    return n;
}

/* Waits until the ledger's offsets cover `messages` (or fails). */
static void wait_drained(const char *db, long messages, int64_t ms)
{
    int64_t until = e2e_ms() + ms;
    char sql[] = "SELECT coalesce(sum(next_offset), 0) FROM offsets";
    while (e2e_count(db, sql) < messages) {
        if (e2e_ms() > until)
            fail_msg("the meters did not drain the topic in time");
        e2e_sleep_ms(200);
    }
}

/* Waits until a meter's progress line shows partitions assigned to it. */
static void wait_assigned(const char *log)
{
    int64_t until = e2e_ms() + 30000;
    while (tu_sh(NULL, "grep -q 'partitions=[1-9]' '%s'", log) != 0) {
        if (e2e_ms() > until)
            fail_msg("the second meter got no partitions (see %s)", log);
        e2e_sleep_ms(100);
    }
}

static void test_join_and_leave(void **state)
{
    (void)state;
    TU_REQUIRE_TOOL(e2e_have_kcat(), "kcat");
    char dir[512], kv[600], nd[600], db[600], clean[600], log_a[600], log_b[600], part[640];
    snprintf(dir, sizeof dir, "%s", tu_tmpdir("meter-rebalance"));
    snprintf(kv, sizeof kv, "%s/stream.kv", dir);
    snprintf(nd, sizeof nd, "%s/stream.ndjson", dir);
    snprintf(db, sizeof db, "%s/meter.db", dir);
    snprintf(clean, sizeof clean, "%s/clean.db", dir);
    snprintf(log_a, sizeof log_a, "%s/meter-a.log", dir);
    snprintf(log_b, sizeof log_b, "%s/meter-b.log", dir);

    e2e_stream st;
    e2e_stream_write(kv, nd, 20000, 200, 7, &st);
    e2e_split(kv, SLICES, st.messages);
    e2e_broker b;
    snprintf(part, sizeof part, "%s/broker.log", dir);
    e2e_broker_start(&b, 8, part);
    assert_int_equal(tu_tally(NULL, "--db '%s' init >/dev/null", db), 0);

    const char *extra[] = {"--batch-events", "500",       "--batch-ms", "50",
                           "--dlq-topic",    "usage-dlq", NULL};
    pid_t a = e2e_meter(db, &b, "rebalance-group", log_a, extra), bm = 0;
    for (int i = 0; i < SLICES; i++) {
        snprintf(part, sizeof part, "%s.%d", kv, i);
        e2e_produce(&b, "usage", part);
        if (i == 2)
            bm = e2e_meter(db, &b, "rebalance-group", log_b, extra);
        if (i == 6) { /* once B holds partitions, A leaves and B takes everything */
            wait_assigned(log_b);
            assert_int_equal(e2e_stop(a, SIGTERM, 20000), 0);
        }
        e2e_sleep_ms(700);
    }
    wait_drained(db, st.messages, 45000);
    assert_int_equal(e2e_stop(bm, SIGTERM, 20000), 0);

    long by_a = summary_messages(log_a), by_b = summary_messages(log_b);
    print_message("meter A committed %ld messages, meter B %ld, of %ld\n", by_a, by_b, st.messages);
    assert_true(by_a > 0 && by_b > 0);
    assert_int_equal(by_a + by_b, st.messages);
    e2e_assert_stream(db, &st);
    e2e_clean_ingest(clean, nd);
    e2e_assert_same_usage(db, clean);
    e2e_assert_same_invoices(db, clean, dir);
    /* Each quarantined message has a dead-letter copy; a commit refused by a
     * rebalance may make a few twice (they carry the same origin). */
    long copies = e2e_topic_count(&b, "usage-dlq");
    print_message("dead-letter copies: %ld for %ld quarantined\n", copies, st.poison);
    assert_true(copies >= st.poison);
    assert_int_equal(e2e_dlq_origins(&b), st.poison);
    e2e_broker_stop(&b);
}

static long summary_field(const char *log, const char *field)
{
    tally_buf out;
    tally_buf_init(&out, 0);
    int rc = tu_sh(&out, "grep -h '^messages=' '%s' | tail -1 | grep -o ' %s=[0-9]*' | cut -d= -f2",
                   log, field);
    long n = rc == 0 && out.data ? strtol(out.data, NULL, 10) : -1;
    tally_buf_release(&out);
    return n;
}

/* Two meters in different groups both own every partition and write the
 * same ledger: each acts as the other's stale writer. Offset
 * compare-and-set lets exactly one commit of each range through; the other
 * is dropped and resumes from the stored offsets. Between them every
 * message is committed exactly once. */
static void test_stale_writers(void **state)
{
    (void)state;
    TU_REQUIRE_TOOL(e2e_have_kcat(), "kcat");
    char dir[512], kv[600], nd[600], db[600], clean[600], log_a[600], log_b[600], part[640];
    snprintf(dir, sizeof dir, "%s", tu_tmpdir("meter-stale"));
    snprintf(kv, sizeof kv, "%s/stream.kv", dir);
    snprintf(nd, sizeof nd, "%s/stream.ndjson", dir);
    snprintf(db, sizeof db, "%s/meter.db", dir);
    snprintf(clean, sizeof clean, "%s/clean.db", dir);
    snprintf(log_a, sizeof log_a, "%s/meter-a.log", dir);
    snprintf(log_b, sizeof log_b, "%s/meter-b.log", dir);

    e2e_stream st;
    e2e_stream_write(kv, nd, 10000, 100, 23, &st);
    e2e_split(kv, 4, st.messages);
    e2e_broker b;
    snprintf(part, sizeof part, "%s/broker.log", dir);
    e2e_broker_start(&b, 4, part);
    assert_int_equal(tu_tally(NULL, "--db '%s' init >/dev/null", db), 0);
    const char *extra[] = {"--batch-events", "200", "--batch-ms", "20", NULL};
    pid_t a = e2e_meter(db, &b, "group-a", log_a, extra);
    pid_t bm = e2e_meter(db, &b, "group-b", log_b, extra);
    for (int i = 0; i < 4; i++) {
        snprintf(part, sizeof part, "%s.%d", kv, i);
        e2e_produce(&b, "usage", part);
        e2e_sleep_ms(500);
    }
    int64_t until = e2e_ms() + 45000;
    while (e2e_count(db, "SELECT coalesce(sum(next_offset), 0) FROM offsets") < st.messages) {
        if (e2e_ms() > until)
            fail_msg("the meters did not drain the topic (see %s, %s)", log_a, log_b);
        e2e_sleep_ms(200);
    }
    e2e_sleep_ms(500); /* let the slower one see that it is behind */
    assert_int_equal(e2e_stop(a, SIGTERM, 20000), 0);
    assert_int_equal(e2e_stop(bm, SIGTERM, 20000), 0);

    long by_a = summary_messages(log_a), by_b = summary_messages(log_b);
    long stale = summary_field(log_a, "stale") + summary_field(log_b, "stale");
    print_message("A committed %ld, B %ld of %ld; %ld batches dropped as stale\n", by_a, by_b,
                  st.messages, stale);
    assert_int_equal(by_a + by_b, st.messages);
    assert_true(stale > 0);
    e2e_assert_stream(db, &st);
    e2e_clean_ingest(clean, nd);
    e2e_assert_same_usage(db, clean);
    e2e_assert_same_invoices(db, clean, dir);
    e2e_broker_stop(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_join_and_leave, e2e_teardown),
        cmocka_unit_test_teardown(test_stale_writers, e2e_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
