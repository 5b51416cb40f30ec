/* Tests for dedupe keys kept as windows (ledger/dedupe_runs.c,
 * schemas/016_dedupe_windows.sql): which ids are of the run form, exact
 * duplicates and conflicts against a model over random streams (out of
 * order, gaps, repeats, windows that fill up, several widths and prefixes,
 * other content or another time, commits of any size), the ids read back
 * through the dedupe_keys view, a rolled-back commit, ledgers that held
 * keys before windows existed (in the dedupe table, or in runs of
 * migration 15), and an edited window. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "../../ledger/ledger_int.h"
#include "../../ledger/run_codec_int.h"
#include "tally/ledger_sql.h"

#define T0 1772323200LL /* 2026-03-01T00:00:00Z */

static int origin_seq;

static tally_ledger *open_ledger(const char *tag)
{
    char path[600];
    snprintf(path, sizeof path, "%s/t.db", tu_tmpdir(tag));
    return tu_open_priced(path);
}

static tally_batch *new_batch(tally_ledger *l)
{
    tally_batch *b = NULL;
    assert_int_equal(tally_batch_create(l, &b), TALLY_OK);
    return b;
}

/* One second of one card: content variant v changes the weight (odd v) or
 * the time (v of 2 and more), and so the fingerprint. */
static tally_event event(const char *source, const char *id, int v)
{
    tally_event ev;
    memset(&ev, 0, sizeof ev);
    ev.meter = TALLY_METER_ACCELERATOR;
    ev.pricing = TALLY_PRICING_ON_DEMAND;
    ev.time_s = T0 + v / 2;
    ev.seconds = 1;
    ev.weight = 1 + v % 2;
    snprintf(ev.id, sizeof ev.id, "%s", id);
    snprintf(ev.source, sizeof ev.source, "%s", source);
    snprintf(ev.account, sizeof ev.account, "acme");
    snprintf(ev.resource, sizeof ev.resource, "i-1");
    snprintf(ev.dim, sizeof ev.dim, "h100");
    tally_event_identify(&ev);
    return ev;
}

static void add(tally_batch *b, const tally_event *ev)
{
    char origin[64];
    snprintf(origin, sizeof origin, "test:%d", ++origin_seq);
    assert_int_equal(tally_batch_add_event(b, ev, ev->id, strlen(ev->id), origin), TALLY_OK);
}

static void commit_ok(tally_batch *b, tally_event_result *results)
{
    tally_err e = tally_batch_commit(b, NULL, results);
    if (e != TALLY_OK)
        fail_msg("commit: %s: %s", tally_err_name(e), tally_ledger_errmsg(b->l));
}

/* One event of //hosts/a per commit, and the result each must have. */
typedef struct step {
    const char *id;
    int v;
    tally_event_result want;
} step;

static void run_steps(tally_batch *b, const step *steps, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        tally_event ev = event("//hosts/a", steps[i].id, steps[i].v);
        add(b, &ev);
        tally_event_result r;
        commit_ok(b, &r);
        if (r != steps[i].want)
            fail_msg("step %zu (%s): %s, want %s", i, steps[i].id, tally_event_result_name(r),
                     tally_event_result_name(steps[i].want));
    }
}

static tally_err rows_cb(void *ctx, int ncols, const char *const *cols)
{
    tally_buf *out = ctx;
    tally_err e = tally_buf_puts(out, ncols > 0 && cols[0] ? cols[0] : "(null)");
    return e == TALLY_OK ? tally_buf_puts(out, "\n") : e;
}

static int64_t keys(tally_ledger *l)
{
    return tu_query_int(l, "SELECT count(*) FROM dedupe_keys", NULL);
}

/* Every window's row, a line each in the order of lo, into out (which it
 * initialises). */
static void window_rows(tally_ledger *l, tally_buf *out)
{
    tally_buf_init(out, 0);
    assert_int_equal(tally_ledger_query(l,
                                        "SELECT lo || ' ' || n || ' ' || hex(bits) || ' ' || "
                                        "hex(content) FROM dedupe_windows ORDER BY lo",
                                        NULL, 0, rows_cb, out),
                     TALLY_OK);
}

/* The report of //hosts/a whose id is prefix and counter k in width
 * digits, every 10 s. */
static void add_report(tally_batch *b, const char *prefix, int width, int k)
{
    char id[32];
    snprintf(id, sizeof id, "%s%0*d", prefix, width, k);
    tally_event ev = event("//hosts/a", id, 0);
    ev.time_s = T0 + 10 * k;
    tally_event_identify(&ev);
    add(b, &ev);
}

/* Every window counts its ids, and the view lists them all. */
static void assert_runs_sound(tally_ledger *l)
{
    assert_int_equal(tu_query_int(l,
                                  "SELECT (SELECT coalesce(sum(length(fps) / 6), 0) FROM "
                                  "dedupe_runs) + (SELECT coalesce(sum(n), 0) FROM "
                                  "dedupe_windows) + (SELECT count(*) FROM dedupe)",
                                  NULL),
                     keys(l));
}

static void test_split(void **state)
{
    (void)state;
    runs_id k;
    assert_true(runs_split("h00347-000000000123", 19, &k));
    assert_int_equal(k.prefix_len, 7);
    assert_int_equal(k.width, 12);
    assert_int_equal(k.n, 123);
    assert_true(runs_split("0000", 4, &k));
    assert_int_equal(k.prefix_len, 0);
    assert_int_equal(k.n, 0);
    assert_true(runs_split("x-999999999999999999", 20, &k)); /* 18 digits */
    assert_int_equal(k.n, 999999999999999999LL);
    assert_false(runs_split("9999999999999999999", 19, &k)); /* 19: not a run id */
    assert_false(runs_split("evt-123", 7, &k));              /* 3 digits */
    assert_false(runs_split("0b9c2f1e-7d3a-4f6b-8e21-5a4c3b2d1e0f", 36, &k));
    assert_false(runs_split("0b9c2f1e-7d3a-4f6b-8e21-a46655440012", 36, &k)); /* after a letter */
    assert_false(runs_split("01HQ3K5ZJ8Q2W6Y7T9R4P3M000", 26, &k));           /* a ULID */
    assert_true(runs_split("0b9c2f1e-7d3a-4f6b-8e21-446655440012", 36, &k));  /* all digits */
    assert_true(runs_split("host_7.000123", 13, &k));
    assert_false(runs_split("", 0, &k));
}

/* The model: every (source, id) seen, with the variant it was first seen
 * with. Ids are small, so a linear table is enough. */
typedef struct model {
    char key[4096][300];
    int variant[4096];
    int n;
} model;

static tally_event_result model_add(model *m, const tally_event *ev, int v)
{
    char key[300];
    snprintf(key, sizeof key, "%s|%s", ev->source, ev->id);
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->key[i], key) == 0)
            return m->variant[i] == v ? TALLY_RESULT_DUPLICATE : TALLY_RESULT_CONFLICT;
    assert_true(m->n < 4096);
    snprintf(m->key[m->n], sizeof m->key[0], "%s", key);
    m->variant[m->n++] = v;
    return TALLY_RESULT_ACCEPTED;
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A random id of a few sources and prefixes: counters of two widths that
 * mostly count up (runs fill and roll over at 163), jump back, skip ahead
 * and repeat; some ids are no run at all. */
static void random_id(uint64_t *s, int64_t *next, char *source, char *id)
{
    int src = (int)(rnd(s) % 3);
    snprintf(source, 64, "//hosts/h%d", src);
    uint64_t shape = rnd(s) % 100;
    if (shape < 5) {
        snprintf(id, 64, "free-%c%c", (char)('a' + rnd(s) % 26), (char)('a' + rnd(s) % 3));
        return;
    }
    int64_t *c = &next[src];
    int64_t n;
    if (shape < 88)
        n = (*c)++; /* counts up */
    else if (shape < 94)
        n = (int64_t)(rnd(s) % (uint64_t)(*c + 1)); /* late or repeated */
    else if (shape < 97)
        n = (*c += (int64_t)(rnd(s) % 20)); /* a gap */
    else
        n = (int64_t)(rnd(s) % 400);
    if (src != 2 || shape % 4)
        snprintf(id, 64, "r-%06lld", (long long)n);
    else
        snprintf(id, 64, "r-%07lld", (long long)n); /* another width: other ids */
}

static void test_random_streams(void **state)
{
    (void)state;
    static model m;
    for (uint64_t seed = 1; seed <= 6; seed++) {
        char tag[32];
        snprintf(tag, sizeof tag, "runs-random-%d", (int)seed);
        tally_ledger *l = open_ledger(tag);
        tally_batch *b = new_batch(l);
        memset(&m, 0, sizeof m);
        uint64_t s = seed * 0x9E3779B97F4A7C15ULL;
        int64_t next[3] = {0, 5000, 123456};
        for (int done = 0; done < 3000;) {
            int size = 1 + (int)(rnd(&s) % (seed % 2 ? 400 : 20));
            tally_event_result want[400], got[400];
            for (int i = 0; i < size; i++) {
                char source[64], id[64];
                random_id(&s, next, source, id);
                /* one in 20: other content, one in 20 another time */
                int v = rnd(&s) % 10 == 0 ? 1 + (int)(rnd(&s) % 2) : 0;
                tally_event ev = event(source, id, v);
                want[i] = model_add(&m, &ev, v);
                add(b, &ev);
            }
            commit_ok(b, got);
            for (int i = 0; i < size; i++)
                if (want[i] != got[i])
                    fail_msg("seed %d, event %d: %s, want %s", (int)seed, done + i,
                             tally_event_result_name(got[i]), tally_event_result_name(want[i]));
            done += size;
        }
        assert_int_equal(keys(l), m.n);
        tally_ledger_counts c;
        assert_int_equal(tally_ledger_counts_get(l, &c), TALLY_OK);
        assert_int_equal(c.dedupe_keys, m.n);
        assert_runs_sound(l);
        tally_batch_destroy(b);
        tally_ledger_close(l);
    }
}

/* Ids that count up fill windows of 480, whatever the commits' sizes:
 * 1,000 ids are 3 rows, and the two full ones cost a byte an id. */
static void test_full_runs(void **state)
{
    (void)state;
    tally_ledger *l = open_ledger("runs-full");
    tally_batch *b = new_batch(l);
    for (int i = 0; i < 1000; i++) {
        char id[32];
        snprintf(id, sizeof id, "r-%08d", i);
        tally_event ev = event("//hosts/a", id, 0);
        add(b, &ev);
        if (i % 7 == 6 || i == 999)
            commit_ok(b, NULL);
    }
    assert_int_equal(tu_query_int(l, "SELECT count(*) FROM dedupe_windows", NULL), 3);
    assert_int_equal(tu_query_int(l,
                                  "SELECT count(*) FROM dedupe_windows WHERE n = 480 AND "
                                  "length(content) <= 1 + 12 + 479",
                                  NULL),
                     2);
    assert_int_equal(tu_query_int(l, "SELECT max(lo) FROM dedupe_windows", NULL), 2 * 480);
    assert_int_equal(keys(l), 1000);
    /* Each of them again is a duplicate, each with other content a conflict. */
    tally_event_result r[2];
    for (int i = 0; i < 1000; i += 37) {
        char id[32];
        snprintf(id, sizeof id, "r-%08d", i);
        tally_event ev = event("//hosts/a", id, 0);
        add(b, &ev);
        ev = event("//hosts/a", id, 1);
        add(b, &ev);
        commit_ok(b, r);
        assert_int_equal(r[0], TALLY_RESULT_DUPLICATE);
        assert_int_equal(r[1], TALLY_RESULT_CONFLICT);
    }
    assert_int_equal(keys(l), 1000);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

/* Queues source i's id r-00000001 with content v. */
static void add_source(tally_batch *b, int i, int v)
{
    char src[32];
    snprintf(src, sizeof src, "//hosts/h%05d", i);
    tally_event ev = event(src, "r-00000001", v);
    add(b, &ev);
}

/* One commit over more runs than a batch holds at once (70,000 sources of
 * one id each, past the 65,536 slots): the slots grow (256, 512, ...),
 * then are written and read again. An id seen before a growth or before
 * the write, repeated later in the same commit, is still a duplicate, or
 * a conflict with other content. */
static void test_many_runs_in_one_commit(void **state)
{
    (void)state;
    enum { SOURCES = 70000, FIRST = 1000 };
    static const int early[] = {0, 1, 255, 256, 511, 999};
    static const int late[] = {0, 1000, 40000, 65535, 65536, 69999};
    size_t n_early = sizeof early / sizeof *early, n_late = sizeof late / sizeof *late;
    tally_ledger *l = open_ledger("runs-many");
    tally_batch *b = new_batch(l);
    for (int i = 0; i < FIRST; i++)
        add_source(b, i, 0);
    for (size_t k = 0; k < n_early; k++) { /* held in slots grown twice */
        add_source(b, early[k], 0);
        add_source(b, early[k], 1);
    }
    for (int i = FIRST; i < SOURCES; i++)
        add_source(b, i, 0);
    for (size_t k = 0; k < n_late; k++) { /* written, or held after it */
        add_source(b, late[k], 0);
        add_source(b, late[k], 1);
    }
    size_t n = SOURCES + 2 * (n_early + n_late);
    tally_event_result *r = calloc(n, sizeof *r);
    assert_non_null(r);
    commit_ok(b, r);
    size_t at = 0, accepted = 0, dup = 0, conflict = 0;
    for (; at < n; at++) {
        accepted += r[at] == TALLY_RESULT_ACCEPTED;
        dup += r[at] == TALLY_RESULT_DUPLICATE;
        conflict += r[at] == TALLY_RESULT_CONFLICT;
    }
    assert_int_equal(accepted, SOURCES);
    assert_int_equal(dup, n_early + n_late);
    assert_int_equal(conflict, n_early + n_late);
    for (size_t k = 0; k < n_early; k++) {
        assert_int_equal(r[FIRST + 2 * k], TALLY_RESULT_DUPLICATE);
        assert_int_equal(r[FIRST + 2 * k + 1], TALLY_RESULT_CONFLICT);
    }
    free(r);
    /* (the dedupe_keys view is too slow over 70,000 runs: the tables) */
    assert_int_equal(tu_query_int(l, "SELECT count(*) FROM dedupe_windows WHERE n = 1", NULL),
                     SOURCES);
    assert_int_equal(tu_query_int(l, "SELECT count(*) FROM dedupe", NULL), 0);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

static tally_event canonical_event(int k)
{
    char id[32];
    snprintf(id, sizeof id, "h7-%08d", k % 1000 * 3 + k / 1000);
    tally_event ev = event("//hosts/a", id, 0);
    ev.time_s = T0 + (k % 4) * 7 + k / 4 * 10;
    ev.weight = 1 + k % 4;
    tally_event_identify(&ev);
    return ev;
}

/* The order of the ids of test_windows_canonical's pass: 0 in order, 1
 * shuffled, 2 and 3 in order but one in four held back one to four places
 * (a window's records are coded for good as commits end, and one to three
 * stay open, so an id lands just before, on or after the first open one). */
static void canonical_order(int pass, int *order, int n, uint64_t *s)
{
    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = n - 1; pass == 1 && i > 0; i--) {
        int j = (int)(rnd(s) % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int i = 0; pass >= 2 && i < n; i++) {
        if (rnd(s) % 4)
            continue;
        int by = 1 + (int)(rnd(s) % 4), t = order[i];
        for (int j = i; j < i + by && j + 1 < n; j++)
            order[j] = order[j + 1];
        order[i + by < n ? i + by : n - 1] = t;
        i += by;
    }
}

/* The same ids with the same contents, given in another order and cut
 * into other commits, leave the same rows, byte for byte: a window's row
 * follows from its ids alone. Times vary, so the coding has work to do.
 * The third pass commits every few ids and replays ids already coded, the
 * fourth commits after each id. */
static void test_windows_canonical(void **state)
{
    (void)state;
    enum { N = 1500, PASSES = 4 };
    static int order[N];
    tally_buf rows[PASSES];
    for (int pass = 0; pass < PASSES; pass++) {
        char tag[32];
        snprintf(tag, sizeof tag, "runs-canonical-%d", pass);
        tally_ledger *l = open_ledger(tag);
        tally_batch *b = new_batch(l);
        uint64_t s = 99 + (uint64_t)pass;
        canonical_order(pass, order, N, &s);
        int every[PASSES] = {500, 37, 3, 1};
        for (int i = 0; i < N; i++) {
            tally_event ev = canonical_event(order[i]);
            add(b, &ev);
            if (pass == 2 && i > 20 && rnd(&s) % 5 == 0) { /* a replay: no change */
                ev = canonical_event(order[i - 1 - (int)(rnd(&s) % 20)]);
                add(b, &ev);
            }
            if (rnd(&s) % (uint64_t)every[pass] == 0)
                commit_ok(b, NULL);
        }
        commit_ok(b, NULL);
        window_rows(l, &rows[pass]);
        assert_int_equal(keys(l), N);
        /* the replays of coded ids were duplicates, not conflicts */
        assert_int_equal(tu_query_int(l, "SELECT count(*) FROM quarantine", NULL), 0);
        tally_batch_destroy(b);
        tally_ledger_close(l);
    }
    assert_true(rows[0].len > 1000);
    for (int pass = 1; pass < PASSES; pass++)
        assert_string_equal(rows[0].data, rows[pass].data);
    for (int pass = 0; pass < PASSES; pass++)
        tally_buf_release(&rows[pass]);
}

/* A host's report every 10 s, the same content: after the first two, every
 * record is short and three share a byte. Id 9 comes late, after 10, 11
 * and 12, one commit each: the record of 8 was coded for good alone (10
 * was not on time), and 9, on time, now belongs with it. The window must
 * be coded again from there, giving the bytes of one commit in order. */
static void test_late_id_next_to_coded(void **state)
{
    (void)state;
    static const int late[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 9, 13, 14, 15, 16, 17};
    enum { N = sizeof late / sizeof late[0] };
    tally_buf row[2];
    for (int pass = 0; pass < 2; pass++) {
        tally_ledger *l = open_ledger(pass ? "runs-late-next" : "runs-late-next-ref");
        tally_batch *b = new_batch(l);
        for (int i = 0; i < N; i++) {
            add_report(b, "r-", 6, pass ? late[i] : i);
            if (pass)
                commit_ok(b, NULL);
        }
        commit_ok(b, NULL);
        window_rows(l, &row[pass]);
        tally_batch_destroy(b);
        tally_ledger_close(l);
    }
    assert_string_equal(row[0].data, row[1].data);
    tally_buf_release(&row[0]);
    tally_buf_release(&row[1]);
}

/* A window whose ids have no gap keeps only where they start (bits_at, and
 * no bitmap); one with gaps only the bytes of its bitmap between its first
 * and last id. Read again by a new batch, its ids are what they were. */
static void test_sparse_window(void **state)
{
    (void)state;
    tally_ledger *l = open_ledger("runs-sparse");
    tally_batch *b = new_batch(l);
    tally_event ev = event("//hosts/a", "r-0950", 0); /* k = 470 of the window at 480 */
    add(b, &ev);
    commit_ok(b, NULL);
    tally_batch_destroy(b);
    assert_int_equal(
        tu_query_int(l, "SELECT bits_at * 100 + length(bits) FROM dedupe_windows", NULL),
        470 * 100 + 0);
    b = new_batch(l); /* reads the row again */
    static const step steps[] = {
        {"r-0950", 0, TALLY_RESULT_DUPLICATE}, {"r-0950", 2, TALLY_RESULT_CONFLICT},
        {"r-0480", 0, TALLY_RESULT_ACCEPTED},  {"r-0959", 1, TALLY_RESULT_ACCEPTED},
        {"r-0949", 0, TALLY_RESULT_ACCEPTED},
    };
    run_steps(b, steps, sizeof steps / sizeof *steps);
    tally_batch_destroy(b);
    assert_int_equal(
        tu_query_int(l, "SELECT bits_at * 100 + length(bits) FROM dedupe_windows", NULL),
        0 * 100 + 60);
    b = new_batch(l);
    ev = event("//hosts/a", "r-0959", 1);
    add(b, &ev);
    ev = event("//hosts/a", "r-0480", 1);
    add(b, &ev);
    tally_event_result r[2];
    commit_ok(b, r);
    assert_int_equal(r[0], TALLY_RESULT_DUPLICATE);
    assert_int_equal(r[1], TALLY_RESULT_CONFLICT);
    assert_int_equal(keys(l), 4);
    assert_runs_sound(l);
    tally_batch_destroy(b);
    /* a gap filled: the window is a range again, and reads back as one */
    const char *ids[] = {"s-0001", "s-0002", "s-0003", "s-0005"};
    b = new_batch(l);
    for (size_t i = 0; i < 4; i++) {
        ev = event("//hosts/b", ids[i], 0);
        add(b, &ev);
    }
    commit_ok(b, NULL);
    assert_int_equal(tu_query_int(l,
                                  "SELECT bits_at * 100 + length(bits) FROM dedupe_windows WHERE "
                                  "prefix = CAST('s-' AS BLOB)",
                                  NULL),
                     0 * 100 + 1);
    ev = event("//hosts/b", "s-0004", 0);
    add(b, &ev);
    commit_ok(b, NULL);
    tally_batch_destroy(b);
    assert_int_equal(tu_query_int(l,
                                  "SELECT bits_at * 10000 + length(bits) * 1000 + n FROM "
                                  "dedupe_windows WHERE prefix = CAST('s-' AS BLOB)",
                                  NULL),
                     1 * 10000 + 0 + 5);
    b = new_batch(l);
    for (int i = 0; i <= 6; i++) {
        char id[16];
        snprintf(id, sizeof id, "s-%04d", i);
        ev = event("//hosts/b", id, 0);
        add(b, &ev);
        tally_event_result r1;
        commit_ok(b, &r1);
        assert_int_equal(r1, i >= 1 && i <= 5 ? TALLY_RESULT_DUPLICATE : TALLY_RESULT_ACCEPTED);
    }
    assert_int_equal(keys(l), 4 + 7);
    assert_runs_sound(l);
    char why[512];
    assert_int_equal(tally_ledger_verify(l, NULL, why, sizeof why), TALLY_OK);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

/* Ids out of order, as a source's events come through several partitions,
 * fill one run: its row follows from the id, not from the arrival. */
static void test_out_of_order(void **state)
{
    (void)state;
    tally_ledger *l = open_ledger("runs-out-of-order");
    tally_batch *b = new_batch(l);
    const char *order[] = {"r-0009", "r-0008", "r-0150", "r-0003"};
    for (int i = 0; i < 4; i++) {
        tally_event ev = event("//hosts/a", order[i], 0);
        add(b, &ev);
        commit_ok(b, NULL);
    }
    const char *replay[] = {"r-0100", "r-0008", "r-0009", "r-0010", "r-0480"};
    tally_event_result r[5];
    for (int i = 0; i < 5; i++) {
        tally_event ev = event("//hosts/a", replay[i], i == 2);
        add(b, &ev);
    }
    commit_ok(b, r);
    assert_int_equal(r[0], TALLY_RESULT_ACCEPTED);
    assert_int_equal(r[1], TALLY_RESULT_DUPLICATE);
    assert_int_equal(r[2], TALLY_RESULT_CONFLICT); /* 9 with other content */
    assert_int_equal(r[3], TALLY_RESULT_ACCEPTED);
    assert_int_equal(r[4], TALLY_RESULT_ACCEPTED); /* the next window */
    assert_int_equal(keys(l), 7);
    assert_int_equal(tu_query_int(l, "SELECT count(*) FROM dedupe_windows", NULL), 2);
    assert_int_equal(tu_query_int(l, "SELECT n FROM dedupe_windows WHERE lo = 0", NULL), 6);
    assert_runs_sound(l);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

/* The view gives back each id exactly, with its width and prefix. */
static void test_view_ids(void **state)
{
    (void)state;
    tally_ledger *l = open_ledger("runs-view");
    tally_batch *b = new_batch(l);
    const char *ids[] = {"0000",           "0001",          "node-7-000123",
                         "node-7-0000123", "node-7-000124", "x-999999999999999999",
                         "free-id",        "ünï-0042"};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        tally_event ev = event("//hosts/a", ids[i], 0);
        add(b, &ev);
    }
    commit_ok(b, NULL);
    tally_buf out;
    tally_buf_init(&out, 0);
    assert_int_equal(tally_ledger_query(l, "SELECT CAST(id AS TEXT) FROM dedupe_keys ORDER BY 1",
                                        NULL, 0, rows_cb, &out),
                     TALLY_OK);
    assert_string_equal(out.data, "0000\n0001\nfree-id\nnode-7-0000123\nnode-7-000123\n"
                                  "node-7-000124\nx-999999999999999999\nünï-0042\n");
    tally_buf_release(&out);
    /* Seven run ids in five windows; one id in the dedupe table. */
    assert_int_equal(tu_query_int(l, "SELECT count(*) FROM dedupe_windows", NULL), 5);
    assert_int_equal(tu_query_int(l, "SELECT count(*) FROM dedupe", NULL), 1);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

/* A batch holds its runs from one commit to the next, but not past a write
 * by another connection or by another batch on its own: ids that another
 * writer recorded in the same run in between are duplicates to it, and its
 * own write keeps them. */
static void test_other_writer_between_commits(void **state)
{
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s/t.db", tu_tmpdir("runs-other"));
    tally_ledger *l = tu_open_priced(path), *other = NULL;
    char why[256] = "";
    if (tally_ledger_open(path, &other, why, sizeof why) != TALLY_OK)
        fail_msg("open: %s", why);
    tally_batch *b = new_batch(l), *ob = new_batch(other);
    tally_event ev = event("//hosts/a", "r-0001", 0);
    add(b, &ev);
    commit_ok(b, NULL); /* b holds the run */
    ev = event("//hosts/a", "r-0002", 0);
    add(ob, &ev);
    commit_ok(ob, NULL); /* the same run, through the other connection */
    tally_event_result r[3];
    const char *ids[] = {"r-0002", "r-0003", "r-0001"};
    for (int i = 0; i < 3; i++) {
        ev = event("//hosts/a", ids[i], 0);
        add(b, &ev);
    }
    commit_ok(b, r);
    assert_int_equal(r[0], TALLY_RESULT_DUPLICATE);
    assert_int_equal(r[1], TALLY_RESULT_ACCEPTED);
    assert_int_equal(r[2], TALLY_RESULT_DUPLICATE);
    assert_int_equal(keys(l), 3);
    assert_runs_sound(l);
    /* and a write on b's own connection, by another batch */
    tally_batch *b2 = new_batch(l);
    ev = event("//hosts/a", "r-0004", 0);
    add(b2, &ev);
    commit_ok(b2, NULL);
    tally_batch_destroy(b2);
    ev = event("//hosts/a", "r-0004", 0);
    add(b, &ev);
    commit_ok(b, r);
    assert_int_equal(r[0], TALLY_RESULT_DUPLICATE);
    assert_int_equal(keys(l), 4);
    tally_batch_destroy(ob);
    tally_batch_destroy(b);
    tally_ledger_close(other);
    tally_ledger_close(l);
}

/* The runs a batch holds between commits are those its last commit used:
 * a window a source has moved on from is let go, so what a long stream
 * holds follows its sources, not its length. */
static void test_held_runs_follow_sources(void **state)
{
    (void)state;
    tally_ledger *l = open_ledger("runs-held");
    tally_batch *b = new_batch(l);
    for (int w = 0; w < 50; w++) { /* one source, a new window each commit */
        char id[32];
        snprintf(id, sizeof id, "r-%08d", w * 480);
        tally_event ev = event("//hosts/a", id, 0);
        add(b, &ev);
        ev = event("//hosts/b", id, 0);
        add(b, &ev);
        commit_ok(b, NULL);
        assert_true(b->runs.n <= 4); /* this commit's two, the last one's two */
    }
    tally_event_result r[2];
    tally_event ev = event("//hosts/a", "r-00000000", 0); /* let go: read again */
    add(b, &ev);
    ev = event("//hosts/b", "r-00023520", 0); /* held */
    add(b, &ev);
    commit_ok(b, r);
    assert_int_equal(r[0], TALLY_RESULT_DUPLICATE);
    assert_int_equal(r[1], TALLY_RESULT_DUPLICATE);
    assert_int_equal(tu_query_int(l, "SELECT count(*) FROM dedupe_windows", NULL), 100);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

/* A window let go frees its records: what the batch holds is the windows
 * it keeps, not the largest each slot ever held (memory would otherwise
 * grow with the stream until BYTES_MAX). */
static void test_held_memory_follows_windows(void **state)
{
    (void)state;
    tally_ledger *l = open_ledger("runs-memory");
    tally_batch *b = new_batch(l);
    for (int i = 0; i < 480; i++) { /* a full window */
        char id[32];
        snprintf(id, sizeof id, "m-%08d", i);
        tally_event ev = event("//hosts/a", id, 0);
        add(b, &ev);
    }
    commit_ok(b, NULL);
    assert_true(b->runs.bytes >= 480 * sizeof(rc_rec));
    const char *next[] = {"m-00000480", "m-00000481", "m-00000482"};
    for (int i = 0; i < 3; i++) { /* the next window, an id a commit */
        tally_event ev = event("//hosts/a", next[i], 0);
        add(b, &ev);
        commit_ok(b, NULL);
    }
    assert_int_equal(b->runs.n, 1);
    assert_true(b->runs.bytes > 0);
    assert_true(b->runs.bytes <= 8 * sizeof(rc_rec));
    tally_event ev = event("//hosts/a", "m-00000479", 0); /* let go: read again */
    tally_event_result r;
    add(b, &ev);
    commit_ok(b, &r);
    assert_int_equal(r, TALLY_RESULT_DUPLICATE);
    assert_runs_sound(l);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

/* Ids of one source read from two partitions, one three commits behind
 * the other: each commit holds the odd ids of one block of 40 and the even
 * ids of the block three before. (One or two commits behind, the records a
 * window keeps open at first hold them.) After the first late id the
 * window keeps more writes' records open, and the next windows start so:
 * only the first window is decoded again. The rows are those of the ids
 * given in order. */
static void test_late_partition(void **state)
{
    (void)state;
    enum { BLOCK = 40, BLOCKS = 60, LATE = 3 };
    tally_buf rows[2];
    uint64_t reopens = 0;
    for (int pass = 0; pass < 2; pass++) {
        tally_ledger *l = open_ledger(pass ? "runs-late-part" : "runs-late-part-ref");
        tally_batch *b = new_batch(l);
        for (int blk = 0; blk < BLOCKS + LATE; blk++) {
            for (int i = 0; i < BLOCK; i++) {
                int k = pass && i % 2 == 0 ? (blk - LATE) * BLOCK + i : blk * BLOCK + i;
                if (k >= 0 && k < BLOCKS * BLOCK)
                    add_report(b, "p-", 8, k);
            }
            commit_ok(b, NULL);
        }
        if (pass)
            reopens = b->runs.reopens;
        window_rows(l, &rows[pass]);
        assert_int_equal(keys(l), BLOCKS * BLOCK);
        tally_batch_destroy(b);
        tally_ledger_close(l);
    }
    assert_string_equal(rows[0].data, rows[1].data);
    assert_true(reopens >= 1);
    assert_true(reopens <= 2);
    tally_buf_release(&rows[0]);
    tally_buf_release(&rows[1]);
}

/* A commit that fails after its runs were written leaves none of them, and
 * the same events are new to the next commit. */
static void test_rollback(void **state)
{
    (void)state;
    tally_ledger *l = open_ledger("runs-rollback");
    tally_batch *b = new_batch(l);
    tally_event ev = event("//hosts/a", "r-0001", 0);
    add(b, &ev);
    commit_ok(b, NULL);
    assert_int_equal(tally_ledger_exec(l, "CREATE TEMP TRIGGER boom BEFORE INSERT ON "
                                          "usage_points BEGIN SELECT RAISE(ABORT, 'boom'); END"),
                     TALLY_OK);
    ev = event("//hosts/a", "r-0002", 0);
    add(b, &ev);
    tally_event pt = event("//hosts/a", "p-0001", 0);
    pt.meter = TALLY_METER_TRAFFIC;
    snprintf(pt.dim, sizeof pt.dim, "internet");
    snprintf(pt.dim2, sizeof pt.dim2, "egress");
    add(b, &pt);
    assert_int_not_equal(tally_batch_commit(b, NULL, NULL), TALLY_OK);
    assert_int_equal(keys(l), 1);
    assert_int_equal(tally_ledger_exec(l, "DROP TRIGGER boom"), TALLY_OK);
    ev = event("//hosts/a", "r-0002", 0);
    add(b, &ev);
    ev = event("//hosts/a", "r-0001", 0);
    add(b, &ev);
    tally_event_result r[2];
    commit_ok(b, r);
    assert_int_equal(r[0], TALLY_RESULT_ACCEPTED);
    assert_int_equal(r[1], TALLY_RESULT_DUPLICATE);
    assert_int_equal(keys(l), 2);
    assert_int_equal(tu_query_int(l, "SELECT count(*) FROM dedupe_windows", NULL), 1);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

/* A ledger with keys from before migration 15 finds an id of the run form
 * in the dedupe table: a replay of it is still a duplicate (or conflict). */
static void test_legacy_keys(void **state)
{
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s/t.db", tu_tmpdir("runs-legacy"));
    tally_ledger *l = tu_open_priced(path);
    tally_event old = event("//hosts/a", "r-0007", 0);
    uint64_t h[2];
    tally_hash128(old.source, strlen(old.source), 0, h);
    /* A ledger at migration 14 that holds the key of r-0007 in its dedupe
     * table, as the meter before runs stored every key. */
    char sql[600];
    snprintf(sql, sizeof sql,
             "INSERT INTO dedupe(src, id, fp) VALUES (%lld, CAST('r-0007' AS BLOB), %lld); "
             "DROP VIEW dedupe_keys; DROP TABLE dedupe_windows; DROP TABLE dedupe_runs; DELETE "
             "FROM meta WHERE key IN ('dedupe_legacy', 'dedupe_runs_legacy'); PRAGMA "
             "user_version = 14",
             (long long)h[0], (long long)tally_event_fingerprint(&old));
    assert_int_equal(tally_ledger_exec(l, sql), TALLY_OK);
    tally_ledger_close(l);
    /* Opening it applies migration 15, which marks it. */
    char why[256] = "";
    if (tally_ledger_open(path, &l, why, sizeof why) != TALLY_OK)
        fail_msg("reopen: %s", why);
    assert_int_equal(tu_query_int(l, "SELECT value FROM meta WHERE key = 'dedupe_legacy'", NULL),
                     1);
    tally_batch *b = new_batch(l);
    add(b, &old);
    tally_event other = event("//hosts/a", "r-0007", 1);
    add(b, &other);
    tally_event next = event("//hosts/a", "r-0008", 0);
    add(b, &next);
    tally_event_result r[3];
    commit_ok(b, r);
    assert_int_equal(r[0], TALLY_RESULT_DUPLICATE);
    assert_int_equal(r[1], TALLY_RESULT_CONFLICT);
    assert_int_equal(r[2], TALLY_RESULT_ACCEPTED);
    assert_int_equal(keys(l), 2);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

/* A ledger at migration 15 keeps its runs (160 ids, a 48-bit fingerprint
 * each): migration 16 marks it, an id a run holds is judged by its
 * fingerprint, nothing writes the runs again, and new ids of the same
 * window go to dedupe_windows. */
static void test_legacy_runs(void **state)
{
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s/t.db", tu_tmpdir("runs-legacy-v1"));
    tally_ledger *l = tu_open_priced(path);
    tally_event a = event("//hosts/a", "r-0161", 0), c = event("//hosts/a", "r-0170", 0);
    uint64_t h[2];
    tally_hash128(a.source, strlen(a.source), 0, h);
    /* The run (src, 'r-', 4, lo 160) holding 161 and 170, as migration 15's
     * code wrote it: bits 1 and 10, fingerprints big-endian in id order. */
    char sql[1200];
    snprintf(sql, sizeof sql,
             "DROP VIEW dedupe_keys; DROP TABLE dedupe_windows; DROP TRIGGER "
             "dedupe_runs_no_insert; DROP TRIGGER dedupe_runs_no_update; DELETE FROM meta WHERE "
             "key = 'dedupe_runs_legacy'; CREATE VIEW dedupe_keys(src, id, fp) AS SELECT 1, 2, 3; "
             "INSERT INTO dedupe_runs(src, prefix, width, lo, bits, fps) VALUES (%lld, "
             "CAST('r-' AS BLOB), 4, 160, x'0204000000000000000000000000000000000000', "
             "x'%012llX%012llX'); PRAGMA user_version = 15",
             (long long)h[0], (unsigned long long)(tally_event_fingerprint(&a) & 0xFFFFFFFFFFFFULL),
             (unsigned long long)(tally_event_fingerprint(&c) & 0xFFFFFFFFFFFFULL));
    assert_int_equal(tally_ledger_exec(l, sql), TALLY_OK);
    tally_ledger_close(l);
    char why[256] = "";
    if (tally_ledger_open(path, &l, why, sizeof why) != TALLY_OK)
        fail_msg("reopen: %s", why);
    assert_int_equal(
        tu_query_int(l, "SELECT value FROM meta WHERE key = 'dedupe_runs_legacy'", NULL), 1);
    assert_int_equal(keys(l), 2);
    tally_batch *b = new_batch(l);
    static const step steps[] = {
        {"r-0161", 0, TALLY_RESULT_DUPLICATE}, {"r-0170", 2, TALLY_RESULT_CONFLICT},
        {"r-0162", 0, TALLY_RESULT_ACCEPTED},  {"r-0001", 0, TALLY_RESULT_ACCEPTED},
        {"r-0500", 0, TALLY_RESULT_ACCEPTED},  {"r-0170", 0, TALLY_RESULT_DUPLICATE},
        {"r-0162", 1, TALLY_RESULT_CONFLICT},
    };
    run_steps(b, steps, sizeof steps / sizeof *steps);
    assert_int_equal(keys(l), 5);
    assert_runs_sound(l);
    assert_int_equal(tu_query_int(l, "SELECT sum(n) FROM dedupe_windows", NULL), 3);
    assert_int_equal(tu_query_int(l, "SELECT length(fps) FROM dedupe_runs", NULL), 12);
    assert_int_not_equal(tally_ledger_exec(l, "UPDATE dedupe_runs SET lo = 320"), TALLY_OK);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

/* A window edited into a malformed row stops the commit with a clear error
 * and changes nothing; tally verify names it. */
static void test_edited_run(void **state)
{
    (void)state;
    tally_ledger *l = open_ledger("runs-edited");
    tally_batch *b = new_batch(l);
    tally_event ev = event("//hosts/a", "r-0001", 0);
    add(b, &ev);
    commit_ok(b, NULL);
    assert_int_equal(tally_ledger_exec(l, "CREATE TEMP TABLE saved AS SELECT content FROM "
                                          "dedupe_windows; PRAGMA ignore_check_constraints = 1; "
                                          "UPDATE dedupe_windows SET content = x'0102'; PRAGMA "
                                          "ignore_check_constraints = 0"),
                     TALLY_OK);
    ev = event("//hosts/a", "r-0002", 0);
    add(b, &ev);
    assert_int_equal(tally_batch_commit(b, NULL, NULL), TALLY_TAMPERED);
    assert_non_null(strstr(tally_ledger_errmsg(l), "dedupe window"));
    assert_int_equal(tu_query_int(l, "SELECT length(content) FROM dedupe_windows", NULL), 2);
    char why[512];
    assert_int_equal(tally_ledger_verify(l, NULL, why, sizeof why), TALLY_TAMPERED);
    assert_non_null(strstr(why, "CHECK constraint failed in dedupe_windows"));
    /* Rows that pass the CHECKs: a bitmap of two ids and a count of one; a
     * bitmap and count of two for one record; a reserved bit set in the
     * record; a byte after it. Each commit that reads the row stops, and
     * nothing is stored. */
    static const struct {
        const char *sql, *says;
    } edits[] = {
        {"UPDATE dedupe_windows SET bits_at = 0, bits = CAST(x'06' || zeroblob(59) AS BLOB), n = "
         "1, "
         "content = (SELECT content FROM saved)",
         "bitmap does not count"},
        {"UPDATE dedupe_windows SET n = 2", "does not hold its 2 ids"},
        {"UPDATE dedupe_windows SET bits_at = 0, bits = CAST(x'02' || zeroblob(59) AS BLOB), n = "
         "1, "
         "content = CAST(x'01' || CAST(x'3E' AS TEXT) || substr((SELECT content FROM saved), 3) AS "
         "BLOB)",
         "does not hold its 1 ids"},
        {"UPDATE dedupe_windows SET content = CAST((SELECT content FROM saved) || x'00' AS BLOB)",
         "does not hold its 1 ids"},
    };
    for (size_t i = 0; i < sizeof edits / sizeof *edits; i++) {
        if (tally_ledger_exec(l, edits[i].sql) != TALLY_OK)
            fail_msg("%s: %s", edits[i].sql, tally_ledger_errmsg(l));
        ev = event("//hosts/a", "r-0003", 0);
        add(b, &ev);
        assert_int_equal(tally_batch_commit(b, NULL, NULL), TALLY_TAMPERED);
        if (!strstr(tally_ledger_errmsg(l), edits[i].says))
            fail_msg("edit %zu: %s", i, tally_ledger_errmsg(l));
        assert_int_equal(tu_query_int(l, "SELECT count(*) FROM dedupe_windows", NULL), 1);
        /* verify names the window (the count of keys alone would pass the
         * last two) */
        assert_int_equal(tally_ledger_verify(l, NULL, why, sizeof why), TALLY_TAMPERED);
        if (!strstr(why, "bitmap, count and content disagree") && !strstr(why, "dedupe keys"))
            fail_msg("edit %zu: verify says %s", i, why);
        if (i >= 2 && !strstr(why, "bitmap, count and content disagree"))
            fail_msg("edit %zu: verify says %s", i, why);
    }
    /* Put back, the window takes new ids again. */
    assert_int_equal(tally_ledger_exec(l, "UPDATE dedupe_windows SET content = (SELECT content "
                                          "FROM saved)"),
                     TALLY_OK);
    ev = event("//hosts/a", "r-0003", 0);
    add(b, &ev);
    commit_ok(b, NULL);
    assert_int_equal(tu_query_int(l, "SELECT n FROM dedupe_windows", NULL), 2);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

static void verify_says(tally_ledger *l, tally_err want, const char *text)
{
    char why[512] = "";
    tally_err got = tally_ledger_verify(l, NULL, why, sizeof why);
    if (got != want || !strstr(why, text))
        fail_msg("verify: %s (%s), wanted %s with \"%s\"", tally_err_name(got), why,
                 tally_err_name(want), text);
}

/* Keys deleted from the file, from a window (its bitmap, count and content
 * rewritten to agree) or from the dedupe table, would let a replay be
 * billed again: tally verify counts the keys against the chained batches'
 * events. An event quarantined as overflow keeps its key and is no alarm. */
static void test_deleted_keys(void **state)
{
    (void)state;
    tally_ledger *l = open_ledger("runs-deleted");
    tally_batch *b = new_batch(l);
    const char *ids[] = {"r-0001", "r-0002", "r-0003", "r-0004", "r-0005", "free-a", "free-b"};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        tally_event ev = event("//hosts/a", ids[i], 0);
        add(b, &ev);
    }
    tally_event big = event("//hosts/a", "t-0001", 0);
    big.meter = TALLY_METER_TRAFFIC;
    big.weight = INT64_MAX;
    snprintf(big.dim, sizeof big.dim, "internet");
    snprintf(big.dim2, sizeof big.dim2, "egress");
    add(b, &big);
    tally_event over = big;
    snprintf(over.id, sizeof over.id, "t-0002");
    over.weight = 1;
    add(b, &over);
    tally_event_result r[9];
    commit_ok(b, r);
    assert_int_equal(r[8], TALLY_RESULT_QUARANTINED); /* overflow: its key stays */
    assert_int_equal(keys(l), 9);
    verify_says(l, TALLY_OK, "balanced");

    /* r-0003 cleared from its run, consistently. */
    /* (r-0002 to r-0005 are short records after r-0001's: the same
     * content at the predicted time, three in a byte and one in the last) */
    assert_int_equal(tally_ledger_exec(l,
                                       "UPDATE dedupe_windows SET bits_at = 0, bits = CAST(x'36' "
                                       "|| zeroblob(59) AS BLOB), n = 4, content = "
                                       "substr(content, 1, length(content) - 1) "
                                       "WHERE prefix = CAST('r-' AS BLOB)"),
                     TALLY_OK);
    assert_int_equal(keys(l), 8);
    verify_says(l, TALLY_TAMPERED,
                "dedupe keys: 8 stored, but the chained usage batches accepted 8 events and 1 "
                "were quarantined as overflow (keys were deleted");
    /* The harm it hides: a replay of r-0003 is new again, and verify still
     * says so. */
    tally_event again = event("//hosts/a", "r-0003", 0);
    add(b, &again);
    commit_ok(b, r);
    assert_int_equal(r[0], TALLY_RESULT_ACCEPTED);
    verify_says(l, TALLY_TAMPERED,
                "dedupe keys: 9 stored, but the chained usage batches accepted 9 events and 1");
    tally_batch_destroy(b);
    tally_ledger_close(l);

    l = open_ledger("runs-deleted-row");
    b = new_batch(l);
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        tally_event ev = event("//hosts/a", ids[i], 0);
        add(b, &ev);
    }
    commit_ok(b, NULL);
    verify_says(l, TALLY_OK, "balanced");
    assert_int_equal(tally_ledger_exec(l, "DELETE FROM dedupe WHERE id = CAST('free-a' AS BLOB)"),
                     TALLY_OK);
    verify_says(l, TALLY_TAMPERED,
                "dedupe keys: 6 stored, but the chained usage batches accepted 7");
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_random_streams),
        cmocka_unit_test(test_full_runs),
        cmocka_unit_test(test_many_runs_in_one_commit),
        cmocka_unit_test(test_other_writer_between_commits),
        cmocka_unit_test(test_held_runs_follow_sources),
        cmocka_unit_test(test_held_memory_follows_windows),
        cmocka_unit_test(test_out_of_order),
        cmocka_unit_test(test_windows_canonical),
        cmocka_unit_test(test_late_id_next_to_coded),
        cmocka_unit_test(test_late_partition),
        cmocka_unit_test(test_sparse_window),
        cmocka_unit_test(test_view_ids),
        cmocka_unit_test(test_rollback),
        cmocka_unit_test(test_legacy_keys),
        cmocka_unit_test(test_legacy_runs),
        cmocka_unit_test(test_edited_run),
        cmocka_unit_test(test_deleted_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
