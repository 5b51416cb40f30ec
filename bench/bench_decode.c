/* Event decoding speed: tally_event_decode() against a bare json-c parse.
 *
 * Generates N realistic usage events of all four types in memory (about 270
 * bytes each, most of them accelerator.usage), then times, on one core:
 *   - tally_event_decode() of every event (validation, field rules, key and
 *     fingerprint included);
 *   - json_tokener_parse() of the same bytes (a fresh tokener per event, the
 *     common way json-c is called), freeing each tree;
 *   - json_tokener_parse_ex() with one reused tokener, json-c's fastest path.
 * Each is run REPEATS times and the best run is kept. Integer arithmetic only.
 *
 * Usage: bench_decode [N [tally]]   (N defaults to 1000000; "tally" times
 * only the decoder, for profiling) */
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tally/event.h"

#define REPEATS 5
#define NOW_S   1775001600 /* 2026-04-01T00:00:00Z */

typedef struct corpus {
    char *text;      /* every event, each NUL-terminated */
    size_t *offset;  /* start of event i */
    size_t *len;     /* length of event i, without the NUL */
    size_t n, bytes; /* events, total bytes without NULs */
} corpus;

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Writes the data object of event i (type by r % 20) into buf. */
static int make_data(char *buf, size_t cap, uint64_t r, const char **type)
{
    static const char *const skus[] = {"h100-80g", "a100-40g", "l40s-48g", "910b-64g"};
    static const char *const pricings[] = {"on_demand", "spot", "reserved"};
    unsigned kind = (unsigned)(r % 20);
    if (kind < 14) {
        *type = "accelerator.usage";
        return snprintf(buf, cap,
                        "{\"instance\":\"i-%08" PRIx64 "\",\"sku\":\"%s\",\"pricing\":\"%s\","
                        "\"cards\":%u,\"seconds\":60,\"migration\":%s}",
                        (r >> 8) & 0xffffffff, skus[(r >> 40) % 4], pricings[(r >> 44) % 3],
                        1u << ((r >> 48) % 4), (r >> 52) % 50 == 0 ? "true" : "false");
    }
    if (kind < 16) {
        *type = "storage.usage";
        return snprintf(buf, cap,
                        "{\"volume\":\"vol-%08" PRIx64 "\",\"class\":\"%s\",\"bytes\":\"%" PRIu64
                        "\",\"seconds\":3600}",
                        (r >> 8) & 0xffffffff, (r >> 40) % 2 ? "ssd" : "hdd",
                        (r >> 20) % 1000000000000);
    }
    if (kind < 18) {
        *type = "traffic.usage";
        return snprintf(buf, cap,
                        "{\"resource\":\"i-%08" PRIx64 "\",\"direction\":\"%s\",\"scope\":\"%s\","
                        "\"bytes\":%" PRIu64 "}",
                        (r >> 8) & 0xffffffff, (r >> 40) % 2 ? "egress" : "ingress",
                        (r >> 41) % 2 ? "internet" : "internal", (r >> 24) % 100000000);
    }
    *type = "tokens.usage";
    return snprintf(buf, cap,
                    "{\"model\":\"qwen-72b-chat\",\"kind\":\"%s\",\"tokens\":%" PRIu64 "}",
                    (r >> 40) % 2 ? "input" : "output", (r >> 24) % 100000);
}

static int make_corpus(corpus *c, size_t n)
{
    size_t cap = n * 400;
    c->text = malloc(cap);
    c->offset = malloc(n * sizeof *c->offset);
    c->len = malloc(n * sizeof *c->len);
    if (!c->text || !c->offset || !c->len)
        return -1;
    uint64_t rng = 0x2545f4914f6cdd1dull;
    size_t at = 0;
    c->bytes = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rng_next(&rng);
        char data[256], when[32];
        const char *type;
        if (make_data(data, sizeof data, r, &type) < 0 ||
            tally_time_format(NOW_S - 86400 + (int64_t)(i % 86000), when, sizeof when) != TALLY_OK)
            return -1;
        int len =
            snprintf(c->text + at, cap - at,
                     "{\"specversion\":\"1.0\",\"id\":\"evt-%010zu\",\"source\":"
                     "\"//hosts/node-%04u\",\"type\":\"%s\",\"subject\":"
                     "\"acct-%05u\",\"time\":\"%s\",\"datacontenttype\":"
                     "\"application/json\",\"data\":%s}",
                     i, (unsigned)(r >> 16) % 4096, type, (unsigned)(r >> 28) % 20000, when, data);
        if (len < 0 || (size_t)len >= cap - at)
            return -1;
        c->offset[i] = at;
        c->len[i] = (size_t)len;
        c->bytes += (size_t)len;
        at += (size_t)len + 1;
    }
    c->n = n;
    return 0;
}

/* Best of REPEATS runs of each contender, in nanoseconds. */
static int64_t run_tally(const corpus *c, int64_t *check)
{
    int64_t best = INT64_MAX;
    for (int rep = 0; rep < REPEATS; rep++) {
        tally_event ev;
        tally_reject rej;
        int64_t sum = 0, t0 = now_ns();
        for (size_t i = 0; i < c->n; i++) {
            if (tally_event_decode(c->text + c->offset[i], c->len[i], NOW_S, &ev, &rej) !=
                TALLY_OK) {
                fprintf(stderr, "event %zu rejected: %s (%s)\n", i, rej.reason, rej.detail);
                exit(1);
            }
            sum += ev.weight + (int64_t)(ev.fingerprint & 1);
        }
        int64_t dt = now_ns() - t0;
        best = dt < best ? dt : best;
        *check = sum;
    }
    return best;
}

static int64_t run_jsonc(const corpus *c, int reuse)
{
    int64_t best = INT64_MAX;
    for (int rep = 0; rep < REPEATS; rep++) {
        struct json_tokener *tok = json_tokener_new();
        int64_t t0 = now_ns();
        for (size_t i = 0; i < c->n; i++) {
            struct json_object *o;
            if (reuse) {
                json_tokener_reset(tok);
                o = json_tokener_parse_ex(tok, c->text + c->offset[i], (int)c->len[i]);
            } else {
                o = json_tokener_parse(c->text + c->offset[i]);
            }
            if (!o) {
                fprintf(stderr, "json-c rejected event %zu\n", i);
                exit(1);
            }
            json_object_put(o);
        }
        int64_t dt = now_ns() - t0;
        json_tokener_free(tok);
        best = dt < best ? dt : best;
    }
    return best;
}

static int64_t per_second(size_t n, int64_t ns)
{
    return ns > 0 ? (int64_t)((__int128)n * 1000000000 / ns) : 0;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 1000000;
    corpus c;
    int64_t check = 0;
    if (n == 0 || make_corpus(&c, n) != 0) {
        fprintf(stderr, "bench_decode: cannot build the corpus\n");
        return 1;
    }
    int64_t t_tally = run_tally(&c, &check);
    if (argc > 2 && strcmp(argv[2], "tally") == 0) {
        printf("tally_event_decode %" PRId64 " events/s, %" PRId64 " ns/event, mean %zu bytes\n",
               per_second(n, t_tally), t_tally / (int64_t)n, c.bytes / n);
        return 0;
    }
    int64_t t_parse = run_jsonc(&c, 0);
    int64_t t_parse_ex = run_jsonc(&c, 1);
    int64_t r_tally = per_second(n, t_tally), r_parse = per_second(n, t_parse),
            r_parse_ex = per_second(n, t_parse_ex);
    printf("events            %zu (mean %zu bytes, best of %d runs, checksum %" PRId64 ")\n", n,
           c.bytes / n, REPEATS, check);
    printf("tally_event_decode       %9" PRId64 " events/s  %5" PRId64 " ns/event  %5" PRId64
           " MB/s\n",
           r_tally, t_tally / (int64_t)n, (int64_t)((__int128)c.bytes * 1000 / t_tally));
    printf("json_tokener_parse       %9" PRId64 " events/s  %5" PRId64 " ns/event\n", r_parse,
           t_parse / (int64_t)n);
    printf("json_tokener_parse_ex    %9" PRId64 " events/s  %5" PRId64
           " ns/event (reused tokener)\n",
           r_parse_ex, t_parse_ex / (int64_t)n);
    printf("ratio decode/parse       %" PRId64 ".%02" PRId64 "x\n", t_parse / t_tally,
           t_parse * 100 / t_tally % 100);
    printf("ratio decode/parse_ex    %" PRId64 ".%02" PRId64 "x\n", t_parse_ex / t_tally,
           t_parse_ex * 100 / t_tally % 100);
    free(c.text);
    free(c.offset);
    free(c.len);
    return 0;
}
