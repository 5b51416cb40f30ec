/* One poison stream through all three input paths into three fresh
 * ledgers: `tally ingest` of a file, `tally meter` from the embedded broker,
 * and POST /v1/events to `tally serve`. The ingest pipeline
 * (include/tally/pipeline.h) must make them agree: the same accepted
 * events, the same quarantine rows with the same reasons, the same
 * invoices; and no bad event may stop a path (tally ingest exits 0, the
 * meter drains its partitions and exits 0, also when started again, and
 * the HTTP answer is 200 with a result per event). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meter_e2e.h"

#include "../server/test_http.h"

#define CLOCK "2026-04-01T00:00:00Z" /* TALLY_NOW of every process */

#define EV(id, subject, time, data)                                                                \
    "{\"specversion\":\"1.0\",\"id\":\"" id "\",\"source\":\"//host-1\",\"type\":"                 \
    "\"accelerator.usage\",\"subject\":\"" subject "\",\"time\":\"" time "\",\"data\":" data "}"
#define GPU(sku, extra)                                                                            \
    "{\"instance\":\"i-1\",\"sku\":\"" sku "\",\"pricing\":\"on_demand\"" extra "}"
#define HOUR ",\"seconds\":3600"

/* One line of the stream: the Kafka key, the message, and what the HTTP
 * answer must say about it (status, and the reason when there is one). */
typedef struct line {
    const char *key, *msg, *status, *reason;
} line;

static const line stream[] = {
    /* good events before */
    {"acme", EV("g1", "acme", "2026-03-10T00:00:00Z", GPU("a100-40g", HOUR)), "accepted", NULL},
    {"acme", EV("g2", "acme", "2026-03-10T01:00:00Z", GPU("a100-40g", ",\"cards\":2" HOUR)),
     "accepted", NULL},
    {"globex",
     "{\"specversion\":\"1.0\",\"id\":\"s1\",\"source\":\"//st\",\"type\":\"storage.usage\","
     "\"subject\":\"globex\",\"time\":\"2026-03-11T00:00:00Z\",\"data\":{\"volume\":\"v-1\","
     "\"class\":\"ssd\",\"bytes\":\"100000000000\",\"seconds\":86400}}",
     "accepted", NULL},
    {"globex",
     "{\"specversion\":\"1.0\",\"id\":\"t1\",\"source\":\"//net\",\"type\":\"traffic.usage\","
     "\"subject\":\"globex\",\"time\":\"2026-03-12T00:00:00Z\",\"data\":{\"resource\":\"r-1\","
     "\"direction\":\"egress\",\"scope\":\"internet\",\"bytes\":5000000000}}",
     "accepted", NULL},
    {"globex",
     "{\"specversion\":\"1.0\",\"id\":\"k1\",\"source\":\"//llm\",\"type\":\"tokens.usage\","
     "\"subject\":\"globex\",\"time\":\"2026-03-12T00:00:00Z\",\"data\":{\"model\":\"qwen\","
     "\"kind\":\"input\",\"tokens\":2000000}}",
     "accepted", NULL},
    /* bad times */
    {"acme", EV("p1", "acme", "1969-12-31T23:59:59Z", GPU("a100-40g", "")), "quarantined",
     "bad_time"},
    {"acme", EV("p2", "acme", "0001-01-01T00:00:00Z", GPU("a100-40g", "")), "quarantined",
     "bad_time"},
    {"acme", EV("p3", "acme", "1999-12-31T23:59:59Z", GPU("a100-40g", "")), "quarantined",
     "bad_time"},
    {"acme", EV("p4", "acme", "yesterday", GPU("a100-40g", "")), "quarantined", "bad_time"},
    {"acme", EV("p5", "acme", "2026-04-01T00:10:00Z", GPU("a100-40g", "")), "quarantined",
     "bad_time"},
    /* bad JSON (kept inside an array's framing, so HTTP can carry it too) */
    {"poison", "not json", "quarantined", "bad_json"},
    {"poison", "{\"specversion\":\"1.0\",\"id\":\"d\",\"id\":\"again\"}", "quarantined",
     "bad_json"},
    {"poison", "{\"specversion\" \"1.0\"}", "quarantined", "bad_json"},
    {"poison", "[1,2,3]", "quarantined", "bad_json"},
    /* unknown type, SKU, price; bad fields */
    {"acme",
     "{\"specversion\":\"1.0\",\"id\":\"p6\",\"source\":\"//host-1\",\"type\":\"gpu.magic\","
     "\"subject\":\"acme\",\"time\":\"2026-03-10T00:00:00Z\",\"data\":{}}",
     "quarantined", "unknown_type"},
    {"acme", EV("p7", "acme", "2026-03-10T00:00:00Z", GPU("quantum-9000", "")), "quarantined",
     "unknown_sku"},
    {"acme",
     EV("p8", "acme", "2026-03-10T00:00:00Z",
        "{\"instance\":\"i-1\",\"sku\":\"tpu-v4-64\",\"pricing\":\"reserved\"}"),
     "quarantined", "no_price"},
    {"acme", EV("p9", " acme", "2026-03-10T00:00:00Z", GPU("a100-40g", "")), "quarantined",
     "bad_field:subject"},
    {"acme", EV("p10", "acme", "2026-03-10T00:00:00Z", GPU("a100-40g", ",\"seconds\":0")),
     "quarantined", "bad_field:seconds"},
    {"acme", EV("p11", "acme", "2026-03-10T00:00:00Z", GPU("a100-40g", ",\"cards\":0")),
     "quarantined", "bad_field:cards"},
    /* out-of-range quantities */
    {"acme",
     EV("p12", "acme", "2026-03-10T00:00:00Z", GPU("a100-40g", ",\"cards\":9223372036854775807")),
     "quarantined", "out_of_range"},
    {"acme", EV("p13", "acme", "2026-03-10T00:00:00Z", GPU("a100-40g", ",\"cards\":65537")),
     "quarantined", "out_of_range"},
    {"globex",
     "{\"specversion\":\"1.0\",\"id\":\"p14\",\"source\":\"//st\",\"type\":\"storage.usage\","
     "\"subject\":\"globex\",\"time\":\"2026-03-11T00:00:00Z\",\"data\":{\"volume\":\"v-1\","
     "\"class\":\"ssd\",\"bytes\":1000000000000000001}}",
     "quarantined", "out_of_range"},
    {"globex",
     "{\"specversion\":\"1.0\",\"id\":\"p15\",\"source\":\"//llm\",\"type\":\"tokens.usage\","
     "\"subject\":\"globex\",\"time\":\"2026-03-12T00:00:00Z\",\"data\":{\"model\":\"qwen\","
     "\"kind\":\"output\",\"tokens\":\"1000000000001\"}}",
     "quarantined", "out_of_range"},
    /* duplicates: the same bytes, and the same event re-serialised */
    {"acme", EV("g1", "acme", "2026-03-10T00:00:00Z", GPU("a100-40g", HOUR)), "duplicate", NULL},
    {"acme",
     "{\"data\":{\"seconds\":\"3600\",\"pricing\":\"on_demand\",\"sku\":\"a100-40g\","
     "\"instance\":\"i-1\"},\"time\":\"2026-03-10T08:00:00+08:00\",\"subject\":\"acme\","
     "\"type\":\"accelerator.usage\",\"source\":\"//"
     "host-1\",\"id\":\"g1\",\"specversion\":\"1.0\"}",
     "duplicate", NULL},
    /* conflicts: same (source, id), other content */
    {"acme", EV("g2", "acme", "2026-03-10T01:00:00Z", GPU("a100-40g", ",\"cards\":3" HOUR)),
     "conflict", "conflict"},
    {"globex",
     "{\"specversion\":\"1.0\",\"id\":\"t1\",\"source\":\"//net\",\"type\":\"traffic.usage\","
     "\"subject\":\"globex\",\"time\":\"2026-03-12T00:00:00Z\",\"data\":{\"resource\":\"r-1\","
     "\"direction\":\"egress\",\"scope\":\"internet\",\"bytes\":6000000000}}",
     "conflict", "conflict"},
    /* good events after */
    {"acme", EV("g3", "acme", "2026-03-20T00:00:00Z", GPU("h100", ",\"cards\":4" HOUR)), "accepted",
     NULL},
    {"globex", EV("g4", "globex", "2026-03-21T00:00:00Z", GPU("a100-80g", HOUR)), "accepted", NULL},
    {"acme", EV("g5", "acme", "2026-03-31T23:30:00Z", GPU("a100-40g", HOUR)), "accepted", NULL},
};
#define N_LINES (sizeof stream / sizeof *stream)

/* Every quarantine row but its origin and time, which name the path. */
static const char *const quarantine_sql =
    "SELECT reason, detail, coalesce(source, '-'), coalesce(event_id, '-'), hex(raw) "
    "FROM quarantine ORDER BY hex(raw), reason";

typedef struct paths {
    char dir[512];
    char nd[700], kv[700];
    char db_file[700], db_kafka[700], db_http[700];
} paths;

static void write_stream(const paths *p)
{
    FILE *nd = fopen(p->nd, "w"), *kv = fopen(p->kv, "w");
    assert_non_null(nd);
    assert_non_null(kv);
    for (size_t i = 0; i < N_LINES; i++) {
        fprintf(nd, "%s\n", stream[i].msg);
        fprintf(kv, "%s:%s\n", stream[i].key, stream[i].msg);
    }
    fclose(nd);
    fclose(kv);
}

static long expected(const char *status)
{
    long n = 0;
    for (size_t i = 0; i < N_LINES; i++)
        n += strcmp(stream[i].status, status) == 0;
    return n;
}

/* Each quarantined line's origin is "file:<path>:<line>:" and 16 hex
 * digits of its hash, and names its own line. */
static void origins_name_lines(const paths *p)
{
    char sql[1200];
    const char *hex16 = "[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]"
                        "[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]";
    long rows = 0;
    for (size_t i = 0; i < N_LINES; i++) {
        if (strcmp(stream[i].status, "quarantined") && strcmp(stream[i].status, "conflict"))
            continue;
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM quarantine WHERE origin GLOB 'file:%s:%zu:%s'", p->nd, i + 1,
                 hex16);
        assert_int_equal(e2e_count(p->db_file, sql), 1);
        rows++;
    }
    assert_int_equal(e2e_count(p->db_file, "SELECT count(*) FROM quarantine"), rows);
}

/* Path 1: tally ingest of the file, twice (the second time stores nothing:
 * events are duplicates, and quarantine keeps each origin once although the
 * counts name every rejected line again). */
static void via_file(const paths *p)
{
    char want[128];
    tally_buf out;
    tally_buf_init(&out, 0);
    assert_int_equal(tu_tally(NULL, "--db '%s' init >/dev/null", p->db_file), 0);
    assert_int_equal(tu_tally(&out, "--db '%s' ingest '%s'", p->db_file, p->nd), 0);
    snprintf(want, sizeof want, "accepted=%ld duplicate=%ld conflict=%ld quarantined=%ld\n",
             expected("accepted"), expected("duplicate"), expected("conflict"),
             expected("quarantined"));
    assert_string_equal(out.data, want);
    origins_name_lines(p);
    tally_buf_reset(&out);
    assert_int_equal(tu_tally(&out, "--db '%s' ingest '%s'", p->db_file, p->nd), 0);
    snprintf(want, sizeof want, "accepted=0 duplicate=%ld conflict=%ld quarantined=%ld\n",
             expected("accepted") + expected("duplicate"), expected("conflict"),
             expected("quarantined"));
    assert_string_equal(out.data, want);
    tally_buf_release(&out);
}

/* Runs the meter until the stream is drained; it must exit 0. */
static void meter_once(const paths *p, const e2e_broker *b, const char *log)
{
    const char *extra[] = {"--until-idle", "2", NULL};
    pid_t pid = e2e_meter(p->db_kafka, b, "poison-paths", log, extra);
    int rc = e2e_wait(pid, 120000);
    if (rc != 0) {
        tu_sh(NULL, "tail -5 '%s' >&2", log);
        fail_msg("tally meter exited with %d", rc);
    }
}

/* Path 2: the embedded broker and tally meter, started twice: a poison
 * message must neither stop it nor hold its partition back. */
static void via_kafka(const paths *p)
{
    char log[700];
    if (!e2e_have_kcat())
        fail_msg("kcat is missing (scripts/deps installs it); this test needs it to produce");
    snprintf(log, sizeof log, "%s/broker.log", p->dir);
    e2e_broker b;
    e2e_broker_start(&b, 4, log);
    e2e_produce(&b, "usage", p->kv);
    assert_int_equal(tu_tally(NULL, "--db '%s' init >/dev/null", p->db_kafka), 0);
    snprintf(log, sizeof log, "%s/meter.log", p->dir);
    meter_once(p, &b, log);
    assert_int_equal(e2e_count(p->db_kafka, "SELECT sum(next_offset) FROM offsets"), N_LINES);
    meter_once(p, &b, log); /* a restart finds nothing left to do */
    assert_int_equal(e2e_count(p->db_kafka, "SELECT sum(next_offset) FROM offsets"), N_LINES);
    e2e_broker_stop(&b);
}

/* The HTTP answer holds, for element i, its status and reason (and a
 * result without a reason when the stream names none). */
static void assert_results(const tally_buf *body)
{
    char at[32], want[128];
    for (size_t i = 0; i < N_LINES; i++) {
        snprintf(at, sizeof at, "{\"index\":%zu,", i);
        const char *r = strstr(body->data, at);
        if (!r)
            fail_msg("no result for element %zu in %s", i, body->data);
        int len = (int)(strchr(r, '}') - r + 1);
        char result[512];
        snprintf(result, sizeof result, "%.*s", len, r);
        snprintf(want, sizeof want, "\"status\":\"%s\"", stream[i].status);
        bool ok = strstr(result, want) != NULL;
        if (stream[i].reason) {
            snprintf(want, sizeof want, "\"reason\":\"%s\"}", stream[i].reason);
            ok = ok && strstr(result, want) != NULL;
        } else {
            ok = ok && strstr(result, "\"reason\"") == NULL;
        }
        if (!ok)
            fail_msg("element %zu: want %s %s, got %s", i, stream[i].status,
                     stream[i].reason ? stream[i].reason : "", result);
    }
}

/* Path 3: one POST /v1/events with the whole stream as an array. */
static void via_http(paths *p)
{
    http_fixture f;
    memset(&f, 0, sizeof f);
    snprintf(f.dir, sizeof f.dir, "%s", tu_tmpdir("poison-paths-http"));
    snprintf(f.db, sizeof f.db, "%s/tally.db", f.dir);
    snprintf(p->db_http, sizeof p->db_http, "%s", f.db);
    assert_int_equal(tu_tally(NULL, "--db '%s' init >/dev/null", f.db), 0);
    fx_key(&f, "--admin", f.admin);
    fx_start(&f, NULL);
    tally_buf body;
    tally_buf_init(&body, 0);
    assert_int_equal(tally_buf_puts(&body, "["), TALLY_OK);
    for (size_t i = 0; i < N_LINES; i++)
        assert_int_equal(tally_buf_printf(&body, "%s%s", i ? "," : "", stream[i].msg), TALLY_OK);
    assert_int_equal(tally_buf_puts(&body, "]"), TALLY_OK);
    http_answer a;
    if (http_send(&f, &a, "POST", "/v1/events", f.admin, body.data) != 200)
        fail_msg("POST /v1/events: %d %s", a.status, a.body.data);
    assert_results(&a.body);
    http_done(&a);
    /* A body that is not one JSON array is still refused whole (SPEC 7). */
    assert_int_equal(
        http_send(&f, &a, "POST", "/v1/events", f.admin, "[{\"specversion\":\"1.0\",\"id\":\"x\""),
        400);
    http_done(&a);
    assert_healthy(&f);
    fx_stop(&f);
    tally_buf_release(&body);
}

static void assert_same_rows(const char *sql, const char *db_a, const char *db_b)
{
    tally_buf a, b;
    tally_buf_init(&a, 0);
    tally_buf_init(&b, 0);
    e2e_query(db_a, sql, &a);
    e2e_query(db_b, sql, &b);
    if (strcmp(a.data, b.data) != 0)
        fail_msg("%s differs\n--- %s\n%s--- %s\n%s", sql, db_a, a.data, db_b, b.data);
    tally_buf_release(&a);
    tally_buf_release(&b);
}

/* What the file path stored, against the stream's own expectations. */
static void assert_reasons(const char *db)
{
    tally_buf got, want;
    tally_buf_init(&got, 0);
    tally_buf_init(&want, 0);
    e2e_query(db, "SELECT reason, count(*) FROM quarantine GROUP BY 1 ORDER BY 1", &got);
    e2e_query(db,
              "SELECT 'bad_field:cards', 1 UNION ALL SELECT 'bad_field:seconds', 1 UNION ALL "
              "SELECT 'bad_field:subject', 1 UNION ALL SELECT 'bad_json', 4 UNION ALL "
              "SELECT 'bad_time', 5 UNION ALL SELECT 'conflict', 2 UNION ALL "
              "SELECT 'no_price', 1 UNION ALL "
              "SELECT 'out_of_range', 4 UNION ALL SELECT 'unknown_sku', 1 UNION ALL "
              "SELECT 'unknown_type', 1",
              &want);
    assert_string_equal(got.data, want.data);
    assert_int_equal(e2e_count(db, "SELECT count(*) FROM dedupe_keys"), expected("accepted"));
    tally_buf_release(&got);
    tally_buf_release(&want);
}

static void test_one_stream_three_paths(void **state)
{
    (void)state;
    paths p;
    snprintf(p.dir, sizeof p.dir, "%s", tu_tmpdir("poison-paths"));
    snprintf(p.nd, sizeof p.nd, "%s/stream.ndjson", p.dir);
    snprintf(p.kv, sizeof p.kv, "%s/stream.kv", p.dir);
    snprintf(p.db_file, sizeof p.db_file, "%s/file.db", p.dir);
    snprintf(p.db_kafka, sizeof p.db_kafka, "%s/kafka.db", p.dir);
    setenv("TALLY_NOW", CLOCK, 1);
    write_stream(&p);
    via_file(&p);
    via_kafka(&p);
    via_http(&p);
    unsetenv("TALLY_NOW");

    assert_reasons(p.db_file);
    const char *others[] = {p.db_kafka, p.db_http};
    char dir[700];
    for (int i = 0; i < 2; i++) {
        e2e_assert_same_usage(p.db_file, others[i]);
        assert_same_rows(quarantine_sql, p.db_file, others[i]);
        assert_same_rows("SELECT id, currency, timezone FROM accounts ORDER BY id", p.db_file,
                         others[i]);
        snprintf(dir, sizeof dir, "%s/invoices-vs-%d", p.dir, i);
        assert_int_equal(tu_sh(NULL, "mkdir -p '%s'", dir), 0);
        e2e_assert_same_invoices(p.db_file, others[i], dir);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_one_stream_three_paths, e2e_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
