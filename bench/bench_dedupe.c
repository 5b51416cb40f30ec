/* Dedupe index and ingest batch throughput at scale.
 *
 *   bench_dedupe --mode seq|uuid|hash128|batch|ingest [--keys N] [--db PATH]
 *                [--window N] [--txn N]
 *
 * seq, uuid: the ledger's dedupe table (src = 64-bit hash of the source, id =
 *   the id's bytes) through the statement the batch uses, one transaction per
 *   --txn keys. seq: 100 sources with increasing ids ("evt-000000000042",
 *   what sequence numbers, ULIDs and UUIDv7 look like to the B-tree); uuid:
 *   random UUIDv4 text.
 * hash128: the alternative design, a WITHOUT ROWID table keyed by the
 *   event's 128-bit hash (two INTEGER columns): every insert lands at a random
 *   page whatever the producer's ids look like.
 * batch: the real tally_batch path (rate-card check, dedupe, interval
 *   coalescing, commit) with hand-built accelerator events of 1,000
 *   instances, sequential ids over 100 sources.
 * ingest: as batch, but from JSON messages through tally_ingest_message()
 *   (decode + batch): the ledger side of the meter's hot path on one core.
 *
 * Prints keys/s per window of --window keys and, at the end, the first and
 * last window's rate. Integer arithmetic only. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../ledger/ledger_int.h"
#include "tally/embed.h"
#include "tally/ingest.h"
#include "tally/ledger_sql.h"

#define SOURCES   100
#define INSTANCES 1000
#define T0_S      1772323200LL /* 2026-03-01T00:00:00Z */

typedef struct bench {
    const char *mode, *db;
    int64_t keys, window, txn;
    tally_ledger *l;
    uint64_t rng;
    int64_t seq[SOURCES];
    int64_t src_hash[SOURCES];
    char source[SOURCES][32];
    int64_t first_rate, last_rate, t_start, t_window;
    int64_t first_cpu_rate, last_cpu_rate, c_start, c_window;
} bench;

static int64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t now_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}

/* CPU time of this process: the machine may be shared, so wall-clock rates
 * alone would measure the neighbours. */
static int64_t cpu_ns(void)
{
    return clock_ns(CLOCK_PROCESS_CPUTIME_ID);
}

static int64_t per_s(int64_t n, int64_t ns)
{
    return n * 1000000000 / (ns > 0 ? ns : 1);
}

static uint64_t rnd(bench *b)
{
    b->rng ^= b->rng >> 12;
    b->rng ^= b->rng << 25;
    b->rng ^= b->rng >> 27;
    return b->rng * 0x2545F4914F6CDD1Dull;
}

static void die(const char *what, const char *why)
{
    fprintf(stderr, "bench_dedupe: %s: %s\n", what, why);
    exit(1);
}

static void check(tally_ledger *l, tally_err e, const char *what)
{
    if (e != TALLY_OK)
        die(what, l ? tally_ledger_errmsg(l) : tally_err_str(e));
}

/* Reports the window that ends at key i (1-based count done). */
static void tick(bench *b, int64_t done)
{
    if (done % b->window != 0 && done != b->keys)
        return;
    int64_t t = now_ns(), c = cpu_ns(), n = done % b->window ? done % b->window : b->window;
    int64_t rate = per_s(n, t - b->t_window), cpu_rate = per_s(n, c - b->c_window);
    if (!b->first_rate) {
        b->first_rate = rate;
        b->first_cpu_rate = cpu_rate;
    }
    b->last_rate = rate;
    b->last_cpu_rate = cpu_rate;
    b->t_window = t;
    b->c_window = c;
    printf("%s keys=%" PRId64 " window: %" PRId64 "/s wall, %" PRId64 "/s cpu; elapsed %" PRId64
           " ms\n",
           b->mode, done, rate, cpu_rate, (t - b->t_start) / 1000000);
    fflush(stdout);
}

static void make_uuid(bench *b, char out[37])
{
    static const char hex[] = "0123456789abcdef";
    uint64_t r[2] = {rnd(b), rnd(b)};
    int k = 0;
    for (int i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            out[i] = '-';
            continue;
        }
        out[i] = hex[(r[k / 16] >> (4 * (k % 16))) & 15];
        k++;
    }
    out[14] = '4';
    out[36] = '\0';
}

/* ---- Direct statements ------------------------------------------------------- */

static void run_direct(bench *b)
{
    sqlite3_stmt *st;
    bool h128 = strcmp(b->mode, "hash128") == 0;
    if (h128)
        check(b->l,
              tally_ledger_exec(b->l, "CREATE TABLE IF NOT EXISTS dedupe128 (k1 INTEGER NOT NULL, "
                                      "k2 INTEGER NOT NULL, fp INTEGER NOT NULL, PRIMARY KEY (k1, "
                                      "k2)) STRICT, WITHOUT ROWID"),
              "create");
    check(b->l,
          ledger_prepare(b->l,
                         h128 ? "INSERT INTO dedupe128(k1, k2, fp) VALUES (?1, ?2, ?3) "
                                "ON CONFLICT DO NOTHING"
                              : "INSERT INTO dedupe(src, id, fp) VALUES (?1, ?2, ?3) "
                                "ON CONFLICT DO NOTHING",
                         &st),
          "prepare");
    for (int64_t i = 0; i < b->keys; i++) {
        char id[64];
        int s = (int)(i % SOURCES);
        if (i % b->txn == 0)
            check(b->l, ledger_begin(b->l), "begin");
        if (strcmp(b->mode, "seq") == 0)
            snprintf(id, sizeof id, "evt-%012" PRId64, b->seq[s]++);
        else
            make_uuid(b, id);
        if (h128) {
            uint64_t k[2];
            char key[128];
            int n = snprintf(key, sizeof key, "%s\n%s", b->source[s], id);
            tally_hash128(key, (size_t)n, 0, k);
            sqlite3_bind_int64(st, 1, (int64_t)k[0]);
            sqlite3_bind_int64(st, 2, (int64_t)k[1]);
        } else {
            sqlite3_bind_int64(st, 1, b->src_hash[s]);
            sqlite3_bind_blob(st, 2, id, (int)strlen(id), SQLITE_STATIC);
        }
        sqlite3_bind_int64(st, 3, (int64_t)rnd(b));
        if (sqlite3_step(st) != SQLITE_DONE)
            die("insert", sqlite3_errmsg(b->l->db));
        sqlite3_reset(st);
        if ((i + 1) % b->txn == 0 || i + 1 == b->keys)
            check(b->l, ledger_commit(b->l), "commit");
        tick(b, i + 1);
    }
    sqlite3_finalize(st);
}

/* ---- Through the batch --------------------------------------------------------- */

static void fill_event(bench *b, int64_t i, tally_event *ev)
{
    int s = (int)(i % SOURCES), inst = (int)(i % INSTANCES);
    memset(ev, 0, sizeof *ev);
    ev->meter = TALLY_METER_ACCELERATOR;
    ev->pricing = TALLY_PRICING_ON_DEMAND;
    ev->time_s = T0_S + i / INSTANCES; /* every instance reports every second */
    ev->seconds = 1;
    ev->weight = 8;
    snprintf(ev->id, sizeof ev->id, "evt-%012" PRId64, b->seq[s]++);
    snprintf(ev->source, sizeof ev->source, "%s", b->source[s]);
    snprintf(ev->account, sizeof ev->account, "acct-%d", inst % 50);
    snprintf(ev->resource, sizeof ev->resource, "i-%05d", inst);
    snprintf(ev->dim, sizeof ev->dim, "h100");
    ev->untimed = tally_event_untimed_hash(ev);
}

static int format_message(bench *b, int64_t i, char *buf, size_t cap)
{
    int s = (int)(i % SOURCES), inst = (int)(i % INSTANCES);
    char when[32];
    if (tally_time_format(T0_S + i / INSTANCES, when, sizeof when) != TALLY_OK)
        die("time", "format");
    return snprintf(buf, cap,
                    "{\"specversion\":\"1.0\",\"id\":\"evt-%012" PRId64 "\",\"source\":\"%s\","
                    "\"type\":\"accelerator.usage\",\"subject\":\"acct-%d\",\"time\":\"%s\","
                    "\"data\":{\"instance\":\"i-%05d\",\"sku\":\"h100\",\"pricing\":"
                    "\"on_demand\",\"cards\":8,\"seconds\":1}}",
                    b->seq[s]++, b->source[s], inst % 50, when, inst);
}

static void run_batch(bench *b, bool decode)
{
    tally_batch *batch;
    tally_batch_stats st;
    int64_t accepted = 0, now = T0_S + 86400 * 60;
    check(b->l, tally_batch_create(b->l, &batch), "batch");
    for (int64_t i = 0; i < b->keys; i++) {
        char origin[48], msg[512];
        snprintf(origin, sizeof origin, "bench:%" PRId64, i);
        if (decode) {
            int n = format_message(b, i, msg, sizeof msg);
            check(b->l, tally_ingest_message(batch, msg, (size_t)n, origin, now, NULL), "ingest");
        } else {
            tally_event ev;
            fill_event(b, i, &ev);
            check(b->l, tally_batch_add_event(batch, &ev, "{}", 2, origin), "add");
        }
        if ((i + 1) % b->txn == 0 || i + 1 == b->keys) {
            check(b->l, tally_batch_commit(batch, &st, NULL), "commit");
            accepted += st.accepted;
        }
        tick(b, i + 1);
    }
    tally_batch_destroy(batch);
    if (accepted != b->keys)
        die("batch", "not every event was accepted");
}

/* ---- Main ---------------------------------------------------------------------- */

static void parse_args(bench *b, int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (strcmp(k, "--mode") == 0)
            b->mode = v;
        else if (strcmp(k, "--db") == 0)
            b->db = v;
        else if (strcmp(k, "--keys") == 0)
            b->keys = strtoll(v, NULL, 10);
        else if (strcmp(k, "--window") == 0)
            b->window = strtoll(v, NULL, 10);
        else if (strcmp(k, "--txn") == 0)
            b->txn = strtoll(v, NULL, 10);
        else
            die("unknown option", k);
    }
    if (b->keys <= 0 || b->window <= 0 || b->txn <= 0)
        die("usage", "--keys, --window and --txn must be positive");
}

int main(int argc, char **argv)
{
    static bench b = {.mode = "seq",
                      .db = "bench-dedupe.db",
                      .keys = 10000000,
                      .window = 1000000,
                      .txn = 10000,
                      .rng = 0x9e3779b97f4a7c15ull};
    char why[256];
    parse_args(&b, argc, argv);
    for (int s = 0; s < SOURCES; s++) {
        uint64_t h[2];
        snprintf(b.source[s], sizeof b.source[s], "//hosts/cn-north-1/node-%03d", s);
        tally_hash128(b.source[s], strlen(b.source[s]), 0, h);
        b.src_hash[s] = (int64_t)h[0];
    }
    remove(b.db);
    check(NULL, tally_ledger_open(b.db, &b.l, why, sizeof why), why);
    const tally_embedded *card = tally_embedded_find("fixtures/pricebook/ratecard.json");
    check(b.l, tally_ledger_ratecard_load(b.l, card->data, card->len, why, sizeof why), "card");
    b.t_start = b.t_window = now_ns();
    b.c_start = b.c_window = cpu_ns();
    if (strcmp(b.mode, "batch") == 0 || strcmp(b.mode, "ingest") == 0)
        run_batch(&b, strcmp(b.mode, "ingest") == 0);
    else if (strcmp(b.mode, "seq") == 0 || strcmp(b.mode, "uuid") == 0 ||
             strcmp(b.mode, "hash128") == 0)
        run_direct(&b);
    else
        die("unknown mode", b.mode);
    int64_t wall = now_ns() - b.t_start, cpu = cpu_ns() - b.c_start;
    printf("%s total keys=%" PRId64 " wall=%" PRId64 " ms cpu=%" PRId64 " ms average=%" PRId64
           "/s wall %" PRId64 "/s cpu; first window %" PRId64 "/s wall %" PRId64
           "/s cpu; last window %" PRId64 "/s wall %" PRId64 "/s cpu\n",
           b.mode, b.keys, wall / 1000000, cpu / 1000000, per_s(b.keys, wall), per_s(b.keys, cpu),
           b.first_rate, b.first_cpu_rate, b.last_rate, b.last_cpu_rate);
    tally_ledger_close(b.l);
    return 0;
}
