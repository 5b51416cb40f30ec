/* Refreshing one account's prepaid balance inside the caller's transaction
 * (include/tally/balance.h, schemas/012_balance.sql).
 *
 * The running charges are what a draft `invoice run` of each period not yet
 * finalized shows, computed by the same code: inv_gather, inv_adjustments
 * and tally_rate_period. The periods are the ones running_periods already
 * holds for the account, the ones the caller just wrote usage into, those
 * of its commitments up to the current period (a commitment bills each
 * period it overlaps in full, from the period's start; the next one joins
 * when the clock reaches it: the account's next check) and,
 * for usage that arrived for a finalized period, the first period after it
 * not finalized (its draft shows the adjustment lines, and its invoice,
 * finalized next, bills them; that period may have no usage of its own).
 * They are rated oldest first:
 *   - adjustments for a finalized period are counted on the first open
 *     period after it only (a draft of each later period would repeat them);
 *     a period finalized out of order, while an earlier one is open, bills
 *     them instead, and they leave the earlier one then;
 *   - credits are applied period after period, each period's draft seeing
 *     what the earlier ones left of every grant.
 * credits = what the account's unexpired grants hold, less what the drafts
 * use of them; balance = credits - (running - covered).
 *
 * The burn rate is the rating of the TALLY_BALANCE_WINDOW_S seconds before
 * the account's latest usage (event time, so a replayed stream gives the
 * same answer), with its commitments and no credits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"
#include "tally/balance.h"
#include "tally/money.h"
#include "tally/outbox.h"

#define BAL_PERIODS_MAX 64 /* open periods tracked per account */

typedef struct bal_used {
    int64_t grant_id, used_minor;
} bal_used;

struct bal_engine {
    tally_ledger *l;
    int64_t now_s; /* the one instant a refresh sees (tally_now_s at its start) */
    inv_gatherer *g;
    inv_input in, scratch;
    tally_line *extra;
    size_t n_extra, cap_extra;
    tally_interval *burn_iv; /* the burn window's usage (burn) */
    size_t cap_burn_iv;
    tally_point *burn_pt;
    size_t cap_burn_pt;
    bal_used *used;
    size_t n_used, cap_used;
    bal_period periods[BAL_PERIODS_MAX];
    size_t n_periods;
    bal_period stored[BAL_PERIODS_MAX]; /* the running periods stored before this refresh */
    size_t n_stored;
    const tally_interval **res; /* list_resources' working memory */
    size_t cap_res;
    tally_buf instances, volumes, doc;
    char why[256];
    bal_cache *cache;    /* a batch's, between its commits; NULL: read everything */
    bal_cache_entry *ce; /* the refreshed account's entry in it, or NULL */
};

/* What one refresh computes. */
typedef struct bal_calc {
    tally_account acct;
    const tally_currency *ccy;
    int64_t running, covered, credits, balance, burn;
    int64_t last_usage_s;  /* 0: none */
    int64_t next_expiry_s; /* INT64_MAX: none */
    int64_t next_period_s; /* a commitment bills the next period from then; INT64_MAX: none */
} bal_calc;

/* What is stored for the account. */
typedef struct bal_stored {
    bool found;
    tally_balance_state state;
    bool exhausted;
    int64_t exhausted_since_s;
    bool released;
    int64_t event_seq;
    int64_t next_check_s; /* as stored; INT64_MAX: none */
} bal_stored;

tally_balance_state bal_state_from_name(const char *name)
{
    return strcmp(name, "exhausted") == 0 ? TALLY_BALANCE_EXHAUSTED
           : strcmp(name, "low") == 0     ? TALLY_BALANCE_LOW
                                          : TALLY_BALANCE_OK;
}

const char *tally_balance_state_name(tally_balance_state s)
{
    static const char *const names[] = {"ok", "low", "exhausted"};
    return s < TALLY_BALANCE_STATE_COUNT ? names[s] : "?";
}

tally_err bal_engine_create(tally_ledger *l, bal_engine **out)
{
    bal_engine *b = calloc(1, sizeof *b);
    if (!b)
        return TALLY_NOMEM;
    b->l = l;
    tally_buf_init(&b->instances, 0);
    tally_buf_init(&b->volumes, 0);
    tally_buf_init(&b->doc, 0);
    tally_err e = inv_gatherer_create(l, &b->g);
    if (e) {
        bal_engine_destroy(b);
        return e;
    }
    *out = b;
    return TALLY_OK;
}

void bal_engine_destroy(bal_engine *b)
{
    if (!b)
        return;
    inv_gatherer_destroy(b->g);
    inv_input_release(&b->in);
    inv_input_release(&b->scratch);
    free(b->extra);
    free(b->burn_iv);
    free(b->burn_pt);
    free(b->used);
    free(b->res);
    tally_buf_release(&b->instances);
    tally_buf_release(&b->volumes);
    tally_buf_release(&b->doc);
    free(b);
}

/* ---- The periods to rate ---------------------------------------------------- */

static void period_add(bal_engine *b, const char *p)
{
    for (size_t i = 0; i < b->n_periods; i++)
        if (strcmp(b->periods[i].period, p) == 0)
            return;
    size_t i = b->n_periods;
    if (i == BAL_PERIODS_MAX) { /* keep the newest: drop the oldest */
        memmove(b->periods, b->periods + 1, (BAL_PERIODS_MAX - 1) * sizeof *b->periods);
        i--;
    } else {
        b->n_periods++;
    }
    memset(&b->periods[i], 0, sizeof b->periods[i]);
    snprintf(b->periods[i].period, sizeof b->periods[i].period, "%s", p);
}

static int period_cmp(const void *a, const void *b)
{
    return strcmp(((const bal_period *)a)->period, ((const bal_period *)b)->period);
}

static void stored_add(bal_engine *b, const bal_period *p)
{
    period_add(b, p->period);
    if (b->n_stored < BAL_PERIODS_MAX)
        b->stored[b->n_stored++] = *p;
}

/* Calls fn for each of the account's stored running periods, oldest first,
 * until it returns false. */
static tally_err periods_each(tally_ledger *l, const char *account,
                              bool (*fn)(void *ctx, const bal_period *p), void *ctx)
{
    sqlite3_stmt *st;
    tally_err e = ledger_cached(l,
                                "SELECT period, subtotal_minor, credits_minor, due_minor FROM "
                                "running_periods WHERE account = ?1 ORDER BY period",
                                &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        bal_period p = {.subtotal = sqlite3_column_int64(st, 1),
                        .credits = sqlite3_column_int64(st, 2),
                        .due = sqlite3_column_int64(st, 3)};
        snprintf(p.period, sizeof p.period, "%s", (const char *)sqlite3_column_text(st, 0));
        if (!fn(ctx, &p)) {
            rc = SQLITE_DONE;
            break;
        }
    }
    return ledger_cached_done(l, st, rc);
}

static bool stored_one(void *ctx, const bal_period *p)
{
    stored_add(ctx, p);
    return true;
}

static tally_err stored_periods(bal_engine *b, const char *account)
{
    b->n_stored = 0;
    if (b->ce && b->ce->periods_ok) {
        for (size_t i = 0; i < b->ce->n_periods; i++)
            stored_add(b, &b->ce->periods[i]);
        return TALLY_OK;
    }
    return periods_each(b->l, account, stored_one, b);
}

static const char span_sql[] =
    "SELECT min(lo), max(hi) FROM (SELECT min(start_s) lo, max(end_s) - 1 hi "
    "FROM usage_intervals WHERE account = ?1 UNION ALL "
    "SELECT min(t_s), max(t_s) FROM usage_points WHERE account = ?1)";

typedef struct span_ctx {
    tally_ledger *l;
    const char *account;
    int64_t *lo, *hi;
} span_ctx;

/* One database's span, merged into the context's. */
static tally_err span_of(void *ctx, sqlite3_stmt *st, int64_t snap_seq)
{
    span_ctx *x = ctx;
    (void)snap_seq;
    sqlite3_bind_text(st, 1, x->account, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
        int64_t lo = sqlite3_column_int64(st, 0), hi = sqlite3_column_int64(st, 1);
        bool none = *x->lo > *x->hi;
        *x->lo = none || lo < *x->lo ? lo : *x->lo;
        *x->hi = none || hi > *x->hi ? hi : *x->hi;
    }
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? TALLY_OK : ledger_stmt_err(x->l, st, rc);
}

/* The earliest and latest usage of an account (in every database holding
 * it, on a ledger directory), for an account refreshed for the first time
 * (usage stored before migration 12, or by meters of a directory before
 * migration 14) and for tally verify. *lo > *hi: none. */
static tally_err usage_span(bal_engine *b, const char *account, int64_t *lo, int64_t *hi)
{
    if (b->l->shards) {
        span_ctx x = {b->l, account, lo, hi};
        return ledger_usage_each(b->l, account, LEDGER_USAGE_SPAN, span_sql, 0, span_of, &x);
    }
    sqlite3_stmt *st;
    tally_err e = ledger_cached(b->l, span_sql, &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
        *lo = sqlite3_column_int64(st, 0);
        *hi = sqlite3_column_int64(st, 1);
        rc = SQLITE_DONE;
    } else if (rc == SQLITE_ROW) {
        rc = SQLITE_DONE;
    }
    return ledger_cached_done(b->l, st, rc);
}

static tally_err is_live(bal_engine *b, const char *account, const char *period, bool *live);

/* Adds the periods of [lo, hi] in the account's time zone; with open_only,
 * only those not finalized. */
static tally_err span_periods(bal_engine *b, const tally_account *a, int64_t lo, int64_t hi,
                              bool open_only)
{
    char p[8], last[8];
    tally_err e = tally_period_of(a->timezone, lo, p, sizeof p);
    if (!e)
        e = tally_period_of(a->timezone, hi, last, sizeof last);
    for (int n = 0; !e && n < BAL_PERIODS_MAX * 8; n++) {
        bool live = false;
        if (open_only)
            e = is_live(b, a->id, p, &live);
        if (!e && !live)
            period_add(b, p);
        if (strcmp(p, last) >= 0)
            break;
        char next[8];
        tally_period_step(p, 1, next, sizeof next);
        memcpy(p, next, sizeof p);
    }
    return e;
}

/* The periods of the account's commitments, up to the current one: a
 * commitment bills every period it overlaps in full, as a draft of that
 * period shows, from the period's start. A later period it overlaps joins
 * the running charges when the clock reaches it (c->next_period_s, the
 * account's next check). */
static tally_err commitment_periods(bal_engine *b, bal_calc *c)
{
    char now_p[8];
    int64_t p_start, p_end;
    tally_err e = tally_period_of(c->acct.timezone, b->now_s, now_p, sizeof now_p);
    if (!e)
        e = tally_period_bounds(now_p, c->acct.timezone, &p_start, &p_end);
    if (e)
        return e;
    sqlite3_stmt *st;
    e = ledger_cached(b->l, "SELECT from_s, to_s FROM commitments WHERE account = ?1", &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, c->acct.id, -1, SQLITE_STATIC);
    int rc;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t from = sqlite3_column_int64(st, 0), to = sqlite3_column_int64(st, 1);
        if (from < p_end) /* the finalized ones have no running charges */
            e = span_periods(b, &c->acct, from, (to < p_end ? to : p_end) - 1, true);
        if (to > p_end) /* it bills a later period too: look again when it starts */
            c->next_period_s = p_end;
    }
    if (e) {
        sqlite3_reset(st);
        return e;
    }
    return ledger_cached_done(b->l, st, rc);
}

static tally_err is_live(bal_engine *b, const char *account, const char *period, bool *live)
{
    if (b->ce && !b->ce->invoiced) { /* an account never invoiced has no live invoice */
        *live = false;
        return TALLY_OK;
    }
    sqlite3_stmt *st = inv_stmt(b->g, INV_Q_LIVE);
    sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, period, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    *live = rc == SQLITE_ROW;
    tally_err e = rc == SQLITE_ROW || rc == SQLITE_DONE ? TALLY_OK : ledger_sqlite_err(b->l, rc);
    sqlite3_reset(st);
    return e;
}

/* ---- Rating the periods ------------------------------------------------------ */

static int64_t *used_slot(bal_engine *b, int64_t grant_id)
{
    for (size_t i = 0; i < b->n_used; i++)
        if (b->used[i].grant_id == grant_id)
            return &b->used[i].used_minor;
    if (ledger_grow((void **)&b->used, b->n_used, &b->cap_used, sizeof *b->used, 16) != TALLY_OK)
        return NULL;
    b->used[b->n_used] = (bal_used){grant_id, 0};
    return &b->used[b->n_used++].used_minor;
}

/* Drops adjustment lines for periods before `after` (an earlier open period
 * counts them). */
static void keep_adjustments_from(bal_engine *b, const char *after)
{
    size_t k = 0;
    for (size_t i = 0; i < b->n_extra; i++)
        if (!after || strcmp(b->extra[i].original_period, after) >= 0)
            b->extra[k++] = b->extra[i];
    b->n_extra = k;
}

/* The latest usage time in the gathered input, inside [start, end). */
static int64_t latest_usage(const inv_input *x)
{
    int64_t t = 0;
    for (size_t i = 0; i < x->n_intervals; i++) {
        int64_t end = x->intervals[i].end_s < x->end_s ? x->intervals[i].end_s : x->end_s;
        if (x->intervals[i].start_s < x->end_s && end > t)
            t = end;
    }
    for (size_t i = 0; i < x->n_points; i++)
        if (x->points[i].t_s + 1 > t)
            t = x->points[i].t_s + 1;
    return t;
}

static int res_cmp(const void *pa, const void *pb)
{
    const tally_interval *a = *(const tally_interval *const *)pa;
    const tally_interval *b = *(const tally_interval *const *)pb;
    if (a->meter != b->meter)
        return a->meter < b->meter ? -1 : 1;
    int c = strcmp(a->resource, b->resource);
    return c ? c : a < b ? -1 : a > b; /* then in the input's order */
}

static int ptr_cmp(const void *pa, const void *pb)
{
    const tally_interval *a = *(const tally_interval *const *)pa;
    const tally_interval *b = *(const tally_interval *const *)pb;
    return a < b ? -1 : a > b;
}

static tally_err res_append(tally_buf *out, const tally_interval *iv)
{
    bool accel = iv->meter == TALLY_METER_ACCELERATOR;
    tally_err e = tally_buf_puts(out, out->len > 1 ? ",{" : "{");
    if (!e)
        e = tally_buf_puts(out, accel ? "\"instance\":" : "\"volume\":");
    if (!e)
        e = tally_buf_json_str(out, iv->resource);
    if (!e)
        e = tally_buf_puts(out, accel ? ",\"sku\":" : ",\"class\":");
    if (!e)
        e = tally_buf_json_str(out, iv->dim);
    return e ? e : tally_buf_puts(out, "}");
}

/* The accelerator instances with usage in [t - window, t), and the volumes
 * with usage in the period, as JSON arrays, each resource once (at its
 * first row), in the input's order. A big account has many rows: they are
 * picked in one pass and deduplicated by sorting, not row against row. */
static tally_err list_resources(bal_engine *b, const inv_input *x, int64_t t)
{
    size_t k = 0;
    if (x->n_intervals > b->cap_res) {
        const tally_interval **p = realloc(b->res, x->n_intervals * sizeof *p);
        if (!p)
            return TALLY_NOMEM;
        b->res = p;
        b->cap_res = x->n_intervals;
    }
    for (size_t i = 0; i < x->n_intervals; i++) {
        const tally_interval *iv = &x->intervals[i];
        bool accel = iv->meter == TALLY_METER_ACCELERATOR;
        if (!(accel ? iv->end_s <= t - TALLY_BALANCE_WINDOW_S || iv->start_s >= t
                    : iv->end_s <= x->start_s || iv->start_s >= x->end_s))
            b->res[k++] = iv;
    }
    if (k > 1) /* b->res may be NULL when there are no rows */
        qsort(b->res, k, sizeof *b->res, res_cmp);
    size_t n = 0; /* an instance may have several rows: keep its first */
    for (size_t i = 0; i < k; i++)
        if (n == 0 || b->res[n - 1]->meter != b->res[i]->meter ||
            strcmp(b->res[n - 1]->resource, b->res[i]->resource) != 0)
            b->res[n++] = b->res[i];
    if (n > 1)
        qsort(b->res, n, sizeof *b->res, ptr_cmp);
    tally_buf_reset(&b->instances);
    tally_buf_reset(&b->volumes);
    tally_err e = tally_buf_puts(&b->instances, "[");
    if (!e)
        e = tally_buf_puts(&b->volumes, "[");
    for (size_t i = 0; !e && i < n; i++)
        e = res_append(b->res[i]->meter == TALLY_METER_ACCELERATOR ? &b->instances : &b->volumes,
                       b->res[i]);
    if (!e)
        e = tally_buf_puts(&b->instances, "]");
    return e ? e : tally_buf_puts(&b->volumes, "]");
}

/* The charges of the window before the latest usage: commitments and usage,
 * no credits, no adjustments. */
static tally_err burn(bal_engine *b, int64_t t, int64_t *out)
{
    tally_rating_input in = b->in.in;
    int64_t lo = t - TALLY_BALANCE_WINDOW_S;
    in.period_start_s = lo;
    in.period_end_s = t;
    in.grants = NULL;
    in.n_grants = 0;
    in.extra_lines = NULL;
    in.n_extra_lines = 0;
    /* Only the usage the window's rating looks at (a day either side, as
     * the rating input asks), not the whole period's: same result, a
     * fraction of the work. */
    if (b->cap_burn_iv < b->in.n_intervals) {
        tally_interval *v = realloc(b->burn_iv, b->in.n_intervals * sizeof *v);
        if (!v)
            return TALLY_NOMEM;
        b->burn_iv = v;
        b->cap_burn_iv = b->in.n_intervals;
    }
    if (b->cap_burn_pt < b->in.n_points) {
        tally_point *v = realloc(b->burn_pt, b->in.n_points * sizeof *v);
        if (!v)
            return TALLY_NOMEM;
        b->burn_pt = v;
        b->cap_burn_pt = b->in.n_points;
    }
    size_t ni = 0, np = 0;
    for (size_t i = 0; i < b->in.n_intervals; i++)
        if (b->in.intervals[i].end_s > lo - 86400 && b->in.intervals[i].start_s < t + 86400)
            b->burn_iv[ni++] = b->in.intervals[i];
    for (size_t i = 0; i < b->in.n_points; i++)
        if (b->in.points[i].t_s >= lo && b->in.points[i].t_s < t)
            b->burn_pt[np++] = b->in.points[i];
    in.intervals = b->burn_iv;
    in.n_intervals = ni;
    in.points = b->burn_pt;
    in.n_points = np;
    tally_rating_result res = {0};
    tally_err e = tally_rate_period(&in, &res, b->why, sizeof b->why);
    *out = e ? 0 : res.subtotal_minor;
    tally_rating_result_release(&res);
    return e;
}

/* inv_gather of the period; the intervals from the cache when it holds
 * this window (which it takes from the gather that reads them). */
static tally_err gather(bal_engine *b, const tally_account *acct, int64_t start, int64_t end)
{
    bal_cache_entry *ce = b->ce;
    const bal_cache_win *w = ce ? bal_cache_window(ce, start, end) : NULL;
    bool given = w != NULL;
    tally_err e = TALLY_OK;
    if (given)
        e = bal_cache_iv_rows(b->cache, ce, w, &b->in.intervals, &b->in.cap_intervals,
                              &b->in.n_intervals);
    b->in.intervals_given = given;
    if (!e)
        e = inv_gather(b->g, acct, start, end, true, &b->in);
    b->in.intervals_given = false;
    if (!e && ce && !given)
        bal_cache_iv_load(b->cache, ce, start, end, b->in.intervals, b->in.interval_ids,
                          b->in.n_intervals);
    return e;
}

/* The late-usage adjustments of the period into b->extra (inv_adjustments):
 * from the batch's cache while none of the usage they read has been
 * written since (ledger_int.h). */
static tally_err adjustments(bal_engine *b, const tally_account *acct, const char *period)
{
    bal_cache_entry *ce = b->ce;
    if (ce && bal_cache_adj_get(ce, period, &b->extra, &b->n_extra, &b->cap_extra))
        return TALLY_OK;
    size_t from = b->n_extra;
    int64_t to = INT64_MIN;
    tally_err e = inv_adjustments(b->g, acct, period, &b->scratch, &b->extra, &b->n_extra,
                                  &b->cap_extra, b->why, sizeof b->why, &to);
    if (!e && ce)
        bal_cache_adj_keep(b->cache, ce, period, to, b->extra + from, b->n_extra - from);
    return e;
}

/* Rates one open period as a draft run would; *skip when there is nothing
 * to bill in it. */
static tally_err rate_period(bal_engine *b, bal_calc *c, bal_period *p, const char *prev_open,
                             bool *skip)
{
    int64_t start, end;
    tally_err e = tally_period_bounds(p->period, c->acct.timezone, &start, &end);
    if (!e)
        e = gather(b, &c->acct, start, end);
    b->n_extra = 0;
    /* An account never invoiced has no finalized period to adjust. */
    if (!e && (!b->ce || b->ce->invoiced))
        e = adjustments(b, &c->acct, p->period);
    if (e)
        return e;
    keep_adjustments_from(b, prev_open);
    *skip = b->in.n_in_window == 0 && b->in.n_commitments == 0 && b->n_extra == 0;
    if (*skip)
        return TALLY_OK;
    for (size_t i = 0; i < b->in.n_grants; i++) { /* what earlier drafts left */
        int64_t *u = used_slot(b, b->in.grants[i].id);
        if (!u)
            return TALLY_NOMEM;
        b->in.grants[i].remaining_minor -= *u;
        if (b->in.grants[i].remaining_minor < 0)
            b->in.grants[i].remaining_minor = 0;
    }
    b->in.in.extra_lines = b->extra;
    b->in.in.n_extra_lines = b->n_extra;
    tally_rating_result res = {0};
    e = tally_rate_period(&b->in.in, &res, b->why, sizeof b->why);
    for (size_t i = 0; !e && i < res.n_credits; i++) {
        int64_t *u = used_slot(b, res.credits[i].grant_id);
        e = !u ? TALLY_NOMEM : tally_money_add(*u, res.credits[i].amount_minor, u);
    }
    if (!e) {
        p->subtotal = res.subtotal_minor;
        p->credits = res.total_credits_minor;
        p->due = res.amount_due_minor;
        e = tally_money_add(c->running, res.subtotal_minor, &c->running);
    }
    if (!e)
        e = tally_money_add(c->covered, res.total_credits_minor, &c->covered);
    tally_rating_result_release(&res);
    int64_t t = latest_usage(&b->in);
    if (!e && t > 0 && t >= c->last_usage_s) {
        c->last_usage_s = t;
        e = burn(b, t, &c->burn);
        if (!e)
            e = list_resources(b, &b->in, t);
    }
    return e;
}

/* The first period after p that is not finalized: the adjustments for late
 * usage of p go on it, as its draft shows them (drafts of later periods
 * repeat them, and they are counted once). "" when the next
 * BAL_PERIODS_MAX periods are all finalized. */
static tally_err next_open(bal_engine *b, const char *account, const char *p, char out[8])
{
    char cur[8];
    tally_period_step(p, 1, cur, sizeof cur);
    for (int n = 0; n < BAL_PERIODS_MAX; n++) {
        bool live = false;
        tally_err e = is_live(b, account, cur, &live);
        if (e || !live) {
            memcpy(out, cur, sizeof cur);
            return e;
        }
        char next[8];
        tally_period_step(cur, 1, next, sizeof next);
        memcpy(cur, next, sizeof cur);
    }
    out[0] = '\0';
    return TALLY_OK;
}

/* Rates the open periods oldest first, dropping the ones finalized since
 * (adding in their place the first open period after each, which bills
 * their late usage) and the ones with nothing to bill. */
static tally_err rate_open(bal_engine *b, bal_calc *c)
{
    char live_p[BAL_PERIODS_MAX][8];
    size_t n_live = 0;
    tally_err e = TALLY_OK;
    for (size_t i = 0; i < b->n_periods; i++) {
        bool live = false;
        e = is_live(b, c->acct.id, b->periods[i].period, &live);
        if (e)
            return e;
        if (live) {
            memcpy(live_p[n_live++], b->periods[i].period, sizeof live_p[0]);
            b->periods[i].period[0] = '\0';
        }
    }
    for (size_t i = 0; i < n_live; i++) {
        char open[8];
        e = next_open(b, c->acct.id, live_p[i], open);
        if (e)
            return e;
        if (open[0])
            period_add(b, open);
    }
    qsort(b->periods, b->n_periods, sizeof *b->periods, period_cmp);
    const char *prev = NULL;
    size_t k = 0;
    for (size_t i = 0; i < b->n_periods; i++) {
        bal_period *p = &b->periods[i];
        bool skip = true;
        if (p->period[0])
            e = rate_period(b, c, p, prev, &skip);
        if (e)
            return e;
        if (!skip) {
            b->periods[k++] = *p;
            prev = b->periods[k - 1].period;
        }
    }
    b->n_periods = k;
    return TALLY_OK;
}

/* What the unexpired grants hold, less what the drafts use of them. */
static tally_err credits_left(bal_engine *b, bal_calc *c)
{
    sqlite3_stmt *st;
    tally_err e = ledger_cached(b->l,
                                "SELECT g.id, g.expires_s, " LEDGER_GRANT_LEFT(
                                    "g") " FROM grants g WHERE g.account = ?1 AND g.currency = ?2 "
                                         "AND (g.expires_s IS NULL OR g.expires_s > ?3)",
                                &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, c->acct.id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, c->acct.currency, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, b->now_s);
    int rc;
    c->credits = 0;
    c->next_expiry_s = INT64_MAX;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t left = sqlite3_column_int64(st, 2);
        for (size_t i = 0; i < b->n_used; i++)
            if (b->used[i].grant_id == sqlite3_column_int64(st, 0))
                left -= b->used[i].used_minor;
        if (left <= 0)
            continue;
        e = tally_money_add(c->credits, left, &c->credits);
        if (sqlite3_column_type(st, 1) != SQLITE_NULL &&
            sqlite3_column_int64(st, 1) < c->next_expiry_s)
            c->next_expiry_s = sqlite3_column_int64(st, 1);
    }
    if (e) {
        sqlite3_reset(st);
        return e;
    }
    return ledger_cached_done(b->l, st, rc);
}

/* ---- Limits, stored state, events ------------------------------------------- */

tally_err bal_row_get(tally_ledger *l, const char *account, bal_row *r, bool *found)
{
    sqlite3_stmt *st;
    memset(r, 0, sizeof *r);
    tally_err e = ledger_cached(
        l,
        "SELECT running_minor, covered_minor, credits_minor, balance_minor, burn_minor, state, "
        "exhausted_since_s, released, next_check_s, updated_at, currency, event_seq "
        "FROM account_balances WHERE account = ?1",
        &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    *found = rc == SQLITE_ROW;
    if (rc == SQLITE_ROW) {
        for (int i = 0; i < 5; i++)
            r->v[i] = sqlite3_column_int64(st, i);
        snprintf(r->state, sizeof r->state, "%s", (const char *)sqlite3_column_text(st, 5));
        r->exhausted = sqlite3_column_type(st, 6) != SQLITE_NULL;
        r->exhausted_since_s = sqlite3_column_int64(st, 6);
        r->released = sqlite3_column_int(st, 7) != 0;
        r->has_next = sqlite3_column_type(st, 8) != SQLITE_NULL;
        r->next_check_s = sqlite3_column_int64(st, 8);
        r->updated_at_s = sqlite3_column_int64(st, 9);
        snprintf(r->currency, sizeof r->currency, "%s", (const char *)sqlite3_column_text(st, 10));
        r->event_seq = sqlite3_column_int64(st, 11);
        rc = SQLITE_DONE;
    }
    return ledger_cached_done(l, st, rc);
}

static tally_err stored_state(bal_engine *b, const char *account, bal_stored *s)
{
    bal_row r;
    *s = (bal_stored){0};
    tally_err e = TALLY_OK;
    if (b->ce) {
        s->found = b->ce->row_found;
        r = b->ce->row;
    } else {
        e = bal_row_get(b->l, account, &r, &s->found);
    }
    if (e || !s->found)
        return e;
    s->state = bal_state_from_name(r.state);
    s->exhausted = r.exhausted;
    s->exhausted_since_s = r.exhausted_since_s;
    s->released = r.released;
    s->event_seq = r.event_seq;
    s->next_check_s = r.has_next ? r.next_check_s : INT64_MAX;
    return TALLY_OK;
}

static tally_balance_state state_of(const tally_limits *lim, int64_t balance)
{
    if (balance <= lim->stop_at_minor)
        return TALLY_BALANCE_EXHAUSTED;
    if (lim->has_low && balance < lim->low_minor)
        return TALLY_BALANCE_LOW;
    return TALLY_BALANCE_OK;
}

typedef struct bal_event_ctx {
    bal_engine *b;
    const bal_calc *c;
    const tally_limits *lim;
    tally_balance_state from, to;
    const char *cause;
    bal_stored *s;
} bal_event_ctx;

static tally_err money_field(tally_buf *d, const char *key, int64_t v, int digits)
{
    tally_err e = tally_buf_printf(d, ",\"%s\":", key);
    return e ? e : inv_json_money(d, v, digits);
}

/* One event of the account, in the refresh's transaction. */
static tally_err emit(bal_event_ctx *x, const char *type)
{
    tally_buf *d = &x->b->doc;
    int digits = x->c->ccy->minor_digits;
    char id[160];
    tally_buf_reset(d);
    x->s->event_seq++;
    tally_err e =
        tally_fmt(id, sizeof id, "%s:%s:%lld", type, x->c->acct.id, (long long)x->s->event_seq);
    if (!e)
        e = tally_buf_puts(d, "{\"account\":");
    if (!e)
        e = tally_buf_json_str(d, x->c->acct.id);
    if (!e)
        e = tally_buf_printf(d, ",\"currency\":\"%s\",\"state\":\"%s\",\"previous_state\":\"%s\"",
                             x->c->acct.currency, tally_balance_state_name(x->to),
                             tally_balance_state_name(x->from));
    if (!e)
        e = money_field(d, "balance", x->c->balance, digits);
    if (!e)
        e = money_field(d, "running_charges", x->c->running, digits);
    if (!e)
        e = money_field(d, "credits_available", x->c->credits, digits);
    if (!e)
        e = x->lim->has_low ? money_field(d, "low_balance", x->lim->low_minor, digits)
                            : tally_buf_puts(d, ",\"low_balance\":null");
    if (!e)
        e = money_field(d, "stop_at", x->lim->stop_at_minor, digits);
    if (!e)
        e = tally_buf_printf(d, ",\"cause\":\"%s\"", x->cause);
    if (!e && strcmp(type, TALLY_EVENT_ACCOUNT_SUSPEND) == 0)
        e = tally_buf_printf(d, ",\"instances\":%s", x->b->instances.data);
    if (!e && strcmp(type, TALLY_EVENT_VOLUME_RELEASE) == 0) {
        e = tally_buf_printf(d, ",\"volumes\":%s,\"exhausted_since\":", x->b->volumes.data);
        if (!e)
            e = inv_json_time(d, x->s->exhausted_since_s);
    }
    if (!e)
        e = tally_buf_puts(d, "}");
    return e ? e : ledger_outbox_add(x->b->l, type, x->c->acct.id, id, d->data, d->len);
}

/* The events of one state change, in the order the thresholds were crossed. */
static tally_err transition(bal_event_ctx *x)
{
    tally_err e = TALLY_OK;
    tally_balance_state from = x->from, to = x->to;
    if (to > from) { /* down, one mark at a time: each event names the state it announces */
        if (from == TALLY_BALANCE_OK && x->lim->has_low) {
            x->to = TALLY_BALANCE_LOW;
            e = emit(x, TALLY_EVENT_BALANCE_LOW);
            x->from = TALLY_BALANCE_LOW;
            x->to = to;
        }
        if (!e && to == TALLY_BALANCE_EXHAUSTED)
            e = emit(x, TALLY_EVENT_BALANCE_EXHAUSTED);
        if (!e && to == TALLY_BALANCE_EXHAUSTED)
            e = emit(x, TALLY_EVENT_ACCOUNT_SUSPEND);
        x->from = from;
    } else if (x->to < x->from) { /* up */
        e = emit(x, TALLY_EVENT_BALANCE_RECOVERED);
        if (!e && x->from == TALLY_BALANCE_EXHAUSTED)
            e = emit(x, TALLY_EVENT_ACCOUNT_RESUME);
    }
    return e;
}

/* The balance row: updated in place when it exists, else inserted. The
 * common update leaves the indexed columns (state, next check) out, so
 * SQLite does not rewrite their index entries (?8 and ?11 are bound to it
 * all the same, and unused). */
static const char bal_update_figures[] =
    "UPDATE account_balances SET currency = ?2, running_minor = ?3, covered_minor = ?4, "
    "credits_minor = ?5, balance_minor = ?6, burn_minor = ?7, exhausted_since_s = ?9, "
    "released = ?10, event_seq = ?12, updated_at = ?13 WHERE account = ?1";
static const char bal_update_all[] =
    "UPDATE account_balances SET currency = ?2, running_minor = ?3, covered_minor = ?4, "
    "credits_minor = ?5, balance_minor = ?6, burn_minor = ?7, state = ?8, "
    "exhausted_since_s = ?9, released = ?10, next_check_s = ?11, event_seq = ?12, "
    "updated_at = ?13 WHERE account = ?1";
static const char bal_insert[] =
    "INSERT INTO account_balances(account, currency, running_minor, covered_minor, "
    "credits_minor, balance_minor, burn_minor, state, exhausted_since_s, released, "
    "next_check_s, event_seq, updated_at) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)";

static tally_err store_row(bal_engine *b, const bal_calc *c, tally_balance_state state,
                           const bal_stored *s, int64_t next_check)
{
    sqlite3_stmt *st = NULL;
    const char *sql = !s->found                                            ? bal_insert
                      : state == s->state && next_check == s->next_check_s ? bal_update_figures
                                                                           : bal_update_all;
    tally_err e = ledger_cached(b->l, sql, &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, c->acct.id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, c->acct.currency, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, c->running);
    sqlite3_bind_int64(st, 4, c->covered);
    sqlite3_bind_int64(st, 5, c->credits);
    sqlite3_bind_int64(st, 6, c->balance);
    sqlite3_bind_int64(st, 7, c->burn);
    sqlite3_bind_text(st, 8, tally_balance_state_name(state), -1, SQLITE_STATIC);
    if (s->exhausted)
        sqlite3_bind_int64(st, 9, s->exhausted_since_s);
    sqlite3_bind_int(st, 10, s->released);
    if (next_check != INT64_MAX)
        sqlite3_bind_int64(st, 11, next_check);
    sqlite3_bind_int64(st, 12, s->event_seq);
    sqlite3_bind_int64(st, 13, b->now_s);
    return ledger_cached_done(b->l, st, sqlite3_step(st));
}

static bool same_period(const bal_period *a, const bal_period *b)
{
    return strcmp(a->period, b->period) == 0 && a->subtotal == b->subtotal &&
           a->credits == b->credits && a->due == b->due;
}

/* The running periods: when they are the ones stored (the common case),
 * only the rows whose figures moved are written; else the account's rows
 * are written anew. */
static tally_err store_periods(bal_engine *b, const char *account)
{
    sqlite3_stmt *st = NULL;
    tally_err e = TALLY_OK;
    bool same = b->n_stored == b->n_periods;
    for (size_t i = 0; same && i < b->n_periods; i++)
        same = strcmp(b->stored[i].period, b->periods[i].period) == 0;
    if (!same)
        e = ledger_cached(b->l, "DELETE FROM running_periods WHERE account = ?1", &st);
    if (!e && !same) {
        sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
        e = ledger_cached_done(b->l, st, sqlite3_step(st));
    }
    if (!e)
        e = ledger_cached(b->l,
                          "INSERT OR REPLACE INTO running_periods(account, period, "
                          "subtotal_minor, credits_minor, due_minor) VALUES (?1, ?2, ?3, ?4, ?5)",
                          &st);
    for (size_t i = 0; !e && i < b->n_periods; i++) {
        if (same && same_period(&b->stored[i], &b->periods[i]))
            continue;
        sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, b->periods[i].period, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, b->periods[i].subtotal);
        sqlite3_bind_int64(st, 4, b->periods[i].credits);
        sqlite3_bind_int64(st, 5, b->periods[i].due);
        int rc = sqlite3_step(st);
        sqlite3_reset(st);
        if (rc != SQLITE_DONE)
            e = ledger_sqlite_err(b->l, rc);
    }
    if (st)
        (void)ledger_cached_done(b->l, st, SQLITE_DONE);
    return e;
}

/* The cache's entry after a store: what the rows now hold. */
static void cache_stored(bal_engine *b, const bal_calc *c, tally_balance_state state,
                         const bal_stored *s, int64_t next_check)
{
    bal_cache_entry *ce = b->ce;
    bal_row *r = &ce->row;
    const int64_t v[5] = {c->running, c->covered, c->credits, c->balance, c->burn};
    memcpy(r->v, v, sizeof r->v);
    snprintf(r->state, sizeof r->state, "%s", tally_balance_state_name(state));
    memcpy(r->currency, c->acct.currency, sizeof r->currency);
    r->exhausted = s->exhausted;
    r->exhausted_since_s = s->exhausted ? s->exhausted_since_s : 0;
    r->released = s->released;
    r->has_next = next_check != INT64_MAX;
    r->next_check_s = r->has_next ? next_check : 0;
    r->updated_at_s = b->now_s;
    r->event_seq = s->event_seq;
    ce->row_found = true;
    ce->periods_ok = b->n_periods <= BAL_CACHE_PERIODS;
    ce->n_periods = ce->periods_ok ? b->n_periods : 0;
    if (ce->periods_ok && b->n_periods)
        memcpy(ce->periods, b->periods, b->n_periods * sizeof *b->periods);
}

static tally_err store(bal_engine *b, const bal_calc *c, tally_balance_state state,
                       const bal_stored *s, int64_t next_check)
{
    tally_err e = store_row(b, c, state, s, next_check);
    if (!e)
        e = store_periods(b, c->acct.id);
    if (!e && b->ce)
        cache_stored(b, c, state, s, next_check);
    return e;
}

/* The state change, the release grace and what is stored. */
/* Spend control applies when the account has a grant (a top-up, a voucher,
 * a coupon; not an adjustment credit) or limits of its own. An account with
 * neither is billed in arrears: its balance is kept, its state stays ok and
 * it is never suspended (README, "Prepaid balances"). */
tally_err bal_limits_get(tally_ledger *l, const char *account, tally_limits *lim, bool *controlled)
{
    *lim = (tally_limits){.release_after_s = TALLY_BALANCE_RELEASE_DEFAULT};
    sqlite3_stmt *st;
    tally_err e = ledger_cached(
        l,
        "SELECT l.low_balance_minor, l.stop_at_minor, l.release_after_s, l.account IS NOT NULL "
        "OR EXISTS (SELECT 1 FROM grants WHERE account = ?1 AND kind != 'adjustment') "
        "FROM (SELECT ?1 AS a) LEFT JOIN account_limits l ON l.account = a",
        &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        bool has_row = sqlite3_column_type(st, 1) != SQLITE_NULL;
        lim->has_low = sqlite3_column_type(st, 0) != SQLITE_NULL;
        lim->low_minor = sqlite3_column_int64(st, 0);
        if (has_row) {
            lim->stop_at_minor = sqlite3_column_int64(st, 1);
            lim->release_after_s = sqlite3_column_int64(st, 2);
        }
        if (controlled)
            *controlled = sqlite3_column_int(st, 3) != 0;
        rc = SQLITE_DONE;
    }
    return ledger_cached_done(l, st, rc);
}

static tally_err settle(bal_engine *b, const bal_calc *c, bal_stored s, const char *cause)
{
    tally_limits lim;
    bool controlled = false;
    tally_err e = TALLY_OK;
    if (b->ce) {
        lim = b->ce->lim;
        controlled = b->ce->controlled;
    } else {
        e = bal_limits_get(b->l, c->acct.id, &lim, &controlled);
    }
    if (e)
        return e;
    tally_balance_state to = controlled ? state_of(&lim, c->balance) : TALLY_BALANCE_OK;
    bal_event_ctx x = {b, c, &lim, s.found ? s.state : TALLY_BALANCE_OK, to, cause, &s};
    int64_t now = b->now_s;
    if (to == TALLY_BALANCE_EXHAUSTED && !s.exhausted) {
        s.exhausted = true;
        s.exhausted_since_s = now;
        s.released = false;
    } else if (to != TALLY_BALANCE_EXHAUSTED) {
        s.exhausted = false;
        s.released = false;
    }
    e = transition(&x);
    int64_t next = c->next_expiry_s < c->next_period_s ? c->next_expiry_s : c->next_period_s;
    if (!e && s.exhausted && !s.released) {
        int64_t due = s.exhausted_since_s + lim.release_after_s;
        if (due <= now) {
            x.from = x.to;
            e = emit(&x, TALLY_EVENT_VOLUME_RELEASE);
            s.released = true;
        } else if (due < next) {
            next = due;
        }
    }
    return e ? e : store(b, c, to, &s, next);
}

/* Computes the account's running charges, credits and balance into c as of
 * b->now_s, writing nothing. The periods rated: the stored ones, those of
 * [lo_s, hi_s] and of the commitments, and with rescan those of all the
 * account's usage (a first refresh, a new time zone, a void: late
 * adjustments that a voided invoice carried are pending again). */
/* Usage within a day of a period's edge is read by its rating (its runs:
 * rating/rate_minimum.c) and by its late-usage check (invoice_adjust.c),
 * so the periods a span of usage can change reach a day either side: a
 * late event at the end of an open January that joins a run of a
 * finalized February changes February's adjustment, which March carries.
 * (Found by test_late test_late_margin; before, the refresh rated January
 * only, and verify, reading the account's whole span, disagreed with the
 * stored balance.) */
static int64_t day_before(int64_t t)
{
    return t > INT64_MIN + 86400 ? t - 86400 : t;
}

/* A day after t, but not past the refresh's clock (a period after the
 * current one has no running charges), and never before t itself. */
static int64_t day_after(const bal_engine *b, int64_t t)
{
    int64_t u = t < INT64_MAX - 86400 ? t + 86400 : t;
    if (u > b->now_s)
        u = b->now_s > t ? b->now_s : t;
    return u;
}

static tally_err compute(bal_engine *b, const char *account, int64_t lo_s, int64_t hi_s,
                         bool rescan, bal_calc *c)
{
    *c = (bal_calc){.next_expiry_s = INT64_MAX, .next_period_s = INT64_MAX};
    b->n_periods = 0;
    b->n_used = 0;
    tally_buf_reset(&b->instances);
    tally_buf_reset(&b->volumes);
    tally_err e = TALLY_OK;
    if (b->ce)
        c->acct = b->ce->acct;
    else
        e = tally_ledger_account_get(b->l, account, &c->acct);
    if (e)
        return e;
    c->ccy = tally_currency_find(c->acct.currency);
    if (!c->ccy)
        return TALLY_UNKNOWN_CURRENCY;
    e = stored_periods(b, account);
    if (!e && rescan) {
        int64_t ulo = 1, uhi = 0;
        e = usage_span(b, account, &ulo, &uhi);
        if (!e && ulo <= uhi)
            e = span_periods(b, &c->acct, day_before(ulo), day_after(b, uhi), false);
    }
    if (!e && lo_s <= hi_s)
        e = span_periods(b, &c->acct, day_before(lo_s), day_after(b, hi_s), false);
    if (!e)
        e = commitment_periods(b, c);
    if (!e)
        e = rate_open(b, c);
    if (!e)
        e = credits_left(b, c);
    if (!e)
        e = tally_money_sub(c->covered, c->running, &c->balance); /* -(running - covered) */
    if (!e)
        e = tally_money_add(c->balance, c->credits, &c->balance);
    if (!e && b->instances.len == 0)
        e = tally_buf_puts(&b->instances, "[]");
    if (!e && b->volumes.len == 0)
        e = tally_buf_puts(&b->volumes, "[]");
    return e;
}

static tally_err invoiced(tally_ledger *l, const char *account, bool *yes)
{
    sqlite3_stmt *st;
    tally_err e =
        ledger_cached(l, "SELECT EXISTS (SELECT 1 FROM invoices WHERE account = ?1)", &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    *yes = rc == SQLITE_ROW && sqlite3_column_int(st, 0) != 0;
    return ledger_cached_done(l, st, rc == SQLITE_ROW ? SQLITE_DONE : rc);
}

/* The account's entry in the engine's cache, read from the ledger the first
 * time (what the refresh reads about the account but its usage). */
static tally_err cache_entry(bal_engine *b, const char *account)
{
    b->ce = NULL;
    if (!b->cache)
        return TALLY_OK;
    b->ce = bal_cache_find(b->cache, account);
    if (b->ce)
        return TALLY_OK;
    bal_cache_entry x = {0};
    tally_err e = tally_ledger_account_get(b->l, account, &x.acct);
    if (!e)
        e = bal_row_get(b->l, account, &x.row, &x.row_found);
    if (!e)
        e = bal_limits_get(b->l, account, &x.lim, &x.controlled);
    if (!e)
        e = invoiced(b->l, account, &x.invoiced);
    bal_cache_entry *ce = NULL;
    if (!e)
        e = bal_cache_add(b->cache, &x.acct, &ce);
    if (e)
        return e;
    ce->row_found = x.row_found;
    ce->row = x.row;
    ce->lim = x.lim;
    ce->controlled = x.controlled;
    ce->invoiced = x.invoiced;
    b->ce = ce; /* periods_ok false: the first refresh reads them */
    return TALLY_OK;
}

void bal_engine_use_cache(bal_engine *b, bal_cache *c)
{
    b->cache = c;
}

tally_err bal_refresh_created(bal_engine *b, const tally_account *acct, int64_t lo_s, int64_t hi_s)
{
    if (!b->cache || bal_cache_find(b->cache, acct->id))
        return bal_refresh(b, acct->id, lo_s, hi_s, "usage");
    bal_cache_entry *ce;
    tally_err e = bal_cache_add(b->cache, acct, &ce);
    if (e)
        return e;
    /* what the queries of cache_entry and the first refresh would find */
    ce->lim = (tally_limits){.release_after_s = TALLY_BALANCE_RELEASE_DEFAULT};
    ce->periods_ok = true;
    bal_calc c;
    bal_stored s = {0};
    b->now_s = tally_now_s();
    b->ce = ce;
    e = compute(b, acct->id, lo_s, hi_s, false, &c);
    return e ? e : settle(b, &c, s, "usage");
}

tally_err bal_refresh(bal_engine *b, const char *account, int64_t lo_s, int64_t hi_s,
                      const char *cause)
{
    bal_calc c;
    bal_stored s = {0};
    b->now_s = tally_now_s();
    tally_err e = cache_entry(b, account);
    if (!e)
        e = stored_state(b, account, &s);
    bool rescan = !s.found || strcmp(cause, "account") == 0 || strcmp(cause, "void") == 0 ||
                  strcmp(cause, "rebuild") == 0;
    if (!e)
        e = compute(b, account, lo_s, hi_s, rescan, &c);
    return e ? e : settle(b, &c, s, cause);
}

tally_err ledger_balance_refresh(tally_ledger *l, const char *account, const char *cause)
{
    return ledger_balance_refresh_span(l, account, 1, 0, cause);
}

tally_err ledger_balance_rezone(tally_ledger *l, const char *account)
{
    if (l->no_balances)
        return TALLY_OK;
    sqlite3_stmt *st;
    tally_err e = ledger_cached(l, "DELETE FROM running_periods WHERE account = ?1", &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
    e = ledger_cached_done(l, st, sqlite3_step(st));
    return e ? e : ledger_balance_refresh(l, account, "account");
}

tally_err ledger_balance_refresh_span(tally_ledger *l, const char *account, int64_t lo_s,
                                      int64_t hi_s, const char *cause)
{
    if (l->no_balances)
        return TALLY_OK;
    bal_engine *b = NULL;
    tally_err e = bal_engine_create(l, &b);
    if (!e)
        e = bal_refresh(b, account, lo_s, hi_s, cause);
    bal_engine_destroy(b);
    return e;
}

/* ---- tally verify: a stored balance against its recomputation --------------- */

static const char *const bal_fields[5] = {"running_minor", "covered_minor", "credits_minor",
                                          "balance_minor", "burn_minor"};

typedef struct period_cmp_ctx {
    const bal_engine *b;
    size_t i;
    char *why;
    size_t cap;
} period_cmp_ctx;

/* One stored running period against the next recomputed one. */
static bool period_cmp_one(void *ctx, const bal_period *got)
{
    period_cmp_ctx *x = ctx;
    const bal_period *want = x->i < x->b->n_periods ? &x->b->periods[x->i] : NULL;
    x->i++;
    if (!want || strcmp(want->period, got->period) != 0)
        snprintf(x->why, x->cap, "running period %s is stored, but recomputing gives %s",
                 got->period, want ? want->period : "no more periods");
    else if (got->subtotal != want->subtotal || got->credits != want->credits ||
             got->due != want->due)
        snprintf(x->why, x->cap,
                 "running period %s stores subtotal %lld, credits %lld, due %lld, but "
                 "recomputing gives %lld, %lld, %lld",
                 got->period, (long long)got->subtotal, (long long)got->credits,
                 (long long)got->due, (long long)want->subtotal, (long long)want->credits,
                 (long long)want->due);
    return !x->why[0];
}

/* The stored running periods against the recomputed ones (b->periods). */
static tally_err periods_check(bal_engine *b, const char *account, char *why, size_t cap)
{
    period_cmp_ctx x = {b, 0, why, cap};
    tally_err e = periods_each(b->l, account, period_cmp_one, &x);
    if (!e && !why[0] && x.i < b->n_periods)
        snprintf(why, cap, "running period %s is missing", b->periods[x.i].period);
    return e;
}

/* The state, exhaustion and next check that settle would have stored with c. */
static tally_err state_check(bal_engine *b, const bal_calc *c, const bal_row *r, char *why,
                             size_t cap)
{
    tally_limits lim;
    bool controlled = false;
    tally_err e = bal_limits_get(b->l, c->acct.id, &lim, &controlled);
    if (e)
        return e;
    tally_balance_state want = controlled ? state_of(&lim, c->balance) : TALLY_BALANCE_OK;
    bool exhausted = want == TALLY_BALANCE_EXHAUSTED;
    int64_t next = c->next_expiry_s < c->next_period_s ? c->next_expiry_s : c->next_period_s;
    if (exhausted && r->exhausted && !r->released &&
        r->exhausted_since_s + lim.release_after_s < next)
        next = r->exhausted_since_s + lim.release_after_s;
    if (strcmp(r->state, tally_balance_state_name(want)) != 0)
        snprintf(why, cap, "state is %s, but its balance and limits give %s", r->state,
                 tally_balance_state_name(want));
    else if (r->exhausted != exhausted || (r->released && !exhausted) ||
             (r->exhausted && r->exhausted_since_s > r->updated_at_s))
        snprintf(why, cap, "exhausted_since and released do not fit state %s", r->state);
    else if (r->has_next != (next != INT64_MAX) || (r->has_next && r->next_check_s != next))
        snprintf(why, cap, "next_check_s is %lld, but recomputing gives %lld",
                 r->has_next ? (long long)r->next_check_s : -1LL,
                 next != INT64_MAX ? (long long)next : -1LL);
    return TALLY_OK;
}

tally_err bal_check(bal_engine *b, const char *account, char *why, size_t cap)
{
    bal_row r;
    bool found = false;
    bal_calc c;
    why[0] = '\0';
    tally_err e = bal_row_get(b->l, account, &r, &found);
    if (e || !found)
        return e;
    b->now_s = r.updated_at_s; /* as the refresh that stored it saw the clock */
    e = compute(b, account, 1, 0, true, &c);
    if (e)
        return e;
    const int64_t want[5] = {c.running, c.covered, c.credits, c.balance, c.burn};
    for (int i = 0; i < 5 && !why[0]; i++)
        if (r.v[i] != want[i])
            snprintf(why, cap, "%s is %lld, but recomputing it from the ledger gives %lld",
                     bal_fields[i], (long long)r.v[i], (long long)want[i]);
    if (!why[0])
        e = periods_check(b, account, why, cap);
    if (!e && !why[0])
        e = state_check(b, &c, &r, why, cap);
    return e;
}
