/* The reliability tests' known stream and what a ledger must hold for it.
 *
 * The stream mixes valid usage of every meter with exact repeats,
 * conflicts (same source and id, other content) and poison. Every message
 * of an account goes to one partition (account % partitions), and a repeat
 * or conflict always names an event of the same instance, so a (source, id)
 * lives in one partition and arrives there after the event it repeats.
 *
 * The invariant (rel_check): a partition's stored next offset N says the
 * ledger holds the effects of exactly the messages at offsets < N of that
 * partition, nothing more and nothing less. Because a partition's messages
 * are applied in offset order, those effects are known from the stream
 * alone: each valid event below N is one dedupe key and its usage on its
 * account; each conflict or poison message below N is one quarantine row
 * whose origin names that partition and offset; a repeat leaves no row (its
 * key is already there, which the dedupe count checks). So, read in one
 * snapshot: the quarantine origins of partition p are exactly the conflict
 * and poison offsets below N_p; the dedupe keys number the valid events
 * below all N_p; every account's usage is the sum of its valid events below
 * its partition's N. */
#ifndef TALLY_REL_MODEL_H
#define TALLY_REL_MODEL_H

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rel_proc.h"
#include "testutil.h"
#include "tally/event.h"

#define REL_MAX_PARTS    16
#define REL_MAX_ACCOUNTS 64
#define REL_T0           1772323200 /* 2026-03-01T00:00:00Z */

typedef enum rel_kind { REL_VALID, REL_DUP, REL_CONFLICT, REL_POISON } rel_kind;

typedef struct rel_msg {
    char *text;
    int acct, part;
    rel_kind kind;
    bool point;     /* traffic or tokens: usage is a quantity, else weight x seconds */
    int64_t usage;  /* what a valid event adds to its account */
    int64_t offset; /* in its partition, once delivered; -1 before */
} rel_msg;

typedef struct rel_stream {
    rel_msg *m;
    long n;
    int parts, accounts;
    long kinds[4]; /* by rel_kind */
} rel_stream;

static const char *const rel_skus[] = {"a100-40g", "h100", "rtx4090", "tpu-v5e", "ascend-910b"};

/* One valid event (variant 0) or its conflicting twin (variant 1). */
static inline int rel_event(rel_msg *m, char *buf, size_t cap, int inst, long seq, int variant)
{
    char ts[32];
    if (tally_time_format(REL_T0 + seq * 10, ts, sizeof ts))
        return -1;
    int acct = m->acct;
    m->point = inst % 8 >= 6;
    if (inst % 8 == 5) {
        int64_t bytes = 1000000000LL * (inst % 7 + 1) + seq + variant;
        m->usage = bytes * 10;
        return snprintf(buf, cap,
                        "{\"specversion\":\"1.0\",\"id\":\"s%d-%ld\",\"source\":\"//st\",\"type\":"
                        "\"storage.usage\",\"subject\":\"acct-%02d\",\"time\":\"%s\",\"data\":{"
                        "\"volume\":\"vol-%d\",\"class\":\"ssd\",\"bytes\":%" PRId64
                        ",\"seconds\":10}}",
                        inst, seq, acct, ts, inst, bytes);
    }
    if (inst % 8 == 6) {
        m->usage = 1000 * seq + 7 + variant;
        return snprintf(buf, cap,
                        "{\"specversion\":\"1.0\",\"id\":\"t%d-%ld\",\"source\":\"//net\",\"type\":"
                        "\"traffic.usage\",\"subject\":\"acct-%02d\",\"time\":\"%s\",\"data\":{"
                        "\"resource\":\"r%d\",\"direction\":\"egress\",\"scope\":\"internet\","
                        "\"bytes\":%" PRId64 "}}",
                        inst, seq, acct, ts, inst, m->usage);
    }
    if (inst % 8 == 7) {
        m->usage = 100000 + seq + variant;
        return snprintf(buf, cap,
                        "{\"specversion\":\"1.0\",\"id\":\"k%d-%ld\",\"source\":\"//llm\",\"type\":"
                        "\"tokens.usage\",\"subject\":\"acct-%02d\",\"time\":\"%s\",\"data\":{"
                        "\"model\":\"m%d\",\"kind\":\"%s\",\"tokens\":%" PRId64 "}}",
                        inst, seq, acct, ts, inst % 3, seq % 2 ? "input" : "output", m->usage);
    }
    int cards = 1 + (inst + variant) % 8;
    m->usage = (int64_t)cards * 10;
    return snprintf(buf, cap,
                    "{\"specversion\":\"1.0\",\"id\":\"a%d-%06ld\",\"source\":\"//host-%d\","
                    "\"type\":\"accelerator.usage\",\"subject\":\"acct-%02d\",\"time\":\"%s\","
                    "\"data\":{\"instance\":\"ins-%d\",\"sku\":\"%s\",\"pricing\":\"%s\","
                    "\"cards\":%d,\"seconds\":10}}",
                    inst, seq, inst, acct, ts, inst, rel_skus[inst % 5],
                    inst % 5 >= 2 && inst % 2 ? "spot" : "on_demand", cards);
}

/* Poison: bad JSON, an unknown type, an unknown SKU, a price the card lacks,
 * a bad value, a time in the future (tests run with TALLY_NOW in April). */
static inline int rel_poison(char *buf, size_t cap, int acct, long n, uint64_t r)
{
    static const char *const bodies[] = {
        "\"type\":\"gpu.magic\",\"time\":\"2026-03-01T00:00:00Z\",\"data\":{}",
        "\"type\":\"accelerator.usage\",\"time\":\"2026-03-01T00:00:00Z\",\"data\":{"
        "\"instance\":\"i\",\"sku\":\"quantum-9000\",\"pricing\":\"on_demand\"}",
        "\"type\":\"accelerator.usage\",\"time\":\"2026-03-01T00:00:00Z\",\"data\":{"
        "\"instance\":\"i\",\"sku\":\"tpu-v5e\",\"pricing\":\"reserved\"}",
        "\"type\":\"accelerator.usage\",\"time\":\"2026-03-01T00:00:00Z\",\"data\":{"
        "\"instance\":\"i\",\"sku\":\"h100\",\"pricing\":\"on_demand\",\"cards\":0}",
        "\"type\":\"tokens.usage\",\"time\":\"2026-05-01T00:00:00Z\",\"data\":{"
        "\"model\":\"m\",\"kind\":\"input\",\"tokens\":1}",
    };
    size_t k = r % (sizeof bodies / sizeof *bodies + 1);
    if (k == sizeof bodies / sizeof *bodies)
        return snprintf(buf, cap, "{\"specversion\":\"1.0\",\"id\":\"bad-%ld\"", n);
    return snprintf(buf, cap,
                    "{\"specversion\":\"1.0\",\"id\":\"p%ld\",\"source\":\"//x\","
                    "\"subject\":\"acct-%02d\",%s}",
                    n, acct, bodies[k]);
}

/* Makes n messages over `accounts` accounts (4 instances each) and parts
 * partitions: about 2.5% exact repeats, 1.5% conflicts, 1.5% poison. */
static inline void rel_stream_make(rel_stream *st, long n, int accounts, int parts, uint64_t seed)
{
    int instances = accounts * 4;
    long *seq = calloc((size_t)instances, sizeof *seq),
         *last = calloc((size_t)instances, sizeof *last);
    memset(st, 0, sizeof *st);
    st->m = calloc((size_t)n, sizeof *st->m);
    assert_true(seq && last && st->m && accounts <= REL_MAX_ACCOUNTS && parts <= REL_MAX_PARTS);
    st->n = n;
    st->parts = parts;
    st->accounts = accounts;
    uint64_t rng = seed * 2654435761u + 7;
    char buf[1024];
    for (long k = 0; k < n; k++) {
        rel_msg *m = &st->m[k];
        uint64_t r = rel_rand(&rng) % 1000;
        int inst = (int)(rel_rand(&rng) % (uint64_t)instances);
        m->acct = inst % accounts;
        m->part = m->acct % parts;
        m->offset = -1;
        if (r < 25 && seq[inst] > 0) {
            m->kind = REL_DUP;
            snprintf(buf, sizeof buf, "%s", st->m[last[inst]].text);
        } else if (r < 40 && seq[inst] > 0) {
            m->kind = REL_CONFLICT;
            rel_event(m, buf, sizeof buf, inst, seq[inst] - 1, 1);
        } else if (r < 55) {
            m->kind = REL_POISON;
            rel_poison(buf, sizeof buf, m->acct, k, rel_rand(&rng));
        } else {
            m->kind = REL_VALID;
            rel_event(m, buf, sizeof buf, inst, seq[inst]++, 0);
            last[inst] = k;
        }
        st->kinds[m->kind]++;
        m->text = strdup(buf);
        assert_non_null(m->text);
    }
    free(seq);
    free(last);
}

static inline void rel_stream_free(rel_stream *st)
{
    for (long k = 0; k < st->n; k++)
        free(st->m[k].text);
    free(st->m);
    memset(st, 0, sizeof *st);
}

/* All messages, in stream order, as NDJSON (the reference ingest). */
static inline void rel_stream_ndjson(const rel_stream *st, long n, const char *path)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (long k = 0; k < n; k++)
        fprintf(f, "%s\n", st->m[k].text);
    assert_int_equal(fclose(f), 0);
}

#endif
