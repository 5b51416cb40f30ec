/* The Kafka path never skips usage silently (issue 14, items 13 to 17):
 * offsets the broker lost (retention, a restarted broker), oversized poison
 * and its dead-letter copy, tombstones, a subject with white space, and a
 * key that does not route to its subject's partition. Each runs `tally
 * meter --until-idle` against the embedded broker on loopback. */
#include <librdkafka/rdkafka.h>

#include "meter_e2e.h"
#include "tally/partition.h"

typedef struct env {
    char dir[512], db[600], log[600], blog[600], kv[600];
} env;

static void env_init(env *e, const char *tag)
{
    snprintf(e->dir, sizeof e->dir, "%s", tu_tmpdir(tag));
    snprintf(e->db, sizeof e->db, "%s/meter.db", e->dir);
    snprintf(e->log, sizeof e->log, "%s/meter.log", e->dir);
    snprintf(e->blog, sizeof e->blog, "%s/broker.log", e->dir);
    snprintf(e->kv, sizeof e->kv, "%s/in.kv", e->dir);
}

/* A fresh folder, a one-partition broker logging into it, and a ledger. */
static void env_start(env *e, e2e_broker *b, const char *tag)
{
    env_init(e, tag);
    e2e_broker_start(b, 1, e->blog);
    assert_int_equal(tu_tally(NULL, "--db '%s' init >/dev/null", e->db), 0);
}

/* Runs one meter until idle (2 s); returns its exit status. */
static int meter_run(const env *e, const e2e_broker *b, const char *const *extra)
{
    const char *args[16] = {"--until-idle", "2", "--batch-ms", "20"};
    int n = 4;
    for (int i = 0; extra && extra[i] && n < 15; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    pid_t m = e2e_meter(e->db, b, "hostile", e->log, args);
    int rc = e2e_wait(m, 90000);
    if (rc == -1) {
        e2e_stop(m, SIGKILL, 5000);
        fail_msg("the meter did not exit (see %s)", e->log);
    }
    return rc;
}

static bool log_has(const env *e, const char *what)
{
    return tu_sh(NULL, "grep -q -e '%s' '%s'", what, e->log) == 0;
}

/* The /metrics answer of a `tally serve` started on db, into out. */
static void metrics_of(const env *e, const char *db, tally_buf *out)
{
    char log[700], addr[128];
    snprintf(log, sizeof log, "%s/serve.log", e->dir);
    const char *argv[] = {TALLY_BINARY, "--db", db, "serve", "--listen", "127.0.0.1:0", NULL};
    int out_fd = -1;
    pid_t s = e2e_spawn(argv, log, NULL, &out_fd);
    if (!e2e_read_line(out_fd, addr, sizeof addr, 20000))
        fail_msg("tally serve printed no address (see %s)", log);
    tally_buf_reset(out);
    int rc = tu_sh(out, "curl -sS --max-time 20 'http://%s/metrics'", addr);
    assert_int_equal(e2e_stop(s, SIGTERM, 10000), 0);
    close(out_fd);
    assert_int_equal(rc, 0);
}

/* Asserts that /metrics (text) holds the line "<series> <value>". */
static void assert_series(const char *text, const char *series, long value)
{
    char want[512];
    snprintf(want, sizeof want, "\n%s %ld\n", series, value);
    if (!strstr(text, want))
        fail_msg("/metrics has no line '%s %ld':\n%s", series, value, text);
}

#define GAPS(state) "tally_kafka_offset_gaps{topic=\"usage\",partition=\"0\",state=\"" state "\"}"
#define GAP_MSGS(state)                                                                            \
    "tally_kafka_offset_gap_messages{topic=\"usage\",partition=\"0\",state=\"" state "\"}"

/* n valid events for acct-00 (ids from first), keyed acct-00. */
static void write_events(const char *path, int first, int n, const char *mode)
{
    FILE *f = fopen(path, mode);
    assert_non_null(f);
    char ev[1024];
    for (int i = first; i < first + n; i++) {
        e2e_event(ev, sizeof ev, 0, i, 1772323200, 0);
        fprintf(f, "acct-00:%s\n", ev);
    }
    fclose(f);
}

/* n poison lines of about `bytes` bytes each, keyed acct-00. */
static void write_padding(const char *path, int n, size_t bytes)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < n; i++) {
        fprintf(f, "acct-00:pad-%d-", i);
        for (size_t k = 0; k < bytes; k++)
            fputc('x', f);
        fputc('\n', f);
    }
    fclose(f);
}

/* 13 and 14: retention moved the log start past the ledger's offset. */
static void test_retention_gap_stops(void **state)
{
    (void)state;
    TU_REQUIRE_TOOL(e2e_have_kcat(), "kcat");
    env e;
    e2e_broker b;
    env_start(&e, &b, "hostile-retention");
    write_events(e.kv, 0, 100, "w");
    e2e_produce(&b, "usage", e.kv);
    assert_int_equal(meter_run(&e, &b, NULL), 0);
    assert_int_equal(e2e_count(e.db, "SELECT next_offset FROM offsets"), 100);
    /* 7 MB more than the broker keeps: offsets from 100 on are dropped. */
    write_padding(e.kv, 7000, 1024);
    e2e_produce(&b, "usage", e.kv);
    assert_int_equal(meter_run(&e, &b, NULL), 1);
    assert_true(log_has(&e, "usage/0: offset gap"));
    assert_true(log_has(&e, "missing offsets 100\\.\\."));
    assert_int_equal(e2e_count(e.db, "SELECT next_offset FROM offsets"), 100);
    /* The operator accepts it: recorded, and the rest is read. */
    const char *accept[] = {"--accept-gap", "usage/0", NULL};
    assert_int_equal(meter_run(&e, &b, accept), 0);
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM offset_gaps WHERE kind = 'retention' "
                                     "AND partition = 0 AND from_offset = 100 AND to_offset > 100 "
                                     "AND state = 'accepted'"),
                     1);
    /* the run that stopped recorded it as open, offset unmoved */
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM offset_gaps WHERE state = 'open' AND "
                                     "stored_next = 100 AND id < (SELECT id FROM offset_gaps "
                                     "WHERE state = 'accepted')"),
                     1);
    assert_int_equal(e2e_count(e.db, "SELECT next_offset FROM offsets"), 7100);
    assert_true(log_has(&e, "gap accepted: offsets 100\\.\\."));
    /* both rows are part of the ledger's own chain, and verify holds */
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM ledger_chain WHERE tbl = 'offset_gaps'"),
                     2);
    assert_int_equal(tu_tally(NULL, "--db '%s' verify >/dev/null", e.db), 0);
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM quarantine WHERE origin LIKE "
                                     "'kafka:usage/0@%' AND raw_size > 1024"),
                     e2e_count(e.db, "SELECT 7100 - to_offset FROM offset_gaps WHERE state = "
                                     "'accepted'"));
    e2e_broker_stop(&b);
}

/* 14: retention overtakes a running meter (stopped with SIGSTOP while 7 MB
 * arrive): it must not jump on when it resumes. */
static void test_retention_while_running(void **state)
{
    (void)state;
    TU_REQUIRE_TOOL(e2e_have_kcat(), "kcat");
    env e;
    e2e_broker b;
    env_start(&e, &b, "hostile-running");
    const char *args[] = {"--until-idle", "20", "--batch-ms", "20", NULL};
    pid_t m = e2e_meter(e.db, &b, "hostile", e.log, args);
    write_events(e.kv, 0, 100, "w");
    e2e_produce(&b, "usage", e.kv);
    int64_t until = e2e_ms() + 30000;
    while (e2e_count(e.db, "SELECT coalesce(sum(next_offset), 0) FROM offsets") < 100) {
        if (e2e_ms() > until)
            fail_msg("the meter is stuck (see %s)", e.log);
        e2e_sleep_ms(50);
    }
    kill(m, SIGSTOP);
    write_padding(e.kv, 7000, 1024);
    e2e_produce(&b, "usage", e.kv);
    kill(m, SIGCONT);
    int rc = e2e_wait(m, 60000);
    if (rc == -1)
        e2e_stop(m, SIGKILL, 5000);
    assert_int_equal(rc, 1);
    assert_true(log_has(&e, "usage/0: offset gap: the ledger.s next offset is 100"));
    assert_int_equal(e2e_count(e.db, "SELECT next_offset FROM offsets"), 100);
    e2e_broker_stop(&b);
}

/* 14: one 10 MB message pushes everything after the ledger's offset out
 * of the broker's 5 MB; --until-idle must not wait forever on that lag. */
static void test_huge_message_gap_exits(void **state)
{
    (void)state;
    TU_REQUIRE_TOOL(e2e_have_kcat(), "kcat");
    env e;
    e2e_broker b;
    env_start(&e, &b, "hostile-huge");
    write_events(e.kv, 0, 100, "w");
    e2e_produce(&b, "usage", e.kv);
    assert_int_equal(meter_run(&e, &b, NULL), 0);
    write_events(e.kv, 100, 50, "w");
    e2e_produce(&b, "usage", e.kv);
    write_padding(e.kv, 1, (size_t)10 << 20);
    assert_int_equal(
        tu_sh(NULL, "kcat -P -l -b '%s' -t usage -K: -X message.max.bytes=20000000 '%s' 2>&1",
              b.bootstrap, e.kv),
        0);
    int64_t t0 = e2e_ms();
    assert_int_equal(meter_run(&e, &b, NULL), 1);
    assert_true(e2e_ms() - t0 < 60000);
    assert_true(log_has(&e, "missing offsets 100\\.\\."));
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM dedupe_keys"), 100);
    e2e_broker_stop(&b);
}

/* 13: the broker restarted empty while the ledger holds offset 300. */
static void test_restarted_broker_stops(void **state)
{
    (void)state;
    TU_REQUIRE_TOOL(e2e_have_kcat(), "kcat");
    env e;
    e2e_broker b;
    env_start(&e, &b, "hostile-restart");
    /* Offset 0 is poison in both logs: the second is a message of its own. */
    write_padding(e.kv, 1, 10);
    write_events(e.kv, 0, 299, "a");
    e2e_produce(&b, "usage", e.kv);
    assert_int_equal(meter_run(&e, &b, NULL), 0);
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM dedupe_keys"), 299);
    e2e_broker_stop(&b);
    e2e_broker_start(&b, 1, e.blog);
    write_padding(e.kv, 1, 20);
    write_events(e.kv, 300, 99, "a");
    e2e_produce(&b, "usage", e.kv);
    assert_int_equal(meter_run(&e, &b, NULL), 1);
    assert_true(log_has(&e, "usage/0: offset gap: the ledger.s next offset is 300"));
    assert_true(log_has(&e, "missing offsets 0\\.\\.99"));
    assert_true(tu_sh(NULL, "grep -q 'gaps=1 gaps_accepted=0 gap=0:0..99' '%s'", e.log) == 0);
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM dedupe_keys"), 299);
    /* The gap is in the ledger as open, once however often the meter stops
     * at it, and a `tally serve` on the ledger shows it in /metrics. */
    assert_int_equal(meter_run(&e, &b, NULL), 1);
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM offset_gaps WHERE state = 'open' AND "
                                     "kind = 'restarted' AND stored_next = 300"),
                     1);
    assert_int_equal(e2e_count(e.db, "SELECT next_offset FROM offsets"), 300);
    tally_buf m;
    tally_buf_init(&m, 0);
    metrics_of(&e, e.db, &m);
    assert_series(m.data, GAPS("open"), 1);
    assert_series(m.data, GAP_MSGS("open"), 100);
    assert_series(m.data, GAPS("accepted"), 0);
    assert_series(m.data, "tally_kafka_offset_gaps_all{state=\"open\"}", 1);
    const char *accept[] = {"--accept-gaps", NULL};
    assert_int_equal(meter_run(&e, &b, accept), 0);
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM offset_gaps WHERE kind = 'restarted' "
                                     "AND from_offset = 0 AND to_offset = 100 AND state = "
                                     "'accepted'"),
                     1);
    metrics_of(&e, e.db, &m);
    assert_series(m.data, GAPS("open"), 0);
    assert_series(m.data, GAPS("accepted"), 1);
    assert_series(m.data, GAP_MSGS("accepted"), 100);
    assert_series(m.data, "tally_kafka_offset_gaps_all{state=\"open\"}", 0);
    tally_buf_release(&m);
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM dedupe_keys"), 398);
    assert_int_equal(e2e_count(e.db, "SELECT next_offset FROM offsets"), 100);
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM quarantine WHERE origin IN "
                                     "('kafka:usage/0@0', 'kafka:usage/0@0+r1')"),
                     2);
    e2e_broker_stop(&b);
}

/* 13: the broker restarted empty and its new log is already longer than
 * the ledger's offset 300: offsets 0..299 of the new log must not be
 * skipped. */
static void test_restarted_longer_log_stops(void **state)
{
    (void)state;
    TU_REQUIRE_TOOL(e2e_have_kcat(), "kcat");
    env e;
    e2e_broker b;
    env_start(&e, &b, "hostile-restart-long");
    write_events(e.kv, 0, 300, "w");
    e2e_produce(&b, "usage", e.kv);
    assert_int_equal(meter_run(&e, &b, NULL), 0);
    /* A second run on the same log goes on where the ledger stops. */
    write_events(e.kv, 300, 10, "w");
    e2e_produce(&b, "usage", e.kv);
    assert_int_equal(meter_run(&e, &b, NULL), 0);
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM dedupe_keys"), 310);
    e2e_broker_stop(&b);
    e2e_broker_start(&b, 1, e.blog);
    write_events(e.kv, 1000, 500, "w");
    e2e_produce(&b, "usage", e.kv);
    assert_int_equal(meter_run(&e, &b, NULL), 1);
    assert_true(log_has(&e, "usage/0: offset gap: the ledger.s next offset is 310"));
    assert_true(log_has(&e, "missing offsets 0\\.\\.309"));
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM dedupe_keys"), 310);
    const char *accept[] = {"--accept-gap", "usage/0", NULL};
    assert_int_equal(meter_run(&e, &b, accept), 0);
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM offset_gaps WHERE kind = 'restarted' "
                                     "AND from_offset = 0 AND to_offset = 310 AND state = "
                                     "'accepted'"),
                     1);
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM dedupe_keys"), 810);
    assert_int_equal(e2e_count(e.db, "SELECT next_offset FROM offsets"), 500);
    e2e_broker_stop(&b);
}

/* Copies ledger directory `from` to `to`, runs sql on its shard of
 * usage/0 with trigger `trg` dropped and then put back as it was (an edit
 * that hides itself from the trigger check), and runs `tally verify` on
 * it: it must fail naming want. */
static void tamper_shard(const char *from, const char *to, const char *trg, const char *sql,
                         const char *want)
{
    tally_buf out;
    tally_buf_init(&out, 0);
    assert_int_equal(tu_sh(NULL,
                           "rm -rf '%s' && cp -r '%s' '%s' && cd '%s' && sqlite3 -bail "
                           "shard-usage-0.db \"SELECT sql || ';' FROM sqlite_master WHERE name "
                           "= '%s'\" > trg.sql && sqlite3 -bail shard-usage-0.db \"DROP TRIGGER "
                           "%s; %s\" && sqlite3 -bail shard-usage-0.db < trg.sql",
                           to, from, to, to, trg, trg, sql),
                     0);
    int rc = tu_tally(&out, "--db '%s' verify 2>&1", to);
    if (rc != 1 || !strstr(out.data ? out.data : "", want))
        fail_msg("verify exit %d: %s (wanted \"%s\")", rc, out.data ? out.data : "", want);
    tally_buf_release(&out);
}

/* 13 over a ledger directory: a gap found in a shard is recorded there,
 * open then accepted, both rows chained in the shard's own chain; /metrics
 * of a `tally serve` on the directory reads them through the shard reader;
 * an edit or a deletion of a shard's gap row fails verify, naming it. */
static void test_shard_gaps(void **state)
{
    (void)state;
    TU_REQUIRE_TOOL(e2e_have_kcat(), "kcat");
    env e;
    env_init(&e, "hostile-shard-gaps");
    char shard[700], copy[700];
    snprintf(e.db, sizeof e.db, "%s/ledger", e.dir);
    snprintf(shard, sizeof shard, "%s/shard-usage-0.db", e.db);
    assert_int_equal(tu_sh(NULL, "mkdir -p '%s'", e.db), 0);
    assert_int_equal(tu_tally(NULL, "--db '%s' init >/dev/null", e.db), 0);
    e2e_broker b;
    e2e_broker_start(&b, 1, e.blog);
    write_events(e.kv, 0, 50, "w");
    e2e_produce(&b, "usage", e.kv);
    assert_int_equal(meter_run(&e, &b, NULL), 0);
    e2e_broker_stop(&b);
    e2e_broker_start(&b, 1, e.blog);
    write_events(e.kv, 100, 20, "w");
    e2e_produce(&b, "usage", e.kv);
    assert_int_equal(meter_run(&e, &b, NULL), 1);
    assert_int_equal(e2e_count(shard, "SELECT count(*) FROM offset_gaps WHERE state = 'open' AND "
                                      "stored_next = 50 AND from_offset = 0 AND to_offset = 20"),
                     1);
    tally_buf m;
    tally_buf_init(&m, 0);
    metrics_of(&e, e.db, &m);
    assert_series(m.data, GAPS("open"), 1);
    assert_series(m.data, GAP_MSGS("open"), 20);
    const char *accept[] = {"--accept-gap", "usage/0", NULL};
    assert_int_equal(meter_run(&e, &b, accept), 0);
    assert_int_equal(e2e_count(shard, "SELECT count(*) FROM dedupe_keys"), 70);
    assert_int_equal(e2e_count(shard, "SELECT count(*) FROM ledger_chain c JOIN offset_gaps g ON "
                                      "c.tbl = 'offset_gaps' AND c.row_key = g.rowid"),
                     2);
    metrics_of(&e, e.db, &m);
    assert_series(m.data, GAPS("open"), 0);
    assert_series(m.data, GAPS("accepted"), 1);
    assert_series(m.data, GAP_MSGS("accepted"), 20);
    tally_buf_release(&m);
    assert_int_equal(tu_tally(NULL, "--db '%s' verify >/dev/null", e.db), 0);
    snprintf(copy, sizeof copy, "%s/edited", e.dir);
    tamper_shard(e.db, copy, "offset_gaps_no_update",
                 "UPDATE offset_gaps SET to_offset = 1 WHERE state = 'accepted';",
                 "shard shard-usage-0: offset gap 2 (usage/0): changed since chain entry");
    tamper_shard(e.db, copy, "offset_gaps_no_delete", "DELETE FROM offset_gaps WHERE id = 1;",
                 "shard shard-usage-0: offset gap 1: deleted (chain entry");
    e2e_broker_stop(&b);
}

/* 15 and 17: a 2 MB poison message among small ones; its copy is cut,
 * nothing is sent twice across restarts, the row keeps a prefix. */
static void test_oversized_poison(void **state)
{
    (void)state;
    TU_REQUIRE_TOOL(e2e_have_kcat(), "kcat");
    env e;
    e2e_broker b;
    env_start(&e, &b, "hostile-poison");
    write_padding(e.kv, 1, (size_t)2 << 20);
    assert_int_equal(
        tu_sh(NULL, "kcat -P -l -b '%s' -t usage -K: -X message.max.bytes=10000000 '%s' 2>&1",
              b.bootstrap, e.kv),
        0);
    write_padding(e.kv, 3, 100);
    e2e_produce(&b, "usage", e.kv);
    const char *dlq[] = {"--dlq-topic", "usage-dlq", NULL};
    assert_int_equal(meter_run(&e, &b, dlq), 0);
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM quarantine"), 4);
    assert_int_equal(e2e_count(e.db, "SELECT max(length(raw)) FROM quarantine"), 65536);
    assert_int_equal(e2e_count(e.db, "SELECT max(raw_size) FROM quarantine"),
                     (long)((2 << 20) + strlen("pad-0-")));
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM quarantine WHERE "
                                     "length(raw_sha256) = 64"),
                     4);
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM dlq_sent"), 4);
    assert_int_equal(e2e_topic_count(&b, "usage-dlq"), 4);
    assert_int_equal(tu_sh(NULL,
                           "timeout 30 kcat -C -b '%s' -t usage-dlq -e -q -o beginning -f '%%h\\n' "
                           "| grep -q 'tally-truncated=true'",
                           b.bootstrap),
                     0);
    /* Restarts send nothing again. */
    assert_int_equal(meter_run(&e, &b, dlq), 0);
    assert_int_equal(meter_run(&e, &b, dlq), 0);
    assert_int_equal(e2e_topic_count(&b, "usage-dlq"), 4);
    e2e_broker_stop(&b);
}

/* The group's committed Kafka offset of usage/0, or a negative value. */
static long long committed_offset(const e2e_broker *b, const char *group)
{
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", b->bootstrap, errstr, sizeof errstr) ||
        rd_kafka_conf_set(conf, "group.id", group, errstr, sizeof errstr))
        fail_msg("conf: %s", errstr);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    assert_non_null(rk);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, "usage", 0);
    long long off = -9999;
    if (rd_kafka_committed(rk, l, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR && !l->elems[0].err)
        off = l->elems[0].offset;
    rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_destroy(rk);
    return off;
}

/* 15: dead-letter copies that fail (the broker refuses every produce) are
 * not recorded, do not hold back the Kafka offset, and go out once on the
 * next start that can deliver them. */
static void test_failed_copies_do_not_pin(void **state)
{
    (void)state;
    TU_REQUIRE_TOOL(e2e_have_kcat(), "kcat");
    env e;
    e2e_broker b;
    env_start(&e, &b, "hostile-dlqfail");
    write_padding(e.kv, 3, 50);
    write_events(e.kv, 0, 5, "a");
    e2e_produce(&b, "usage", e.kv);
    e2e_broker_ctl(&b, "error Produce 100000 MSG_SIZE_TOO_LARGE");
    const char *dlq[] = {"--dlq-topic", "usage-dlq", NULL};
    assert_int_equal(meter_run(&e, &b, dlq), 0);
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM quarantine"), 3);
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM dlq_sent"), 0);
    assert_int_equal(e2e_count(e.db, "SELECT next_offset FROM offsets"), 8);
    assert_int_equal(committed_offset(&b, "hostile"), 8);
    e2e_broker_ctl(&b, "clear Produce");
    assert_int_equal(meter_run(&e, &b, dlq), 0);
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM dlq_sent"), 3);
    assert_int_equal(e2e_topic_count(&b, "usage-dlq"), 3);
    assert_int_equal(meter_run(&e, &b, dlq), 0);
    assert_int_equal(e2e_topic_count(&b, "usage-dlq"), 3);
    e2e_broker_stop(&b);
}

/* 17: a tombstone and a subject with white space. */
static void test_tombstone_and_whitespace(void **state)
{
    (void)state;
    TU_REQUIRE_TOOL(e2e_have_kcat(), "kcat");
    env e;
    e2e_broker b;
    env_start(&e, &b, "hostile-tomb");
    FILE *f = fopen(e.kv, "w");
    assert_non_null(f);
    fprintf(f, "acct-01:{\"specversion\":\"1.0\",\"id\":\"w1\",\"source\":\"//h\",\"type\":"
               "\"accelerator.usage\",\"subject\":\" acct-01\",\"time\":\"2026-03-01T00:00:00Z\","
               "\"data\":{\"instance\":\"i\",\"sku\":\"h100\",\"pricing\":\"on_demand\","
               "\"cards\":1,\"seconds\":10}}\n");
    fclose(f);
    e2e_produce(&b, "usage", e.kv);
    assert_int_equal(
        tu_sh(NULL, "printf 'acct-01:\\n' | kcat -P -Z -b '%s' -t usage -K: 2>&1", b.bootstrap), 0);
    const char *dlq[] = {"--dlq-topic", "usage-dlq", NULL};
    assert_int_equal(meter_run(&e, &b, dlq), 0);
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM quarantine WHERE reason = "
                                     "'bad_field:subject'"),
                     1);
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM quarantine WHERE reason = "
                                     "'tombstone' AND raw_size = 0"),
                     1);
    assert_int_equal(e2e_count(e.db, "SELECT count(*) FROM dedupe_keys"), 0);
    assert_int_equal(tu_sh(NULL,
                           "timeout 30 kcat -C -Z -b '%s' -t usage-dlq -e -q -o beginning "
                           "-f '%%h %%s\\n' | grep 'tally-reason=tombstone' | grep -q ' NULL$'",
                           b.bootstrap),
                     0);
    e2e_broker_stop(&b);
}

/* 16: keyed acct-A with subject acct-B, then the correctly keyed retry. */
static void test_misrouted_key(void **state)
{
    (void)state;
    TU_REQUIRE_TOOL(e2e_have_kcat(), "kcat");
    env e;
    env_init(&e, "hostile-misrouted");
    char ledger[600];
    snprintf(ledger, sizeof ledger, "%s/ledger", e.dir);
    snprintf(e.db, sizeof e.db, "%s", ledger);
    assert_int_equal(tu_sh(NULL, "mkdir -p '%s'", ledger), 0);
    assert_int_equal(tu_tally(NULL, "--db '%s' init >/dev/null", ledger), 0);
    char a[16] = "acct-00", bb[16] = "";
    for (int i = 1; i < 50 && !bb[0]; i++) {
        char cand[16];
        snprintf(cand, sizeof cand, "acct-%02d", i);
        if (tally_partition_of(cand, strlen(cand), 4) != tally_partition_of(a, strlen(a), 4))
            memcpy(bb, cand, sizeof bb);
    }
    assert_true(bb[0] != '\0');
    e2e_broker b;
    e2e_broker_start(&b, 4, e.blog);
    FILE *f = fopen(e.kv, "w");
    assert_non_null(f);
    for (int k = 0; k < 2; k++)
        fprintf(f,
                "%s:{\"specversion\":\"1.0\",\"id\":\"m1\",\"source\":\"//h\",\"type\":"
                "\"accelerator.usage\",\"subject\":\"%s\",\"time\":\"2026-03-01T00:00:00Z\","
                "\"data\":{\"instance\":\"i\",\"sku\":\"h100\",\"pricing\":\"on_demand\","
                "\"cards\":1,\"seconds\":10}}\n",
                k == 0 ? a : bb, bb);
    fclose(f);
    /* Keyed as producers must key (murmur2), so the key picks the partition. */
    assert_int_equal(
        tu_sh(NULL, "kcat -P -l -b '%s' -t usage -K: -X partitioner=murmur2_random '%s' 2>&1",
              b.bootstrap, e.kv),
        0);
    assert_int_equal(meter_run(&e, &b, NULL), 0);
    long misrouted = 0, keys = 0;
    for (int p = 0; p < 4; p++) {
        char shard[700];
        snprintf(shard, sizeof shard, "%s/shard-usage-%d.db", ledger, p);
        if (access(shard, F_OK) != 0)
            continue;
        misrouted += e2e_count(shard, "SELECT count(*) FROM quarantine WHERE reason = 'misrouted'");
        keys += e2e_count(shard, "SELECT count(*) FROM dedupe_keys");
    }
    assert_int_equal(misrouted, 1);
    assert_int_equal(keys, 1);
    e2e_broker_stop(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_tombstone_and_whitespace, e2e_teardown),
        cmocka_unit_test_teardown(test_misrouted_key, e2e_teardown),
        cmocka_unit_test_teardown(test_oversized_poison, e2e_teardown),
        cmocka_unit_test_teardown(test_failed_copies_do_not_pin, e2e_teardown),
        cmocka_unit_test_teardown(test_restarted_broker_stops, e2e_teardown),
        cmocka_unit_test_teardown(test_restarted_longer_log_stops, e2e_teardown),
        cmocka_unit_test_teardown(test_retention_gap_stops, e2e_teardown),
        cmocka_unit_test_teardown(test_shard_gaps, e2e_teardown),
        cmocka_unit_test_teardown(test_huge_message_gap_exits, e2e_teardown),
        cmocka_unit_test_teardown(test_retention_while_running, e2e_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
