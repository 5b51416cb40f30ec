/* Disk faults under an ingest batch, through the fault-injecting VFS
 * (include/tally/faultvfs.h), in-process with the library: tally_batch_*
 * fed by tally_ingest_message, offsets of two partitions per batch.
 *
 * For every N over the writes, syncs and truncates that committing one
 * batch (and checkpointing, and closing) performs:
 *  - a transient I/O error on call N: the commit fails with TALLY_IO and a
 *    message, or succeeds if SQLite could do without that call; a retry on
 *    the same connection then commits; after reopening the ledger holds the
 *    batch exactly once;
 *  - a dead disk or a full disk from call N on (nothing more is written,
 *    the connection is closed as a killed process would leave the files):
 *    after reopening, the ledger holds all of the batch with its offsets or
 *    none of it, integrity_check is ok, and committing again from the
 *    stored offsets completes it;
 *  - a power cut at call N (writes not yet synced are lost, whole or torn
 *    by sector) during a run of batches: every batch whose commit returned
 *    TALLY_OK is there after reopening, the one in flight is all there or
 *    not at all.
 * "Holds" is checked against the stream model (rel_model.h): the stored
 * offsets account exactly for the dedupe keys, quarantine rows and usage. */
#include <errno.h>
#include <unistd.h>

#include "rel_check.h"
#include "faultvfs.h"
#include "tally/balance.h"
#include "tally/ingest.h"
#include "tally/ledger_sql.h"

#define PARTS    2
#define ACCOUNTS 12
#define BATCH    100
#define BATCHES  4

typedef struct disk {
    char dir[512], base[600], work[600], why[1024];
    rel_stream st;
    int64_t next[BATCHES + 2][PARTS]; /* offsets after batch i (row 0: base) */
} disk;

static disk D;

static tally_ledger *open_ledger(const char *path)
{
    tally_ledger *l = NULL;
    if (tally_ledger_open(path, &l, D.why, sizeof D.why) != TALLY_OK)
        fail_msg("cannot open %s: %s", path, D.why);
    return l;
}

/* Queues messages of batch i (stream items [i*BATCH, (i+1)*BATCH)) and the
 * offsets they end at, from expected (the stored ones; -1: none). */
static void queue_batch(tally_batch *b, int i, const int64_t *expected)
{
    char origin[64];
    for (long k = (long)i * BATCH; k < (long)(i + 1) * BATCH; k++) {
        const rel_msg *m = &D.st.m[k];
        snprintf(origin, sizeof origin, "kafka:usage/%d@%lld", m->part, (long long)m->offset);
        assert_int_equal(
            tally_ingest_message(b, m->text, strlen(m->text), origin, tally_now_s(), NULL),
            TALLY_OK);
    }
    for (int p = 0; p < PARTS; p++)
        assert_int_equal(
            tally_batch_set_offset(b, "usage", p, expected[p] ? expected[p] : -1, D.next[i + 1][p]),
            TALLY_OK);
}

/* One batch object per open connection, reused across commits (a batch is
 * empty after every commit, failed or not): creating one allocates its
 * aggregation tables, which is slow under ASan when done hundreds of times. */
static struct {
    tally_ledger *l;
    tally_batch *b;
} cached;

static tally_err commit_batch(tally_ledger *l, int i, const int64_t *expected)
{
    if (cached.l != l) {
        assert_null(cached.l); /* close_ledger() forgets it */
        assert_int_equal(tally_batch_create(l, &cached.b), TALLY_OK);
        cached.l = l;
    }
    queue_batch(cached.b, i, expected);
    return tally_batch_commit(cached.b, NULL, NULL);
}

static void close_ledger(tally_ledger *l)
{
    if (cached.l == l) {
        tally_batch_destroy(cached.b);
        cached.l = NULL;
        cached.b = NULL;
    }
    tally_ledger_close(l);
}

/* The batch index whose end the stored offsets name (-1 if none), after
 * checking the whole ledger against the model, integrity_check and the
 * conservation checks (one connection for all of it). */
static int stored_batch(const char *path)
{
    rel_snap s;
    tally_ledger *l = open_ledger(path);
    if (!rel_snap_read_ledger(l, &s, D.why, sizeof D.why) ||
        !rel_snap_check(&s, &D.st, NULL, D.why, sizeof D.why))
        fail_msg("%s", D.why);
    tally_buf out;
    tally_buf_init(&out, 0);
    assert_int_equal(tally_ledger_query(l, "PRAGMA integrity_check", NULL, 0, rel_row_text, &out),
                     TALLY_OK);
    if (strcmp(out.data ? out.data : "", "ok\n") != 0)
        fail_msg("integrity_check: %s", out.data ? out.data : "(nothing)");
    tally_buf_release(&out);
    tu_assert_conservation(l);
    close_ledger(l);
    int at = -1;
    for (int i = 0; i <= BATCHES; i++)
        if (memcmp(s.next, D.next[i], sizeof D.next[i]) == 0)
            at = i;
    rel_snap_free(&s);
    if (at < 0)
        fail_msg("the stored offsets end no batch: a batch was stored in part");
    return at;
}

/* work.db (and no WAL or shm) as a copy of base.db, without a shell. */
static void copy_base(void)
{
    tu_copy_db(D.base, D.work);
}

/* The stream, offsets as a Kafka partition would number them, and a base
 * ledger (rate card only) closed cleanly, so it is one file. */
static int setup(void **state)
{
    (void)state;
    setenv("TALLY_NOW", "2026-04-02T00:00:00Z", 1);
    /* The shim decides what is durable; real fsyncs would only cost time. */
    if (access("/dev/shm", W_OK) == 0)
        setenv("TALLY_TEST_TMP", "/dev/shm/tally-tests", 1);
    if (tally_faultvfs_install() != TALLY_OK)
        return -1;
    snprintf(D.dir, sizeof D.dir, "%s", tu_tmpdir("disk-faults"));
    snprintf(D.base, sizeof D.base, "%s/base.db", D.dir);
    snprintf(D.work, sizeof D.work, "%s/work.db", D.dir);
    rel_stream_make(&D.st, (long)BATCH * BATCHES, ACCOUNTS, PARTS, 77);
    int64_t count[PARTS] = {0};
    for (int i = 0; i < BATCHES; i++) {
        for (long k = (long)i * BATCH; k < (long)(i + 1) * BATCH; k++)
            D.st.m[k].offset = count[D.st.m[k].part]++;
        memcpy(D.next[i + 1], count, sizeof count);
    }
    tally_ledger *l = open_ledger(D.base);
    tally_buf card;
    tally_buf_init(&card, 0);
    assert_int_equal(tu_read_file(tu_src("fixtures/pricebook/ratecard.json"), &card), 0);
    assert_int_equal(tally_ledger_ratecard_load(l, card.data, card.len, D.why, sizeof D.why),
                     TALLY_OK);
    tally_buf_release(&card);
    close_ledger(l);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tally_faultvfs_disarm();
    rel_stream_free(&D.st);
    /* Nothing to look at after a pass, and /dev/shm is memory. */
    return tu_sh(NULL, "rm -rf '%s'", D.dir) == 0 ? 0 : -1;
}

/* A fresh copy of the base with batch 0 committed, open. */
static tally_ledger *start_work(void)
{
    copy_base();
    tally_ledger *l = open_ledger(D.work);
    assert_int_equal(commit_batch(l, 0, D.next[0]), TALLY_OK);
    return l;
}

/* Counted calls of a fault-free commit of batch 1 after start_work, then
 * a checkpoint or closing the connection. */
static int64_t window_ops(bool then_close)
{
    tally_ledger *l = start_work();
    int64_t before = tally_faultvfs_count(TALLY_FAULT_ANY);
    assert_int_equal(commit_batch(l, 1, D.next[1]), TALLY_OK);
    if (!then_close)
        assert_int_equal(tally_ledger_exec(l, "PRAGMA wal_checkpoint(TRUNCATE)"), TALLY_OK);
    int64_t n = tally_faultvfs_count(TALLY_FAULT_ANY) - before;
    close_ledger(l);
    if (then_close)
        n = tally_faultvfs_count(TALLY_FAULT_ANY) - before;
    assert_true(n > 2);
    return n;
}

/* A transient I/O error on each call of a commit and a checkpoint. */
static void test_transient_error_each_call(void **state)
{
    (void)state;
    int64_t ops = window_ops(false);
    long refused = 0, tolerated = 0;
    for (int64_t n = 1; n <= ops; n++) {
        tally_ledger *l = start_work();
        tally_faultvfs_arm(TALLY_FAULT_FAIL_ONCE, TALLY_FAULT_ANY, n, TALLY_FAULT_EIO);
        tally_err e = commit_batch(l, 1, D.next[1]);
        tally_err ck = tally_ledger_exec(l, "PRAGMA wal_checkpoint(TRUNCATE)");
        assert_int_equal(tally_faultvfs_failed(), 1);
        tally_faultvfs_disarm();
        if (e != TALLY_OK) {
            assert_int_equal(e, TALLY_IO);
            assert_true(tally_ledger_errmsg(l)[0] != '\0');
            int64_t stored = -2;
            assert_int_equal(tally_ledger_offset_get(l, "usage", 0, &stored), TALLY_OK);
            assert_int_equal(stored, D.next[1][0]); /* not advanced by the failed batch */
            assert_int_equal(commit_batch(l, 1, D.next[1]), TALLY_OK);
            refused++;
        } else {
            tolerated += ck == TALLY_OK; /* SQLite did without that call */
        }
        close_ledger(l);
        assert_int_equal(stored_batch(D.work), 2);
    }
    printf("transient EIO: %lld calls, %ld refused with TALLY_IO then retried, %ld tolerated, "
           "%lld failed the checkpoint only\n",
           (long long)ops, refused, tolerated, (long long)(ops - refused - tolerated));
}

/* Nothing more reaches the disk from call n on (dead or full disk); the
 * files are then as a process killed at that call would leave them. */
static void dead_disk_at(int64_t n, tally_fault_kind kind, long *outcome)
{
    tally_ledger *l = start_work();
    tally_faultvfs_arm(TALLY_FAULT_FAIL_STICKY, TALLY_FAULT_ANY, n, kind);
    tally_err e = commit_batch(l, 1, D.next[1]);
    if (e != TALLY_OK) {
        assert_int_equal(e, TALLY_IO);
        assert_true(tally_ledger_errmsg(l)[0] != '\0');
    }
    close_ledger(l);
    assert_true(tally_faultvfs_failed() > 0);
    tally_faultvfs_disarm();
    int at = stored_batch(D.work);
    if (e == TALLY_OK)
        assert_int_equal(at, 2); /* acknowledged, so durable */
    assert_true(at == 1 || at == 2);
    /* absent; stored and acknowledged; stored although the commit failed
     * (the WAL frames were written, their fsync failed: the outcome of a
     * TALLY_IO commit is known only from the stored offsets) */
    outcome[at == 1 ? 0 : e == TALLY_OK ? 1 : 2]++;
    /* Carry on from what is stored: the batch once, whichever way it went. */
    l = open_ledger(D.work);
    tally_err again = commit_batch(l, 1, D.next[1]);
    assert_int_equal(again, at == 1 ? TALLY_OK : TALLY_STALE);
    close_ledger(l);
    assert_int_equal(stored_batch(D.work), 2);
}

static void test_dead_or_full_disk_each_call(void **state)
{
    (void)state;
    int64_t ops = window_ops(true);
    for (int kind = TALLY_FAULT_EIO; kind <= TALLY_FAULT_ENOSPC; kind++) {
        long outcome[3] = {0, 0, 0};
        for (int64_t n = 1; n <= ops; n++)
            dead_disk_at(n, (tally_fault_kind)kind, outcome);
        printf("%s from call N on, N = 1..%lld: batch absent %ld times, whole %ld times "
               "(%ld of them after a failed commit), never in part\n",
               kind == TALLY_FAULT_EIO ? "dead disk (EIO)" : "full disk (ENOSPC)", (long long)ops,
               outcome[0], outcome[1] + outcome[2], outcome[2]);
        assert_true(outcome[0] > 0 && outcome[1] > 0);
    }
}

/* A full disk: a clear error, the ledger still readable, and the same
 * connection commits once space is back. */
static void test_disk_full_then_space(void **state)
{
    (void)state;
    tally_ledger *l = start_work();
    tally_faultvfs_arm(TALLY_FAULT_FAIL_STICKY, TALLY_FAULT_WRITE, 1, TALLY_FAULT_ENOSPC);
    assert_int_equal(commit_batch(l, 1, D.next[1]), TALLY_IO);
    assert_non_null(strstr(tally_ledger_errmsg(l), "full"));
    assert_int_equal(commit_batch(l, 1, D.next[1]), TALLY_IO); /* still full */
    int64_t stored = -2;
    assert_int_equal(tally_ledger_offset_get(l, "usage", 1, &stored), TALLY_OK);
    assert_int_equal(stored, D.next[1][1]);
    tally_faultvfs_disarm();
    assert_int_equal(commit_batch(l, 1, D.next[1]), TALLY_OK);
    close_ledger(l);
    assert_int_equal(stored_batch(D.work), 2);
    rel_assert_sound(D.work, NULL);
}

/* Batches 0.. committed one after another until call n, when the power
 * goes: nothing more is written, and what was not synced is lost (whole, or
 * torn by sector with torn_seed). Returns the batches acknowledged; with
 * no_sync (synchronous=OFF, to show the check can fail) whether one of them
 * was lost. */
static int power_cut_at(int64_t n, uint64_t torn_seed, bool no_sync)
{
    copy_base();
    tally_faultvfs_track(true);
    tally_ledger *l = open_ledger(D.work);
    if (no_sync)
        assert_int_equal(tally_ledger_exec(l, "PRAGMA synchronous=OFF"), TALLY_OK);
    tally_faultvfs_arm(TALLY_FAULT_FAIL_STICKY, TALLY_FAULT_ANY, n, TALLY_FAULT_EIO);
    int acked = 0;
    while (acked < BATCHES && commit_batch(l, acked, D.next[acked]) == TALLY_OK)
        acked++;
    close_ledger(l);
    tally_faultvfs_disarm();
    assert_int_equal(tally_faultvfs_power_cut(torn_seed), TALLY_OK);
    tally_faultvfs_track(false);
    int at = stored_batch(D.work);
    if (no_sync)
        return at < acked;
    if (at < acked || at > acked + 1)
        fail_msg("power cut at call %lld (torn %llu): %d batches acknowledged, %d stored",
                 (long long)n, (unsigned long long)torn_seed, acked, at);
    return acked;
}

static void test_power_cut_each_call(void **state)
{
    (void)state;
    copy_base();
    tally_ledger *l = open_ledger(D.work);
    int64_t before = tally_faultvfs_count(TALLY_FAULT_ANY);
    for (int i = 0; i < BATCHES; i++)
        assert_int_equal(commit_batch(l, i, D.next[i]), TALLY_OK);
    close_ledger(l);
    int64_t ops = tally_faultvfs_count(TALLY_FAULT_ANY) - before;
    long cuts = 0;
    for (int64_t n = 1; n <= ops + 1; n++)
        for (uint64_t torn = 0; torn < 1 + (uint64_t)(n % 2); torn++, cuts++)
            (void)power_cut_at(n, torn ? (uint64_t)n * 31 + 5 : 0, false);
    /* The harness has teeth: without syncs, acknowledged batches are lost. */
    assert_true(power_cut_at(ops / 2, 0, true));
    printf("power cut: %ld cuts over %lld calls of %d batches (unsynced writes lost; torn by "
           "sector at every other call), every acknowledged batch kept, none in part\n",
           cuts, (long long)ops, BATCHES);
}

/* ---- The balance cache of a kept batch -------------------------------------- */

/* One hour of an rtx4090 (1.98) for acct-b, starting at hour h of
 * 2026-04-01. */
static void queue_hour(tally_batch *b, int h)
{
    char ev[512], origin[32];
    snprintf(ev, sizeof ev,
             "{\"specversion\":\"1.0\",\"id\":\"bal-%d\",\"source\":\"disk-test\","
             "\"type\":\"accelerator.usage\",\"subject\":\"acct-b\","
             "\"time\":\"2026-04-01T%02d:00:00Z\",\"data\":{\"instance\":\"i-b\","
             "\"sku\":\"rtx4090\",\"pricing\":\"on_demand\",\"cards\":1,"
             "\"seconds\":3600}}",
             h, h);
    snprintf(origin, sizeof origin, "test:bal-%d", h);
    tally_reject rej;
    assert_int_equal(tally_ingest_message(b, ev, strlen(ev), origin, tally_now_s(), &rej),
                     TALLY_OK);
    assert_string_equal(rej.reason, "");
}

/* A batch kept from commit to commit, as the meter keeps one, remembers
 * what its balance refreshes read and stored (ledger/balance_cache.c). A
 * commit that fails after its refresh stored a new state (here the WAL's
 * sync at COMMIT fails) must leave none of it behind: the retry of the
 * same usage announces the crossing, numbered from 1, and the balance is
 * what the ledger gives. */
static void test_failed_commit_forgets_balances(void **state)
{
    (void)state;
    copy_base();
    tally_ledger *l = open_ledger(D.work);
    tally_grant_spec g = {.account = "acct-b",
                          .kind = TALLY_GRANT_PREPAID,
                          .amount_minor = 1000,
                          .priority = 50,
                          .effective_s = 1767225600, /* 2026-01-01 */
                          .expires_s = TALLY_TIME_MAX,
                          .scope = ""};
    int64_t id, stop = 700, release = TALLY_BALANCE_RELEASE_DEFAULT;
    assert_int_equal(tally_ledger_grant_add(l, &g, &id, D.why, sizeof D.why), TALLY_OK);
    tally_limits_change lc = {
        .clear_low = true, .stop_at_minor = &stop, .release_after_s = &release};
    assert_int_equal(tally_limits_set(l, "acct-b", &lc, D.why, sizeof D.why), TALLY_OK);
    tally_batch *b = NULL;
    assert_int_equal(tally_batch_create(l, &b), TALLY_OK);
    queue_hour(b, 10);
    assert_int_equal(tally_batch_commit(b, NULL, NULL), TALLY_OK); /* 8.02: ok */
    const char *events = "SELECT count(*) FROM outbox WHERE subject = ?1";
    assert_int_equal(tu_query_int(l, events, "acct-b"), 0);

    queue_hour(b, 11); /* 6.04, at or below the stop mark of 7.00 */
    tally_faultvfs_arm(TALLY_FAULT_FAIL_ONCE, TALLY_FAULT_SYNC, 1, TALLY_FAULT_EIO);
    assert_int_not_equal(tally_batch_commit(b, NULL, NULL), TALLY_OK);
    assert_true(tally_faultvfs_failed() > 0);
    tally_faultvfs_disarm();
    assert_int_equal(tu_query_int(l, events, "acct-b"), 0);

    queue_hour(b, 11);
    assert_int_equal(tally_batch_commit(b, NULL, NULL), TALLY_OK);
    assert_int_equal(tu_query_int(l, events, "acct-b"), 2);
    assert_int_equal(tu_query_int(l,
                                  "SELECT count(*) FROM outbox WHERE event_id IN "
                                  "('balance.exhausted:acct-b:1', 'account.suspend:acct-b:2')",
                                  NULL),
                     2);
    assert_int_equal(tu_query_int(l,
                                  "SELECT balance_minor FROM account_balances WHERE "
                                  "account = ?1 AND state = 'exhausted'",
                                  "acct-b"),
                     1000 - 2 * 198);
    tally_batch_destroy(b);
    assert_int_equal(tally_ledger_verify(l, NULL, D.why, sizeof D.why), TALLY_OK);
    close_ledger(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transient_error_each_call),
        cmocka_unit_test(test_dead_or_full_disk_each_call),
        cmocka_unit_test(test_disk_full_then_space),
        cmocka_unit_test(test_power_cut_each_call),
        cmocka_unit_test(test_failed_commit_forgets_balances),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
