/* Scale-out end to end (SPEC section 8, include/tally/shard.h): three
 * `tally meter` processes in one consumer group write a 12-partition topic
 * into one ledger directory, one shard per partition. Mid-stream one meter
 * is killed with SIGKILL and a replacement started. Then:
 *
 *   - the producers' partitions (kcat with partitioner=murmur2_random) are
 *     the ones `tally partition-of` and tally_partition_of compute, and
 *     every shard holds only accounts routed to its partition;
 *   - every distinct event is stored once, every poison message quarantined
 *     once, every partition's offset is at its end;
 *   - no shard was written by two processes at once: while the group was
 *     stable every shard's lock was held (a try to take one failed), each
 *     shard's owner rows (one per acquisition) form non-overlapping
 *     intervals whose writes chain offset to offset, the killed meter's
 *     rows are the only ones never released and each was taken over, and
 *     every lock is free once the meters are gone;
 *   - the invoices equal a clean single-process `tally ingest` of the same
 *     events: drafts byte for byte (JSON, CSV, HTML), and finalized
 *     documents minus their ids, hashes and issue times. */
#include <sqlite3.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include "meter_e2e.h"
#include "tally/shard.h"
#include "tally/ledger_sql.h"

#define PARTITIONS 12
#define METERS     3
#define EVENTS     24000
#define GROUP      "scale"

typedef struct scale {
    char dir[512], ledger[600], kv[600], nd[600], clean[600], key[600];
    char logs[METERS + 1][600];
    pid_t meters[METERS + 1];
    e2e_broker b;
    e2e_stream st;
} scale;

/* ---- Reading shards read-only while meters write them ---------------------------- */

static void shard_file(const scale *s, int p, char *out, size_t cap)
{
    snprintf(out, cap, "%s/shard-usage-%d.db", s->ledger, p);
}

/* One integer from a shard (0 if the shard or table does not exist yet). */
static long shard_long(const scale *s, int p, const char *sql)
{
    char path[700];
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    long v = 0;
    shard_file(s, p, path, sizeof path);
    if (access(path, F_OK) != 0)
        return 0;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_busy_timeout(db, 5000);
        if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW)
            v = (long)sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

static long shards_sum(const scale *s, const char *sql)
{
    long sum = 0;
    for (int p = 0; p < PARTITIONS; p++)
        sum += shard_long(s, p, sql);
    return sum;
}

static long progress(const scale *s)
{
    return shards_sum(s, "SELECT coalesce(sum(next_offset), 0) FROM offsets");
}

static void wait_progress(const scale *s, long at_least, int64_t ms, const char *what)
{
    int64_t until = e2e_ms() + ms;
    while (progress(s) < at_least) {
        if (e2e_ms() > until)
            fail_msg("%s: the meters reached offset %ld of %ld in time (logs in %s)", what,
                     progress(s), at_least, s->dir);
        e2e_sleep_ms(100);
    }
}

/* ---- Meters and the group ----------------------------------------------------------- */

static pid_t start_meter(scale *s, int i)
{
    const char *extra[] = {"--batch-events", "250", "--batch-ms", "30", NULL};
    char log[sizeof s->logs[i]];
    snprintf(log, sizeof log, "%s/meter-%d.log", s->dir, i);
    memcpy(s->logs[i], log, sizeof log);
    s->meters[i] = e2e_meter(s->ledger, &s->b, GROUP, s->logs[i], extra);
    return s->meters[i];
}

/* The partitions a meter's latest progress line reports, -1 if none yet. */
static int assigned(const char *log)
{
    tally_buf out;
    tally_buf_init(&out, 0);
    int rc = tu_sh(&out, "grep -o 'partitions=[0-9]*' '%s' | tail -1 | cut -d= -f2", log);
    int n = rc == 0 && out.data && *out.data ? (int)strtol(out.data, NULL, 10) : -1;
    tally_buf_release(&out);
    return n;
}

/* Waits until the three live meters (all but skip) report 4 partitions
 * each: a settled group. */
static void wait_settled(const scale *s, int skip)
{
    int64_t until = e2e_ms() + 40000;
    for (;;) {
        int total = 0, even = 1;
        for (int i = 0; i <= METERS; i++) {
            if (i == skip || !s->logs[i][0])
                continue;
            int n = assigned(s->logs[i]);
            total += n;
            even &= n == PARTITIONS / METERS;
        }
        if (even && total == PARTITIONS)
            return;
        if (e2e_ms() > until)
            fail_msg("the group did not settle on 3 x 4 partitions (logs in %s)", s->dir);
        e2e_sleep_ms(200);
    }
}

/* Every shard's lock is held by some meter: taking any of them fails. */
static void assert_all_held(const scale *s)
{
    tally_ledger *l = NULL;
    tally_shard_set *set = NULL;
    char why[512];
    assert_int_equal(tally_ledger_open(s->ledger, &l, why, sizeof why), TALLY_OK);
    assert_int_equal(tally_shard_set_create(l, "probe", &set), TALLY_OK);
    for (int p = 0; p < PARTITIONS; p++) {
        tally_shard *sh = NULL;
        tally_err e = tally_shard_acquire(set, "usage", p, 0, &sh, why, sizeof why);
        if (e != TALLY_BUSY)
            fail_msg("shard %d was not held by a meter: %s", p, tally_err_name(e));
        assert_non_null(strstr(why, "owner="));
    }
    tally_shard_set_destroy(set);
    tally_ledger_close(l);
}

/* Once the meters are gone every lock is free (a killed holder's too). */
static void assert_all_free(const scale *s)
{
    tally_ledger *l = NULL;
    tally_shard_set *set = NULL;
    char why[512];
    assert_int_equal(tally_ledger_open(s->ledger, &l, why, sizeof why), TALLY_OK);
    assert_int_equal(tally_shard_set_create(l, "probe", &set), TALLY_OK);
    for (int p = 0; p < PARTITIONS; p++) {
        tally_shard *sh = NULL;
        if (tally_shard_acquire(set, "usage", p, 0, &sh, why, sizeof why) != TALLY_OK)
            fail_msg("shard %d is still locked: %s", p, why);
        tally_shard_release(sh);
    }
    tally_shard_set_destroy(set);
    tally_ledger_close(l);
}

/* ---- Ownership intervals ---------------------------------------------------------------- */

typedef struct owner_row {
    long epoch, pid, acquired, released, writes, first_off, last_off, first_w, last_w;
} owner_row;

static int owner_rows(const scale *s, int p, owner_row *rows, int cap)
{
    char path[700];
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int n = 0;
    shard_file(s, p, path, sizeof path);
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(
        sqlite3_prepare_v2(db,
                           "SELECT epoch, pid, acquired_ms, coalesce(released_ms, -1), writes, "
                           "coalesce(first_offset, -2), coalesce(last_offset, -2), "
                           "coalesce(first_write_ms, -1), coalesce(last_write_ms, -1) "
                           "FROM shard_owners ORDER BY epoch",
                           -1, &st, NULL),
        SQLITE_OK);
    while (n < cap && sqlite3_step(st) == SQLITE_ROW) {
        long *f = &rows[n].epoch;
        for (int c = 0; c < 9; c++)
            f[c] = (long)sqlite3_column_int64(st, c);
        n++;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

/* When a holder's tenure provably ended: its release, else its last write
 * (it died holding the lock), else its acquisition. */
static long tenure_end(const owner_row *r)
{
    return r->released >= 0 ? r->released : r->writes > 0 ? r->last_w : r->acquired;
}

/* Checks one shard's owner rows; returns how many the killed meter left open. */
static int check_owners(const scale *s, int p, pid_t killed)
{
    owner_row rows[64];
    int n = owner_rows(s, p, rows, 64), open_killed = 0;
    long chain = -1; /* the offset the next writer must start from */
    assert_true(n >= 1);
    for (int i = 0; i < n; i++) {
        const owner_row *r = &rows[i];
        if (r->epoch != i + 1)
            fail_msg("shard %d: epoch %ld at row %d", p, r->epoch, i);
        if (i > 0 && r->acquired < tenure_end(&rows[i - 1]))
            fail_msg("shard %d: epoch %ld (pid %ld) took over at %ld before epoch %ld (pid %ld) "
                     "ended at %ld",
                     p, r->epoch, r->pid, r->acquired, rows[i - 1].epoch, rows[i - 1].pid,
                     tenure_end(&rows[i - 1]));
        if (r->writes > 0) {
            assert_true(r->first_w >= r->acquired && r->last_w >= r->first_w);
            assert_true(r->released < 0 || r->released >= r->last_w);
            if (r->first_off != chain)
                fail_msg("shard %d: epoch %ld wrote from offset %ld, the previous writer stopped "
                         "at %ld",
                         p, r->epoch, r->first_off, chain);
            chain = r->last_off;
        }
        if (r->released < 0) {
            /* Only a killed holder never releases, and someone took over. */
            if (r->pid != (long)killed || i == n - 1)
                fail_msg("shard %d: epoch %ld (pid %ld) was never released", p, r->epoch, r->pid);
            open_killed++;
        }
    }
    assert_int_equal(chain, shard_long(s, p, "SELECT coalesce(max(next_offset), -1) FROM offsets"));
    return open_killed;
}

/* Every account in shard p is routed to partition p. */
static void check_routing(const scale *s, int p)
{
    char path[700];
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    shard_file(s, p, path, sizeof path);
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT id FROM accounts", -1, &st, NULL), SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *id = (const char *)sqlite3_column_text(st, 0);
        if (tally_partition_of(id, strlen(id), PARTITIONS) != p)
            fail_msg("shard %d holds account %s, routed to %d", p, id,
                     tally_partition_of(id, strlen(id), PARTITIONS));
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* ---- Producing and routing ---------------------------------------------------------------- */

static void produce(const scale *s, const char *path)
{
    assert_int_equal(tu_sh(NULL,
                           "kcat -P -l -b '%s' -t usage -K: -X partitioner=" TALLY_KAFKA_PARTITIONER
                           " '%s' 2>&1",
                           s->b.bootstrap, path),
                     0);
}

/* The partition the broker put each key in equals tally partition-of. */
static void check_partitioner(const scale *s)
{
    tally_buf out, cli;
    tally_buf_init(&out, 0);
    tally_buf_init(&cli, 0);
    assert_int_equal(tu_sh(&out,
                           "timeout 30 kcat -C -b '%s' -t usage -e -q -f '%%k %%p\\n' | sort -u",
                           s->b.bootstrap),
                     0);
    int keys = 0;
    char *save = NULL;
    for (char *line = strtok_r(out.data, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char key[64];
        int part = -1;
        if (sscanf(line, "%63s %d", key, &part) != 2)
            fail_msg("kcat printed '%s'", line);
        assert_int_equal(tally_partition_of(key, strlen(key), PARTITIONS), part);
        if (keys++ % 8 == 0) { /* and through the binary */
            tally_buf_reset(&cli);
            assert_int_equal(tu_tally(&cli, "partition-of '%s' --partitions %d", key, PARTITIONS),
                             0);
            assert_int_equal(strtol(cli.data, NULL, 10), part);
        }
    }
    assert_true(keys >= 20); /* 23 accounts */
    tally_buf_release(&out);
    tally_buf_release(&cli);
}

/* ---- Invoices ----------------------------------------------------------------------------- */

static tally_err doc_row(void *ctx, int ncols, const char *const *cols)
{
    static const char *const sealed[] = {"invoice_id", "hash", "prev_hash", "signature",
                                         "issued_at"};
    (void)ncols;
    json_object *o = json_tokener_parse(cols[0]);
    assert_non_null(o);
    for (size_t i = 0; i < sizeof sealed / sizeof *sealed; i++)
        json_object_object_del(o, sealed[i]);
    tally_err e = tally_buf_printf(ctx, "%s\n", json_object_to_json_string_ext(o, 0));
    json_object_put(o);
    return e;
}

static void finalized_docs(const char *db, tally_buf *out)
{
    tally_ledger *l = NULL;
    char why[256];
    assert_int_equal(tally_ledger_open(db, &l, why, sizeof why), TALLY_OK);
    tally_buf_reset(out);
    assert_int_equal(tally_ledger_query(l,
                                        "SELECT CAST(doc AS TEXT) FROM invoices "
                                        "ORDER BY account, period, seq",
                                        NULL, 0, doc_row, out),
                     TALLY_OK);
    tally_ledger_close(l);
    assert_non_null(out->data);
}

static void assert_same_finalized(const scale *s)
{
    setenv("TALLY_NOW", "2026-04-02T00:00:00Z", 1);
    assert_int_equal(tu_tally(NULL, "--key '%s' keygen >/dev/null", s->key), 0);
    const char *dbs[] = {s->ledger, s->clean};
    for (int i = 0; i < 2; i++)
        assert_int_equal(tu_tally(NULL,
                                  "--db '%s' --key '%s' invoice run --period 2026-03 --finalize "
                                  ">/dev/null",
                                  dbs[i], s->key),
                         0);
    unsetenv("TALLY_NOW");
    tally_buf a, b;
    tally_buf_init(&a, 0);
    tally_buf_init(&b, 0);
    finalized_docs(s->ledger, &a);
    finalized_docs(s->clean, &b);
    if (strcmp(a.data, b.data) != 0)
        fail_msg("finalized invoices differ\n--- sharded\n%s--- single\n%s", a.data, b.data);
    assert_true(a.len > 1000);
    tally_buf_release(&a);
    tally_buf_release(&b);
    assert_int_equal(tu_tally(NULL, "--db '%s' --key '%s' verify >/dev/null", s->ledger, s->key),
                     0);
    tu_assert_conservation_path(s->ledger);
}

/* ---- The test ------------------------------------------------------------------------------ */

static void setup(scale *s)
{
    memset(s, 0, sizeof *s);
    snprintf(s->dir, sizeof s->dir, "%s", tu_tmpdir("scaleout"));
    snprintf(s->ledger, sizeof s->ledger, "%s/ledger", s->dir);
    snprintf(s->kv, sizeof s->kv, "%s/stream.kv", s->dir);
    snprintf(s->nd, sizeof s->nd, "%s/stream.ndjson", s->dir);
    snprintf(s->clean, sizeof s->clean, "%s/clean.db", s->dir);
    snprintf(s->key, sizeof s->key, "%s/tally.key", s->dir);
    e2e_stream_write(s->kv, s->nd, EVENTS, 300, 20261130, &s->st);
    e2e_split(s->kv, 3, s->st.messages);
    char log[640];
    snprintf(log, sizeof log, "%s/broker.log", s->dir);
    e2e_broker_start(&s->b, PARTITIONS, log);
    assert_int_equal(mkdir(s->ledger, 0755), 0);
    assert_int_equal(tu_tally(NULL, "--db '%s' init >/dev/null", s->ledger), 0);
}

static void test_three_meters_one_killed(void **state)
{
    (void)state;
    TU_REQUIRE_TOOL(e2e_have_kcat(), "kcat");
    int64_t t0 = e2e_ms();
    scale s;
    setup(&s);
    char part[640];
    snprintf(part, sizeof part, "%s.0", s.kv);
    produce(&s, part);
    check_partitioner(&s);
    for (int i = 0; i < METERS; i++)
        start_meter(&s, i);
    wait_settled(&s, -1);
    wait_progress(&s, s.st.messages / 6, 30000, "first third");
    assert_all_held(&s);

    /* The second third arrives; the meter that holds some of it is killed
     * while it commits. */
    snprintf(part, sizeof part, "%s.1", s.kv);
    long before = progress(&s); /* before producing: the meters may read it all at once */
    produce(&s, part);
    wait_progress(&s, before + 500, 30000, "second third");
    pid_t killed = s.meters[1];
    assert_int_equal(e2e_stop(killed, SIGKILL, 5000), 128 + SIGKILL);
    print_message("killed pid %ld at offset %ld of %ld\n", (long)killed, progress(&s),
                  s.st.messages);
    snprintf(part, sizeof part, "%s.2", s.kv);
    produce(&s, part);
    start_meter(&s, METERS); /* the replacement */
    wait_settled(&s, 1);     /* the killed meter's partitions were taken over */
    wait_progress(&s, s.st.messages, 60000, "whole stream");
    for (int i = 0; i <= METERS; i++)
        if (i != 1)
            assert_int_equal(e2e_stop(s.meters[i], SIGTERM, 15000), 0);

    /* Exactly once, across the shards. */
    assert_int_equal(progress(&s), s.st.messages);
    assert_int_equal(shards_sum(&s, "SELECT count(*) FROM dedupe_keys"), s.st.distinct);
    assert_int_equal(shards_sum(&s, "SELECT count(DISTINCT origin) FROM quarantine"), s.st.poison);
    assert_int_equal(shards_sum(&s, "SELECT count(*) FROM quarantine"), s.st.poison);
    /* One writer at a time, proven per shard. */
    int open_killed = 0;
    for (int p = 0; p < PARTITIONS; p++) {
        open_killed += check_owners(&s, p, killed);
        check_routing(&s, p);
    }
    assert_true(open_killed >= 1); /* the kill landed while it held shards */
    assert_all_free(&s);
    /* The same bill as one process. */
    e2e_clean_ingest(s.clean, s.nd);
    e2e_assert_same_invoices(s.ledger, s.clean, s.dir);
    assert_same_finalized(&s);
    e2e_broker_stop(&s.b);
    print_message("scale-out test took %lld ms\n", (long long)(e2e_ms() - t0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_three_meters_one_killed, e2e_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
