/* Tests for ingest batches (ledger/batch*.c): dedupe, conflicts, quarantine,
 * offsets, coalescing of intervals, per-second points, and all-or-nothing
 * commits. Events are built by hand, except where re-serialised JSON must
 * decode to the same fingerprint. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "../../ledger/ledger_int.h"
#include "tally/embed.h"
#include "tally/ledger_sql.h"
#include "tally/sign.h"

#define T0      1772323200LL /* 2026-03-01T00:00:00Z */
#define T0_TEXT "1772323200"

static char db_path[600];
static int origin_seq;

static tally_ledger *open_with_card(const char *tag)
{
    tally_ledger *l = NULL;
    snprintf(db_path, sizeof db_path, "%s/t.db", tu_tmpdir(tag));
    l = tu_open_priced(db_path);
    return l;
}

static tally_err first_col(void *ctx, int ncols, const char *const *cols)
{
    char *out = ctx;
    if (!out[0])
        snprintf(out, 256, "%s", ncols > 0 && cols[0] ? cols[0] : "(null)");
    return TALLY_OK;
}

static long long query_int(tally_ledger *l, const char *sql)
{
    char out[256] = "";
    if (tally_ledger_query(l, sql, NULL, 0, first_col, out) != TALLY_OK)
        fail_msg("%s: %s", sql, tally_ledger_errmsg(l));
    return strtoll(out, NULL, 10);
}

static void query_str(tally_ledger *l, const char *sql, char out[256])
{
    out[0] = '\0';
    if (tally_ledger_query(l, sql, NULL, 0, first_col, out) != TALLY_OK)
        fail_msg("%s: %s", sql, tally_ledger_errmsg(l));
}

/* ---- Building events ---------------------------------------------------- */

/* What the decoder sets for an event (hand-made events need it too). */
static void set_fingerprint(tally_event *ev)
{
    tally_event_identify(ev);
}

static tally_event accel(const char *id, const char *instance, const char *sku, tally_pricing p,
                         int64_t t, int64_t secs, int64_t cards)
{
    tally_event ev;
    memset(&ev, 0, sizeof ev);
    ev.meter = TALLY_METER_ACCELERATOR;
    ev.pricing = p;
    ev.time_s = t;
    ev.seconds = secs;
    ev.weight = cards;
    snprintf(ev.id, sizeof ev.id, "%s", id);
    snprintf(ev.source, sizeof ev.source, "//hosts/node-1");
    snprintf(ev.account, sizeof ev.account, "acme");
    snprintf(ev.resource, sizeof ev.resource, "%s", instance);
    snprintf(ev.dim, sizeof ev.dim, "%s", sku);
    set_fingerprint(&ev);
    return ev;
}

static tally_event instant(tally_meter m, const char *id, const char *dim, const char *dim2,
                           int64_t t, int64_t qty)
{
    tally_event ev;
    memset(&ev, 0, sizeof ev);
    ev.meter = m;
    ev.time_s = t;
    ev.weight = qty;
    snprintf(ev.id, sizeof ev.id, "%s", id);
    snprintf(ev.source, sizeof ev.source, "//hosts/node-2");
    snprintf(ev.account, sizeof ev.account, "acme");
    snprintf(ev.resource, sizeof ev.resource, "r1");
    snprintf(ev.dim, sizeof ev.dim, "%s", dim);
    snprintf(ev.dim2, sizeof ev.dim2, "%s", dim2);
    set_fingerprint(&ev);
    return ev;
}

static void add(tally_batch *b, const tally_event *ev)
{
    char origin[64], raw[160];
    snprintf(origin, sizeof origin, "test:%d", ++origin_seq);
    int n = snprintf(raw, sizeof raw, "{\"id\":\"%s\",\"w\":%lld}", ev->id, (long long)ev->weight);
    assert_int_equal(tally_batch_add_event(b, ev, raw, (size_t)n, origin), TALLY_OK);
}

/* Each of the n results is the one wanted. */
static void assert_results(const tally_event_result *got, const tally_event_result *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("result %zu: %d, wanted %d", i, (int)got[i], (int)want[i]);
}

static tally_batch_stats commit_ok(tally_batch *b, tally_event_result *results)
{
    tally_batch_stats st;
    tally_err e = tally_batch_commit(b, &st, results);
    if (e != TALLY_OK)
        fail_msg("commit: %s: %s", tally_err_name(e), tally_ledger_errmsg(b->l));
    return st;
}

/* Sum over interval rows of weight x seconds. */
static long long card_seconds(tally_ledger *l)
{
    return query_int(l, "SELECT coalesce(sum(weight * (end_s - start_s)), 0) FROM usage_intervals");
}

static void assert_counts_match(tally_ledger *l)
{
    tally_ledger_counts c;
    assert_int_equal(tally_ledger_counts_get(l, &c), TALLY_OK);
    assert_int_equal(c.dedupe_keys, query_int(l, "SELECT count(*) FROM dedupe_keys"));
    assert_int_equal(c.quarantined, query_int(l, "SELECT count(*) FROM quarantine"));
    assert_int_equal(c.intervals, query_int(l, "SELECT count(*) FROM usage_intervals"));
    assert_int_equal(c.points, query_int(l, "SELECT count(*) FROM usage_points"));
}

/* ---- Dedupe and quarantine ------------------------------------------------- */

static void test_accept_duplicate_conflict(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("batch-dedupe");
    tally_batch *b;
    tally_event_result r[4];
    assert_int_equal(tally_batch_create(l, &b), TALLY_OK);
    tally_event ev = accel("e1", "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0, 60, 8);
    add(b, &ev);
    add(b, &ev); /* the same event twice in one batch */
    assert_int_equal(tally_batch_count(b), 2);
    tally_batch_stats st = commit_ok(b, r);
    assert_int_equal(st.accepted, 1);
    assert_int_equal(st.duplicates, 1);
    assert_int_equal(r[0], TALLY_RESULT_ACCEPTED);
    assert_int_equal(r[1], TALLY_RESULT_DUPLICATE);
    assert_int_equal(tally_batch_count(b), 0);

    tally_event other = ev;
    other.weight = 4; /* same (source, id), other content */
    set_fingerprint(&other);
    add(b, &ev);
    add(b, &other);
    st = commit_ok(b, r);
    assert_int_equal(r[0], TALLY_RESULT_DUPLICATE);
    assert_int_equal(r[1], TALLY_RESULT_CONFLICT);
    assert_int_equal(st.conflicts, 1);
    assert_int_equal(st.accepted + st.quarantined, 0);

    char out[256];
    query_str(l, "SELECT reason || ' ' || detail FROM quarantine", out);
    assert_non_null(strstr(out, "conflict"));
    assert_non_null(strstr(out, "e1"));
    query_str(l, "SELECT CAST(raw AS TEXT) FROM quarantine", out);
    assert_string_equal(out, "{\"id\":\"e1\",\"w\":4}");
    query_str(l, "SELECT source || ' ' || event_id FROM quarantine", out);
    assert_string_equal(out, "//hosts/node-1 e1");
    assert_int_equal(card_seconds(l), 8 * 60);
    tally_account a;
    assert_int_equal(tally_ledger_account_get(l, "acme", &a), TALLY_OK);
    assert_string_equal(a.currency, "CNY");
    assert_string_equal(a.timezone, "UTC");
    /* The same id from another source is another event. */
    snprintf(other.source, sizeof other.source, "//hosts/node-9");
    add(b, &other);
    st = commit_ok(b, NULL);
    assert_int_equal(st.accepted, 1);
    assert_counts_match(l);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

static void test_duplicate_reserialised(void **state)
{
    (void)state;
    static const char *const msgs[] = {
        "{\"specversion\":\"1.0\",\"id\":\"x-1\",\"source\":\"//h/1\",\"type\":\"accelerator."
        "usage\",\"subject\":\"acme\",\"time\":\"2026-03-01T08:00:00+08:00\",\"data\":{"
        "\"instance\":\"i-1\",\"sku\":\"h100\",\"pricing\":\"on_demand\",\"cards\":8}}",
        "{ \"data\": {\"cards\": \"8\", \"pricing\": \"on_demand\", \"sku\": \"h100\", "
        "\"instance\": \"i-1\", \"seconds\": 1},\n \"time\": \"2026-03-01T00:00:00.9Z\", "
        "\"subject\": \"acme\", \"type\": \"accelerator.usage\", \"source\": \"//h/1\", "
        "\"id\": \"x-1\", \"specversion\": \"1.0\" }",
    };
    tally_ledger *l = open_with_card("batch-reser");
    tally_batch *b;
    tally_event_result r[2];
    assert_int_equal(tally_batch_create(l, &b), TALLY_OK);
    for (int i = 0; i < 2; i++) {
        tally_event ev;
        tally_reject rej;
        tally_err e = tally_event_decode(msgs[i], strlen(msgs[i]), T0 + 3600, &ev, &rej);
        if (e != TALLY_OK)
            fail_msg("decode %d: %s %s", i, rej.reason, rej.detail);
        assert_int_equal(
            tally_batch_add_event(b, &ev, msgs[i], strlen(msgs[i]), i ? "file:b:1" : "file:a:1"),
            TALLY_OK);
    }
    commit_ok(b, r);
    assert_int_equal(r[0], TALLY_RESULT_ACCEPTED);
    assert_int_equal(r[1], TALLY_RESULT_DUPLICATE);
    assert_int_equal(card_seconds(l), 8);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

static void test_card_quarantine(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("batch-card");
    tally_batch *b;
    tally_event_result r[5];
    assert_int_equal(tally_batch_create(l, &b), TALLY_OK);
    tally_event ev[5] = {
        accel("q1", "i-1", "h200", TALLY_PRICING_ON_DEMAND, T0, 1, 1),
        accel("q2", "i-1", "tpu-v4-64", TALLY_PRICING_RESERVED, T0, 1, 1),
        accel("q3", "i-1", "h100", TALLY_PRICING_SPOT, T0, 1, 1),
        accel("q4", "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0 - 86400 * 365, 1, 1),
        instant(TALLY_METER_TRAFFIC, "q5", "moon", "egress", T0, 1),
    };
    for (int i = 0; i < 5; i++)
        add(b, &ev[i]);
    tally_batch_stats st = commit_ok(b, r);
    assert_int_equal(st.quarantined, 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(r[i], TALLY_RESULT_QUARANTINED);
    assert_int_equal(query_int(l, "SELECT count(*) FROM quarantine WHERE reason = 'unknown_sku'"),
                     1);
    assert_int_equal(query_int(l, "SELECT count(*) FROM quarantine WHERE reason = 'no_price'"), 4);
    char out[256];
    query_str(l, "SELECT detail FROM quarantine WHERE event_id = 'q1'", out);
    assert_non_null(strstr(out, "h200"));
    query_str(l, "SELECT detail FROM quarantine WHERE event_id = 'q2'", out);
    assert_non_null(strstr(out, "reserved"));
    /* Nothing of them was accepted: no keys, no usage, no account. */
    assert_int_equal(query_int(l, "SELECT count(*) FROM dedupe_keys"), 0);
    assert_int_equal(query_int(l, "SELECT count(*) FROM accounts"), 0);
    assert_counts_match(l);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

static void test_reject_once(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("batch-reject");
    tally_batch *b;
    tally_reject rej = {"bad_json", "unexpected end of input"};
    assert_int_equal(tally_batch_create(l, &b), TALLY_OK);
    for (int round = 0; round < 2; round++) {
        assert_int_equal(tally_batch_add_reject(b, &rej, "{\"id\":", 6, "kafka:usage/0@17"),
                         TALLY_OK);
        assert_int_equal(tally_batch_add_reject(b, &rej, NULL, 0, "kafka:usage/0@18"), TALLY_OK);
        tally_batch_stats st = commit_ok(b, NULL);
        assert_int_equal(st.quarantined, 2);
    }
    assert_int_equal(query_int(l, "SELECT count(*) FROM quarantine"), 2);
    assert_int_equal(query_int(l, "SELECT length(raw) FROM quarantine WHERE origin = "
                                  "'kafka:usage/0@18'"),
                     0);
    /* Rejects alone write no usage: the usage sequence does not move. */
    assert_int_equal(query_int(l, "SELECT value FROM meta WHERE key = 'usage_seq'"), 0);
    assert_counts_match(l);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

/* A 10 MB reject keeps a 64 KiB prefix plus the whole message's size and
 * SHA-256 (every input path queues rejects through this batch). */
static void test_reject_bounded(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("batch-reject-big");
    tally_batch *b;
    tally_reject rej = {"too_large", "over 64 KiB"};
    size_t n = (size_t)10 << 20;
    char *raw = malloc(n);
    assert_non_null(raw);
    memset(raw, 'x', n);
    char sha[65], want[300];
    tally_sha256_hex(raw, n, sha);
    assert_int_equal(tally_batch_create(l, &b), TALLY_OK);
    assert_int_equal(tally_batch_add_reject(b, &rej, raw, n, "file:big:1:00"), TALLY_OK);
    assert_int_equal(tally_batch_add_reject(b, &rej, "{}", 2, "file:big:2:00"), TALLY_OK);
    (void)commit_ok(b, NULL);
    assert_int_equal(query_int(l, "SELECT length(raw) FROM quarantine WHERE origin = "
                                  "'file:big:1:00'"),
                     65536);
    assert_int_equal(query_int(l, "SELECT raw_size FROM quarantine WHERE origin = "
                                  "'file:big:1:00'"),
                     (long long)n);
    snprintf(want, sizeof want,
             "SELECT count(*) FROM quarantine WHERE origin = 'file:big:1:00' AND raw_sha256 = '%s'",
             sha);
    assert_int_equal(query_int(l, want), 1);
    tally_sha256_hex("{}", 2, sha);
    snprintf(want, sizeof want,
             "SELECT count(*) FROM quarantine WHERE origin = 'file:big:2:00' AND raw_sha256 = "
             "'%s' AND raw_size = 2 AND raw = CAST('{}' AS BLOB)",
             sha);
    assert_int_equal(query_int(l, want), 1);
    free(raw);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

/* A ledger with the fixture card and a batch on it. */
static tally_batch *open_batch(const char *tag, tally_ledger **l)
{
    tally_batch *b = NULL;
    *l = open_with_card(tag);
    assert_int_equal(tally_batch_create(*l, &b), TALLY_OK);
    return b;
}

/* A batch keeps copied events packed (ledger_int.h, batch_event) and
 * unpacks each at commit: strings at their longest come back whole, an
 * event's source is not confused with the one before it (the commit
 * remembers the last source across unpacks), and rejects keep their reason
 * and detail. */
static void fill(char *s, size_t cap, char c)
{
    memset(s, c, cap - 1);
    s[cap - 1] = '\0';
}

static void test_packed_strings(void **state)
{
    (void)state;
    tally_ledger *l;
    tally_batch *b = open_batch("batch-packed", &l);
    tally_event a = accel("x", "i", "h100", TALLY_PRICING_ON_DEMAND, T0, 60, 2);
    fill(a.id, sizeof a.id, 'd');
    fill(a.source, sizeof a.source, 's');
    fill(a.account, sizeof a.account, 'a');
    fill(a.resource, sizeof a.resource, 'r');
    set_fingerprint(&a);
    tally_event other = a; /* same id, another source: its own key */
    other.source[0] = 't';
    set_fingerprint(&other);
    tally_event again = a; /* a's key and content: a duplicate */
    tally_event bad = a;   /* a's key, other content: a conflict */
    bad.weight = 3;
    set_fingerprint(&bad);
    tally_event tok = instant(TALLY_METER_TOKENS, "t", "qwen-72b", "output", T0, 7);
    fill(tok.account, sizeof tok.account, 'a');
    set_fingerprint(&tok);
    tally_reject rej;
    fill(rej.reason, sizeof rej.reason, 'q');
    fill(rej.detail, sizeof rej.detail, 'w');
    add(b, &a);
    add(b, &other);
    add(b, &again);
    add(b, &bad);
    add(b, &tok);
    assert_int_equal(tally_batch_add_reject(b, &rej, "{", 1, "test:rej"), TALLY_OK);
    tally_event_result r[6];
    tally_batch_stats st = commit_ok(b, r);
    static const tally_event_result want_r[6] = {TALLY_RESULT_ACCEPTED,  TALLY_RESULT_ACCEPTED,
                                                 TALLY_RESULT_DUPLICATE, TALLY_RESULT_CONFLICT,
                                                 TALLY_RESULT_ACCEPTED,  TALLY_RESULT_QUARANTINED};
    assert_results(r, want_r, 6);
    assert_int_equal(st.accepted, 3);
    char want[600];
    snprintf(want, sizeof want,
             "SELECT count(*) FROM usage_intervals WHERE account = '%s' AND resource = '%s' "
             "AND dim = 'h100' AND weight = 2",
             a.account, a.resource);
    assert_int_equal(query_int(l, want), 2); /* a and other overlap: a row each */
    assert_int_equal(card_seconds(l), 240);
    snprintf(want, sizeof want,
             "SELECT qty FROM usage_points WHERE account = '%s' AND dim = 'qwen-72b' AND dim2 = "
             "'output'",
             tok.account);
    assert_int_equal(query_int(l, want), 7);
    snprintf(want, sizeof want,
             "SELECT count(*) FROM quarantine WHERE reason = 'conflict' AND source = '%s' AND "
             "event_id = '%s'",
             a.source, a.id);
    assert_int_equal(query_int(l, want), 1);
    snprintf(want, sizeof want,
             "SELECT count(*) FROM quarantine WHERE origin = 'test:rej' AND reason = '%s' AND "
             "detail = '%s'",
             rej.reason, rej.detail);
    assert_int_equal(query_int(l, want), 1);
    assert_counts_match(l);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

/* A conflict's detail quotes 60 bytes of the source and id; a cut inside a
 * character would store invalid UTF-8 in quarantine.detail (a TEXT
 * column), so the cut falls before that character. */
static void test_conflict_detail_utf8(void **state)
{
    (void)state;
    tally_ledger *l;
    tally_batch *b = open_batch("batch-detail-utf8", &l);
    tally_event a = accel("x", "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0, 60, 2);
    char src[TALLY_ID_MAX] = "//hx/"; /* 5 bytes, then 2-byte characters: 60 splits one */
    for (size_t i = 0; i < 61; i++)
        memcpy(src + 5 + 2 * i, "\xC3\xBC", 3); /* u with diaeresis, and a NUL */
    snprintf(a.source, sizeof a.source, "%s", src);
    set_fingerprint(&a);
    tally_event bad = a;
    bad.weight = 3;
    set_fingerprint(&bad);
    add(b, &a);
    add(b, &bad);
    tally_event_result r[2];
    commit_ok(b, r);
    assert_int_equal(r[1], TALLY_RESULT_CONFLICT);
    char detail[256];
    query_str(l, "SELECT detail FROM quarantine WHERE reason = 'conflict'", detail);
    assert_true(tu_valid_utf8(detail, strlen(detail)));
    assert_non_null(strstr(detail, "(source, id) = (//hx/\xC3\xBC"));
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

/* Under tally_batch_set_origin_hash an origin is a prefix and the message's
 * hash follows it, computed when the message is quarantined: a conflict, a
 * reject, and a reject over QUARANTINE_RAW_MAX (whose hash covers all of
 * it, though only a prefix is kept). An accepted event stores no origin. */
static void want_origin(tally_ledger *l, const char *prefix, const char *raw, size_t len)
{
    uint64_t h[2];
    char sql[300];
    tally_hash128(raw, len, 0, h);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM quarantine WHERE origin = '%s%016llx'", prefix,
             (unsigned long long)h[0]);
    assert_int_equal(query_int(l, sql), 1);
}

static void test_origin_hash(void **state)
{
    (void)state;
    tally_ledger *l;
    tally_batch *b = open_batch("batch-origin-hash", &l);
    tally_event a = accel("o1", "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0, 60, 2);
    tally_event bad = a;
    bad.weight = 3;
    set_fingerprint(&bad);
    tally_reject rej = {"bad_json", "x"};
    size_t big_n = QUARANTINE_RAW_MAX + 10;
    char *big = malloc(big_n);
    assert_non_null(big);
    memset(big, 'b', big_n);
    assert_int_equal(tally_batch_add_event(b, &a, "{a}", 3, "file:f:1:"), TALLY_OK);
    tally_batch_set_origin_hash(b, true);
    assert_int_equal(tally_batch_add_event(b, &a, "{a}", 3, "file:f:2:"), TALLY_OK);
    assert_int_equal(tally_batch_add_event(b, &bad, "{bad}", 5, "file:f:3:"), TALLY_OK);
    assert_int_equal(tally_batch_add_reject(b, &rej, "{", 1, "file:f:4:"), TALLY_OK);
    assert_int_equal(tally_batch_add_reject(b, &rej, big, big_n, "file:f:5:"), TALLY_OK);
    char long_prefix[600];
    memset(long_prefix, 'p', sizeof long_prefix - 1);
    long_prefix[sizeof long_prefix - 1] = '\0';
    assert_int_equal(tally_batch_add_reject(b, &rej, "{", 1, long_prefix), TALLY_TOO_LARGE);
    tally_batch_set_origin_hash(b, false);
    assert_int_equal(tally_batch_add_reject(b, &rej, "{", 1, "file:f:6:whole"), TALLY_OK);
    tally_event_result r[6];
    commit_ok(b, r);
    static const tally_event_result want[3] = {TALLY_RESULT_ACCEPTED, TALLY_RESULT_DUPLICATE,
                                               TALLY_RESULT_CONFLICT};
    assert_results(r, want, 3);
    want_origin(l, "file:f:3:", "{bad}", 5);
    want_origin(l, "file:f:4:", "{", 1);
    want_origin(l, "file:f:5:", big, big_n);
    assert_int_equal(
        query_int(l, "SELECT count(*) FROM quarantine WHERE origin = 'file:f:6:whole'"), 1);
    assert_int_equal(query_int(l, "SELECT count(*) FROM quarantine"), 4);
    free(big);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

/* An offset's mark is stored with it and cleared by an accepted gap, which
 * is recorded append-only and moves the offset with compare-and-set. */
static void test_offset_mark_and_gap(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("batch-gap");
    tally_batch *b;
    int64_t next = 0, mark = 0;
    bool has = true;
    tally_reject rej = {"bad_json", "x"};
    assert_int_equal(tally_batch_create(l, &b), TALLY_OK);
    assert_int_equal(tally_batch_add_reject(b, &rej, "x", 1, "kafka:usage/3@99"), TALLY_OK);
    assert_int_equal(tally_batch_set_offset_mark(b, "usage", 3, 7), TALLY_INVAL);
    assert_int_equal(tally_batch_set_offset(b, "usage", 3, -1, 100), TALLY_OK);
    assert_int_equal(tally_batch_set_offset_mark(b, "usage", 3, 4242), TALLY_OK);
    (void)commit_ok(b, NULL);
    assert_int_equal(tally_ledger_offset_mark(l, "usage", 3, &next, &mark, &has), TALLY_OK);
    assert_true(has);
    assert_int_equal(next, 100);
    assert_int_equal(mark, 4242);
    tally_offset_gap g = {.topic = "usage",
                          .partition = 3,
                          .from = 100,
                          .to = 900,
                          .kind = "retention",
                          .stored_next = 50,
                          .log_start = 900,
                          .log_end = 950};
    assert_int_equal(tally_ledger_gap_accept(l, &g), TALLY_STALE); /* not the stored offset */
    assert_int_equal(query_int(l, "SELECT count(*) FROM offset_gaps"), 0);
    g.kind = "whatever";
    assert_int_equal(tally_ledger_gap_accept(l, &g), TALLY_INVAL);
    g.kind = "retention";
    g.stored_next = 100;
    assert_int_equal(tally_ledger_gap_accept(l, &g), TALLY_OK);
    assert_int_equal(tally_ledger_offset_mark(l, "usage", 3, &next, &mark, &has), TALLY_OK);
    assert_false(has);
    assert_int_equal(next, 900);
    assert_int_equal(query_int(l, "SELECT count(*) FROM offset_gaps WHERE from_offset = 100 AND "
                                  "to_offset = 900 AND kind = 'retention'"),
                     1);
    assert_int_not_equal(tally_ledger_exec(l, "DELETE FROM offset_gaps"), TALLY_OK);
    assert_int_not_equal(tally_ledger_exec(l, "UPDATE offset_gaps SET to_offset = 100"), TALLY_OK);
    /* Dead-letter deliveries: unsent until recorded, recorded once. */
    const char *origins[] = {"kafka:usage/3@99", "kafka:usage/3@99"};
    assert_int_equal(tally_ledger_dlq_mark_sent(l, origins, 2), TALLY_OK);
    assert_int_equal(query_int(l, "SELECT count(*) FROM dlq_sent"), 1);
    assert_int_not_equal(tally_ledger_exec(l, "DELETE FROM dlq_sent"), TALLY_OK);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

static void test_bad_input(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("batch-bad");
    tally_batch *b;
    assert_int_equal(tally_batch_create(l, &b), TALLY_OK);
    tally_event ev = accel("b1", "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0, 1, 1);
    ev.meter = (tally_meter)9;
    assert_int_equal(tally_batch_add_event(b, &ev, "", 0, "x:1"), TALLY_INVAL);
    ev = accel("b1", "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0, 0, 1);
    assert_int_equal(tally_batch_add_event(b, &ev, "", 0, "x:1"), TALLY_INVAL);
    ev = accel("b1", "i-1", "h100", TALLY_PRICING_NONE, T0, 1, 1);
    assert_int_equal(tally_batch_add_event(b, &ev, "", 0, "x:1"), TALLY_INVAL);
    ev = accel("b1", "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0, 1, 1);
    memset(ev.dim, 'x', sizeof ev.dim); /* not terminated */
    assert_int_equal(tally_batch_add_event(b, &ev, "", 0, "x:1"), TALLY_INVAL);
    ev = accel("b1", "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0, 1, 1);
    assert_int_equal(tally_batch_add_event(b, &ev, "", TALLY_EVENT_MAX_BYTES + 1, "x:1"),
                     TALLY_TOO_LARGE);
    assert_int_equal(tally_batch_set_offset(b, "usage", -1, -1, 0), TALLY_INVAL);
    assert_int_equal(tally_batch_set_offset(b, "usage", 0, 5, 4), TALLY_INVAL);
    assert_int_equal(tally_batch_count(b), 0);
    tally_batch_stats st = commit_ok(b, NULL);
    assert_int_equal(st.accepted + st.duplicates + st.conflicts + st.quarantined, 0);
    tally_batch_destroy(b);
    tally_batch_destroy(NULL);
    tally_ledger_close(l);
}

/* ---- Borrowed events (tally_batch_add_event_ref) -------------------------- */

/* A borrowed event is committed exactly as a copied one: accepted, duplicate,
 * conflict and quarantine alike, with the caller's raw bytes and origin in
 * quarantine, and nothing of the caller's buffers is read after the commit. */
static void test_borrowed_events(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("batch-borrow");
    tally_batch *b;
    tally_event_result r[5];
    assert_int_equal(tally_batch_create(l, &b), TALLY_OK);
    tally_event ev[4] = {
        accel("r1", "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0, 60, 8),
        accel("r1", "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0, 60, 8),
        accel("r1", "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0, 60, 4),
        accel("r2", "i-1", "h200", TALLY_PRICING_ON_DEMAND, T0, 60, 1),
    };
    char raw[4][32], origin[4][32];
    for (int i = 0; i < 4; i++) {
        snprintf(raw[i], sizeof raw[i], "{\"raw\":%d}", i);
        snprintf(origin[i], sizeof origin[i], "kafka:usage/0@%d", i);
        assert_int_equal(tally_batch_add_event_ref(b, &ev[i], raw[i], strlen(raw[i]), origin[i]),
                         TALLY_OK);
    }
    tally_event copied = accel("r3", "i-2", "h100", TALLY_PRICING_ON_DEMAND, T0, 60, 1);
    add(b, &copied); /* copied and borrowed items mix in one batch */
    assert_int_equal(tally_batch_count(b), 5);
    assert_true(tally_batch_bytes(b) >= 4 * strlen("{\"raw\":0}"));
    tally_batch_stats st = commit_ok(b, r);
    static const tally_event_result want[5] = {TALLY_RESULT_ACCEPTED, TALLY_RESULT_DUPLICATE,
                                               TALLY_RESULT_CONFLICT, TALLY_RESULT_QUARANTINED,
                                               TALLY_RESULT_ACCEPTED};
    assert_results(r, want, 5);
    assert_int_equal(st.accepted, 2);
    assert_int_equal(tally_batch_bytes(b), 0);
    char out[256];
    query_str(l, "SELECT CAST(raw AS TEXT) || ' ' || origin FROM quarantine WHERE event_id = 'r1'",
              out);
    assert_string_equal(out, "{\"raw\":2} kafka:usage/0@2");
    query_str(l,
              "SELECT reason || ' ' || CAST(raw AS TEXT) || ' ' || origin FROM quarantine "
              "WHERE event_id = 'r2'",
              out);
    assert_string_equal(out, "unknown_sku {\"raw\":3} kafka:usage/0@3");
    assert_int_equal(card_seconds(l), 8 * 60 + 60);

    /* The caller may reuse its buffers once the commit has returned. */
    memset(ev, 0xff, sizeof ev);
    memset(raw, 'z', sizeof raw);
    memset(origin, 'z', sizeof origin);
    (void)commit_ok(b, NULL);
    assert_int_equal(query_int(l, "SELECT count(*) FROM quarantine"), 2);
    assert_int_equal(card_seconds(l), 8 * 60 + 60);

    /* A NULL raw is stored as empty bytes; bad events are refused, unqueued. */
    tally_event q = accel("r4", "i-1", "h200", TALLY_PRICING_ON_DEMAND, T0, 1, 1);
    assert_int_equal(tally_batch_add_event_ref(b, &q, NULL, 0, "kafka:usage/0@9"), TALLY_OK);
    tally_event bad = accel("r5", "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0, 0, 1);
    assert_int_equal(tally_batch_add_event_ref(b, &bad, "", 0, "x:1"), TALLY_INVAL);
    assert_int_equal(tally_batch_add_event_ref(b, &q, "", TALLY_EVENT_MAX_BYTES + 1, "x:1"),
                     TALLY_TOO_LARGE);
    assert_int_equal(tally_batch_count(b), 1);
    (void)commit_ok(b, r);
    assert_int_equal(r[0], TALLY_RESULT_QUARANTINED);
    assert_int_equal(query_int(l, "SELECT length(raw) FROM quarantine WHERE event_id = 'r4'"), 0);

    /* Raw bytes are kept as bytes, a NUL and a 0xff included, and counted
     * in the batch's size as if copied. */
    static const char bin[] = {'{', '\0', '\xff', '}'};
    tally_event q2 = accel("r7", "i-1", "h200", TALLY_PRICING_ON_DEMAND, T0, 1, 1);
    assert_int_equal(tally_batch_add_event_ref(b, &q2, bin, sizeof bin, "kafka:usage/0@10"),
                     TALLY_OK);
    assert_int_equal(tally_batch_bytes(b), sizeof bin);
    (void)commit_ok(b, r);
    assert_int_equal(r[0], TALLY_RESULT_QUARANTINED);
    query_str(l, "SELECT length(raw) || ' ' || hex(raw) FROM quarantine WHERE event_id = 'r7'",
              out);
    assert_string_equal(out, "4 7B00FF7D");

    /* A commit that fails (its offset moved under it) takes its borrowed
     * items with it: nothing of them is read, or written, afterwards. */
    char stale_raw[32] = "{\"raw\":\"stale\"}";
    tally_event s1 = accel("r6", "i-9", "h100", TALLY_PRICING_ON_DEMAND, T0, 60, 1);
    assert_int_equal(
        tally_batch_add_event_ref(b, &s1, stale_raw, strlen(stale_raw), "kafka:usage/0@20"),
        TALLY_OK);
    assert_int_equal(tally_batch_set_offset(b, "usage", 0, 5, 21), TALLY_OK); /* none stored */
    assert_int_equal(tally_batch_commit(b, NULL, NULL), TALLY_STALE);
    assert_int_equal(tally_batch_count(b), 0);
    assert_int_equal(tally_batch_bytes(b), 0);
    memset(&s1, 0xff, sizeof s1);
    memset(stale_raw, 'z', sizeof stale_raw);
    (void)commit_ok(b, NULL);
    assert_int_equal(query_int(l, "SELECT count(*) FROM usage_intervals WHERE resource = 'i-9'"),
                     0);
    assert_int_equal(query_int(l, "SELECT count(*) FROM quarantine WHERE event_id = 'r6'"), 0);
    assert_counts_match(l);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

/* tally_batch_add_event_raw_ref (tally ingest's mapped file): the event and
 * origin are copied, the raw bytes stay the caller's until the commit, and
 * a line the commit quarantines is stored from them, byte for byte. The
 * event may be changed as soon as it is queued; the origin's buffer too. */
static void test_raw_borrowed(void **state)
{
    (void)state;
    tally_ledger *l;
    tally_batch *b = open_batch("batch-rawref", &l);
    tally_event ev[3] = {
        accel("w1", "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0, 60, 8),
        accel("w1", "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0, 60, 4), /* a conflict */
        accel("w2", "i-1", "h200", TALLY_PRICING_ON_DEMAND, T0, 60, 1), /* not on the card */
    };
    char raw[3][32], origin[32];
    size_t bytes = 0;
    for (int i = 0; i < 3; i++) {
        snprintf(raw[i], sizeof raw[i], "{\"line\":%d,\"\xc3\xa9\":0}", i);
        snprintf(origin, sizeof origin, "file:x:%d:", i + 1);
        tally_batch_set_origin_hash(b, true);
        assert_int_equal(tally_batch_add_event_raw_ref(b, &ev[i], raw[i], strlen(raw[i]), origin),
                         TALLY_OK);
        tally_batch_set_origin_hash(b, false);
        bytes += strlen(raw[i]);
        memset(&ev[i], 0xff, sizeof ev[i]); /* copied: the caller may reuse it at once */
        memset(origin, 'z', sizeof origin - 1);
    }
    /* Counted as if copied, so a batch of large lines still commits in time;
     * the origins are the batch's own copies. */
    assert_true(tally_batch_bytes(b) >= bytes + 3 * strlen("file:x:1:"));
    tally_event_result r[3];
    (void)commit_ok(b, r);
    static const tally_event_result want[3] = {TALLY_RESULT_ACCEPTED, TALLY_RESULT_CONFLICT,
                                               TALLY_RESULT_QUARANTINED};
    assert_results(r, want, 3);
    assert_int_equal(tally_batch_bytes(b), 0);
    for (int i = 1; i < 3; i++)
        want_origin(l, i == 1 ? "file:x:2:" : "file:x:3:", raw[i], strlen(raw[i]));
    char out[256];
    query_str(l, "SELECT CAST(raw AS TEXT) FROM quarantine WHERE origin LIKE 'file:x:2:%'", out);
    assert_string_equal(out, raw[1]);
    query_str(l, "SELECT reason || ' ' || CAST(raw AS TEXT) FROM quarantine WHERE event_id = 'w2'",
              out);
    char w2[64];
    snprintf(w2, sizeof w2, "unknown_sku %s", raw[2]);
    assert_string_equal(out, w2);
    assert_int_equal(card_seconds(l), 8 * 60);

    /* Too large, or an event the batch refuses: nothing queued, nothing
     * counted. */
    tally_event q = accel("w3", "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0, 60, 1);
    tally_event bad = accel("w4", "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0, 0, 1);
    assert_int_equal(tally_batch_add_event_raw_ref(b, &q, "", TALLY_EVENT_MAX_BYTES + 1, "x:1"),
                     TALLY_TOO_LARGE);
    assert_int_equal(tally_batch_add_event_raw_ref(b, &bad, "{}", 2, "x:2"), TALLY_INVAL);
    assert_int_equal(tally_batch_count(b), 0);
    assert_int_equal(tally_batch_bytes(b), 0);
    assert_counts_match(l);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

/* ---- Hashes taken when queued (batch_hashes) ------------------------------- */

/* An event's lookup hashes are taken when it is queued, by whichever way
 * (copied, raw borrowed, all borrowed), and the commit uses them instead of
 * hashing again: they are the ones the commit would take, so the three
 * ways find one another's dedupe windows and open intervals. 60 instances
 * report three times each, each report by another way and interleaved, so
 * the commit's prefetch (items ahead of the one at work, on here for small
 * tables too) runs over all of them; a reject and an id that does not count
 * up sit among them. */
static void test_queued_hashes(void **state)
{
    (void)state;
    tally_ledger *l;
    tally_batch *b = open_batch("batch-hashes", &l);
    b->prefetch_from = 0; /* prefetch however small the tables */
    enum { INST = 60, REPORTS = 3, N = INST * REPORTS };
    static tally_event ev[N], dup[INST];
    static char raw[N][48], origin[N][32];
    int k = 0;
    for (int r = 0; r < REPORTS; r++) {
        for (int i = 0; i < INST; i++, k++) {
            char id[32], inst[32];
            snprintf(id, sizeof id, "rep-%06d", i * 10 + r); /* counts up per instance */
            snprintf(inst, sizeof inst, "i-%d", i);
            ev[k] = accel(id, inst, "h100", TALLY_PRICING_ON_DEMAND, T0 + 60 * r, 60, 1);
            snprintf(ev[k].source, sizeof ev[k].source, "//hosts/node-%d", i);
            set_fingerprint(&ev[k]);
            snprintf(raw[k], sizeof raw[k], "{\"i\":%d,\"r\":%d}", i, r);
            snprintf(origin[k], sizeof origin[k], "test:h:%d", k);
            int way = (i + r) % 3;
            tally_err e =
                way == 0 ? tally_batch_add_event(b, &ev[k], raw[k], strlen(raw[k]), origin[k])
                : way == 1
                    ? tally_batch_add_event_raw_ref(b, &ev[k], raw[k], strlen(raw[k]), origin[k])
                    : tally_batch_add_event_ref(b, &ev[k], raw[k], strlen(raw[k]), origin[k]);
            assert_int_equal(e, TALLY_OK);
            const batch_hashes *h = &b->items[b->n_items - 1].u.ev.h;
            assert_true(h->iv != 0 && h->iv == agg_key_hash(&ev[k]));
            assert_true(h->src == runs_source_hash(ev[k].source));
            assert_true(h->run != 0 && h->run == runs_window_hash(h->src, ev[k].id));
        }
        tally_reject rej = {.reason = "bad_json", .detail = "between the reports"};
        assert_int_equal(tally_batch_add_reject(b, &rej, "{", 1, "test:h:rej"), TALLY_OK);
    }
    /* Each instance's first report again, by another way than its first. */
    for (int i = 0; i < INST; i++) {
        dup[i] = ev[i];
        tally_err e = i % 3 == 0 ? tally_batch_add_event_ref(b, &dup[i], "{}", 2, "test:h:dup")
                                 : tally_batch_add_event(b, &dup[i], "{}", 2, "test:h:dup");
        assert_int_equal(e, TALLY_OK);
    }
    tally_event odd = instant(TALLY_METER_TRAFFIC, "no-digits", "internet", "egress", T0, 5);
    assert_int_equal(tally_batch_add_event(b, &odd, "{}", 2, "test:h:odd"), TALLY_OK);
    assert_true(b->items[b->n_items - 1].u.ev.h.run == 0 &&
                b->items[b->n_items - 1].u.ev.h.iv == 0);

    tally_batch_stats st = commit_ok(b, NULL);
    assert_int_equal(st.accepted, N + 1);
    assert_int_equal(st.duplicates, INST);
    assert_int_equal(st.quarantined, REPORTS);
    /* One row per instance, three minutes long, whatever way each came. */
    assert_int_equal(query_int(l, "SELECT count(*) FROM usage_intervals"), INST);
    assert_int_equal(
        query_int(l, "SELECT count(*) FROM usage_intervals WHERE end_s - start_s = 180"), INST);
    /* A later commit finds the held windows under the same hashes. */
    for (int i = 0; i < INST; i++)
        assert_int_equal(tally_batch_add_event_ref(b, &ev[N - 1 - i], "{}", 2, "test:h:again"),
                         TALLY_OK);
    st = commit_ok(b, NULL);
    assert_int_equal(st.duplicates, INST);
    assert_int_equal(st.accepted, 0);
    assert_counts_match(l);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

/* ---- Offsets ------------------------------------------------------------------ */

static void test_offsets_cas(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("batch-offsets"), *l2;
    tally_batch *b, *stale;
    char why[256];
    int64_t next;
    assert_int_equal(tally_ledger_open(db_path, &l2, why, sizeof why), TALLY_OK);
    assert_int_equal(tally_batch_create(l, &b), TALLY_OK);
    assert_int_equal(tally_batch_create(l2, &stale), TALLY_OK);

    tally_event ev = accel("o1", "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0, 1, 1);
    add(b, &ev);
    assert_int_equal(tally_batch_set_offset(b, "usage", 0, -1, 5), TALLY_OK);
    assert_int_equal(tally_batch_set_offset(b, "usage", 0, 5, 10), TALLY_OK); /* continues */
    commit_ok(b, NULL);
    assert_int_equal(tally_ledger_offset_get(l, "usage", 0, &next), TALLY_OK);
    assert_int_equal(next, 10);

    /* A second writer that still believes nothing is stored. */
    tally_event ev2 = accel("o2", "i-2", "h100", TALLY_PRICING_ON_DEMAND, T0, 1, 1);
    add(stale, &ev2);
    assert_int_equal(tally_batch_set_offset(stale, "usage", 0, -1, 20), TALLY_OK);
    tally_batch_stats st = {1, 1, 1, 1};
    assert_int_equal(tally_batch_commit(stale, &st, NULL), TALLY_STALE);
    assert_int_equal(st.accepted, 0);
    assert_non_null(strstr(tally_ledger_errmsg(l2), "usage/0"));
    assert_int_equal(tally_batch_count(stale), 0);
    /* ... or an old value. */
    add(stale, &ev2);
    assert_int_equal(tally_batch_set_offset(stale, "usage", 0, 5, 20), TALLY_OK);
    assert_int_equal(tally_batch_commit(stale, NULL, NULL), TALLY_STALE);
    assert_int_equal(query_int(l, "SELECT count(*) FROM dedupe_keys"), 1);
    assert_int_equal(query_int(l, "SELECT count(*) FROM usage_intervals"), 1);
    assert_int_equal(tally_ledger_offset_get(l, "usage", 0, &next), TALLY_OK);
    assert_int_equal(next, 10);

    /* With the right expectation it goes through; other partitions are apart. */
    add(stale, &ev2);
    assert_int_equal(tally_batch_set_offset(stale, "usage", 0, 10, 20), TALLY_OK);
    assert_int_equal(tally_batch_set_offset(stale, "usage", 1, -1, 3), TALLY_OK);
    st = commit_ok(stale, NULL);
    assert_int_equal(st.accepted, 1);
    assert_int_equal(tally_ledger_offset_get(l, "usage", 0, &next), TALLY_OK);
    assert_int_equal(next, 20);
    assert_int_equal(tally_ledger_offset_get(l, "usage", 1, &next), TALLY_OK);
    assert_int_equal(next, 3);
    assert_counts_match(l);
    tally_batch_destroy(b);
    tally_batch_destroy(stale);
    tally_ledger_close(l2);
    tally_ledger_close(l);
}

/* ---- Coalescing ---------------------------------------------------------------- */

static void test_coalesce_hour(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("batch-hour");
    tally_batch *b;
    assert_int_equal(tally_batch_create(l, &b), TALLY_OK);
    for (int i = 0; i < 3600; i++) {
        char id[32];
        snprintf(id, sizeof id, "h-%05d", i);
        tally_event ev = accel(id, "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0 + i, 1, 1);
        add(b, &ev);
        if (i % 100 == 99) /* 36 commits: the open interval outlives each */
            commit_ok(b, NULL);
    }
    assert_int_equal(query_int(l, "SELECT count(*) FROM usage_intervals"), 1);
    assert_int_equal(query_int(l, "SELECT start_s FROM usage_intervals"), T0);
    assert_int_equal(query_int(l, "SELECT end_s FROM usage_intervals"), T0 + 3600);
    assert_int_equal(query_int(l, "SELECT seq FROM usage_intervals"),
                     query_int(l, "SELECT value FROM meta WHERE key = 'usage_seq'"));
    assert_int_equal(query_int(l, "SELECT value FROM meta WHERE key = 'usage_seq'"), 36);
    assert_counts_match(l);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

static void test_coalesce_two_days(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("batch-days");
    tally_batch *b;
    assert_int_equal(tally_batch_create(l, &b), TALLY_OK);
    for (int i = 0; i < 2 * 1440; i++) {
        char id[32];
        snprintf(id, sizeof id, "d-%05d", i);
        tally_event ev = accel(id, "i-1", "a100-40g", TALLY_PRICING_RESERVED, T0 + 60 * i, 60, 2);
        add(b, &ev);
    }
    commit_ok(b, NULL);
    assert_true(query_int(l, "SELECT count(*) FROM usage_intervals") >= 2);
    assert_true(query_int(l, "SELECT count(*) FROM usage_intervals") <= 3);
    assert_int_equal(query_int(l, "SELECT max(end_s - start_s) FROM usage_intervals"), 86400);
    assert_int_equal(card_seconds(l), 2 * 2 * 86400);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static void test_out_of_order(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("batch-shuffle");
    tally_batch *b;
    enum { N = 3600 };
    static int order[N];
    uint64_t seed = 42;
    for (int i = 0; i < N; i++)
        order[i] = i;
    for (int i = N - 1; i > 0; i--) {
        int j = (int)(lcg(&seed) % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    assert_int_equal(tally_batch_create(l, &b), TALLY_OK);
    for (int i = 0; i < N; i++) {
        char id[32];
        snprintf(id, sizeof id, "s-%05d", order[i]);
        tally_event ev = accel(id, "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0 + order[i], 1, 8);
        add(b, &ev);
        if (i % 256 == 255)
            commit_ok(b, NULL);
    }
    commit_ok(b, NULL);
    assert_int_equal(card_seconds(l), 8LL * N);
    /* Every gap filled joined its neighbours: one row. */
    assert_int_equal(query_int(l, "SELECT count(*) FROM usage_intervals"), 1);
    assert_int_equal(query_int(l, "SELECT min(start_s) FROM usage_intervals"), T0);
    assert_counts_match(l);

    /* A gap filled last joins two stored rows into one. */
    const int64_t t[] = {T0 + 10000, T0 + 10002, T0 + 10001};
    for (int i = 0; i < 3; i++) {
        char id[32];
        snprintf(id, sizeof id, "g-%d", i);
        tally_event ev = accel(id, "i-2", "h100", TALLY_PRICING_ON_DEMAND, t[i], 1, 1);
        add(b, &ev);
        commit_ok(b, NULL);
    }
    assert_int_equal(query_int(l, "SELECT count(*) FROM usage_intervals WHERE resource = 'i-2'"),
                     1);
    assert_int_equal(query_int(l, "SELECT end_s - start_s FROM usage_intervals WHERE resource = "
                                  "'i-2'"),
                     3);
    assert_counts_match(l);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

/* Another connection edits and deletes interval rows between two commits
 * (someone at the SQLite file): the batch must not extend a row it no
 * longer knows. The edited row keeps the edit and is not grown; the deleted
 * one is not updated into nothing: the usage after it gets rows of its own. */
static void test_rows_edited_between_commits(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("batch-edited"), *l2;
    tally_batch *b;
    char why[256], got[256];
    assert_int_equal(tally_ledger_open(db_path, &l2, why, sizeof why), TALLY_OK);
    assert_int_equal(tally_batch_create(l, &b), TALLY_OK);
    tally_event x1 = accel("x1", "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0, 60, 1);
    tally_event x2 = accel("x2", "i-2", "h100", TALLY_PRICING_ON_DEMAND, T0, 60, 1);
    add(b, &x1);
    add(b, &x2);
    commit_ok(b, NULL);
    tally_event x3 = accel("x3", "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0 + 60, 60, 1);
    add(b, &x3);
    commit_ok(b, NULL);
    assert_int_equal(query_int(l, "SELECT count(*) FROM usage_intervals"), 2);

    assert_int_equal(tally_ledger_exec(l2, "UPDATE usage_intervals SET start_s = start_s + 30 "
                                           "WHERE resource = 'i-1'"),
                     TALLY_OK);
    assert_int_equal(tally_ledger_exec(l2, "DELETE FROM usage_intervals WHERE resource = 'i-2'"),
                     TALLY_OK);
    tally_event x4 = accel("x4", "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0 + 120, 60, 1);
    tally_event x5 = accel("x5", "i-2", "h100", TALLY_PRICING_ON_DEMAND, T0 + 60, 60, 1);
    add(b, &x4);
    add(b, &x5);
    commit_ok(b, NULL);
    query_str(l,
              "SELECT group_concat(r, ' ') FROM (SELECT resource || ':' || (start_s - " T0_TEXT
              ") || '-' || (end_s - " T0_TEXT ") AS r FROM usage_intervals ORDER BY id)",
              got);
    assert_string_equal(got, "i-1:30-120 i-1:120-180 i-2:60-120");
    tally_batch_destroy(b);
    tally_ledger_close(l2);
    tally_ledger_close(l);
}

/* More instances than the open-interval map holds: the least recently used
 * are forgotten, and billing stays exact. */
static void test_eviction(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("batch-evict");
    tally_batch *b;
    const int counts[] = {IV_MAX, IV_MAX, IV_MAX + 500};
    assert_int_equal(tally_batch_create(l, &b), TALLY_OK);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < counts[round]; i++) {
            char id[32], inst[32];
            snprintf(id, sizeof id, "v-%d-%d", round, i);
            snprintf(inst, sizeof inst, "i-%d", i);
            tally_event ev = accel(id, inst, "h100", TALLY_PRICING_ON_DEMAND, T0 + round, 1, 1);
            add(b, &ev);
        }
        commit_ok(b, NULL);
        if (round == 1) /* everything fit: one row per instance */
            assert_int_equal(query_int(l, "SELECT count(*) FROM usage_intervals"), IV_MAX);
    }
    assert_int_equal(card_seconds(l), 3LL * IV_MAX + 500);
    long long rows = query_int(l, "SELECT count(*) FROM usage_intervals");
    assert_true(rows > IV_MAX && rows <= 2LL * IV_MAX + 500);
    assert_counts_match(l);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

/* ---- Points ------------------------------------------------------------------- */

static void test_points(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("batch-points");
    tally_batch *b;
    assert_int_equal(tally_batch_create(l, &b), TALLY_OK);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 5; i++) {
            char id[32];
            snprintf(id, sizeof id, "p-%d-%d", round, i);
            tally_event ev = instant(TALLY_METER_TRAFFIC, id, "internet", "egress", T0, 100);
            add(b, &ev);
        }
        char id[32];
        snprintf(id, sizeof id, "t-%d", round);
        tally_event tok = instant(TALLY_METER_TOKENS, id, "qwen-72b", "output", T0 + round, 4096);
        add(b, &tok);
        commit_ok(b, NULL);
    }
    assert_int_equal(query_int(l, "SELECT count(*) FROM usage_points"), 3);
    assert_int_equal(query_int(l, "SELECT qty FROM usage_points WHERE meter = 2"), 1000);
    assert_int_equal(query_int(l, "SELECT sum(qty) FROM usage_points WHERE meter = 3"), 8192);
    assert_int_equal(query_int(l, "SELECT seq FROM usage_points WHERE meter = 2"), 2);
    assert_counts_match(l);

    /* A sum that cannot fit is quarantined, not wrapped. */
    tally_event big = instant(TALLY_METER_TRAFFIC, "big-1", "internal", "ingress", T0, INT64_MAX);
    add(b, &big);
    big = instant(TALLY_METER_TRAFFIC, "big-2", "internal", "ingress", T0, 1);
    add(b, &big);
    tally_event_result r[2];
    commit_ok(b, r);
    assert_int_equal(r[0], TALLY_RESULT_ACCEPTED);
    assert_int_equal(r[1], TALLY_RESULT_QUARANTINED);
    assert_int_equal(query_int(l, "SELECT count(*) FROM quarantine WHERE reason = 'overflow'"), 1);
    /* Across commits too: quarantined, and the rest of the batch goes on
     * (this used to fail the whole batch, on every retry). */
    big = instant(TALLY_METER_TRAFFIC, "big-3", "internal", "ingress", T0, 5);
    add(b, &big);
    tally_event next = instant(TALLY_METER_TRAFFIC, "big-4", "internal", "ingress", T0 + 1, 5);
    add(b, &next);
    commit_ok(b, r);
    assert_int_equal(r[0], TALLY_RESULT_QUARANTINED);
    assert_int_equal(r[1], TALLY_RESULT_ACCEPTED);
    assert_int_equal(query_int(l, "SELECT count(*) FROM quarantine WHERE reason = 'overflow'"), 2);
    assert_int_equal(query_int(l, "SELECT qty FROM usage_points WHERE meter = 2 AND t_s = " T0_TEXT
                                  " AND dim = 'internal'"),
                     INT64_MAX);
    assert_counts_match(l);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

/* Issue 14 item 3: in-range traffic (at most 10^18 bytes an event) summed
 * per second in int64. Ten maximal events in one second, each in its own
 * commit as a Kafka partition would deliver them: nine are stored exactly,
 * the tenth is quarantined as "overflow" and never wraps, and each commit
 * goes on with the events after it. */
static void test_points_bound_across_commits(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("batch-points-bound");
    tally_batch *b;
    assert_int_equal(tally_batch_create(l, &b), TALLY_OK);
    for (int i = 0; i < 10; i++) {
        char id[32], id2[32];
        snprintf(id, sizeof id, "max-%d", i);
        snprintf(id2, sizeof id2, "tok-%d", i);
        tally_event ev =
            instant(TALLY_METER_TRAFFIC, id, "internet", "egress", T0, TALLY_BYTES_MAX);
        tally_event tok =
            instant(TALLY_METER_TOKENS, id2, "qwen-72b", "input", T0, TALLY_TOKENS_MAX);
        add(b, &ev);
        add(b, &tok);
        tally_event_result r[2];
        commit_ok(b, r);
        assert_int_equal(r[0], i < 9 ? TALLY_RESULT_ACCEPTED : TALLY_RESULT_QUARANTINED);
        assert_int_equal(r[1], TALLY_RESULT_ACCEPTED);
    }
    assert_int_equal(query_int(l, "SELECT qty FROM usage_points WHERE meter = 2"),
                     9 * TALLY_BYTES_MAX);
    assert_int_equal(query_int(l, "SELECT qty FROM usage_points WHERE meter = 3"),
                     10 * TALLY_TOKENS_MAX);
    assert_int_equal(query_int(l, "SELECT count(*) FROM quarantine WHERE reason = 'overflow' "
                                  "AND event_id = 'max-9'"),
                     1);
    assert_counts_match(l);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

/* ---- All or nothing ------------------------------------------------------------ */

static void test_rollback(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("batch-rollback");
    tally_batch *b;
    assert_int_equal(tally_batch_create(l, &b), TALLY_OK);
    tally_event a1 = accel("r1", "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0, 1, 1);
    add(b, &a1);
    commit_ok(b, NULL);

    /* Writing the batch's points fails after its interval was extended. */
    assert_int_equal(tally_ledger_exec(l, "CREATE TEMP TRIGGER boom BEFORE INSERT ON usage_points "
                                          "BEGIN SELECT RAISE(ABORT, 'injected'); END"),
                     TALLY_OK);
    tally_event a2 = accel("r2", "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0 + 1, 1, 1);
    tally_event p1 = instant(TALLY_METER_TRAFFIC, "r3", "internet", "egress", T0, 7);
    tally_reject rej = {"bad_json", "x"};
    add(b, &a2);
    add(b, &p1);
    assert_int_equal(tally_batch_add_reject(b, &rej, "x", 1, "file:r:1"), TALLY_OK);
    assert_int_equal(tally_batch_set_offset(b, "usage", 0, -1, 3), TALLY_OK);
    tally_batch_stats st = {9, 9, 9, 9};
    assert_int_equal(tally_batch_commit(b, &st, NULL), TALLY_DB);
    assert_non_null(strstr(tally_ledger_errmsg(l), "injected"));
    assert_int_equal(st.accepted + st.quarantined, 0);
    assert_int_equal(tally_batch_count(b), 0);
    assert_int_equal(query_int(l, "SELECT count(*) FROM dedupe_keys"), 1);
    assert_int_equal(query_int(l, "SELECT count(*) FROM quarantine"), 0);
    assert_int_equal(query_int(l, "SELECT count(*) FROM offsets"), 0);
    assert_int_equal(card_seconds(l), 1);
    assert_int_equal(query_int(l, "SELECT value FROM meta WHERE key = 'usage_seq'"), 1);
    assert_int_equal(tally_ledger_exec(l, "DROP TRIGGER temp.boom"), TALLY_OK);

    /* The next event after the failed one must not extend a row that the
     * rollback shortened: billed seconds stay exact. */
    tally_event a3 = accel("r4", "i-1", "h100", TALLY_PRICING_ON_DEMAND, T0 + 2, 1, 1);
    add(b, &a3);
    commit_ok(b, NULL);
    assert_int_equal(card_seconds(l), 2);
    /* The failed batch, sent again, is accepted in full. */
    add(b, &a2);
    add(b, &p1);
    st = commit_ok(b, NULL);
    assert_int_equal(st.accepted, 2);
    assert_int_equal(card_seconds(l), 3);
    assert_int_equal(query_int(l, "SELECT sum(qty) FROM usage_points"), 7);
    assert_counts_match(l);
    tu_assert_conservation(l);
    tally_batch_destroy(b);
    tally_ledger_close(l);
}

int main(void)
{
    setenv("TALLY_NOW", "2026-03-15T00:00:00Z", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accept_duplicate_conflict),
        cmocka_unit_test(test_duplicate_reserialised),
        cmocka_unit_test(test_card_quarantine),
        cmocka_unit_test(test_reject_once),
        cmocka_unit_test(test_reject_bounded),
        cmocka_unit_test(test_packed_strings),
        cmocka_unit_test(test_conflict_detail_utf8),
        cmocka_unit_test(test_origin_hash),
        cmocka_unit_test(test_offset_mark_and_gap),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_borrowed_events),
        cmocka_unit_test(test_raw_borrowed),
        cmocka_unit_test(test_queued_hashes),
        cmocka_unit_test(test_offsets_cas),
        cmocka_unit_test(test_coalesce_hour),
        cmocka_unit_test(test_coalesce_two_days),
        cmocka_unit_test(test_out_of_order),
        cmocka_unit_test(test_rows_edited_between_commits),
        cmocka_unit_test(test_eviction),
        cmocka_unit_test(test_points),
        cmocka_unit_test(test_points_bound_across_commits),
        cmocka_unit_test(test_rollback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
