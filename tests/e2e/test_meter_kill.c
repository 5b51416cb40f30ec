/* Exactly once through crashes: `tally meter` is SIGKILLed at seeded random
 * moments mid-stream (after it has committed something, so kills land
 * between and inside commits) and restarted each time, until a last run
 * drains the topic with --until-idle. The ledger must then hold exactly
 * what a clean `tally ingest` of the same events holds: the same usage to
 * the card-second, every distinct event once, every poison message
 * quarantined exactly once, and a dead-letter copy of each.
 *
 * TALLY_KILL_EVENTS, TALLY_KILL_KILLS, TALLY_KILL_SEED and
 * TALLY_KILL_PARTITIONS scale it up (the long version: bench/kafka_kill.sh). */
#include "meter_e2e.h"

static long env_long(const char *name, long dflt)
{
    const char *s = getenv(name);
    return s && *s ? strtol(s, NULL, 10) : dflt;
}

/* The sum of the stored offsets (how far the ledger got), -1 if unreadable. */
static long ledger_progress(const char *db)
{
    tally_buf out;
    tally_buf_init(&out, 0);
    int rc = tu_sh(&out,
                   "sqlite3 -readonly '%s' 'SELECT coalesce(sum(next_offset),0) FROM offsets' "
                   "2>/dev/null",
                   db);
    long n = rc == 0 && out.data ? strtol(out.data, NULL, 10) : -1;
    tally_buf_release(&out);
    return n;
}

/* Runs a meter until it has committed past `after`, then kills it after a
 * random delay. Returns the progress reached, or -1 if the meter exited. */
static long run_and_kill(const char *db, const e2e_broker *b, const char *log, long after,
                         uint64_t *rng)
{
    const char *extra[] = {"--batch-events", "150",       "--batch-ms", "30",
                           "--dlq-topic",    "usage-dlq", NULL};
    pid_t pid = e2e_meter(db, b, "kill-group", log, extra);
    int64_t until = e2e_ms() + 30000;
    long now = after;
    while (now <= after && e2e_ms() < until) {
        if (e2e_wait(pid, 30) != -1)
            fail_msg("the meter exited before it was killed (see %s)", log);
        now = ledger_progress(db);
    }
    if (now <= after)
        fail_msg("the meter made no progress in 30 s (see %s)", log);
    e2e_sleep_ms((int64_t)(e2e_rand(rng) % 400));
    assert_int_equal(e2e_stop(pid, SIGKILL, 5000), 128 + SIGKILL);
    return ledger_progress(db);
}

static void test_kill9_exactly_once(void **state)
{
    (void)state;
    TU_REQUIRE_TOOL(e2e_have_kcat(), "kcat");
    long events = env_long("TALLY_KILL_EVENTS", 20000);
    long kills_wanted = env_long("TALLY_KILL_KILLS", 5);
    uint64_t rng = (uint64_t)env_long("TALLY_KILL_SEED", 20260301);
    char dir[512], kv[600], nd[600], db[600], clean[600], log[600], part[640];
    snprintf(dir, sizeof dir, "%s", tu_tmpdir("meter-kill"));
    snprintf(kv, sizeof kv, "%s/stream.kv", dir);
    snprintf(nd, sizeof nd, "%s/stream.ndjson", dir);
    snprintf(db, sizeof db, "%s/meter.db", dir);
    snprintf(clean, sizeof clean, "%s/clean.db", dir);
    snprintf(log, sizeof log, "%s/meter.log", dir);

    e2e_stream st;
    e2e_stream_write(kv, nd, events, 300, rng, &st);
    int parts = (int)kills_wanted + 2;
    e2e_split(kv, parts, st.messages);
    e2e_broker b;
    snprintf(part, sizeof part, "%s/broker.log", dir);
    /* The embedded broker keeps about 5 MB per partition. */
    e2e_broker_start(&b, (int)env_long("TALLY_KILL_PARTITIONS", 8), part);
    assert_int_equal(tu_tally(NULL, "--db '%s' init >/dev/null", db), 0);

    /* Each run gets a new slice of the stream, so there is always a backlog
     * when the kill comes. */
    long progress = 0;
    for (long k = 0; k < kills_wanted; k++) {
        snprintf(part, sizeof part, "%s.%ld", kv, k);
        e2e_produce(&b, "usage", part);
        progress = run_and_kill(db, &b, log, progress, &rng);
        assert_true(progress >= 0 && progress <= st.messages);
        print_message("kill %ld: the ledger was at offset %ld of %ld\n", k + 1, progress,
                      st.messages);
    }
    for (int k = (int)kills_wanted; k < parts; k++) {
        snprintf(part, sizeof part, "%s.%d", kv, k);
        e2e_produce(&b, "usage", part);
    }
    const char *extra[] = {"--until-idle", "3", "--dlq-topic", "usage-dlq", NULL};
    pid_t last = e2e_meter(db, &b, "kill-group", log, extra);
    assert_int_equal(e2e_wait(last, 120000), 0);

    e2e_assert_stream(db, &st);
    e2e_clean_ingest(clean, nd);
    e2e_assert_same_usage(db, clean);
    e2e_assert_same_invoices(db, clean, dir);
    tu_assert_conservation_path(db);
    /* Every quarantined message has a dead-letter copy, and the ledger
     * records each as delivered, so no later start sends it again. Repeats
     * can only come from a kill between a copy's acknowledgement and that
     * record. */
    assert_int_equal(e2e_dlq_origins(&b), st.poison);
    assert_int_equal(e2e_count(db, "SELECT count(*) FROM quarantine q WHERE NOT EXISTS "
                                   "(SELECT 1 FROM dlq_sent s WHERE s.origin = q.origin)"),
                     0);
    long copies = e2e_topic_count(&b, "usage-dlq");
    print_message("dead-letter copies: %ld for %ld quarantined messages\n", copies, st.poison);
    assert_true(copies >= st.poison);
    e2e_broker_stop(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_kill9_exactly_once, e2e_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
