/* Crash loop: `tally meter` is SIGKILLed at seeded random moments while it
 * consumes a known stream of usage with repeats, conflicts and poison, and
 * restarted every time. After every kill the ledger must pass PRAGMA
 * integrity_check, `tally verify` and the conservation checks, and its
 * stored offsets must account exactly for what it holds (rel_model.h), never
 * moving back. At the end a meter drains the topic and the invoices must
 * equal, to the fen, those of a clean `tally ingest` of the same events.
 *
 * Each round starts a meter, produces the next slice of the stream and
 * kills a meter a random 0-300 ms later, while it is committing. Joining a
 * group on the embedded broker takes about 3 s, so by default REL_OVERLAP
 * (3) meters are alive, each in a group of its own: every meter consumes
 * every partition and the ledger's compare-and-set on offsets decides which
 * commit wins. REL_OVERLAP=1 runs one meter at a time in one group (a
 * plain restart). REL_KILLS, REL_EVENTS and REL_SEED scale it; the long
 * version is tests/long/crash_loop.sh. */
#include "rel_check.h"
#include "rel_invoice.h"
#include "rel_proc.h"

typedef struct loop {
    char dir[512], db[600], ref[600], log[600], why[1024];
    rel_broker b;
    rd_kafka_t *prod;
    rel_stream st;
    long produced, kills, overlap;
    int64_t prev[REL_MAX_PARTS];
    uint64_t rng;
} loop;

static void produce_upto(loop *t, long upto)
{
    char key[32];
    for (; t->produced < upto && t->produced < t->st.n; t->produced++) {
        rel_msg *m = &t->st.m[t->produced];
        snprintf(key, sizeof key, "acct-%02d", m->acct);
        rel_produce(t->prod, m->part, key, m->text, &m->offset);
    }
    rel_flush(t->prod);
}

static pid_t start_meter(loop *t, long k)
{
    static const char *const events[] = {"7", "20", "50", "150", "400"};
    static const char *const ms[] = {"5", "20", "60"};
    char group[32];
    snprintf(group, sizeof group, t->overlap > 1 ? "crash-%ld" : "crash", k);
    bool dlq = rel_rand(&t->rng) % 4 != 0; /* else a meter without the pipeline thread */
    const char *extra[] = {"--batch-events",
                           events[rel_rand(&t->rng) % 5],
                           "--batch-ms",
                           ms[rel_rand(&t->rng) % 3],
                           dlq ? "--dlq-topic" : "--no-pipeline",
                           dlq ? "usage-dlq" : NULL,
                           NULL};
    return rel_meter(t->db, &t->b, group, t->log, extra);
}

/* After a kill: the ledger is sound and says exactly what it holds. */
static void check_after_kill(loop *t, long k)
{
    rel_snap s;
    rel_assert_sound(t->db, NULL);
    if (!rel_snap_read(t->db, &s, t->why, sizeof t->why) ||
        !rel_snap_check(&s, &t->st, t->prev, t->why, sizeof t->why))
        fail_msg("after kill %ld: %s", k, t->why);
    memcpy(t->prev, s.next, sizeof t->prev);
    rel_snap_free(&s);
}

static long progress(const loop *t)
{
    rel_snap s;
    char why[256];
    long sum = 0;
    if (!rel_snap_read(t->db, &s, why, sizeof why))
        return -1;
    for (int p = 0; p < REL_MAX_PARTS; p++)
        sum += (long)s.next[p];
    rel_snap_free(&s);
    return sum;
}

/* One meter at a time: start, wait for its first commit, kill. */
static void round_sequential(loop *t, long k, long slice)
{
    long before = progress(t);
    pid_t pid = start_meter(t, k);
    produce_upto(t, t->produced + slice);
    for (int64_t until = rel_ms() + 30000; progress(t) <= before;) {
        if (rel_wait(pid, 20) != -1 || rel_ms() > until)
            fail_msg("round %ld: the meter exited or made no progress (see %s)", k, t->log);
    }
    rel_sleep_ms((int64_t)(rel_rand(&t->rng) % 300));
    assert_int_equal(rel_stop(pid, SIGKILL, 5000), 128 + SIGKILL);
    t->kills++;
    check_after_kill(t, k);
}

/* Several meters: the oldest is killed while all of them chew a slice. */
static void round_overlap(loop *t, long k, long slice, pid_t *pids)
{
    pids[k] = start_meter(t, k);
    rel_sleep_ms(1200);
    produce_upto(t, t->produced + slice);
    rel_sleep_ms((int64_t)(rel_rand(&t->rng) % 300));
    long victim = k - t->overlap + 1;
    if (victim < 0)
        return;
    int rc = rel_stop(pids[victim], SIGKILL, 5000);
    if (rc != 128 + SIGKILL)
        fail_msg("meter %ld ended with %d before it was killed (see %s)", victim, rc, t->log);
    pids[victim] = 0;
    t->kills++;
    check_after_kill(t, k);
}

/* The check itself must notice an offset one message off either way (for a
 * partition whose last message left a trace: a repeat leaves none). */
static void assert_model_is_strict(loop *t, rel_snap *s)
{
    for (int p = 0; p < t->st.parts; p++) {
        const rel_msg *last = NULL;
        for (long k = 0; k < t->st.n; k++)
            if (t->st.m[k].part == p && t->st.m[k].offset == s->next[p] - 1)
                last = &t->st.m[k];
        if (!last || last->kind == REL_DUP)
            continue;
        s->next[p]--;
        assert_false(rel_snap_check(s, &t->st, NULL, t->why, sizeof t->why));
        s->next[p] += 2;
        assert_false(rel_snap_check(s, &t->st, NULL, t->why, sizeof t->why));
        s->next[p]--;
        assert_true(rel_snap_check(s, &t->st, NULL, t->why, sizeof t->why));
        return;
    }
    fail_msg("no partition ends with a message that leaves a trace");
}

static void drain_and_compare(loop *t, pid_t *pids, long n_pids)
{
    for (long i = 0; i < n_pids; i++)
        if (pids[i] > 0)
            (void)rel_stop(pids[i], SIGKILL, 5000);
    produce_upto(t, t->st.n);
    const char *extra[] = {"--until-idle", "3", "--dlq-topic", "usage-dlq", NULL};
    pid_t last = rel_meter(t->db, &t->b, "crash-drain", t->log, extra);
    assert_int_equal(rel_wait(last, 120000), 0);

    rel_snap s;
    if (!rel_snap_read(t->db, &s, t->why, sizeof t->why) ||
        !rel_snap_check(&s, &t->st, t->prev, t->why, sizeof t->why))
        fail_msg("after the drain: %s", t->why);
    long total = 0;
    for (int p = 0; p < t->st.parts; p++)
        total += (long)s.next[p];
    assert_int_equal(total, t->st.n); /* everything consumed */
    assert_model_is_strict(t, &s);
    rel_snap_free(&s);
    rel_assert_sound(t->db, NULL);

    char nd[700];
    snprintf(nd, sizeof nd, "%s/stream.ndjson", t->dir);
    rel_stream_ndjson(&t->st, t->st.n, nd);
    assert_int_equal(tu_tally(NULL, "--db '%s' init >/dev/null", t->ref), 0);
    assert_int_equal(tu_tally(NULL, "--db '%s' ingest '%s' >/dev/null", t->ref, nd), 0);
    int64_t due = 0;
    long invoices = rel_assert_same_invoices(t->db, t->ref, t->dir, &due);
    char key[1100];
    snprintf(key, sizeof key, "%s/inv-faulted/sign.key", t->dir);
    rel_assert_sound(t->db, key);
    snprintf(key, sizeof key, "%s/inv-reference/sign.key", t->dir);
    rel_assert_sound(t->ref, key);
    printf("crash loop: %ld kills (overlap %ld), %ld messages (%ld valid, %ld repeats, %ld "
           "conflicts, %ld poison), %ld invoices equal to the reference, %lld.%02lld due\n",
           t->kills, t->overlap, t->st.n, t->st.kinds[REL_VALID], t->st.kinds[REL_DUP],
           t->st.kinds[REL_CONFLICT], t->st.kinds[REL_POISON], invoices, (long long)(due / 100),
           (long long)(due % 100));
}

static void test_crash_loop(void **state)
{
    (void)state;
    static loop t;
    long kills = rel_env("REL_KILLS", 20), events = rel_env("REL_EVENTS", 4000);
    t.overlap = rel_env("REL_OVERLAP", 3);
    t.rng = (uint64_t)rel_env("REL_SEED", 20260301) * 2654435761u + 1;
    setenv("TALLY_NOW", "2026-04-02T00:00:00Z", 1);
    snprintf(t.dir, sizeof t.dir, "%s", tu_tmpdir("crash-loop"));
    snprintf(t.db, sizeof t.db, "%s/meter.db", t.dir);
    snprintf(t.ref, sizeof t.ref, "%s/reference.db", t.dir);
    snprintf(t.log, sizeof t.log, "%s/meter.log", t.dir);
    char blog[700];
    snprintf(blog, sizeof blog, "%s/broker.log", t.dir);
    rel_stream_make(&t.st, events, 12, 4, (uint64_t)rel_env("REL_SEED", 20260301));
    rel_broker_start(&t.b, 4, blog);
    t.prod = rel_producer(&t.b);
    assert_int_equal(tu_tally(NULL, "--db '%s' init >/dev/null", t.db), 0);

    long rounds = kills + (t.overlap > 1 ? t.overlap - 1 : 0);
    long slice = events / (rounds + 2);
    pid_t *pids = calloc((size_t)rounds + 1, sizeof *pids);
    assert_non_null(pids);
    for (long k = 0; k < rounds; k++) {
        if (t.overlap > 1)
            round_overlap(&t, k, slice, pids);
        else
            round_sequential(&t, k, slice);
    }
    assert_int_equal(t.kills, kills);
    drain_and_compare(&t, pids, rounds);
    free(pids);
    rd_kafka_destroy(t.prod);
    rel_broker_stop(&t.b);
    rel_stream_free(&t.st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_crash_loop, rel_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
