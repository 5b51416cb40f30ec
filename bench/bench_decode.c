/* Event decoding speed: tally_event_decode() against a bare json-c parse.
 *
 * Generates N realistic usage events of all four types in memory (about 270
 * bytes each, most of them accelerator.usage), then times, on one core:
 *   - tally_event_decode() of every event (validation, field rules, key and
 *     content hash included);
 *   - json_tokener_parse() of the same bytes (a fresh tokener per event, the
 *     common way json-c is called), freeing each tree;
 *   - json_tokener_parse_ex() with one reused tokener, json-c's fastest path.
 * Each is run REPEATS times and the best pass is kept, by CPU time (what
 * other processes take on a shared machine left out) and by wall-clock
 * time. Integer arithmetic only.
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

static int64_t now_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The best wall-clock and CPU time of the passes; CPU time leaves out what
 * other processes on a shared machine take. */
typedef struct timing {
    int64_t wall_ns, cpu_ns;
} timing;

static void pass_begin(timing *t)
{
    t->wall_ns = now_ns(CLOCK_MONOTONIC);
    t->cpu_ns = now_ns(CLOCK_PROCESS_CPUTIME_ID);
}

static void pass_end(const timing *start, timing *best)
{
    int64_t wall = now_ns(CLOCK_MONOTONIC) - start->wall_ns;
    int64_t cpu = now_ns(CLOCK_PROCESS_CPUTIME_ID) - start->cpu_ns;
    best->wall_ns = wall < best->wall_ns ? wall : best->wall_ns;
    best->cpu_ns = cpu < best->cpu_ns ? cpu : best->cpu_ns;
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

/* Best of REPEATS passes of each contender. */
static timing run_tally(const corpus *c, int64_t *check)
{
    timing best = {INT64_MAX, INT64_MAX}, start;
    for (int rep = 0; rep < REPEATS; rep++) {
        tally_event ev;
        tally_reject rej;
        int64_t sum = 0;
        pass_begin(&start);
        for (size_t i = 0; i < c->n; i++) {
            if (tally_event_decode(c->text + c->offset[i], c->len[i], NOW_S, &ev, &rej) !=
                TALLY_OK) {
                fprintf(stderr, "event %zu rejected: %s (%s)\n", i, rej.reason, rej.detail);
                exit(1);
            }
            sum += ev.weight + (int64_t)(ev.untimed & 1);
        }
        pass_end(&start, &best);
        *check = sum;
    }
    return best;
}

static timing run_jsonc(const corpus *c, int reuse)
{
    timing best = {INT64_MAX, INT64_MAX}, start;
    for (int rep = 0; rep < REPEATS; rep++) {
        struct json_tokener *tok = json_tokener_new();
        pass_begin(&start);
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
        pass_end(&start, &best);
        json_tokener_free(tok);
    }
    return best;
}

static int64_t per_second(size_t n, int64_t ns)
{
    return ns > 0 ? (int64_t)((__int128)n * 1000000000 / ns) : 0;
}

static void print_row(const char *what, size_t n, const timing *t)
{
    printf("%-40s %12" PRId64 " %10" PRId64 " %12" PRId64 "\n", what, per_second(n, t->cpu_ns),
           t->cpu_ns / (int64_t)n, per_second(n, t->wall_ns));
}

static void print_ratio(const char *what, int64_t slow_ns, int64_t fast_ns)
{
    printf("%-40s %" PRId64 ".%02" PRId64 "x\n", what, slow_ns / fast_ns,
           slow_ns * 100 / fast_ns % 100);
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
    timing t_tally = run_tally(&c, &check);
    if (argc > 2 && strcmp(argv[2], "tally") == 0) {
        printf("tally_event_decode %" PRId64 " events/s (CPU), %" PRId64
               " ns/event, mean %zu bytes\n",
               per_second(n, t_tally.cpu_ns), t_tally.cpu_ns / (int64_t)n, c.bytes / n);
        return 0;
    }
    timing t_parse = run_jsonc(&c, 0);
    timing t_parse_ex = run_jsonc(&c, 1);
    printf("events  %zu (mean %zu bytes, best of %d passes, checksum %" PRId64 ")\n", n,
           c.bytes / n, REPEATS, check);
    printf("%-40s %12s %10s %12s\n", "", "events/s CPU", "ns/ev CPU", "events/s wall");
    print_row("tally_event_decode", n, &t_tally);
    print_row("json_tokener_parse (new tokener each)", n, &t_parse);
    print_row("json_tokener_parse_ex (reused tokener)", n, &t_parse_ex);
    printf("tally_event_decode: %" PRId64 " MB/s (CPU)\n",
           (int64_t)((__int128)c.bytes * 1000 / t_tally.cpu_ns));
    print_ratio("ratio to json_tokener_parse (CPU)", t_parse.cpu_ns, t_tally.cpu_ns);
    print_ratio("ratio to json_tokener_parse_ex (CPU)", t_parse_ex.cpu_ns, t_tally.cpu_ns);
    free(c.text);
    free(c.offset);
    free(c.len);
    return 0;
}
