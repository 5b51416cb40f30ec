/* Tests for ledger directories (include/tally/shard.h, ledger/shard_*.c)
 * through the library: the murmur2 partitioner against Kafka's reference
 * values and librdkafka's own partitioner, shard names, the lock (in one
 * process, across processes, after the holder is killed), owner rows and the
 * fence, rate cards and accounts across main.db and shards, and invoices of
 * a sharded ledger (more shards than SQLite can attach) equal to those of a
 * plain ledger holding the same events, late events included. */
#include <json-c/json.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "tally/embed.h"
#include "tally/ingest.h"
#include "tally/invoice.h"
#include "tally/shard.h"
#include "tally/sign.h"
#include "tally/ledger_sql.h"

#define NOW   "2026-06-01T00:00:00Z"
#define TOPIC "usage"

/* ---- Routing ------------------------------------------------------------------ */

/* Kafka's own test vectors for Utils.murmur2 (signed 32-bit results). */
static void test_murmur2_reference(void **state)
{
    (void)state;
    static const struct {
        const char *key;
        int32_t h;
    } cases[] = {
        {"21", -973932308},
        {"foobar", -790332482},
        {"a-little-bit-long-string", -985981536},
        {"a-little-bit-longer-string", -1486304829},
        {"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
        {"abc", 479470107},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        assert_int_equal((int32_t)tally_murmur2(cases[i].key, strlen(cases[i].key)), cases[i].h);
    assert_int_equal(tally_partition_of("x", 1, 0), -1);
    assert_int_equal(tally_partition_of("x", 1, 1), 0);
}

/* The partition librdkafka's murmur2 partitioners pick, for many keys of
 * every length 0..40 (all tail lengths) and partition counts. */
static void test_partition_matches_librdkafka(void **state)
{
    (void)state;
    char key[64];
    uint64_t rng = 88172645463325252ull;
    static const int32_t counts[] = {1, 2, 3, 7, 8, 12, 100, 1000};
    for (int n = 0; n < 4000; n++) {
        size_t len = (size_t)(n % 41);
        for (size_t i = 0; i < len; i++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            key[i] = (char)(n % 3 == 0 ? 'a' + rng % 26 : rng & 0xff); /* text and binary */
        }
        for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
            int32_t want = rd_kafka_msg_partitioner_murmur2(NULL, key, len, counts[c], NULL, NULL);
            assert_int_equal(tally_partition_of(key, len, counts[c]), want);
            if (len > 0)
                assert_int_equal(
                    rd_kafka_msg_partitioner_murmur2_random(NULL, key, len, counts[c], NULL, NULL),
                    want);
        }
    }
    /* Account ids as producers key them. */
    for (int a = 0; a < 200; a++) {
        int len = snprintf(key, sizeof key, "acct-%02d", a);
        assert_int_equal(tally_partition_of(key, (size_t)len, 12),
                         rd_kafka_msg_partitioner_murmur2(NULL, key, (size_t)len, 12, NULL, NULL));
    }
}

static void test_shard_names(void **state)
{
    (void)state;
    char name[300];
    assert_true(tally_shard_name("usage", 3, name, sizeof name));
    assert_string_equal(name, "shard-usage-3");
    assert_true(tally_shard_name("a.b_c-D9", 11, name, sizeof name));
    assert_string_equal(name, "shard-a.b_c-D9-11");
    assert_false(tally_shard_name("", 0, name, sizeof name));
    assert_false(tally_shard_name("../x", 0, name, sizeof name));
    assert_false(tally_shard_name("a/b", 0, name, sizeof name));
    assert_false(tally_shard_name("usage", -1, name, sizeof name));
    assert_false(tally_shard_name("usage", 1, name, 8));
    char long_topic[260];
    memset(long_topic, 't', 250);
    long_topic[250] = '\0';
    assert_false(tally_shard_name(long_topic, 0, name, sizeof name));
}

/* ---- A ledger directory --------------------------------------------------------- */

typedef struct fx {
    char dir[512];
    char key[600];
    tally_ledger *l; /* the directory */
    tally_shard_set *s;
} fx;

static void load_card(tally_ledger *l)
{
    char why[256] = "";
    const tally_embedded *card = tally_embedded_find("fixtures/pricebook/ratecard.json");
    assert_non_null(card);
    if (tally_ledger_ratecard_load(l, card->data, card->len, why, sizeof why) != TALLY_OK)
        fail_msg("ratecard: %s", why);
}

static void fx_open(fx *f, const char *tag)
{
    memset(f, 0, sizeof *f);
    setenv("TALLY_NOW", NOW, 1);
    snprintf(f->dir, sizeof f->dir, "%s/ledger", tu_tmpdir(tag));
    snprintf(f->key, sizeof f->key, "%s.key", f->dir);
    assert_int_equal(mkdir(f->dir, 0755), 0);
    char why[256] = "";
    if (tally_ledger_open(f->dir, &f->l, why, sizeof why) != TALLY_OK)
        fail_msg("open %s: %s", f->dir, why);
    assert_true(tally_ledger_is_dir(f->l));
    assert_string_equal(tally_ledger_dir(f->l), f->dir);
    load_card(f->l);
    assert_int_equal(tally_keygen(f->key, 0), TALLY_OK);
    assert_int_equal(tally_shard_set_create(f->l, "test", &f->s), TALLY_OK);
}

static void fx_close(fx *f)
{
    tally_shard_set_destroy(f->s);
    tu_assert_conservation(f->l);
    char why[512] = "";
    if (tally_ledger_verify(f->l, f->key, why, sizeof why) != TALLY_OK)
        fail_msg("verify: %s", why);
    tally_ledger_close(f->l);
}

static tally_shard *take(fx *f, int32_t p)
{
    return tu_shard_take(f->s, TOPIC, p);
}

static int64_t value(tally_ledger *l, const char *sql)
{
    return tu_query_int(l, sql, NULL);
}

/* A plain ledger file's one value (a shard file, read as a ledger). */
static int64_t file_value(const char *path, const char *sql)
{
    tally_ledger *l = NULL;
    char why[256] = "";
    if (tally_ledger_open(path, &l, why, sizeof why) != TALLY_OK)
        fail_msg("open %s: %s", path, why);
    int64_t v = value(l, sql);
    tally_ledger_close(l);
    return v;
}

static void shard_path(const fx *f, int32_t p, char *out, size_t cap)
{
    snprintf(out, cap, "%s/shard-" TOPIC "-%d.db", f->dir, (int)p);
}

/* ---- Events --------------------------------------------------------------------- */

/* Event n of account a in 2026-<month>; tag makes its id unique. */
static int event_json(char *buf, size_t cap, const char *tag, int n, int a, const char *month)
{
    static const char *const skus[] = {"h100", "rtx4090", "a100-40g", "tpu-v5e"};
    int day = 1 + n % 27, hour = n % 24, kind = n % 7;
    char ts[32];
    snprintf(ts, sizeof ts, "2026-%s-%02dT%02d:%02d:00Z", month, day, hour, (n * 7) % 60);
    if (kind == 5)
        return snprintf(buf, cap,
                        "{\"specversion\":\"1.0\",\"id\":\"t-%s-%d\",\"source\":\"//net\","
                        "\"type\":\"traffic.usage\",\"subject\":\"acct-%02d\",\"time\":\"%s\","
                        "\"data\":{\"resource\":\"r%d\",\"direction\":\"egress\",\"scope\":"
                        "\"internet\",\"bytes\":%d}}",
                        tag, n, a, ts, a, 1000000 + 777 * n);
    if (kind == 6)
        return snprintf(buf, cap,
                        "{\"specversion\":\"1.0\",\"id\":\"s-%s-%d\",\"source\":\"//st\","
                        "\"type\":\"storage.usage\",\"subject\":\"acct-%02d\",\"time\":\"%s\","
                        "\"data\":{\"volume\":\"v%d\",\"class\":\"ssd\",\"bytes\":%d,"
                        "\"seconds\":3600}}",
                        tag, n, a, ts, a, 500000000 + n);
    return snprintf(buf, cap,
                    "{\"specversion\":\"1.0\",\"id\":\"a-%s-%d\",\"source\":\"//host-%d\","
                    "\"type\":\"accelerator.usage\",\"subject\":\"acct-%02d\",\"time\":\"%s\","
                    "\"data\":{\"instance\":\"i-%d-%d\",\"sku\":\"%s\",\"pricing\":\"%s\","
                    "\"cards\":%d,\"seconds\":%d}}",
                    tag, n, a % 3, a, ts, a, n % 5, skus[n % 4], n % 4 == 1 ? "spot" : "on_demand",
                    1 + n % 4, 30 + (n * 37) % 600);
}

typedef struct stream {
    int n_accounts, n_events, partitions;
    const char *tag, *month;
    int misroute_every; /* 0: none; else every k-th event of acct-00 goes to another partition */
} stream;

/* The partition an event goes to. */
static int32_t part_of(const stream *s, int n, int a)
{
    char key[16];
    int len = snprintf(key, sizeof key, "acct-%02d", a);
    int32_t p = tally_partition_of(key, (size_t)len, s->partitions);
    if (s->misroute_every && a == 0 && n % s->misroute_every == 0)
        p = (p + 1) % s->partitions;
    return p;
}

/* Queues the events of one partition (or all, p < 0) into b. */
static size_t queue_events(tally_batch *b, const stream *s, int32_t p, int salt)
{
    char ev[1024], origin[64];
    size_t queued = 0;
    for (int n = 0; n < s->n_events; n++) {
        int a = (n * 5 + n / 12) % s->n_accounts;
        if (p >= 0 && part_of(s, n, a) != p)
            continue;
        int len = event_json(ev, sizeof ev, s->tag, n, a, s->month);
        snprintf(origin, sizeof origin, "test:%s:%d:%d", s->tag, salt, n);
        tally_reject rej;
        assert_int_equal(tally_ingest_message(b, ev, (size_t)len, origin, tally_now_s(), &rej),
                         TALLY_OK);
        if (rej.reason[0])
            fail_msg("event %d rejected: %s %s", n, rej.reason, rej.detail);
        queued++;
    }
    return queued;
}

/* Writes the stream into the shards, one commit per partition, advancing
 * each partition's offset by the events it took. */
static void write_shards(fx *f, const stream *s)
{
    for (int32_t p = 0; p < s->partitions; p++) {
        tally_shard *sh = take(f, p);
        tally_batch *b = NULL;
        int64_t next = -1;
        assert_int_equal(tally_shard_batch(sh, &b), TALLY_OK);
        size_t n = queue_events(b, s, p, 0);
        if (n == 0)
            continue;
        assert_int_equal(tally_ledger_offset_get(tally_shard_ledger(sh), TOPIC, p, &next),
                         TALLY_OK);
        assert_int_equal(
            tally_batch_set_offset(b, TOPIC, p, next, (next < 0 ? 0 : next) + (int64_t)n),
            TALLY_OK);
        assert_int_equal(tally_shard_prepare(sh), TALLY_OK);
        tally_batch_stats st;
        assert_int_equal(tally_batch_commit(b, &st, NULL), TALLY_OK);
        assert_int_equal(st.accepted, (int64_t)n);
    }
}

static void write_plain(tally_ledger *l, const stream *s)
{
    tally_batch *b = NULL;
    assert_int_equal(tally_batch_create(l, &b), TALLY_OK);
    queue_events(b, s, -1, 0);
    assert_int_equal(tally_batch_commit(b, NULL, NULL), TALLY_OK);
    tally_batch_destroy(b);
}

/* ---- Invoices ------------------------------------------------------------------------ */

static void run_period(tally_ledger *l, const char *key, const char *period)
{
    tally_invoice_run_opts o = {.period = period, .finalize = true, .key_path = key};
    char why[512] = "";
    tally_err e = tally_invoice_run(l, &o, why, sizeof why);
    if (e)
        fail_msg("invoice run %s: %s: %s", period, tally_err_name(e), why);
}

static tally_err doc_row(void *ctx, int ncols, const char *const *cols)
{
    static const char *const sealed[] = {"invoice_id", "hash", "prev_hash", "signature",
                                         "issued_at"};
    tally_buf *out = ctx;
    (void)ncols;
    json_object *o = json_tokener_parse(cols[0]);
    assert_non_null(o);
    for (size_t i = 0; i < sizeof sealed / sizeof *sealed; i++)
        json_object_object_del(o, sealed[i]);
    tally_err e = tally_buf_printf(out, "%s\n", json_object_to_json_string_ext(o, 0));
    json_object_put(o);
    return e;
}

/* Every finalized document, minus what names or seals it, by account and period. */
static void docs(tally_ledger *l, tally_buf *out)
{
    tally_buf_reset(out);
    if (tally_ledger_query(l,
                           "SELECT CAST(doc AS TEXT) FROM invoices ORDER BY account, period, seq",
                           NULL, 0, doc_row, out) != TALLY_OK)
        fail_msg("docs: %s", tally_ledger_errmsg(l));
    if (!out->data)
        assert_int_equal(tally_buf_puts(out, ""), TALLY_OK);
}

static void assert_same_docs(tally_ledger *a, tally_ledger *b, long want)
{
    tally_buf x, y;
    tally_buf_init(&x, 0);
    tally_buf_init(&y, 0);
    docs(a, &x);
    docs(b, &y);
    if (strcmp(x.data, y.data) != 0)
        fail_msg("invoices differ\n--- sharded\n%s--- plain\n%s", x.data, y.data);
    long lines = 0;
    for (const char *p = x.data; *p; p++)
        lines += *p == '\n';
    assert_int_equal(lines, want);
    tally_buf_release(&x);
    tally_buf_release(&y);
}

/* 13 shards (more than SQLite attaches), one account split over two shards,
 * late usage after finalization, a second month: every invoice equals the
 * plain ledger's, to the fen and line by line. */
static void test_invoices_equal_plain(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "shard-invoices");
    char plain_db[600], why[256] = "";
    snprintf(plain_db, sizeof plain_db, "%s/../plain.db", f.dir);
    tally_ledger *plain = NULL;
    if (tally_ledger_open(plain_db, &plain, why, sizeof why) != TALLY_OK)
        fail_msg("open plain: %s", why);
    load_card(plain);

    stream march = {.n_accounts = 12,
                    .n_events = 700,
                    .partitions = 13,
                    .tag = "m",
                    .month = "03",
                    .misroute_every = 9};
    write_shards(&f, &march);
    write_plain(plain, &march);
    run_period(f.l, f.key, "2026-03");
    run_period(plain, f.key, "2026-03");
    assert_same_docs(f.l, plain, 12);

    /* acct-00's usage is in two shards; both are read. */
    char path[700];
    char key[] = "acct-00";
    int32_t home = tally_partition_of(key, strlen(key), 13);
    shard_path(&f, (home + 1) % 13, path, sizeof path);
    assert_true(file_value(path, "SELECT count(*) FROM accounts WHERE id = 'acct-00'") == 1);

    stream late = {.n_accounts = 12,
                   .n_events = 60,
                   .partitions = 13,
                   .tag = "late",
                   .month = "03",
                   .misroute_every = 4};
    stream april = {
        .n_accounts = 12, .n_events = 200, .partitions = 13, .tag = "apr", .month = "04"};
    write_shards(&f, &late);
    write_shards(&f, &april);
    write_plain(plain, &late);
    write_plain(plain, &april);
    run_period(f.l, f.key, "2026-04");
    run_period(plain, f.key, "2026-04");
    assert_same_docs(f.l, plain, 24);
    assert_true(value(f.l, "SELECT count(*) FROM invoice_lines WHERE kind = 'adjustment'") > 0);
    /* Re-running changes nothing; the snapshots name the shards. */
    run_period(f.l, f.key, "2026-04");
    assert_same_docs(f.l, plain, 24);
    /* main.db and the 10 shards with usage (12 accounts on 13 partitions);
     * one snapshot per run, as nothing was written during either. */
    assert_int_equal(value(f.l, "SELECT count(DISTINCT source) FROM shard_snapshots"), 11);
    assert_int_equal(value(f.l, "SELECT count(DISTINCT id) FROM shard_snapshots"), 2);
    assert_int_equal(value(f.l, "SELECT count(*) FROM usage_intervals"), 0); /* main.db */
    /* Offsets and totals of the directory come from its shards. */
    int64_t sum = 0;
    for (int32_t p = 0; p < 13; p++) {
        int64_t next = -1;
        assert_int_equal(tally_ledger_offset_get(f.l, TOPIC, p, &next), TALLY_OK);
        sum += next > 0 ? next : 0;
    }
    assert_int_equal(sum, 700 + 60 + 200);
    int64_t none = 0;
    assert_int_equal(tally_ledger_offset_get(f.l, TOPIC, 99, &none), TALLY_OK);
    assert_int_equal(none, -1);
    tally_ledger_counts cd, cp;
    assert_int_equal(tally_ledger_counts_get(f.l, &cd), TALLY_OK);
    assert_int_equal(tally_ledger_counts_get(plain, &cp), TALLY_OK);
    assert_int_equal(cd.dedupe_keys, 960);
    assert_int_equal(cd.dedupe_keys, cp.dedupe_keys);
    assert_int_equal(cd.points, cp.points);

    tu_assert_conservation(plain);
    tally_ledger_close(plain);
    fx_close(&f);
}

/* Usage that reaches a shard while an invoice run is under way: acct-01
 * exists in main.db (a grant) but has no usage when the run starts; its
 * first usage lands in a shard after the run finalized acct-00 and before it
 * gets to acct-01. It is either on acct-01's invoice or, if it came too
 * late for it, an adjustment on the next one; never neither. */
typedef struct mid_run {
    fx *f;
    bool written;
} mid_run;

static void write_mid_run(void *ctx, size_t done, size_t total)
{
    mid_run *m = ctx;
    (void)total;
    if (done != 1 || m->written)
        return;
    stream s = {.n_accounts = 1, .n_events = 40, .partitions = 4, .tag = "mid", .month = "03"};
    char key[] = "acct-01";
    int32_t p = tally_partition_of(key, strlen(key), 4);
    tally_shard *sh = take(m->f, p);
    tally_batch *b = NULL;
    char ev[1024];
    assert_int_equal(tally_shard_batch(sh, &b), TALLY_OK);
    for (int n = 0; n < s.n_events; n++) {
        int len = event_json(ev, sizeof ev, s.tag, n, 1, s.month);
        tally_reject rej;
        char origin[32];
        snprintf(origin, sizeof origin, "mid:%d", n);
        assert_int_equal(tally_ingest_message(b, ev, (size_t)len, origin, tally_now_s(), &rej),
                         TALLY_OK);
    }
    int64_t next = -1;
    assert_int_equal(tally_ledger_offset_get(tally_shard_ledger(sh), TOPIC, p, &next), TALLY_OK);
    assert_int_equal(tally_batch_set_offset(b, TOPIC, p, next, (next < 0 ? 0 : next) + s.n_events),
                     TALLY_OK);
    assert_int_equal(tally_shard_prepare(sh), TALLY_OK);
    assert_int_equal(tally_batch_commit(b, NULL, NULL), TALLY_OK);
    m->written = true;
}

static void test_usage_during_run(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "shard-mid-run");
    stream first = {.n_accounts = 1, .n_events = 20, .partitions = 4, .tag = "a", .month = "03"};
    write_shards(&f, &first); /* acct-00 */
    tally_grant_spec g = {.account = "acct-01",
                          .kind = TALLY_GRANT_GOODWILL,
                          .amount_minor = 100,
                          .priority = 50,
                          .effective_s = 1767225600, /* 2026-01-01 */
                          .expires_s = TALLY_TIME_MAX};
    int64_t gid = 0;
    char why[512] = "";
    assert_int_equal(tally_ledger_grant_add(f.l, &g, &gid, why, sizeof why), TALLY_OK);
    mid_run m = {.f = &f};
    tally_invoice_run_opts o = {.period = "2026-03",
                                .finalize = true,
                                .key_path = f.key,
                                .on_progress = write_mid_run,
                                .ctx = &m};
    if (tally_invoice_run(f.l, &o, why, sizeof why) != TALLY_OK)
        fail_msg("run: %s", why);
    assert_true(m.written);
    /* The plain ledger billing the same 60 events in one go. */
    char plain_db[600];
    tally_ledger *plain = NULL;
    snprintf(plain_db, sizeof plain_db, "%s/../plain.db", f.dir);
    assert_int_equal(tally_ledger_open(plain_db, &plain, why, sizeof why), TALLY_OK);
    load_card(plain);
    write_plain(plain, &first);
    stream mid = {.n_accounts = 1, .n_events = 40, .partitions = 4, .tag = "mid", .month = "03"};
    tally_batch *b = NULL;
    char ev[1024];
    assert_int_equal(tally_batch_create(plain, &b), TALLY_OK);
    for (int n = 0; n < mid.n_events; n++) {
        int len = event_json(ev, sizeof ev, mid.tag, n, 1, mid.month);
        char origin[32];
        snprintf(origin, sizeof origin, "mid:%d", n);
        assert_int_equal(tally_ingest_message(b, ev, (size_t)len, origin, tally_now_s(), NULL),
                         TALLY_OK);
    }
    assert_int_equal(tally_batch_commit(b, NULL, NULL), TALLY_OK);
    tally_batch_destroy(b);
    /* March and April billed in the directory bill what March alone bills
     * in the plain ledger. */
    run_period(f.l, f.key, "2026-04");
    run_period(plain, f.key, "2026-03");
    int64_t billed =
        value(f.l, "SELECT sum(subtotal_minor) FROM invoices WHERE account = 'acct-01'");
    int64_t want = value(plain, "SELECT subtotal_minor FROM invoices WHERE account = 'acct-01'");
    assert_true(want > 0);
    assert_int_equal(billed, want);
    assert_int_equal(value(f.l, "SELECT count(*) FROM invoices WHERE account = 'acct-01' AND "
                                "period = '2026-03' AND subtotal_minor = 0"),
                     0); /* with the snapshot's index refresh, on March's own invoice */
    tally_ledger_close(plain);
    fx_close(&f);
}

/* ---- Locks, owner rows and the fence ------------------------------------------------ */

static void test_lock_in_process(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "shard-lock");
    tally_shard *a = take(&f, 0);
    assert_int_equal(tally_shard_epoch(a), 1);
    assert_ptr_equal(tally_shard_find(f.s, TOPIC, 0), a);
    tally_shard *again = NULL;
    char why[512] = "";
    assert_int_equal(tally_shard_acquire(f.s, TOPIC, 0, 0, &again, why, sizeof why), TALLY_OK);
    assert_ptr_equal(again, a); /* held by this set already */

    tally_shard_set *other = NULL;
    tally_shard *b = NULL;
    assert_int_equal(tally_shard_set_create(f.l, "other", &other), TALLY_OK);
    assert_int_equal(tally_shard_acquire(other, TOPIC, 0, 0, &b, why, sizeof why), TALLY_BUSY);
    assert_null(b);
    assert_non_null(strstr(why, "owner=test"));
    assert_int_equal(tally_shard_acquire(other, TOPIC, 0, 150, &b, why, sizeof why), TALLY_BUSY);
    assert_int_equal(tally_shard_acquire(other, "bad/topic", 0, 0, &b, why, sizeof why),
                     TALLY_INVAL);

    tally_shard_release(a);
    assert_null(tally_shard_find(f.s, TOPIC, 0));
    assert_int_equal(tally_shard_acquire(other, TOPIC, 0, 0, &b, why, sizeof why), TALLY_OK);
    assert_int_equal(tally_shard_epoch(b), 2);
    char path[700];
    shard_path(&f, 0, path, sizeof path);
    assert_int_equal(file_value(path, "SELECT count(*) FROM shard_owners WHERE epoch = 1 AND "
                                      "owner = 'test' AND released_ms >= acquired_ms"),
                     1);
    assert_int_equal(file_value(path, "SELECT count(*) FROM shard_owners WHERE epoch = 2 AND "
                                      "owner = 'other' AND released_ms IS NULL"),
                     1);
    tally_shard_set_destroy(other);
    assert_int_equal(tally_shard_set_create(f.l, NULL, &other), TALLY_OK);
    tally_shard_set_destroy(other);
    assert_int_equal(tally_shard_set_create(NULL, NULL, &other), TALLY_INVAL);
    fx_close(&f);
}

/* A child process takes the shard and is killed with SIGKILL: the lock goes
 * with it, its owner row stays open, and the next owner is epoch 2. */
static void test_lock_across_processes(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "shard-lock-proc");
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        tally_ledger *l = NULL;
        tally_shard_set *s = NULL;
        tally_shard *sh = NULL;
        char why[256];
        if (tally_ledger_open(f.dir, &l, why, sizeof why) ||
            tally_shard_set_create(l, "child", &s) ||
            tally_shard_acquire(s, TOPIC, 1, 0, &sh, why, sizeof why))
            _exit(3);
        if (write(pipefd[1], "1", 1) != 1)
            _exit(4);
        for (;;)
            pause();
    }
    close(pipefd[1]);
    char c = 0;
    assert_int_equal(read(pipefd[0], &c, 1), 1);
    close(pipefd[0]);
    tally_shard *sh = NULL;
    char why[512] = "";
    assert_int_equal(tally_shard_acquire(f.s, TOPIC, 1, 0, &sh, why, sizeof why), TALLY_BUSY);
    assert_non_null(strstr(why, "owner=child"));
    kill(pid, SIGKILL);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(tally_shard_acquire(f.s, TOPIC, 1, 1000, &sh, why, sizeof why), TALLY_OK);
    assert_int_equal(tally_shard_epoch(sh), 2);
    char path[700];
    shard_path(&f, 1, path, sizeof path);
    assert_int_equal(file_value(path, "SELECT count(*) FROM shard_owners WHERE epoch = 1 AND "
                                      "owner = 'child' AND released_ms IS NULL"),
                     1);
    fx_close(&f);
}

/* A writer whose epoch is no longer the newest (it lost its lock without
 * noticing) is refused inside its own transaction; nothing it sent lands. */
static void test_fence(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "shard-fence");
    stream s = {.n_accounts = 3, .n_events = 30, .partitions = 1, .tag = "f", .month = "03"};
    write_shards(&f, &s);
    char path[700];
    shard_path(&f, 0, path, sizeof path);
    assert_int_equal(file_value(path, "SELECT writes FROM shard_owners WHERE epoch = 1"), 1);
    assert_int_equal(file_value(path, "SELECT last_offset FROM shard_owners WHERE epoch = 1"), 30);
    assert_int_equal(file_value(path, "SELECT first_offset FROM shard_owners WHERE epoch = 1"), -1);

    /* Another owner row appears, as if the lock had passed on. */
    tally_ledger *intruder = NULL;
    char why[512] = "";
    assert_int_equal(tally_ledger_open(path, &intruder, why, sizeof why), TALLY_OK);
    assert_int_equal(tally_ledger_exec(intruder,
                                       "INSERT INTO shard_owners(epoch, owner, host, pid, topic, "
                                       "partition, acquired_ms) VALUES (2, 'x', 'h', 1, 'usage', "
                                       "0, 0)"),
                     TALLY_OK);
    tally_ledger_close(intruder);

    tally_shard *sh = take(&f, 0);
    tally_batch *b = NULL;
    assert_int_equal(tally_shard_batch(sh, &b), TALLY_OK);
    stream more = {.n_accounts = 3, .n_events = 10, .partitions = 1, .tag = "g", .month = "03"};
    queue_events(b, &more, 0, 1);
    assert_int_equal(tally_batch_set_offset(b, TOPIC, 0, 30, 40), TALLY_OK);
    assert_int_equal(tally_batch_commit(b, NULL, NULL), TALLY_DB);
    assert_non_null(strstr(tally_ledger_errmsg(tally_shard_ledger(sh)), "shard fence"));
    assert_int_equal(file_value(path, "SELECT count(*) FROM dedupe_keys"), 30);
    assert_int_equal(file_value(path, "SELECT next_offset FROM offsets"), 30);
    assert_int_equal(file_value(path, "SELECT writes FROM shard_owners WHERE epoch = 1"), 1);
    fx_close(&f);
}

/* Each shard chains its own usage batches; verify on the directory checks
 * every shard and names the one whose usage was edited. */
static void test_shard_chain_checked(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "shard-chain");
    stream s = {.n_accounts = 3, .n_events = 30, .partitions = 2, .tag = "c", .month = "03"};
    write_shards(&f, &s);
    char why[512] = "", path[700];
    assert_int_equal(tally_ledger_verify(f.l, f.key, why, sizeof why), TALLY_OK);
    shard_path(&f, 1, path, sizeof path);
    assert_true(file_value(path, "SELECT count(*) FROM usage_batches") > 0);
    tally_ledger *x = NULL;
    assert_int_equal(tally_ledger_open(path, &x, why, sizeof why), TALLY_OK);
    assert_int_equal(tally_ledger_exec(x, "UPDATE usage_intervals SET weight = weight + 1 "
                                          "WHERE id = (SELECT min(id) FROM usage_intervals)"),
                     TALLY_OK);
    tally_ledger_close(x);
    assert_int_equal(tally_ledger_verify(f.l, f.key, why, sizeof why), TALLY_TAMPERED);
    assert_non_null(strstr(why, "shard shard-" TOPIC "-1: usage of meter 0: the usage tables"));
    /* put it back, so fx_close's verify passes */
    assert_int_equal(tally_ledger_open(path, &x, why, sizeof why), TALLY_OK);
    assert_int_equal(tally_ledger_exec(x, "UPDATE usage_intervals SET weight = weight - 1 "
                                          "WHERE id = (SELECT min(id) FROM usage_intervals)"),
                     TALLY_OK);
    tally_ledger_close(x);
    fx_close(&f);
}

/* ---- Rate cards and accounts across main.db and shards ------------------------------ */

static void test_cards_and_accounts(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "shard-cards");
    tally_shard *sh = take(&f, 2);
    char path[700];
    shard_path(&f, 2, path, sizeof path);
    assert_int_equal(file_value(path, "SELECT count(*) FROM ratecards"), 1);

    /* A card loaded into main.db later reaches the shard before its next commit. */
    const tally_embedded *card = tally_embedded_find("fixtures/pricebook/ratecard.json");
    char *next = malloc(card->len + 64);
    assert_non_null(next);
    memcpy(next, card->data, card->len + 1);
    char *id = strstr(next, "pricebook-2026-01"), *from = strstr(next, "2026-01-01T00:00:00Z");
    assert_non_null(id);
    assert_non_null(from);
    memcpy(id, "pricebook-2026-05", 17);
    memcpy(from, "2026-05-01", 10);
    char why[256] = "";
    if (tally_ledger_ratecard_load(f.l, next, strlen(next), why, sizeof why) != TALLY_OK)
        fail_msg("second card: %s", why);
    free(next);
    assert_int_equal(tally_shard_prepare(sh), TALLY_OK);
    assert_int_equal(file_value(path, "SELECT count(*) FROM ratecards"), 2);

    /* An account first seen in a shard is added to main.db by the next reader. */
    stream s = {.n_accounts = 1, .n_events = 5, .partitions = 3, .tag = "c", .month = "03"};
    int32_t p = part_of(&s, 0, 0);
    sh = take(&f, p);
    tally_batch *b = NULL;
    assert_int_equal(tally_shard_batch(sh, &b), TALLY_OK);
    queue_events(b, &s, -1, 0);
    assert_int_equal(tally_batch_set_offset(b, TOPIC, p, -1, 5), TALLY_OK);
    assert_int_equal(tally_shard_prepare(sh), TALLY_OK);
    assert_int_equal(tally_batch_commit(b, NULL, NULL), TALLY_OK);
    assert_int_equal(value(f.l, "SELECT count(*) FROM accounts WHERE id = 'acct-00'"), 0);
    tally_ledger *reader = NULL;
    assert_int_equal(tally_ledger_open(f.dir, &reader, why, sizeof why), TALLY_OK);
    assert_int_equal(value(reader, "SELECT count(*) FROM accounts WHERE id = 'acct-00'"), 1);
    assert_int_equal(value(f.l, "SELECT count(*) FROM accounts WHERE id = 'acct-00'"), 1);
    tally_ledger_close(reader);
    /* main.db holds no usage: it is all in the shard. */
    assert_int_equal(value(f.l, "SELECT count(*) FROM dedupe_keys"), 0);
    fx_close(&f);
}

/* A plain file is not a directory; a directory whose main.db is a directory
 * is refused instead of recursing. */
static void test_dir_edges(void **state)
{
    (void)state;
    const char *base = tu_tmpdir("shard-edges");
    char path[600], why[256] = "";
    tally_ledger *l = NULL;
    snprintf(path, sizeof path, "%s/plain.db", base);
    assert_int_equal(tally_ledger_open(path, &l, why, sizeof why), TALLY_OK);
    assert_false(tally_ledger_is_dir(l));
    assert_null(tally_ledger_dir(l));
    tally_shard_set *s = NULL;
    assert_int_equal(tally_shard_set_create(l, NULL, &s), TALLY_INVAL);
    tally_ledger_close(l);
    snprintf(path, sizeof path, "%s/d", base);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/d/main.db", base);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/d", base);
    assert_int_equal(tally_ledger_open(path, &l, why, sizeof why), TALLY_INVAL);
    assert_null(l);
    assert_non_null(strstr(why, "is a directory"));

    /* A shard file a meter has just created, with no tables yet, reads as
     * an empty shard. */
    snprintf(path, sizeof path, "%s/e", base);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/e/shard-usage-5.db", base);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(path, sizeof path, "%s/e", base);
    assert_int_equal(tally_ledger_open(path, &l, why, sizeof why), TALLY_OK);
    load_card(l);
    int64_t next = 0;
    tally_ledger_counts counts;
    assert_int_equal(tally_ledger_offset_get(l, TOPIC, 5, &next), TALLY_OK);
    assert_int_equal(next, -1);
    assert_int_equal(tally_ledger_counts_get(l, &counts), TALLY_OK);
    assert_int_equal(counts.dedupe_keys, 0);
    tally_invoice_run_opts o = {.period = "2026-03"};
    assert_int_equal(tally_invoice_run(l, &o, why, sizeof why), TALLY_OK);
    tally_ledger_close(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_murmur2_reference),
        cmocka_unit_test(test_partition_matches_librdkafka),
        cmocka_unit_test(test_shard_names),
        cmocka_unit_test(test_invoices_equal_plain),
        cmocka_unit_test(test_usage_during_run),
        cmocka_unit_test(test_lock_in_process),
        cmocka_unit_test(test_lock_across_processes),
        cmocka_unit_test(test_fence),
        cmocka_unit_test(test_shard_chain_checked),
        cmocka_unit_test(test_cards_and_accounts),
        cmocka_unit_test(test_dir_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
