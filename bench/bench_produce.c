/* bench_produce: a fast producer of realistic usage events.
 *
 *   bench_produce --brokers B --topic T --events N [--seed S] [--accounts A]
 *                 [--instances I] [--dup-permille D] [--poison-permille P]
 *                 [--start RFC3339] [--kv FILE] [--ndjson FILE] [--gaps 1]
 *
 * Events are CloudEvents as SPEC section 1 describes, keyed by account: per
 * instance a stream of 10-second accelerator.usage reports (on demand, spot
 * and reserved; one source per host of 4 instances), plus storage, traffic
 * and token usage from a few sources. Each source's ids count up. With D and P, about
 * D and P in a thousand messages are repeated events or poison (malformed
 * JSON, unknown types, bad fields). With --kv/--ndjson the messages are
 * written as "key:value" lines (for kcat -K:) or bare NDJSON lines (for
 * tally ingest) instead of, or (with --brokers) as well as, being produced.
 * Each instance keeps one clock per kind of usage, so its accelerator
 * reports come every 10 seconds without a break, as a host's do; --gaps 1
 * shares one clock between the kinds (the stream of earlier runs in
 * bench/RESULTS.md: an accelerator report is skipped whenever the instance
 * sends a storage, traffic or token event, so its intervals break often).
 * Prints "produced=N bytes=B seconds=S" at the end. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <librdkafka/rdkafka.h>

#include "tally/event.h"
#include "tally/kafka_conf.h"
#include "tally/shard.h"

typedef struct gen_opts {
    const char *brokers, *topic, *kv, *ndjson;
    long long events, seed, accounts, instances, dup_pm, poison_pm, gaps;
    int64_t start_s;
} gen_opts;

typedef struct gen {
    gen_opts o;
    uint64_t rng;
    long long *inst_seq; /* per clock (4 kinds x instances): reports sent */
    long long *src_seq;  /* per source (4 kinds x instances): ids issued */
    char msg[1024], prev[1024], key[64];
    size_t msg_len, prev_len;
    rd_kafka_t *rk;
    FILE *kv, *nd;
    long long produced, bytes;
} gen;

static uint64_t rnd(gen *g)
{
    g->rng ^= g->rng << 13;
    g->rng ^= g->rng >> 7;
    g->rng ^= g->rng << 17;
    return g->rng;
}

static const char *const skus[] = {"a100-40g",  "a100-80g", "h100",        "rtx4090",
                                   "tpu-v4-64", "tpu-v5e",  "ascend-910b", "cpu-container"};
static const char *const spot_skus[] = {"rtx4090", "tpu-v5e", "ascend-910b"};
static const char *const models[] = {"qwen-72b", "llama-3-70b", "deepseek-v3", "glm-4"};

/* The next id of a source: each source counts up, as producers' sequence
 * numbers, ULIDs and UUIDv7 ids grow with time. */
static long long next_id(gen *g, int kind, long long src)
{
    return ++g->src_seq[kind * g->o.instances + src];
}

/* A 10-second accelerator report of one instance. */
static int accel(gen *g, long long inst, const char *acct, const char *ts)
{
    uint64_t h = (uint64_t)inst * 2654435761u;
    const char *sku = skus[h % 8];
    const char *pricing = "on_demand";
    if (h % 7 == 3) {
        sku = spot_skus[h % 3];
        pricing = "spot";
    } else if (h % 7 == 5 && (h % 8) < 3) {
        pricing = "reserved";
    }
    return snprintf(g->msg, sizeof g->msg,
                    "{\"specversion\":\"1.0\",\"id\":\"h%05lld-%012lld\",\"source\":\"//gpu-"
                    "hosts/h%05lld\",\"type\":\"accelerator.usage\",\"subject\":\"%s\",\"time\":"
                    "\"%s\",\"datacontenttype\":\"application/json\",\"data\":{\"instance\":\"ins-"
                    "%05lld\",\"sku\":\"%s\",\"pricing\":\"%s\",\"cards\":%d,\"seconds\":10}}",
                    inst / 4, next_id(g, 0, inst / 4), inst / 4, acct, ts, inst, sku, pricing,
                    (int)(1 + (h >> 8) % 8));
}

static int other(gen *g, long long inst, long long seq, const char *acct, const char *ts, int kind)
{
    switch (kind) {
    case 0:
        return snprintf(g->msg, sizeof g->msg,
                        "{\"specversion\":\"1.0\",\"id\":\"p%05lld-%012lld\",\"source\":\"//"
                        "storage/pool-%lld\",\"type\":\"storage.usage\",\"subject\":\"%s\","
                        "\"time\":\"%s\",\"data\":{\"volume\":\"vol-%05lld\",\"class\":\"%s\","
                        "\"bytes\":%lld,\"seconds\":10}}",
                        inst % 16, next_id(g, 1, inst % 16), inst % 16, acct, ts, inst,
                        inst % 3 ? "ssd" : "hdd", (inst + 1) * 1000000000LL);
    case 1:
        return snprintf(g->msg, sizeof g->msg,
                        "{\"specversion\":\"1.0\",\"id\":\"g%05lld-%012lld\",\"source\":\"//"
                        "net/gw-%lld\",\"type\":\"traffic.usage\",\"subject\":\"%s\",\"time\":"
                        "\"%s\",\"data\":{\"resource\":\"ins-%05lld\",\"direction\":\"%s\","
                        "\"scope\":\"%s\",\"bytes\":\"%llu\"}}",
                        inst % 8, next_id(g, 2, inst % 8), inst % 8, acct, ts, inst,
                        seq % 2 ? "egress" : "ingress", inst % 5 ? "internet" : "internal",
                        (unsigned long long)(rnd(g) % 50000000));
    default:
        return snprintf(g->msg, sizeof g->msg,
                        "{\"specversion\":\"1.0\",\"id\":\"a%05lld-%012lld\",\"source\":\"//"
                        "inference/api-%lld\",\"type\":\"tokens.usage\",\"subject\":\"%s\","
                        "\"time\":\"%s\",\"data\":{\"model\":\"%s\",\"kind\":\"%s\",\"tokens\":"
                        "%llu}}",
                        inst % 4, next_id(g, 3, inst % 4), inst % 4, acct, ts, models[inst % 4],
                        seq % 3 ? "input" : "output", (unsigned long long)(rnd(g) % 20000));
    }
}

/* Poison messages: each is prefix + sequence number + suffix. */
static const char *const poison[][2] = {
    {"{\"specversion\":\"1.0\",\"id\":\"p-", "\""},
    {"{\"specversion\":\"1.0\",\"id\":\"p-",
     "\",\"source\":\"//x\",\"type\":\"gpu.magic\",\"subject\":\"a\",\"time\":"
     "\"2026-03-01T00:00:00Z\",\"data\":{}}"},
    {"{\"specversion\":\"1.0\",\"id\":\"p-",
     "\",\"source\":\"//x\",\"type\":\"accelerator.usage\",\"subject\":\"a\",\"time\":"
     "\"2026-03-01T00:00:00Z\",\"data\":{\"instance\":\"i\",\"sku\":\"h100\",\"pricing\":"
     "\"on_demand\",\"cards\":-4}}"},
    {"{\"specversion\":\"1.0\",\"id\":\"p-",
     "\",\"source\":\"//x\",\"type\":\"accelerator.usage\",\"subject\":\"a\",\"time\":"
     "\"2026-03-01T00:00:00Z\",\"data\":{\"instance\":\"i\",\"sku\":\"quantum-9000\","
     "\"pricing\":\"on_demand\"}}"},
    {"not json at all ", ""},
};

/* The next message into g->msg (and its key into g->key). */
static void next_message(gen *g, long long i)
{
    if (g->prev_len && (long long)(rnd(g) % 1000) < g->o.dup_pm) {
        memcpy(g->msg, g->prev, g->prev_len);
        g->msg_len = g->prev_len;
        return;
    }
    long long inst = (long long)(rnd(g) % (uint64_t)g->o.instances);
    long long acct = inst % g->o.accounts;
    snprintf(g->key, sizeof g->key, "acct-%05lld", acct);
    int n;
    if ((long long)(rnd(g) % 1000) < g->o.poison_pm) {
        n = snprintf(g->msg, sizeof g->msg, "%s%lld%s", poison[i % 5][0], i, poison[i % 5][1]);
    } else {
        char ts[32];
        uint64_t kind = rnd(g) % 100;
        long long clock = g->o.gaps ? 0 : kind < 80 ? 0 : 1 + (long long)(kind % 3);
        long long *seq = &g->inst_seq[clock * g->o.instances + inst];
        int64_t t = g->o.start_s + 10 * *seq;
        if (tally_time_format(t, ts, sizeof ts))
            ts[0] = '\0';
        n = kind < 80 ? accel(g, inst, g->key, ts)
                      : other(g, inst, *seq, g->key, ts, (int)kind % 3);
        (*seq)++;
        memcpy(g->prev, g->msg, (size_t)n);
        g->prev_len = (size_t)n;
    }
    g->msg_len = n > 0 && (size_t)n < sizeof g->msg ? (size_t)n : 0;
}

static int produce(gen *g)
{
    for (;;) {
        rd_kafka_resp_err_t err = rd_kafka_producev(
            g->rk, RD_KAFKA_V_TOPIC(g->o.topic), RD_KAFKA_V_KEY(g->key, strlen(g->key)),
            RD_KAFKA_V_VALUE(g->msg, g->msg_len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_END);
        if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
            return 0;
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            fprintf(stderr, "bench_produce: %s\n", rd_kafka_err2str(err));
            return 1;
        }
        rd_kafka_poll(g->rk, 10);
    }
}

static rd_kafka_t *make_producer(const char *brokers)
{
    char err[256];
    rd_kafka_conf_t *conf = NULL;
    tally_producer_conf_opts co = {
        .brokers = brokers, .client_id = "tally-bench-produce", .kind = TALLY_PRODUCER_BULK};
    if (tally_kafka_producer_conf(&co, &conf, err, sizeof err) != TALLY_OK) {
        fprintf(stderr, "bench_produce: %s\n", err);
        return NULL;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk)
        fprintf(stderr, "bench_produce: %s\n", err);
    return rk;
}

static int parse_args(int argc, char **argv, gen_opts *o)
{
    *o = (gen_opts){.topic = "usage",
                    .events = 1000000,
                    .seed = 1,
                    .accounts = 500,
                    .instances = 4000,
                    .start_s = 1772323200 /* 2026-03-01 */};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        long long n = strtoll(v, NULL, 10);
        if (!strcmp(a, "--brokers"))
            o->brokers = v;
        else if (!strcmp(a, "--topic"))
            o->topic = v;
        else if (!strcmp(a, "--kv"))
            o->kv = v;
        else if (!strcmp(a, "--ndjson"))
            o->ndjson = v;
        else if (!strcmp(a, "--events"))
            o->events = n;
        else if (!strcmp(a, "--seed"))
            o->seed = n;
        else if (!strcmp(a, "--accounts"))
            o->accounts = n;
        else if (!strcmp(a, "--instances"))
            o->instances = n;
        else if (!strcmp(a, "--dup-permille"))
            o->dup_pm = n;
        else if (!strcmp(a, "--poison-permille"))
            o->poison_pm = n;
        else if (!strcmp(a, "--gaps"))
            o->gaps = n;
        else if (!strcmp(a, "--start") && tally_time_parse(v, strlen(v), &o->start_s) == 0)
            continue;
        else
            return 1;
    }
    return (argc % 2 == 0 || o->events < 0 || o->accounts < 1 || o->instances < 1 ||
            (!o->brokers && !o->kv && !o->ndjson));
}

static int emit(gen *g)
{
    if (g->kv)
        fprintf(g->kv, "%s:%.*s\n", g->key, (int)g->msg_len, g->msg);
    if (g->nd)
        fprintf(g->nd, "%.*s\n", (int)g->msg_len, g->msg);
    g->produced++;
    g->bytes += (long long)g->msg_len;
    return g->rk ? produce(g) : 0;
}

int main(int argc, char **argv)
{
    gen g = {0};
    if (parse_args(argc, argv, &g.o)) {
        fprintf(stderr, "usage: bench_produce --brokers B --topic T --events N [--seed S] "
                        "[--accounts A] [--instances I] [--dup-permille D] "
                        "[--poison-permille P] [--start TIME] [--kv FILE] [--ndjson FILE] "
                        "[--gaps 1]\n");
        return 2;
    }
    g.rng = 0x9E3779B97F4A7C15ULL ^ (uint64_t)g.o.seed;
    g.inst_seq = calloc(4 * (size_t)g.o.instances, sizeof *g.inst_seq);
    g.src_seq = calloc(4 * (size_t)g.o.instances, sizeof *g.src_seq);
    g.kv = g.o.kv ? fopen(g.o.kv, "w") : NULL;
    g.nd = g.o.ndjson ? fopen(g.o.ndjson, "w") : NULL;
    g.rk = g.o.brokers ? make_producer(g.o.brokers) : NULL;
    if (!g.inst_seq || !g.src_seq || (g.o.kv && !g.kv) || (g.o.ndjson && !g.nd) ||
        (g.o.brokers && !g.rk)) {
        fprintf(stderr, "bench_produce: cannot set up\n");
        return 1;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = 0;
    for (long long i = 0; i < g.o.events && !rc; i++) {
        next_message(&g, i);
        rc = emit(&g);
    }
    if (g.rk) {
        if (rd_kafka_flush(g.rk, 600000) != RD_KAFKA_RESP_ERR_NO_ERROR)
            rc = 1;
        rd_kafka_destroy(g.rk);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long long ms = (t1.tv_sec - t0.tv_sec) * 1000LL + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    printf("produced=%lld bytes=%lld ms=%lld\n", g.produced, g.bytes, ms);
    if (g.kv)
        fclose(g.kv);
    if (g.nd)
        fclose(g.nd);
    free(g.inst_seq);
    free(g.src_seq);
    return rc;
}
