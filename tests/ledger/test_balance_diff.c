/* Differential test of the prepaid balances (SPEC section 9, ledger/balance.c)
 * against the invoice engine.
 *
 * Each round builds a fresh ledger of a few hundred accounts (some in
 * Asia/Shanghai, America/New_York or Pacific/Auckland), with grants of every
 * kind (windows, scopes, priorities, expiries), limits and commitments, and
 * a random usage stream: accelerators on demand, on spot and reserved (with
 * and without commitments, overage), migration windows (insurance), runs
 * shorter than the minimum, storage, traffic and tokens, duplicates and
 * conflicts, and late events that arrive after their period was finalized
 * (among them events that join two short runs, so that the adjustment is
 * negative and can net an invoice below zero). The stream is fed through
 * the real ingest path (tally_ingest_message into tally_batch_commit) in
 * random batch sizes, through one batch for the round as a meter keeps one
 * (so its balance cache, ledger/balance_cache.c, lives from commit to
 * commit while everything below changes between them), the clock
 * (TALLY_NOW) moving through random instants.
 * At each, spot prices may change (also back-dated into finalized months),
 * prepaid top-ups and commitments are added, limits and time zones change,
 * and periods that ended are finalized (for all accounts at once, or for a
 * few, the rest later); at some of them invoices are voided and everything
 * is compared.
 *
 * At every finalization: the period leaves the running charges, and the
 * invoice equals what the running period showed just before (after a
 * sweep, as a read would show it) to the fen, subtotal, credits and amount
 * due, when it was the account's oldest open period. A period finalized
 * out of order, while an earlier one is open (a period that was run before
 * late usage reached it and is not run again), is compared by its charges:
 * late adjustments that the balance counted on the earlier open period, as
 * a draft of it shows them, are billed on this invoice instead, so the
 * running charges fall by exactly the invoice's subtotal; its credits are
 * not comparable (the earlier period's draft used the grants first).
 *
 * At every check (after tally_balance_sweep), for every account:
 *   1. Against a draft `tally_invoice_run` of each period from scratch, on
 *      the live ledger: the stored running periods are exactly the open
 *      periods up to the account's current one whose draft has anything to
 *      bill (a period with a zero subtotal may be absent: usage that costs
 *      nothing, or grants only); the oldest one equals its draft to the fen
 *      (subtotal, credits, amount due). A later open period equals its
 *      draft's subtotal minus the adjustment lines for finalized periods
 *      before the previous open period: a draft of every open period after
 *      a finalized one repeats that period's late adjustments, the balance
 *      counts them once, on the first open period after it. Credits of a
 *      later open period are not comparable with a separate draft: the
 *      balance applies credits period after period (each period sees what
 *      the earlier ones left of every grant), separate drafts each see the
 *      grants whole. That part is compared by 2.
 *   2. Against the sequential reference: a copy of the ledger (VACUUM INTO)
 *      in which the open periods are finalized oldest first (each account's
 *      up to its current period), each seeing what the earlier invoices
 *      used; each invoice so made must equal the stored running period
 *      (subtotal, credits, amount due), and what the account's unexpired
 *      grants hold afterwards must equal the stored credits_minor. Where the
 *      reference issued an `adjustment` credit (late adjustments netted a
 *      period below zero) the credits of the periods after it are not
 *      comparable (the balance keeps the negative subtotal in the running
 *      charges instead of a grant; the balance comes to the same unless
 *      grants expire in between), and only their subtotals are compared.
 *   3. running = the sum of the subtotals, covered = the sum of the credits,
 *      balance = credits - (running - covered), and the state is the one the
 *      limits give (ok for an account not under spend control).
 *   4. `tally verify` passes (at every other check and at the end of each
 *      round): among its checks, every stored balance equals
 *      its recomputation from scratch (ledger/verify_balance.c), so the
 *      balance kept incrementally and the one derived afresh agree.
 *
 * TALLY_BALDIFF_SEED=<n> reproduces a run (the seed is printed first, and
 * with every failure); TALLY_BALDIFF_ROUNDS and TALLY_BALDIFF_ACCOUNTS make
 * it bigger. */
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "tally/balance.h"
#include "tally/embed.h"
#include "tally/ingest.h"
#include "tally/invoice.h"
#include "tally/ledger_sql.h"
#include "tally/period.h"
#include "tally/sign.h"

#define DAY       86400
#define NP        6 /* the periods a round can touch */
#define NZ        4
#define STEPS_MAX 24 /* instants the clock moves to in a round */
#define CHECKS    4  /* of them, the ones where everything is compared */

static const char *const periods[NP] = {"2025-12", "2026-01", "2026-02",
                                        "2026-03", "2026-04", "2026-05"};
static const char *const zones[NZ] = {"UTC", "Asia/Shanghai", "America/New_York",
                                      "Pacific/Auckland"};

typedef struct sku_info {
    const char *sku;
    bool spot, reserved;
} sku_info;

static const sku_info skus[] = {
    {"a100-40g", false, true},   {"a100-80g", false, true},       {"h100", false, true},
    {"rtx4090", true, true},     {"tpu-v5e", true, false},        {"ascend-910b", true, false},
    {"tpu-v4-64", false, false}, {"cpu-container", false, false},
};
#define N_SKUS (sizeof skus / sizeof *skus)

static const char *const scopes[] = {
    "",
    "",
    "meter=accelerator",
    "sku=a100-40g|a100-80g|h100,pricing=reserved",
    "pricing=spot",
    "meter=storage|traffic",
    "meter=tokens",
    "sku=h100|rtx4090",
};
#define N_SCOPES (sizeof scopes / sizeof *scopes)

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rnext(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A number in [lo, hi]. */
static int64_t rin(rng *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rnext(r) % (uint64_t)(hi - lo + 1));
}

static bool chance(rng *r, int percent)
{
    return rin(r, 1, 100) <= percent;
}

typedef struct tacct {
    char id[32];
    int tz;
    bool has_commit[N_SKUS];
} tacct;

/* One account's period as something reports it. */
typedef struct cell {
    bool has, fin;
    int64_t sub, cred, due, issued;
} cell;

typedef struct stored {
    bool has;
    int64_t running, covered, credits, balance;
    char state[16];
} stored;

typedef struct qev {
    int64_t arrival, seq;
    char *json;
} qev;

typedef struct world {
    rng r;
    uint64_t seed;
    int round, stop;
    tally_ledger *l;
    tally_batch *batch; /* one for the round, as a meter keeps one: its balance cache lives on */
    char dir[512], db[600], key[600], copy[600];
    int64_t now;
    size_t n;
    tacct *a;
    cell (*rows)[NP];
    cell (*dr)[NP];
    cell (*sq)[NP];
    stored *bal;
    int64_t *sq_left;
    bool *sq_issued;
    int now_p[NZ]; /* the index of each zone's current period */
    qev *ev;
    size_t n_ev, cap_ev, next_ev;
    int64_t next_id;
    bool fin_all[NP];
    /* counts, printed at the end */
    int64_t n_events, n_batches, n_checks, n_cells, n_multi, n_adjusted, n_finalized, n_voided,
        n_seq, n_out_of_order, n_issued, n_issued_live, n_rezoned;
} world;

#define FAILW(w, ...)                                                                              \
    do {                                                                                           \
        char msg_[768];                                                                            \
        snprintf(msg_, sizeof msg_, __VA_ARGS__);                                                  \
        fail_msg("TALLY_BALDIFF_SEED=%" PRIu64 " round %d step %d: %s", (w)->seed, (w)->round,     \
                 (w)->stop, msg_);                                                                 \
    } while (0)

#define EQW(w, got, want, ...)                                                                     \
    do {                                                                                           \
        int64_t g_ = (got), w_ = (want);                                                           \
        if (g_ != w_) {                                                                            \
            char what_[384];                                                                       \
            snprintf(what_, sizeof what_, __VA_ARGS__);                                            \
            FAILW(w, "%s: %" PRId64 " != %" PRId64, what_, g_, w_);                                \
        }                                                                                          \
    } while (0)

static int64_t at(const char *s)
{
    int64_t t;
    assert_int_equal(tally_time_parse(s, strlen(s), &t), TALLY_OK);
    return t;
}

static void clock_at(world *w, int64_t t)
{
    char s[40];
    w->now = t;
    assert_int_equal(tally_time_format(t, s, sizeof s), TALLY_OK);
    setenv("TALLY_NOW", s, 1);
}

static int64_t num(const char *s)
{
    return s ? strtoll(s, NULL, 10) : 0;
}

/* An account's index from its id ("a00042"), or -1. */
static long acct_index(const world *w, const char *id)
{
    if (!id || id[0] != 'a')
        return -1;
    char *end;
    long i = strtol(id + 1, &end, 10);
    return *end || i < 0 || (size_t)i >= w->n ? -1 : i;
}

static int period_index(const char *p)
{
    for (int i = 0; i < NP; i++)
        if (p && strcmp(periods[i], p) == 0)
            return i;
    return -1;
}

/* Money as a decimal string in major units ("-1.25") to minor units (2 digits). */
static int64_t minor_of(const char *s)
{
    bool neg = *s == '-';
    int64_t v = 0;
    int frac = 0;
    bool in_frac = false;
    for (s += neg; *s; s++) {
        if (*s == '.') {
            in_frac = true;
            continue;
        }
        v = v * 10 + (*s - '0');
        frac += in_frac;
    }
    for (; frac < 2; frac++)
        v *= 10;
    return neg ? -v : v;
}

/* ---- The usage stream ------------------------------------------------------- */

static void push_event(world *w, int64_t arrival, const char *json)
{
    if (w->n_ev == w->cap_ev) {
        w->cap_ev = w->cap_ev ? w->cap_ev * 2 : 4096;
        w->ev = realloc(w->ev, w->cap_ev * sizeof *w->ev);
        assert_non_null(w->ev);
    }
    w->ev[w->n_ev].arrival = arrival;
    w->ev[w->n_ev].seq = (int64_t)w->n_ev;
    w->ev[w->n_ev].json = strdup(json);
    assert_non_null(w->ev[w->n_ev].json);
    w->n_ev++;
}

static int64_t usage_start, usage_end, stream_end;

/* When an event that ends at end_s reaches the ledger: soon, or (late)
 * weeks after, when its period may be finalized. */
static int64_t arrival_of(world *w, int64_t end_s)
{
    if (chance(&w->r, 8))
        return end_s + rin(&w->r, 15 * DAY, 45 * DAY);
    return end_s + rin(&w->r, 0, 7200);
}

/* Queues one event (and now and then a duplicate or a conflict of it). */
static void emit(world *w, const tacct *a, const char *type, int64_t t, int64_t seconds,
                 const char *data)
{
    char ts[40], json[1024];
    assert_int_equal(tally_time_format(t, ts, sizeof ts), TALLY_OK);
    int64_t id = ++w->next_id;
    snprintf(json, sizeof json,
             "{\"specversion\":\"1.0\",\"id\":\"e%" PRId64 "\",\"source\":\"host-%" PRId64
             "\",\"type\":\"%s\",\"subject\":\"%s\",\"time\":\"%s\",\"data\":%s}",
             id, id % 7, type, a->id, ts, data);
    int64_t arrival = arrival_of(w, t + seconds);
    push_event(w, arrival, json);
    if (chance(&w->r, 3)) /* the same event again: a duplicate, never billed twice */
        push_event(w, arrival + rin(&w->r, 0, 3 * DAY), json);
    if (chance(&w->r, 1)) { /* the same id, other content: a conflict, quarantined */
        char other[1100];
        snprintf(other, sizeof other,
                 "{\"specversion\":\"1.0\",\"id\":\"e%" PRId64 "\",\"source\":\"host-%" PRId64
                 "\",\"type\":\"tokens.usage\",\"subject\":\"%s\",\"time\":\"%s\",\"data\":{"
                 "\"model\":\"x\",\"kind\":\"input\",\"tokens\":999999}}",
                 id, id % 7, a->id, ts);
        push_event(w, arrival + rin(&w->r, 1, DAY), other);
    }
}

static void gen_accel(world *w, tacct *a, int s, bool short_run)
{
    size_t k = (size_t)rin(&w->r, 0, N_SKUS - 1);
    const char *pricing = "on_demand";
    if (a->has_commit[k] && chance(&w->r, 80))
        pricing = "reserved";
    else if (skus[k].spot && chance(&w->r, 60))
        pricing = "spot";
    else if (skus[k].reserved && chance(&w->r, 15))
        pricing = "reserved"; /* no commitment: all of it is overage */
    int64_t cards = chance(&w->r, 50) ? 1 : rin(&w->r, 1, 8);
    int64_t t = rin(&w->r, usage_start, usage_end);
    int segs = short_run ? 1 : (int)rin(&w->r, 1, 6);
    for (int i = 0; i < segs; i++) {
        int64_t secs = short_run ? rin(&w->r, 1, 59) : rin(&w->r, 1, 3600);
        if (t + secs > usage_end)
            break;
        char data[512];
        snprintf(data, sizeof data,
                 "{\"instance\":\"i-%s-%d\",\"sku\":\"%s\",\"pricing\":\"%s\",\"cards\":%" PRId64
                 ",\"seconds\":%" PRId64 ",\"migration\":%s}",
                 a->id, s, skus[k].sku, pricing, cards, secs, chance(&w->r, 10) ? "true" : "false");
        emit(w, a, "accelerator.usage", t, secs, data);
        int gap = (int)rin(&w->r, 1, 10);
        t += secs + (gap <= 7 ? 0 : gap <= 9 ? rin(&w->r, 1, 60) : rin(&w->r, 61, 4000));
    }
}

/* Two runs shorter than the minimum, each billed as the minimum, and a late
 * event that fills the gap between them: the one run they make bills less,
 * so the late adjustment is negative (and may net an invoice below zero,
 * which then issues an `adjustment` credit). */
static void gen_dissolve(world *w, tacct *a, int s)
{
    int64_t t = rin(&w->r, usage_start, usage_end - DAY);
    int64_t first = rin(&w->r, 5, 40), gap = rin(&w->r, 61, 120), second = rin(&w->r, 5, 40);
    const char *sku = skus[rin(&w->r, 0, N_SKUS - 1)].sku;
    char data[512];
    for (int i = 0; i < 3; i++) {
        int64_t at = i == 0 ? t : i == 1 ? t + first + gap : t + first;
        int64_t secs = i == 0 ? first : i == 1 ? second : gap;
        snprintf(data, sizeof data,
                 "{\"instance\":\"i-%s-%d\",\"sku\":\"%s\",\"pricing\":\"on_demand\","
                 "\"seconds\":%" PRId64 "}",
                 a->id, s, sku, secs);
        char ts[40], json[1024];
        assert_int_equal(tally_time_format(at, ts, sizeof ts), TALLY_OK);
        int64_t id = ++w->next_id;
        snprintf(json, sizeof json,
                 "{\"specversion\":\"1.0\",\"id\":\"e%" PRId64
                 "\",\"source\":\"host-9\",\"type\":\"accelerator.usage\",\"subject\":\"%s\","
                 "\"time\":\"%s\",\"data\":%s}",
                 id, a->id, ts, data);
        int64_t end = at + secs;
        push_event(w, i < 2 ? end + rin(&w->r, 0, 3600) : end + rin(&w->r, 15 * DAY, 45 * DAY),
                   json);
    }
}

static void gen_other(world *w, tacct *a, int s, int kind)
{
    int64_t t = rin(&w->r, usage_start, usage_end);
    int n = (int)rin(&w->r, 1, 3);
    for (int i = 0; i < n; i++) {
        char data[512];
        int64_t secs = 1;
        if (kind == 0) {
            secs = rin(&w->r, 3600, DAY);
            snprintf(data, sizeof data,
                     "{\"volume\":\"v-%s-%d\",\"class\":\"%s\",\"bytes\":%" PRId64
                     ",\"seconds\":%" PRId64 "}",
                     a->id, s, chance(&w->r, 70) ? "ssd" : "hdd",
                     rin(&w->r, 1, 2000) * (int64_t)1000000000, secs);
        } else if (kind == 1) {
            snprintf(
                data, sizeof data,
                "{\"resource\":\"r-%s\",\"direction\":\"%s\",\"scope\":\"%s\",\"bytes\":%" PRId64
                "}",
                a->id, chance(&w->r, 70) ? "egress" : "ingress",
                chance(&w->r, 70) ? "internet" : "internal", rin(&w->r, 0, 30000000000LL));
        } else {
            snprintf(data, sizeof data,
                     "{\"model\":\"m%d\",\"kind\":\"%s\",\"tokens\":%" PRId64 "}",
                     (int)rin(&w->r, 1, 2), chance(&w->r, 50) ? "input" : "output",
                     rin(&w->r, 0, 30000000));
        }
        if (t + secs > usage_end)
            break;
        static const char *const types[] = {"storage.usage", "traffic.usage", "tokens.usage"};
        emit(w, a, types[kind], t, secs, data);
        t += secs + (kind == 0 ? (chance(&w->r, 70) ? 0 : rin(&w->r, 1, DAY)) : rin(&w->r, 1, DAY));
    }
}

static void gen_usage(world *w, tacct *a)
{
    int sessions = (int)rin(&w->r, 1, 4);
    for (int s = 0; s < sessions; s++) {
        int kind = (int)rin(&w->r, 0, 10);
        if (kind <= 5)
            gen_accel(w, a, s, kind == 5);
        else if (kind == 10)
            gen_dissolve(w, a, s);
        else
            gen_other(w, a, s, kind - 6 > 2 ? 2 : kind - 6);
    }
}

static int ev_cmp(const void *x, const void *y)
{
    const qev *a = x, *b = y;
    if (a->arrival != b->arrival)
        return a->arrival < b->arrival ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* Everything that arrived by the clock, in random batch sizes. */
static void ingest_until(world *w, int64_t t)
{
    while (w->next_ev < w->n_ev && w->ev[w->next_ev].arrival <= t) {
        int pick = (int)rin(&w->r, 1, 10);
        int64_t size = pick <= 4   ? rin(&w->r, 1, 5)
                       : pick <= 8 ? rin(&w->r, 6, 60)
                                   : rin(&w->r, 61, 400);
        if (!w->batch)
            assert_int_equal(tally_batch_create(w->l, &w->batch), TALLY_OK);
        tally_batch *b = w->batch;
        for (int64_t i = 0; i < size && w->next_ev < w->n_ev && w->ev[w->next_ev].arrival <= t;
             i++) {
            const qev *q = &w->ev[w->next_ev++];
            char origin[64];
            tally_reject rej;
            snprintf(origin, sizeof origin, "test:%" PRId64, q->seq);
            assert_int_equal(
                tally_ingest_message(b, q->json, strlen(q->json), origin, w->now, &rej), TALLY_OK);
            if (rej.reason[0])
                FAILW(w, "event rejected: %s %s (%s)", rej.reason, rej.detail, q->json);
        }
        tally_batch_stats st;
        tally_err e = tally_batch_commit(b, &st, NULL);
        if (e)
            FAILW(w, "batch commit: %s (%s)", tally_err_str(e), tally_ledger_errmsg(w->l));
        if (st.quarantined)
            FAILW(w, "%" PRId64 " events quarantined", st.quarantined);
        w->n_events += st.accepted;
        w->n_batches++;
    }
}

/* ---- Configuration ------------------------------------------------------------ */

static void grant(world *w, const tacct *a, tally_grant_kind kind, int64_t amount, int64_t eff,
                  int64_t exp, const char *scope, int priority)
{
    tally_grant_spec g = {.account = a->id,
                          .kind = kind,
                          .amount_minor = amount,
                          .priority = priority,
                          .effective_s = eff,
                          .expires_s = exp,
                          .scope = scope};
    char why[256] = "";
    int64_t id;
    tally_err e = tally_ledger_grant_add(w->l, &g, &id, why, sizeof why);
    if (e)
        FAILW(w, "grant for %s: %s (%s)", a->id, tally_err_str(e), why);
}

static void random_grant(world *w, const tacct *a, int64_t around)
{
    static const tally_grant_kind kinds[] = {TALLY_GRANT_TRIAL, TALLY_GRANT_COUPON,
                                             TALLY_GRANT_PREPAID, TALLY_GRANT_INSURANCE,
                                             TALLY_GRANT_GOODWILL};
    int64_t eff = around - rin(&w->r, 0, 20 * DAY);
    int64_t exp = chance(&w->r, 40) ? TALLY_TIME_MAX : eff + rin(&w->r, 3 * DAY, 60 * DAY);
    grant(w, a, kinds[rin(&w->r, 0, 4)], rin(&w->r, 20, 8000), eff, exp,
          scopes[rin(&w->r, 0, N_SCOPES - 1)], (int)rin(&w->r, 5, 90));
}

static void random_limits(world *w, const tacct *a)
{
    int64_t stop = chance(&w->r, 70) ? 0 : -rin(&w->r, 1, 2000);
    int64_t low = stop + rin(&w->r, 1, 3000);
    int64_t release = rin(&w->r, 0, 20) * DAY;
    tally_limits_change c = {.stop_at_minor = &stop, .release_after_s = &release};
    if (chance(&w->r, 70))
        c.low_minor = &low;
    else
        c.clear_low = true;
    char why[256] = "";
    tally_err e = tally_limits_set(w->l, a->id, &c, why, sizeof why);
    if (e)
        FAILW(w, "limits for %s: %s (%s)", a->id, tally_err_str(e), why);
}

static void random_commitment(world *w, tacct *a, int64_t around)
{
    size_t k;
    do
        k = (size_t)rin(&w->r, 0, N_SKUS - 1);
    while (!skus[k].reserved);
    int64_t from = around + rin(&w->r, -10 * DAY, 10 * DAY);
    from -= from % 3600;
    if (from < usage_start) /* the rate card's reserved prices start then */
        from = usage_start;
    int64_t to = from + rin(&w->r, 1, 40) * DAY + rin(&w->r, 0, 23) * 3600;
    tally_err e =
        tally_ledger_commit_add(w->l, a->id, skus[k].sku, rin(&w->r, 1, 3), from, to, NULL);
    if (e)
        FAILW(w, "commitment for %s: %s (%s)", a->id, tally_err_str(e), tally_ledger_errmsg(w->l));
    a->has_commit[k] = true;
}

/* A new time zone, which an account without invoices may take: its
 * periods are found again. */
static void random_rezone(world *w, tacct *a)
{
    int tz = (int)rin(&w->r, 0, NZ - 1);
    tally_err e = tally_ledger_account_set(w->l, a->id, NULL, zones[tz], NULL);
    if (e == TALLY_FINALIZED)
        return;
    if (e)
        FAILW(w, "time zone of %s: %s (%s)", a->id, tally_err_str(e), tally_ledger_errmsg(w->l));
    a->tz = tz;
    w->n_rezoned++;
}

static void random_spot(world *w)
{
    static const char *const spot_skus[] = {"rtx4090", "tpu-v5e", "ascend-910b"};
    int64_t from = w->now - rin(&w->r, 0, 40 * DAY);
    from -= from % 60;
    if (from < usage_start)
        from = usage_start;
    tally_err e = tally_ledger_spot_set(w->l, spot_skus[rin(&w->r, 0, 2)],
                                        rin(&w->r, 30, 120) * 10000000LL, from);
    if (e)
        FAILW(w, "spot: %s (%s)", tally_err_str(e), tally_ledger_errmsg(w->l));
}

/* ---- Reading what is stored ----------------------------------------------------- */

static tally_err row_running(void *ctx, int n, const char *const *c)
{
    world *w = ctx;
    (void)n;
    long i = acct_index(w, c[0]);
    int p = period_index(c[1]);
    if (i < 0 || p < 0)
        FAILW(w, "running period of an unknown account or period: %s %s", c[0], c[1]);
    w->rows[i][p] = (cell){.has = true, .sub = num(c[2]), .cred = num(c[3]), .due = num(c[4])};
    return TALLY_OK;
}

static tally_err row_balance(void *ctx, int n, const char *const *c)
{
    world *w = ctx;
    (void)n;
    long i = acct_index(w, c[0]);
    if (i < 0)
        FAILW(w, "balance of an unknown account %s", c[0]);
    stored *s = &w->bal[i];
    *s = (stored){.has = true,
                  .running = num(c[1]),
                  .covered = num(c[2]),
                  .credits = num(c[3]),
                  .balance = num(c[4])};
    snprintf(s->state, sizeof s->state, "%s", c[5]);
    return TALLY_OK;
}

static void load_stored(world *w)
{
    memset(w->rows, 0, w->n * sizeof *w->rows);
    memset(w->bal, 0, w->n * sizeof *w->bal);
    assert_int_equal(tally_ledger_query(w->l,
                                        "SELECT account, period, subtotal_minor, credits_minor, "
                                        "due_minor FROM running_periods",
                                        NULL, 0, row_running, w),
                     TALLY_OK);
    assert_int_equal(tally_ledger_query(w->l,
                                        "SELECT account, running_minor, covered_minor, "
                                        "credits_minor, balance_minor, state FROM account_balances",
                                        NULL, 0, row_balance, w),
                     TALLY_OK);
}

/* Invoice runs, collecting what each account's invoice or draft shows. */
typedef struct collect {
    world *w;
    cell (*into)[NP];
    int p;
} collect;

static void on_invoice(void *ctx, const tally_invoice_summary *s)
{
    collect *c = ctx;
    long i = acct_index(c->w, s->account);
    if (i < 0)
        return;
    c->into[i][c->p] = (cell){.has = true,
                              .fin = s->already_finalized,
                              .sub = s->subtotal_minor,
                              .cred = s->credits_minor,
                              .due = s->amount_due_minor,
                              .issued = s->credit_issued_minor};
}

static void run(world *w, tally_ledger *l, int p, bool finalize, const char *account,
                cell (*into)[NP])
{
    collect c = {w, into, p};
    tally_invoice_run_opts o = {.period = periods[p],
                                .finalize = finalize,
                                .account = account,
                                .key_path = w->key,
                                .on_invoice = on_invoice,
                                .ctx = &c};
    char why[512] = "";
    tally_err e = tally_invoice_run(l, &o, why, sizeof why);
    if (e)
        FAILW(w, "invoice run %s%s: %s (%s)", periods[p], finalize ? " --finalize" : "",
              tally_err_str(e), why);
}

/* The index of each zone's current period. */
static void zone_periods(world *w)
{
    for (int z = 0; z < NZ; z++) {
        char p[8];
        assert_int_equal(tally_period_of(zones[z], w->now, p, sizeof p), TALLY_OK);
        w->now_p[z] = period_index(p);
        assert_true(w->now_p[z] >= 0);
    }
}

/* ---- Finalizing and voiding mid-stream -------------------------------------------- */

static int64_t running_total(const cell *rows)
{
    int64_t t = 0;
    for (int q = 0; q < NP; q++)
        t += rows[q].sub;
    return t;
}

/* Finalizes period p (for every account, or for one) and asserts that each
 * invoice equals what its running period showed just before: all of it when
 * p was the account's oldest open period. When an earlier period is still
 * open (finalized out of order: a period run before late usage reached it,
 * and not run again), late adjustments that the balance counted on the
 * earlier period, as a draft of it shows them, go on this invoice instead;
 * then the charges are conserved: the invoice takes from the running
 * charges exactly its subtotal. */
static void finalize_checked(world *w, int p, const char *account)
{
    int64_t n = 0; /* what a read would show: the accounts due a refresh refreshed */
    assert_int_equal(tally_balance_sweep(w->l, w->now, &n), TALLY_OK);
    load_stored(w);
    cell(*before)[NP] = malloc(w->n * sizeof *before);
    assert_non_null(before);
    memcpy(before, w->rows, w->n * sizeof *before);
    cell(*inv)[NP] = calloc(w->n, sizeof *inv);
    assert_non_null(inv);
    run(w, w->l, p, true, account, inv);
    load_stored(w);
    for (size_t i = 0; i < w->n; i++) {
        const cell *v = &inv[i][p], *b = &before[i][p];
        const char *id = w->a[i].id;
        if (!v->has || v->fin) {
            EQW(w, running_total(w->rows[i]), running_total(before[i]),
                "%s: running charges changed by a run that did not finalize it", id);
            continue;
        }
        if (w->rows[i][p].has)
            FAILW(w, "%s %s is finalized but still in the running charges", id, periods[p]);
        w->n_finalized++;
        w->n_issued_live += v->issued > 0;
        EQW(w, running_total(w->rows[i]) + v->sub, running_total(before[i]),
            "%s %s: running charges after + the invoice vs running charges before", id, periods[p]);
        bool oldest = true;
        for (int q = 0; q < p; q++)
            oldest &= !before[i][q].has;
        if (!oldest) {
            w->n_out_of_order++;
            continue;
        }
        EQW(w, v->sub, b->has ? b->sub : 0, "%s %s: finalized subtotal vs running", id, periods[p]);
        EQW(w, v->cred, b->has ? b->cred : 0, "%s %s: finalized credits vs running", id,
            periods[p]);
        EQW(w, v->due, b->has ? b->due : 0, "%s %s: finalized amount due vs running", id,
            periods[p]);
    }
    free(before);
    free(inv);
}

static void finalize_due(world *w)
{
    for (int p = 0; p < NP; p++) {
        int64_t end = 0;
        for (int z = 0; z < NZ; z++) {
            int64_t s, e;
            assert_int_equal(tally_period_bounds(periods[p], zones[z], &s, &e), TALLY_OK);
            end = e > end ? e : end;
        }
        if (w->fin_all[p] || end + DAY > w->now)
            continue;
        if (chance(&w->r, 60)) {
            finalize_checked(w, p, NULL);
            w->fin_all[p] = true;
        } else { /* a few accounts now, the rest at a later stop */
            int k = (int)rin(&w->r, 1, 4);
            for (int j = 0; j < k; j++)
                finalize_checked(w, p, w->a[rin(&w->r, 0, (int64_t)w->n - 1)].id);
        }
    }
}

typedef struct live_list {
    char (*id)[80];
    int *p;
    size_t n, cap;
} live_list;

static tally_err row_live(void *ctx, int n, const char *const *c)
{
    live_list *v = ctx;
    (void)n;
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 256;
        v->id = realloc(v->id, v->cap * sizeof *v->id);
        v->p = realloc(v->p, v->cap * sizeof *v->p);
        assert_true(v->id && v->p);
    }
    snprintf(v->id[v->n], sizeof v->id[v->n], "%s", c[0]);
    v->p[v->n++] = period_index(c[1]);
    return TALLY_OK;
}

static void void_some(world *w)
{
    if (!chance(&w->r, 60))
        return;
    live_list v = {0};
    assert_int_equal(tally_ledger_query(w->l,
                                        "SELECT i.id, i.period FROM invoices i WHERE "
                                        "i.doc_type = 'invoice' AND NOT EXISTS (SELECT 1 FROM "
                                        "invoices c WHERE c.refers_to = i.id) ORDER BY i.seq",
                                        NULL, 0, row_live, &v),
                     TALLY_OK);
    size_t k = v.n ? (size_t)rin(&w->r, 1, (int64_t)(v.n / 40 + 1)) : 0;
    for (size_t j = 0; j < k; j++) {
        size_t x = (size_t)rin(&w->r, 0, (int64_t)v.n - 1);
        char cn[80];
        tally_err e = tally_invoice_void(w->l, v.id[x], "test", w->key, cn, sizeof cn);
        if (e == TALLY_FINALIZED) /* voided already, or its adjustment credit is spent */
            continue;
        if (e)
            FAILW(w, "void %s: %s (%s)", v.id[x], tally_err_str(e), tally_ledger_errmsg(w->l));
        w->n_voided++;
        if (v.p[x] >= 0)
            w->fin_all[v.p[x]] = false;
    }
    free(v.id);
    free(v.p);
}

/* ---- The comparisons --------------------------------------------------------------- */

/* The sum of the adjustment lines of a draft for periods before `before`. */
static int64_t repeated_adjustments(world *w, const char *account, int p, int before)
{
    char id[96];
    snprintf(id, sizeof id, "draft:%s:%s", account, periods[p]);
    tally_buf doc;
    tally_buf_init(&doc, 0);
    assert_int_equal(tally_invoice_show(w->l, id, TALLY_FORMAT_JSON, &doc), TALLY_OK);
    json_object *o = json_tokener_parse(doc.data), *lines;
    assert_non_null(o);
    assert_true(json_object_object_get_ex(o, "lines", &lines));
    int64_t sum = 0;
    for (size_t i = 0; i < json_object_array_length(lines); i++) {
        json_object *ln = json_object_array_get_idx(lines, i), *k, *op, *amt;
        if (!json_object_object_get_ex(ln, "kind", &k) ||
            strcmp(json_object_get_string(k), "adjustment") != 0 ||
            !json_object_object_get_ex(ln, "original_period", &op) ||
            !json_object_object_get_ex(ln, "amount", &amt))
            continue;
        if (strcmp(json_object_get_string(op), periods[before]) < 0)
            sum += minor_of(json_object_get_string(amt));
    }
    json_object_put(o);
    tally_buf_release(&doc);
    return sum;
}

/* 1. Against drafts of each period from scratch. */
static void compare_drafts(world *w)
{
    memset(w->dr, 0, w->n * sizeof *w->dr);
    int max_p = 0;
    for (int z = 0; z < NZ; z++)
        max_p = w->now_p[z] > max_p ? w->now_p[z] : max_p;
    for (int p = 0; p <= max_p; p++)
        run(w, w->l, p, false, NULL, w->dr);
    for (size_t i = 0; i < w->n; i++) {
        const char *id = w->a[i].id;
        int prev = -1, open = 0;
        for (int p = 0; p < NP; p++) {
            const cell *s = &w->rows[i][p], *d = &w->dr[i][p];
            if (p > w->now_p[w->a[i].tz]) {
                if (s->has)
                    FAILW(w, "%s: running charges for %s, after the current period", id,
                          periods[p]);
                continue;
            }
            if (!s->has) {
                /* a draft that only repeats adjustments counted earlier */
                int64_t rep = d->has && !d->fin && d->sub != 0 && prev >= 0
                                  ? repeated_adjustments(w, id, p, prev)
                                  : 0;
                if (d->has && !d->fin && d->sub - rep != 0)
                    FAILW(w, "%s %s: the draft bills %" PRId64 " but there is no running period",
                          id, periods[p], d->sub - rep);
                continue;
            }
            if (!d->has || d->fin)
                FAILW(w, "%s %s: a running period, but the draft %s", id, periods[p],
                      d->has ? "is finalized" : "has nothing");
            w->n_cells++;
            open++;
            if (prev < 0) {
                EQW(w, s->sub, d->sub, "%s %s: running subtotal vs draft", id, periods[p]);
                EQW(w, s->cred, d->cred, "%s %s: running credits vs draft", id, periods[p]);
                EQW(w, s->due, d->due, "%s %s: running amount due vs draft", id, periods[p]);
            } else if (s->sub != d->sub) {
                int64_t rep = repeated_adjustments(w, id, p, prev);
                w->n_adjusted++;
                EQW(w, s->sub, d->sub - rep,
                    "%s %s: running subtotal vs draft less the adjustments counted on %s", id,
                    periods[p], periods[prev]);
            }
            prev = p;
        }
        if (open > 1)
            w->n_multi++;
    }
}

typedef struct left_ctx {
    world *w;
} left_ctx;

static tally_err row_left(void *ctx, int n, const char *const *c)
{
    world *w = ctx;
    (void)n;
    long i = acct_index(w, c[0]);
    if (i >= 0)
        w->sq_left[i] = num(c[1]);
    return TALLY_OK;
}

/* 2. Against the sequential reference in a copy of the ledger. */
static void compare_sequential(world *w)
{
    unlink(w->copy);
    char sql[700];
    snprintf(sql, sizeof sql, "VACUUM INTO '%s'", w->copy);
    assert_int_equal(tally_ledger_exec(w->l, sql), TALLY_OK);
    tally_ledger *c = NULL;
    char why[256] = "";
    setenv("TALLY_NO_BALANCES", "1", 1); /* the copy's own balances are not looked at */
    tally_err e = tally_ledger_open(w->copy, &c, why, sizeof why);
    unsetenv("TALLY_NO_BALANCES");
    if (e)
        FAILW(w, "open the copy: %s", why);
    assert_int_equal(tally_ledger_exec(c, "PRAGMA synchronous=OFF"), TALLY_OK);
    memset(w->sq, 0, w->n * sizeof *w->sq);
    memset(w->sq_left, 0, w->n * sizeof *w->sq_left);
    memset(w->sq_issued, 0, w->n * sizeof *w->sq_issued);
    int min_p = NP, max_p = 0;
    for (int z = 0; z < NZ; z++) {
        min_p = w->now_p[z] < min_p ? w->now_p[z] : min_p;
        max_p = w->now_p[z] > max_p ? w->now_p[z] : max_p;
    }
    for (int p = 0; p <= max_p; p++) {
        if (p <= min_p) {
            run(w, c, p, true, NULL, w->sq);
            continue;
        }
        for (size_t i = 0; i < w->n; i++)
            if (w->now_p[w->a[i].tz] >= p)
                run(w, c, p, true, w->a[i].id, w->sq);
    }
    char now[32];
    snprintf(now, sizeof now, "%" PRId64, w->now);
    const char *params[] = {now};
    assert_int_equal(tally_ledger_query(c,
                                        "SELECT g.account, sum(max(0, coalesce((SELECT "
                                        "b.credit_minor - b.debit_minor FROM balances b WHERE "
                                        "b.ledger_acct = 'grant:' || g.id AND b.currency = "
                                        "g.currency), 0))) FROM grants g WHERE g.expires_s IS "
                                        "NULL OR g.expires_s > CAST(?1 AS INTEGER) GROUP BY "
                                        "g.account",
                                        params, 1, row_left, w),
                     TALLY_OK);
    tally_ledger_close(c);
    for (size_t i = 0; i < w->n; i++) {
        const char *id = w->a[i].id;
        bool issued = false;
        for (int p = 0; p <= w->now_p[w->a[i].tz]; p++) {
            const cell *s = &w->rows[i][p], *q = &w->sq[i][p];
            if (q->has && !q->fin)
                w->n_seq++;
            if (!s->has) {
                if (q->has && !q->fin && (q->sub != 0 || (!issued && q->cred != 0)))
                    FAILW(w,
                          "%s %s: the reference bills %" PRId64 " (credits %" PRId64
                          ") but there is no running period",
                          id, periods[p], q->sub, q->cred);
            } else {
                if (!q->has || q->fin)
                    FAILW(w, "%s %s: running, but the reference has no invoice", id, periods[p]);
                EQW(w, s->sub, q->sub, "%s %s: running subtotal vs the reference", id, periods[p]);
                if (!issued) {
                    EQW(w, s->cred, q->cred, "%s %s: running credits vs the reference", id,
                        periods[p]);
                    EQW(w, s->due, q->due, "%s %s: running amount due vs the reference", id,
                        periods[p]);
                }
            }
            issued |= q->has && !q->fin && q->issued > 0;
        }
        w->sq_issued[i] = issued;
        w->n_issued += issued;
        if (w->bal[i].has && !issued)
            EQW(w, w->bal[i].credits, w->sq_left[i],
                "%s: stored credits vs what the reference's grants hold", id);
    }
}

typedef struct ctl_ctx {
    world *w;
    bool *controlled;
    bool *has_low;
    int64_t *low, *stop;
} ctl_ctx;

static tally_err row_ctl(void *ctx, int n, const char *const *c)
{
    ctl_ctx *x = ctx;
    (void)n;
    long i = acct_index(x->w, c[0]);
    if (i < 0)
        return TALLY_OK;
    x->controlled[i] = num(c[1]) != 0;
    x->has_low[i] = c[2] != NULL;
    x->low[i] = num(c[2]);
    x->stop[i] = num(c[3]);
    return TALLY_OK;
}

/* 3. The account's totals and state. */
static void compare_totals(world *w)
{
    bool *controlled = calloc(w->n, sizeof *controlled), *has_low = calloc(w->n, 1);
    int64_t *low = calloc(w->n, sizeof *low), *stop = calloc(w->n, sizeof *stop);
    assert_true(controlled && has_low && low && stop);
    ctl_ctx x = {w, controlled, has_low, low, stop};
    assert_int_equal(tally_ledger_query(w->l,
                                        "SELECT a.id, EXISTS (SELECT 1 FROM grants g WHERE "
                                        "g.account = a.id AND g.kind != 'adjustment') OR "
                                        "EXISTS (SELECT 1 FROM account_limits m WHERE m.account "
                                        "= a.id), (SELECT low_balance_minor FROM account_limits m "
                                        "WHERE m.account = a.id), coalesce((SELECT stop_at_minor "
                                        "FROM account_limits m WHERE m.account = a.id), 0) FROM "
                                        "accounts a",
                                        NULL, 0, row_ctl, &x),
                     TALLY_OK);
    for (size_t i = 0; i < w->n; i++) {
        const stored *b = &w->bal[i];
        const char *id = w->a[i].id;
        int64_t run_sum = 0, cov_sum = 0;
        for (int p = 0; p < NP; p++) {
            run_sum += w->rows[i][p].sub;
            cov_sum += w->rows[i][p].cred;
        }
        if (!b->has) {
            if (run_sum)
                FAILW(w, "%s: running periods but no balance", id);
            continue;
        }
        EQW(w, b->running, run_sum, "%s: running_minor vs the running periods", id);
        EQW(w, b->covered, cov_sum, "%s: covered_minor vs the running periods", id);
        EQW(w, b->balance, b->credits - (b->running - b->covered), "%s: balance_minor", id);
        const char *want = !controlled[i]                      ? "ok"
                           : b->balance <= stop[i]             ? "exhausted"
                           : has_low[i] && b->balance < low[i] ? "low"
                                                               : "ok";
        if (strcmp(b->state, want) != 0)
            FAILW(w, "%s: state %s, balance %" PRId64 " wants %s", id, b->state, b->balance, want);
    }
    free(controlled);
    free(has_low);
    free(low);
    free(stop);
}

static void check(world *w)
{
    int64_t n = 0;
    assert_int_equal(tally_balance_sweep(w->l, w->now, &n), TALLY_OK);
    zone_periods(w);
    load_stored(w);
    compare_totals(w);
    compare_drafts(w);
    compare_sequential(w);
    /* and what tally verify recomputes (ledger/verify_balance.c) agrees:
     * at every other check, and at the end of the round, for time */
    char why[512] = "";
    if (w->n_checks % 2 && tally_ledger_verify(w->l, w->key, why, sizeof why) != TALLY_OK)
        FAILW(w, "verify: %s", why);
    w->n_checks++;
}

/* ---- A round ---------------------------------------------------------------------- */

static void round_setup(world *w, size_t n_accounts)
{
    snprintf(w->dir, sizeof w->dir, "%s", tu_tmpdir("baldiff"));
    snprintf(w->db, sizeof w->db, "%s/t.db", w->dir);
    snprintf(w->key, sizeof w->key, "%s/t.key", w->dir);
    snprintf(w->copy, sizeof w->copy, "%s/copy.db", w->dir);
    clock_at(w, at("2025-12-15T00:00:00Z"));
    w->l = tu_open_priced(w->db);
    assert_int_equal(tally_keygen(w->key, 0), TALLY_OK);
    /* What is compared does not depend on durability: no fsync per write. */
    assert_int_equal(tally_ledger_exec(w->l, "PRAGMA synchronous=OFF"), TALLY_OK);
    w->n = n_accounts;
    w->a = calloc(w->n, sizeof *w->a);
    w->rows = calloc(w->n, sizeof *w->rows);
    w->dr = calloc(w->n, sizeof *w->dr);
    w->sq = calloc(w->n, sizeof *w->sq);
    w->bal = calloc(w->n, sizeof *w->bal);
    w->sq_left = calloc(w->n, sizeof *w->sq_left);
    w->sq_issued = calloc(w->n, sizeof *w->sq_issued);
    assert_true(w->a && w->rows && w->dr && w->sq && w->bal && w->sq_left && w->sq_issued);
    for (size_t i = 0; i < w->n; i++) {
        tacct *a = &w->a[i];
        snprintf(a->id, sizeof a->id, "a%05zu", i);
        a->tz = chance(&w->r, 55) ? 0 : (int)rin(&w->r, 1, NZ - 1);
        assert_int_equal(tally_ledger_account_set(w->l, a->id, NULL, zones[a->tz], NULL), TALLY_OK);
        int grants = (int)rin(&w->r, 0, 3);
        for (int g = 0; g < grants; g++)
            random_grant(w, a, rin(&w->r, usage_start, usage_start + 40 * DAY));
        if (chance(&w->r, 20))
            random_limits(w, a);
        if (chance(&w->r, 15))
            random_commitment(w, a, rin(&w->r, usage_start, usage_end));
        gen_usage(w, a);
    }
    qsort(w->ev, w->n_ev, sizeof *w->ev, ev_cmp);
    w->next_ev = 0;
    memset(w->fin_all, 0, sizeof w->fin_all);
}

static void round_teardown(world *w)
{
    tally_batch_destroy(w->batch);
    w->batch = NULL;
    tu_assert_conservation(w->l);
    char why[512] = "";
    if (tally_ledger_verify(w->l, w->key, why, sizeof why) != TALLY_OK)
        FAILW(w, "verify: %s", why);
    tally_ledger_close(w->l);
    w->l = NULL;
    /* passed: the round's ledger and its copy (some 20 MB) go; a failure
     * keeps them for a look */
    assert_int_equal(tu_sh(NULL, "rm -rf '%s'", w->dir), 0);
    for (size_t i = 0; i < w->n_ev; i++)
        free(w->ev[i].json);
    free(w->ev);
    w->ev = NULL;
    w->n_ev = w->cap_ev = 0;
    free(w->a);
    free(w->rows);
    free(w->dr);
    free(w->sq);
    free(w->bal);
    free(w->sq_left);
    free(w->sq_issued);
}

static int i64_cmp(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* The clock moves through STEPS_MAX random instants; at each the usage that
 * arrived by then is ingested, prices, grants, commitments and limits may
 * change and due periods are finalized; at CHECKS of them (the last among
 * them) invoices are voided and everything is compared. */
static void one_round(world *w, size_t n_accounts)
{
    round_setup(w, n_accounts);
    int64_t steps[STEPS_MAX];
    bool checked[STEPS_MAX] = {false};
    for (int s = 0; s < STEPS_MAX; s++)
        steps[s] = rin(&w->r, usage_start + 5 * DAY, stream_end);
    qsort(steps, STEPS_MAX, sizeof *steps, i64_cmp);
    for (int k = 0; k < CHECKS - 1; k++)
        checked[rin(&w->r, 0, STEPS_MAX - 2)] = true;
    checked[STEPS_MAX - 1] = true;
    for (w->stop = 0; w->stop < STEPS_MAX; w->stop++) {
        clock_at(w, steps[w->stop]);
        ingest_until(w, w->now);
        if (chance(&w->r, 25))
            random_spot(w);
        for (int k = (int)rin(&w->r, 0, (int64_t)w->n / 150); k > 0; k--)
            grant(w, &w->a[rin(&w->r, 0, (int64_t)w->n - 1)], TALLY_GRANT_PREPAID,
                  rin(&w->r, 100, 5000), w->now,
                  chance(&w->r, 50) ? TALLY_TIME_MAX : w->now + 30 * DAY, "",
                  (int)rin(&w->r, 10, 90));
        if (chance(&w->r, 30))
            random_commitment(w, &w->a[rin(&w->r, 0, (int64_t)w->n - 1)], w->now);
        if (chance(&w->r, 30))
            random_limits(w, &w->a[rin(&w->r, 0, (int64_t)w->n - 1)]);
        if (chance(&w->r, 30))
            random_rezone(w, &w->a[rin(&w->r, 0, (int64_t)w->n - 1)]);
        finalize_due(w);
        if (!checked[w->stop])
            continue;
        void_some(w);
        check(w);
    }
    round_teardown(w);
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *s = getenv(name);
    return s && *s ? strtoull(s, NULL, 10) : dflt;
}

static void test_balance_differential(void **state)
{
    (void)state;
    usage_start = at("2026-01-01T00:00:00Z");
    usage_end = at("2026-03-31T00:00:00Z");
    stream_end = at("2026-04-06T00:00:00Z");
    world w = {0};
    w.seed = env_u64("TALLY_BALDIFF_SEED", (uint64_t)time(NULL));
    uint64_t rounds = env_u64("TALLY_BALDIFF_ROUNDS", 4);
    uint64_t accounts = env_u64("TALLY_BALDIFF_ACCOUNTS", 500);
    print_message("TALLY_BALDIFF_SEED=%" PRIu64 " (%" PRIu64 " rounds of %" PRIu64 " accounts)\n",
                  w.seed, rounds, accounts);
    for (w.round = 0; (uint64_t)w.round < rounds; w.round++) {
        w.r.s = w.seed * 1000003ULL + (uint64_t)w.round;
        w.next_id = 0;
        one_round(&w, (size_t)accounts);
    }
    print_message(
        "%" PRId64 " events in %" PRId64 " batches, %" PRId64 " checks, %" PRId64
        " running periods compared (%" PRId64 " in the reference), %" PRId64
        " accounts with several open periods, %" PRId64 " with repeated adjustments, "
        "%" PRId64 " invoices finalized against their running period (%" PRId64
        " out of order, %" PRId64 " issuing an adjustment credit), %" PRId64 " voided, %" PRId64
        " account checks after a credit the reference issued, %" PRId64 " time zones changed\n",
        w.n_events, w.n_batches, w.n_checks, w.n_cells, w.n_seq, w.n_multi, w.n_adjusted,
        w.n_finalized, w.n_out_of_order, w.n_issued_live, w.n_voided, w.n_issued, w.n_rezoned);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_balance_differential),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
