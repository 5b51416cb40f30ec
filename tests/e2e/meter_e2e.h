/* Shared by the meter's end-to-end tests (tests/e2e/test_meter_*.c): child
 * processes (the broker, meters, kcat) that are always reaped, a seeded
 * usage stream with duplicates, conflicts and poison, and comparisons of
 * what two ledgers hold. Header-only: each test is one executable. */
#ifndef TALLY_METER_E2E_H
#define TALLY_METER_E2E_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "tally/event.h"

#include "proc.h"
#include "tally/ledger_sql.h"

/* Child processes and the broker come from tests/util/proc.h; these are
 * their names in the meter tests. */
#define E2E_UNUSED       __attribute__((unused))
#define E2E_MAX_CHILDREN TU_MAX_CHILDREN
#define e2e_ms           tu_ms
#define e2e_sleep_ms     tu_sleep_ms
#define e2e_track        tu_track
#define e2e_untrack      tu_untrack
#define e2e_wait         tu_wait
#define e2e_stop         tu_stop
#define e2e_teardown     tu_proc_teardown
#define e2e_spawn        tu_spawn
#define e2e_read_line    tu_read_line
#define e2e_broker_start tu_broker_start
#define e2e_broker_ctl   tu_broker_ctl
#define e2e_broker_stop  tu_broker_stop
typedef tu_broker e2e_broker;

/* ---- Producing with kcat -------------------------------------------------------- */

static E2E_UNUSED bool e2e_have_kcat(void)
{
    return tu_sh(NULL, "kcat -V >/dev/null 2>&1") == 0;
}

/* Produces the "key:value" lines of path, keyed by account. */
static E2E_UNUSED void e2e_produce(const e2e_broker *b, const char *topic, const char *path)
{
    int rc = tu_sh(NULL, "kcat -P -l -b '%s' -t '%s' -K: '%s' 2>&1", b->bootstrap, topic, path);
    assert_int_equal(rc, 0);
}

/* Messages in a topic (all partitions), read with kcat. */
static E2E_UNUSED long e2e_topic_count(const e2e_broker *b, const char *topic)
{
    tally_buf out;
    tally_buf_init(&out, 0);
    int rc = tu_sh(&out, "timeout 30 kcat -C -b '%s' -t '%s' -e -q -o beginning -f 'x\\n' | wc -l",
                   b->bootstrap, topic);
    long n = rc == 0 && out.data ? strtol(out.data, NULL, 10) : -1;
    tally_buf_release(&out);
    return n;
}

/* Distinct tally-origin headers in the dead-letter topic. */
static E2E_UNUSED long e2e_dlq_origins(const e2e_broker *b)
{
    tally_buf out;
    tally_buf_init(&out, 0);
    int rc = tu_sh(&out,
                   "timeout 30 kcat -C -b '%s' -t usage-dlq -e -q -o beginning -f '%%h\\n' | "
                   "grep -o 'tally-origin=kafka:[^,]*' | sort -u | wc -l",
                   b->bootstrap);
    long n = rc == 0 && out.data ? strtol(out.data, NULL, 10) : -1;
    tally_buf_release(&out);
    return n;
}

/* ---- A seeded usage stream -------------------------------------------------------- */

typedef struct e2e_stream {
    long messages;  /* lines written */
    long distinct;  /* distinct valid events (dedupe keys) */
    long poison;    /* messages that must be quarantined (conflicts included) */
    long conflicts; /* same (source, id) as an earlier event, different content */
    long dups;      /* exact repeats */
} e2e_stream;

static E2E_UNUSED uint64_t e2e_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static E2E_UNUSED const char *const e2e_skus[] = {"a100-40g", "h100", "rtx4090", "tpu-v5e",
                                                  "ascend-910b"};

/* One valid event of instance i (its seq-th report) into buf. Accelerator
 * ids end in a 6-digit counter, so they are kept as dedupe runs; the other
 * meters' ids are rows of their own (ledger/dedupe_runs.c). */
static E2E_UNUSED int e2e_event(char *buf, size_t cap, int i, long seq, int64_t t0, int variant)
{
    char ts[32];
    if (tally_time_format(t0 + seq * 10, ts, sizeof ts))
        return -1;
    int acct = i % 23;
    switch (i % 10) {
    case 7:
        return snprintf(buf, cap,
                        "{\"specversion\":\"1.0\",\"id\":\"s%d-%ld\",\"source\":\"//st\",\"type\":"
                        "\"storage.usage\",\"subject\":\"acct-%02d\",\"time\":\"%s\",\"data\":{"
                        "\"volume\":\"vol-%d\",\"class\":\"ssd\",\"bytes\":%d,\"seconds\":10}}",
                        i, seq, acct, ts, i, 1000000 * (i + 1) + variant);
    case 8:
        return snprintf(buf, cap,
                        "{\"specversion\":\"1.0\",\"id\":\"t%d-%ld\",\"source\":\"//net\",\"type\":"
                        "\"traffic.usage\",\"subject\":\"acct-%02d\",\"time\":\"%s\",\"data\":{"
                        "\"resource\":\"r%d\",\"direction\":\"egress\",\"scope\":\"internet\","
                        "\"bytes\":%ld}}",
                        i, seq, acct, ts, i, 1000 * seq + 7 + variant);
    case 9:
        return snprintf(buf, cap,
                        "{\"specversion\":\"1.0\",\"id\":\"k%d-%ld\",\"source\":\"//llm\",\"type\":"
                        "\"tokens.usage\",\"subject\":\"acct-%02d\",\"time\":\"%s\",\"data\":{"
                        "\"model\":\"m%d\",\"kind\":\"%s\",\"tokens\":%ld}}",
                        i, seq, acct, ts, i % 3, seq % 2 ? "input" : "output", 100 + seq + variant);
    default:
        return snprintf(buf, cap,
                        "{\"specversion\":\"1.0\",\"id\":\"a%d-%06ld\",\"source\":\"//host-%d\","
                        "\"type\":\"accelerator.usage\",\"subject\":\"acct-%02d\",\"time\":\"%s\","
                        "\"data\":{\"instance\":\"ins-%d\",\"sku\":\"%s\",\"pricing\":\"%s\","
                        "\"cards\":%d,\"seconds\":10}}",
                        i, seq, i / 3, acct, ts, i, e2e_skus[i % 5],
                        i % 5 >= 2 && i % 2 ? "spot" : "on_demand", 1 + (i + variant) % 8);
    }
}

static E2E_UNUSED const char *const e2e_poison[] = {
    "{\"specversion\":\"1.0\",\"id\":\"bad\"",
    "{\"specversion\":\"1.0\",\"id\":\"x\",\"source\":\"//x\",\"type\":\"gpu.magic\",\"subject\":"
    "\"acct-00\",\"time\":\"2026-03-01T00:00:00Z\",\"data\":{}}",
    "{\"specversion\":\"1.0\",\"id\":\"y\",\"source\":\"//x\",\"type\":\"accelerator.usage\","
    "\"subject\":\"acct-00\",\"time\":\"2026-03-01T00:00:00Z\",\"data\":{\"instance\":\"i\","
    "\"sku\":\"quantum-9000\",\"pricing\":\"on_demand\"}}",
    "not json",
    "{\"specversion\":\"1.0\",\"id\":\"z\",\"source\":\"//x\",\"type\":\"accelerator.usage\","
    "\"subject\":\"acct-00\",\"time\":\"2026-03-01T00:00:00Z\",\"data\":{\"instance\":\"i\","
    "\"sku\":\"h100\",\"pricing\":\"on_demand\",\"cards\":0}}",
};

/* Writes n valid events over `instances` instances (March 2026), with about
 * 2% exact repeats, 1% poison and a few conflicts, as "acct-NN:<json>" lines
 * to kv_path and as bare NDJSON to nd_path, in the same order. */
static E2E_UNUSED void e2e_stream_write(const char *kv_path, const char *nd_path, long n,
                                        int instances, uint64_t seed, e2e_stream *st)
{
    FILE *kv = fopen(kv_path, "w"), *nd = fopen(nd_path, "w");
    if (!kv || !nd)
        fail_msg("cannot write the stream files");
    long *seq = calloc((size_t)instances, sizeof *seq);
    assert_non_null(seq);
    uint64_t rng = seed * 2654435761u + 1;
    char msg[1024], prev[1024] = "";
    int prev_acct = 0;
    memset(st, 0, sizeof *st);
    for (long made = 0; made < n;) {
        uint64_t r = e2e_rand(&rng) % 1000;
        int i = (int)(e2e_rand(&rng) % (uint64_t)instances), acct = i % 23;
        if (r < 20 && prev[0]) { /* an exact repeat, to the same key */
            memcpy(msg, prev, sizeof msg);
            acct = prev_acct;
            st->dups++;
        } else if (r < 30) {
            snprintf(msg, sizeof msg, "%s", e2e_poison[e2e_rand(&rng) % 5]);
            st->poison++;
        } else if (r < 33 && seq[i] > 0) { /* a conflict: same id, other content */
            e2e_event(msg, sizeof msg, i, seq[i] - 1, 1772323200, 1);
            st->conflicts++;
            st->poison++;
        } else {
            e2e_event(msg, sizeof msg, i, seq[i]++, 1772323200, 0);
            memcpy(prev, msg, sizeof prev);
            prev_acct = acct;
            made++;
            st->distinct++;
        }
        fprintf(kv, "acct-%02d:%s\n", acct, msg);
        fprintf(nd, "%s\n", msg);
        st->messages++;
    }
    free(seq);
    fclose(kv);
    fclose(nd);
}

/* Splits a file of lines into `parts` files path.0, path.1, ... */
static E2E_UNUSED void e2e_split(const char *path, int parts, long lines)
{
    FILE *in = fopen(path, "r");
    assert_non_null(in);
    char line[2048], name[1024];
    long per = (lines + parts - 1) / parts, done = 0;
    for (int p = 0; p < parts; p++) {
        snprintf(name, sizeof name, "%s.%d", path, p);
        FILE *out = fopen(name, "w");
        assert_non_null(out);
        for (long k = 0; k < per && done < lines && fgets(line, sizeof line, in); k++, done++)
            fputs(line, out);
        fclose(out);
    }
    fclose(in);
}

/* ---- Ledgers ---------------------------------------------------------------------- */

static E2E_UNUSED tally_err e2e_row(void *ctx, int ncols, const char *const *cols)
{
    tally_buf *b = ctx;
    for (int i = 0; i < ncols; i++)
        if (tally_buf_printf(b, "%s%s", i ? "|" : "", cols[i] ? cols[i] : "NULL") ||
            tally_buf_puts(b, i + 1 == ncols ? "\n" : ""))
            return TALLY_NOMEM;
    return TALLY_OK;
}

/* The rows of a query on the ledger at path, one line each, into out. */
static E2E_UNUSED void e2e_query(const char *db, const char *sql, tally_buf *out)
{
    tally_ledger *l = NULL;
    char why[256] = "";
    if (tally_ledger_open(db, &l, why, sizeof why) != TALLY_OK)
        fail_msg("cannot open %s: %s", db, why);
    tally_buf_reset(out);
    if (tally_ledger_query(l, sql, NULL, 0, e2e_row, out) != TALLY_OK)
        fail_msg("query failed on %s: %s", db, tally_ledger_errmsg(l));
    tally_ledger_close(l);
    if (!out->data && tally_buf_puts(out, ""))
        fail_msg("out of memory");
}

static E2E_UNUSED long e2e_count(const char *db, const char *sql)
{
    tally_buf b;
    tally_buf_init(&b, 0);
    e2e_query(db, sql, &b);
    long n = strtol(b.data, NULL, 10);
    tally_buf_release(&b);
    return n;
}

/* Usage per account, meter, pricing and dimensions (card-seconds, byte-
 * seconds, bytes, tokens), which does not depend on how rows were split. */
static E2E_UNUSED const char *const e2e_usage_sql =
    "SELECT account, meter, pricing, migration, dim, sum(weight * (end_s - start_s)), "
    "min(start_s), max(end_s) FROM usage_intervals GROUP BY 1, 2, 3, 4, 5 "
    "UNION ALL SELECT account, meter, -1, 0, dim || '/' || dim2, sum(qty), min(t_s), max(t_s) "
    "FROM usage_points GROUP BY 1, 2, 5 ORDER BY 1, 2, 3, 4, 5";

/* Asserts that the two ledgers hold the same usage, the same dedupe keys
 * and the same quarantine reasons. */
static E2E_UNUSED void e2e_assert_same_usage(const char *db_a, const char *db_b)
{
    static const char *const sqls[] = {
        NULL, /* e2e_usage_sql */
        /* Every key with its fingerprint, whichever table holds it (runs are
         * cut where a stream's arrival order cut them, so compare keys). */
        "SELECT count(*), sum(src & 4294967295), sum(length(id)), group_concat(fp, '') FROM "
        "(SELECT * FROM dedupe_keys ORDER BY src, id)",
        /* and what windows keep of each id in place of a fingerprint: the
         * coding is canonical, so the same keys give the same bytes */
        "SELECT count(*), sum(n), group_concat(bits_at || hex(bits) || hex(content), '') FROM "
        "(SELECT * FROM dedupe_windows ORDER BY src, prefix, width, lo)",
        "SELECT reason, count(*) FROM quarantine GROUP BY 1 ORDER BY 1",
    };
    tally_buf a, b;
    tally_buf_init(&a, 0);
    tally_buf_init(&b, 0);
    for (size_t i = 0; i < sizeof sqls / sizeof *sqls; i++) {
        const char *sql = sqls[i] ? sqls[i] : e2e_usage_sql;
        e2e_query(db_a, sql, &a);
        e2e_query(db_b, sql, &b);
        if (strcmp(a.data, b.data) != 0)
            fail_msg("ledgers differ on %s\n--- %s\n%s--- %s\n%s", sql, db_a, a.data, db_b, b.data);
        if (i == 0 && a.len < 10)
            fail_msg("no usage at all in %s", db_a);
    }
    tally_buf_release(&a);
    tally_buf_release(&b);
}

/* Rates March 2026 in both ledgers (drafts, a fixed clock) and asserts that
 * every invoice file (JSON, CSV, HTML) is byte for byte the same. */
static E2E_UNUSED void e2e_assert_same_invoices(const char *db_a, const char *db_b, const char *dir)
{
    const char *dbs[] = {db_a, db_b};
    setenv("TALLY_NOW", "2026-04-02T00:00:00Z", 1); /* issued_at */
    for (int i = 0; i < 2; i++)
        assert_int_equal(tu_tally(NULL,
                                  "--db '%s' invoice run --period 2026-03 --out '%s/invoices-%d' "
                                  ">/dev/null",
                                  dbs[i], dir, i),
                         0);
    unsetenv("TALLY_NOW");
    assert_int_equal(tu_sh(NULL, "test -n \"$(ls '%s/invoices-0')\"", dir), 0);
    assert_int_equal(tu_sh(NULL, "diff -r '%s/invoices-0' '%s/invoices-1' >&2", dir, dir), 0);
}

/* A fresh ledger at db holding a clean `tally ingest` of nd_path. */
static E2E_UNUSED void e2e_clean_ingest(const char *db, const char *nd_path)
{
    assert_int_equal(tu_tally(NULL, "--db '%s' init >/dev/null", db), 0);
    assert_int_equal(tu_tally(NULL, "--db '%s' ingest '%s' >/dev/null", db, nd_path), 0);
}

/* Asserts what the metered ledger holds against the stream: every distinct
 * event once, every poison message quarantined exactly once (by origin),
 * offsets at the end of every partition. */
static E2E_UNUSED void e2e_assert_stream(const char *db, const e2e_stream *st)
{
    assert_int_equal(e2e_count(db, "SELECT count(*) FROM dedupe_keys"), st->distinct);
    assert_int_equal(e2e_count(db, "SELECT count(*) FROM quarantine WHERE origin LIKE 'kafka:%'"),
                     st->poison);
    assert_int_equal(e2e_count(db, "SELECT count(DISTINCT origin) FROM quarantine"), st->poison);
    assert_int_equal(e2e_count(db, "SELECT coalesce(sum(next_offset), 0) FROM offsets"),
                     st->messages);
}

/* ---- Meters ---------------------------------------------------------------------- */

/* Starts `tally meter` on db with the given extra arguments (NULL-ended). */
static E2E_UNUSED pid_t e2e_meter(const char *db, const e2e_broker *b, const char *group,
                                  const char *log, const char *const *extra)
{
    const char *argv[32] = {TALLY_BINARY,           "--db",    db,      "meter",   "--brokers",
                            b->bootstrap,           "--topic", "usage", "--group", group,
                            "--session-timeout-ms", "3000"};
    int n = 12;
    for (int i = 0; extra && extra[i] && n < 31; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    return e2e_spawn(argv, log, NULL, NULL);
}

#endif
