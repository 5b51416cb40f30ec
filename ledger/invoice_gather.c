/* Gathering one account's rating input from the ledger.
 *
 * A run reads the rate cards and spot points once (inv_gatherer) and then,
 * per account, four indexed queries:
 *   - usage_intervals overlapping [start - 1 day, end + 1 day), found through
 *     the (account, start_s) index: a row is at most 86400 s long, so a row
 *     overlapping that window starts after start - 2 days;
 *   - usage_points inside [start, end);
 *   - commitments overlapping [start, end);
 *   - grants of the account's currency whose window touches [start, end) and
 *     that have money left: the remaining balance is the credit balance of
 *     ledger account grant:<id> (granting credits it, invoices debit it, a
 *     void credits it back).
 * The arrays are kept between accounts and only grow. In a ledger directory
 * (include/tally/shard.h) the two usage queries run on main.db and on each
 * shard that holds the account (ledger_int.h, ledger directories). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"
#include "tally/money.h"

#define DAY_S 86400

struct inv_gatherer {
    tally_ledger *l;
    const tally_ratecard *const *cards;
    size_t n_cards;
    tally_spot_point *spot;
    int64_t *spot_entered_s;
    size_t n_spot;
    /* The prices as they stood at as_of_s (inv_gather_as_of): the cards and
     * spot points entered by then. INT64_MAX: all of them. */
    int64_t as_of_s;
    const tally_ratecard **cards_as_of;
    size_t n_cards_as_of;
    tally_spot_point *spot_as_of;
    size_t n_spot_as_of;
    sqlite3_stmt *st[INV_Q_COUNT];
    /* TALLY_RAW_POINTS=1: read traffic and tokens second by second, never by
     * the hour (for the test that both rate alike). */
    bool raw_points;
    /* How far past a period's edges usage can change what its rating bills
     * (inv_late_margin); TALLY_LATE_ALWAYS=1: every earlier period counts
     * as late (for the test that the margin misses nothing). */
    int64_t late_margin_s;
    bool late_always;
};

/* An invoice i (or j) is live unless a credit note of the same account and
 * period refers to it. Terms on doc_type are written +x.doc_type so that
 * SQLite looks rows up by account (invoices_by_account) and never scans all
 * invoices of a type through the (doc_type, year, number) index. */
#define LIVE_I                                                                                     \
    "NOT EXISTS (SELECT 1 FROM invoices c WHERE c.account = i.account AND c.period = i.period "    \
    "AND +c.doc_type = 'credit_note' AND c.refers_to = i.id)"
#define LIVE_J                                                                                     \
    "NOT EXISTS (SELECT 1 FROM invoices c WHERE c.account = j.account AND c.period = j.period "    \
    "AND +c.doc_type = 'credit_note' AND c.refers_to = j.id)"

static const char *const queries[INV_Q_COUNT] = {
    [INV_Q_INTERVALS] = "SELECT meter, pricing, migration, resource, dim, weight, start_s, end_s, "
                        "id FROM usage_intervals WHERE account = ?1 AND start_s > ?2 - 86400 "
                        "AND start_s < ?3 AND end_s > ?2",
    [INV_Q_POINTS] = "SELECT meter, dim, dim2, t_s, qty FROM usage_points "
                     "WHERE account = ?1 AND t_s >= ?2 AND t_s < ?3",
    [INV_Q_HOURS] = "SELECT meter, dim, dim2, hour_s, qty FROM usage_points_hourly "
                    "WHERE account = ?1 AND hour_s > ?2 - 3600 AND hour_s < ?3",
    [INV_Q_COMMITMENTS] = "SELECT id, sku, cards, from_s, to_s FROM commitments "
                          "WHERE account = ?1 AND from_s < ?3 AND to_s > ?2",
    [INV_Q_GRANTS] =
        "SELECT g.id, g.kind, g.priority, g.effective_s, g.expires_s, g.scope, " LEDGER_GRANT_LEFT(
            "g") " FROM grants g WHERE g.account = ?1 AND g.currency = ?4 "
                 "AND g.effective_s < ?3 AND (g.expires_s IS NULL OR g.expires_s > ?2) "
                 "ORDER BY g.id",
    /* The account's live finalized invoice for a period. */
    [INV_Q_LIVE] = "SELECT i.id, i.subtotal_minor, i.credits_minor, i.amount_due_minor, "
                   "i.currency, i.doc FROM invoices i WHERE i.account = ?1 AND i.period = ?2 "
                   "AND +i.doc_type = 'invoice' AND " LIVE_I " ORDER BY i.seq DESC LIMIT 1",
    /* Earlier live invoices: seq, period, the time zone the period was
     * invoiced in, its usage_seq, and when it was finalized (its prices are
     * those entered by then). The usage_seq up to which a period is billed
     * also counts later invoices' adjustments for it: INV_Q_ADJUSTED. */
    [INV_Q_HISTORY] =
        "SELECT i.seq, i.period, "
        "json_extract(CAST(i.doc AS TEXT), '$.period.timezone'), i.usage_seq, "
        "i.finalized_at FROM invoices i WHERE i.account = ?1 "
        "AND +i.doc_type = 'invoice' AND i.period < ?2 AND " LIVE_I " ORDER BY i.period",
    /* Whether the account ever had an invoice (live or void) for period ?2. */
    [INV_Q_EVER] = "SELECT EXISTS (SELECT 1 FROM invoices WHERE account = ?1 AND period = ?2)",
    /* The account's live invoices with adjustment lines (an original period
     * set): seq, usage_seq and the period adjusted, a row per line (a
     * period's largest usage_seq is all that is taken). One pass over the
     * account's lines; asking it of each earlier invoice in turn (a
     * subquery per history row) cost the square of the account's
     * invoices. */
    [INV_Q_ADJUSTED] = "SELECT j.seq, j.usage_seq, x.original_period FROM invoices j "
                       "JOIN invoice_lines x ON x.invoice_seq = j.seq WHERE j.account = ?1 "
                       "AND +j.doc_type = 'invoice' AND x.original_period != '' AND " LIVE_J,
    /* Whether usage that can change the rating of [?2, ?3) was written
     * after usage_seq ?4: an interval reaching past ?2 - ?5 and starting
     * before ?3 + ?5 (a row is at most a day long), a point inside. */
    [INV_Q_LATE] = "SELECT EXISTS (SELECT 1 FROM usage_intervals WHERE account = ?1 "
                   "AND start_s > ?2 - ?5 - 86400 AND start_s < ?3 + ?5 AND end_s > ?2 - ?5 "
                   "AND seq > ?4) OR EXISTS (SELECT 1 FROM usage_points WHERE account = ?1 "
                   "AND t_s >= ?2 AND t_s < ?3 AND seq > ?4)",
    /* What was billed for a period: the lines of its invoice ?1 (adjustments
     * for other periods excluded) and adjustment lines naming it ?3 on later
     * live invoices of the account ?2, each as the kind it adjusts. */
    [INV_Q_BILLED] =
        "SELECT " INV_LINE_COLS " FROM invoice_lines WHERE invoice_seq = ?1 "
        "AND kind != 'adjustment' UNION ALL "
        "SELECT x.kind, x.meter, x.pricing, x.migration, x.sku, x.dim2, x.quantity, "
        "x.unit_price_nano, x.amount_minor, x.adjusts, x.original_period FROM invoice_lines x "
        "JOIN invoices j ON j.seq = x.invoice_seq WHERE j.account = ?2 "
        "AND +j.doc_type = 'invoice' AND j.seq > ?1 AND x.original_period = ?3 AND " LIVE_J,
};

sqlite3_stmt *inv_stmt(inv_gatherer *g, inv_query q)
{
    sqlite3_reset(g->st[q]);
    sqlite3_clear_bindings(g->st[q]);
    return g->st[q];
}

const char *inv_query_sql(inv_query q)
{
    return queries[q];
}

tally_ledger *inv_gatherer_ledger(inv_gatherer *g)
{
    return g->l;
}

/* Twice the longest minimum billable duration of any card, at most a day
 * (rating/rate_minimum.c). Usage outside a period is billed in it only
 * through a run that starts in the period and is shorter than its
 * minimum M: such a run's rows all start within M of its start, so a row
 * that joins or ends it starts within 2M after the period's end, or ends
 * within M before its start. Farther usage cannot change the period's
 * lines. The gather still reads a day either side. */
static int64_t late_margin(const inv_gatherer *g)
{
    int64_t m = 0;
    for (size_t i = 0; i < g->n_cards; i++)
        for (size_t k = 0; k < g->cards[i]->n_skus; k++)
            if (g->cards[i]->skus[k].min_billable_s > m)
                m = g->cards[i]->skus[k].min_billable_s;
    return m >= 43200 ? 86400 : 2 * m;
}

int64_t inv_late_margin(const inv_gatherer *g)
{
    return g->late_margin_s;
}

bool inv_late_always(const inv_gatherer *g)
{
    return g->late_always;
}

tally_err inv_gatherer_create(tally_ledger *l, inv_gatherer **out)
{
    inv_gatherer *g = calloc(1, sizeof *g);
    if (!g)
        return TALLY_NOMEM;
    g->l = l;
    tally_err e = ledger_shards_refresh(l);
    if (!e)
        e = ledger_cards(l, &g->cards, &g->n_cards);
    if (!e)
        e = ledger_spot_points(l, &g->spot, &g->spot_entered_s, &g->n_spot);
    if (!e && !(g->cards_as_of = calloc(g->n_cards + 1, sizeof *g->cards_as_of)))
        e = TALLY_NOMEM;
    if (!e && !(g->spot_as_of = calloc(g->n_spot + 1, sizeof *g->spot_as_of)))
        e = TALLY_NOMEM;
    g->as_of_s = INT64_MAX;
    const char *raw = getenv("TALLY_RAW_POINTS");
    g->raw_points = raw && strcmp(raw, "1") == 0;
    const char *always = getenv("TALLY_LATE_ALWAYS");
    g->late_always = always && strcmp(always, "1") == 0;
    if (!e)
        g->late_margin_s = late_margin(g);
    /* Prepared once per connection (ledger_cached): a balance refresh makes
     * a gatherer for every commit of the meter. */
    for (int i = 0; i < INV_Q_COUNT && !e; i++)
        e = ledger_cached(l, queries[i], &g->st[i]);
    if (e) {
        inv_gatherer_destroy(g);
        return e;
    }
    *out = g;
    return TALLY_OK;
}

void inv_gatherer_destroy(inv_gatherer *g)
{
    if (!g)
        return;
    for (int i = 0; i < INV_Q_COUNT; i++)
        if (g->st[i])
            (void)ledger_cached_done(g->l, g->st[i], SQLITE_DONE);
    free(g->spot);
    free(g->spot_entered_s);
    free(g->cards_as_of);
    free(g->spot_as_of);
    free(g);
}

/* Bitemporal prices (SPEC section 2): from now on inv_gather() rates with
 * the rate cards and spot points entered at or before as_of_s (a price
 * entered in the very second of a finalization counts as in force for it);
 * INT64_MAX restores all of them. */
void inv_gather_as_of(inv_gatherer *g, int64_t as_of_s)
{
    const int64_t *card_at = g->l->card_entered_s;
    g->as_of_s = as_of_s;
    g->n_cards_as_of = g->n_spot_as_of = 0;
    for (size_t i = 0; i < g->n_cards; i++)
        if (!card_at || card_at[i] <= as_of_s)
            g->cards_as_of[g->n_cards_as_of++] = g->cards[i];
    for (size_t i = 0; i < g->n_spot; i++)
        if (g->spot_entered_s[i] <= as_of_s)
            g->spot_as_of[g->n_spot_as_of++] = g->spot[i];
}

void inv_input_release(inv_input *x)
{
    free(x->intervals);
    free(x->interval_ids);
    free(x->points);
    free(x->commitments);
    free(x->grants);
    memset(x, 0, sizeof *x);
}

/* Makes room for one more element in a growable array. */
static tally_err grow(void **arr, size_t n, size_t *cap, size_t size)
{
    return ledger_grow(arr, n, cap, size, 64);
}

/* Binds account, window [lo, hi) and currency to st (query q). */
static tally_err bind(inv_gatherer *g, sqlite3_stmt *st, int q, const char *account, int64_t lo,
                      int64_t hi, const char *currency)
{
    sqlite3_reset(st);
    int rc = sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(st, 2, lo);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(st, 3, hi);
    if (rc == SQLITE_OK && q == INV_Q_GRANTS)
        rc = sqlite3_bind_text(st, 4, currency, -1, SQLITE_STATIC);
    return rc == SQLITE_OK ? TALLY_OK : ledger_stmt_err(g->l, st, rc);
}

static tally_err step_done(inv_gatherer *g, sqlite3_stmt *st, int rc)
{
    tally_err e = rc == SQLITE_DONE ? TALLY_OK : ledger_stmt_err(g->l, st, rc);
    sqlite3_reset(st);
    return e;
}

static tally_err read_intervals(inv_gatherer *g, sqlite3_stmt *st, inv_input *x)
{
    tally_err e =
        bind(g, st, INV_Q_INTERVALS, x->account.id, x->start_s - DAY_S, x->end_s + DAY_S, NULL);
    int rc;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        e = grow((void **)&x->intervals, x->n_intervals, &x->cap_intervals, sizeof(tally_interval));
        if (!e)
            e = grow((void **)&x->interval_ids, x->n_intervals, &x->cap_interval_ids,
                     sizeof *x->interval_ids);
        if (e)
            break;
        x->interval_ids[x->n_intervals] = sqlite3_column_int64(st, 8);
        tally_interval *iv = &x->intervals[x->n_intervals++];
        memset(iv, 0, sizeof *iv);
        iv->meter = (tally_meter)sqlite3_column_int(st, 0);
        iv->pricing = (tally_pricing)sqlite3_column_int(st, 1);
        iv->migration = sqlite3_column_int(st, 2) != 0;
        inv_col_text(st, 3, iv->resource, sizeof iv->resource);
        inv_col_text(st, 4, iv->dim, sizeof iv->dim);
        iv->weight = sqlite3_column_int64(st, 5);
        iv->start_s = sqlite3_column_int64(st, 6);
        iv->end_s = sqlite3_column_int64(st, 7);
        if (iv->start_s < x->end_s && iv->end_s > x->start_s)
            x->n_in_window++;
    }
    return e ? (sqlite3_reset(st), e) : step_done(g, st, rc);
}

/* The points of [lo, hi), second by second, from st (INV_Q_POINTS' text). */
static tally_err read_points_in(inv_gatherer *g, sqlite3_stmt *st, inv_input *x, int64_t lo,
                                int64_t hi)
{
    tally_err e = bind(g, st, INV_Q_POINTS, x->account.id, lo, hi, NULL);
    int rc;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        e = grow((void **)&x->points, x->n_points, &x->cap_points, sizeof(tally_point));
        if (e)
            break;
        tally_point *p = &x->points[x->n_points++];
        memset(p, 0, sizeof *p);
        p->meter = (tally_meter)sqlite3_column_int(st, 0);
        inv_col_text(st, 1, p->dim, sizeof p->dim);
        inv_col_text(st, 2, p->dim2, sizeof p->dim2);
        p->t_s = sqlite3_column_int64(st, 3);
        p->qty = sqlite3_column_int64(st, 4);
        x->n_in_window++;
    }
    return e ? (sqlite3_reset(st), e) : step_done(g, st, rc);
}

static tally_err read_points(inv_gatherer *g, sqlite3_stmt *st, inv_input *x)
{
    return read_points_in(g, st, x, x->start_s, x->end_s);
}

/* ---- Points by the hour (schemas/013_points_hourly.sql) --------------------- */

#define HOUR_S 3600

typedef struct hour_row {
    tally_point p;
    bool whole; /* the sum is known (it fit in 64 bits) */
} hour_row;

typedef struct hours {
    hour_row *v;
    size_t n, cap;
    int64_t *raw; /* hours read second by second, sorted, unique */
    size_t n_raw, cap_raw;
    int64_t *bounds; /* times at which a price or a credit epoch may change */
    size_t n_bounds, cap_bounds;
} hours;

static tally_err push_i64(int64_t **v, size_t *n, size_t *cap, int64_t t)
{
    tally_err e = grow((void **)v, *n, cap, sizeof **v);
    if (!e)
        (*v)[(*n)++] = t;
    return e;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Whether a bound falls strictly inside (h, h + 1 hour). */
static bool cut_inside(const hours *hs, int64_t h)
{
    size_t lo = 0, n = hs->n_bounds;
    while (lo < n) { /* the first bound > h */
        size_t mid = lo + (n - lo) / 2;
        if (hs->bounds[mid] <= h)
            lo = mid + 1;
        else
            n = mid;
    }
    return lo < hs->n_bounds && hs->bounds[lo] < h + HOUR_S;
}

/* The times where rating may price or credit two seconds differently: the
 * window's edges, the rate cards' starts and the grants' windows. */
static tally_err hour_bounds(inv_gatherer *g, const inv_input *x, hours *hs)
{
    tally_err e = push_i64(&hs->bounds, &hs->n_bounds, &hs->cap_bounds, x->start_s);
    if (!e)
        e = push_i64(&hs->bounds, &hs->n_bounds, &hs->cap_bounds, x->end_s);
    for (size_t i = 0; !e && i < g->n_cards; i++)
        e = push_i64(&hs->bounds, &hs->n_bounds, &hs->cap_bounds, g->cards[i]->effective_from_s);
    for (size_t i = 0; !e && i < x->n_grants; i++) {
        e = push_i64(&hs->bounds, &hs->n_bounds, &hs->cap_bounds, x->grants[i].effective_s);
        if (!e)
            e = push_i64(&hs->bounds, &hs->n_bounds, &hs->cap_bounds, x->grants[i].expires_s);
    }
    if (!e)
        qsort(hs->bounds, hs->n_bounds, sizeof *hs->bounds, cmp_i64);
    return e;
}

static tally_err read_hour_rows(inv_gatherer *g, inv_input *x, hours *hs, int64_t *last)
{
    sqlite3_stmt *st = g->st[INV_Q_HOURS];
    tally_err e = bind(g, st, INV_Q_HOURS, x->account.id, x->start_s, x->end_s, NULL);
    int rc;
    *last = INT64_MIN;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        e = grow((void **)&hs->v, hs->n, &hs->cap, sizeof *hs->v);
        if (e)
            break;
        hour_row *r = &hs->v[hs->n++];
        memset(r, 0, sizeof *r);
        r->p.meter = (tally_meter)sqlite3_column_int(st, 0);
        inv_col_text(st, 1, r->p.dim, sizeof r->p.dim);
        inv_col_text(st, 2, r->p.dim2, sizeof r->p.dim2);
        r->p.t_s = sqlite3_column_int64(st, 3);
        r->whole = sqlite3_column_type(st, 4) != SQLITE_NULL;
        r->p.qty = sqlite3_column_int64(st, 4);
        if (r->p.t_s > *last)
            *last = r->p.t_s;
    }
    return e ? (sqlite3_reset(st), e) : step_done(g, st, rc);
}

/* An hour is read second by second when its sum is unknown, when it is not
 * wholly inside the window, when a bound falls inside it, or when it is one
 * of the account's last two hours with usage (the balance's burn rate rates
 * the ten minutes before the latest usage: include/tally/balance.h). Every
 * other hour is priced and credited alike in each of its seconds, so its sum
 * rates to the same line, to the fen, as its seconds do. */
static bool hour_raw(const hours *hs, const hour_row *r, int64_t start, int64_t end, int64_t last)
{
    int64_t h = r->p.t_s;
    return !r->whole || h < start || h + HOUR_S > end || h >= last - HOUR_S || cut_inside(hs, h);
}

static bool is_raw(const hours *hs, int64_t h)
{
    return bsearch(&h, hs->raw, hs->n_raw, sizeof *hs->raw, cmp_i64) != NULL;
}

/* Hours whole where they can be, seconds where they must be. */
static tally_err read_points_hourly(inv_gatherer *g, inv_input *x)
{
    hours hs = {0};
    int64_t last;
    tally_err e = hour_bounds(g, x, &hs);
    if (!e)
        e = read_hour_rows(g, x, &hs, &last);
    for (size_t i = 0; !e && i < hs.n; i++)
        if (hour_raw(&hs, &hs.v[i], x->start_s, x->end_s, last))
            e = push_i64(&hs.raw, &hs.n_raw, &hs.cap_raw, hs.v[i].p.t_s);
    if (!e && hs.n_raw) {
        qsort(hs.raw, hs.n_raw, sizeof *hs.raw, cmp_i64);
        size_t k = 1;
        for (size_t i = 1; i < hs.n_raw; i++)
            if (hs.raw[i] != hs.raw[k - 1])
                hs.raw[k++] = hs.raw[i];
        hs.n_raw = k;
    }
    for (size_t i = 0; !e && i < hs.n; i++) {
        if (is_raw(&hs, hs.v[i].p.t_s))
            continue;
        e = grow((void **)&x->points, x->n_points, &x->cap_points, sizeof(tally_point));
        if (!e) {
            x->points[x->n_points++] = hs.v[i].p;
            x->n_in_window++;
        }
    }
    for (size_t i = 0; !e && i < hs.n_raw;) { /* runs of consecutive raw hours */
        size_t j = i + 1;
        while (j < hs.n_raw && hs.raw[j] == hs.raw[j - 1] + HOUR_S)
            j++;
        int64_t lo = hs.raw[i] > x->start_s ? hs.raw[i] : x->start_s;
        int64_t hi = hs.raw[j - 1] + HOUR_S < x->end_s ? hs.raw[j - 1] + HOUR_S : x->end_s;
        if (lo < hi)
            e = read_points_in(g, g->st[INV_Q_POINTS], x, lo, hi);
        i = j;
    }
    free(hs.v);
    free(hs.raw);
    free(hs.bounds);
    return e;
}

static tally_err read_commitments(inv_gatherer *g, inv_input *x)
{
    sqlite3_stmt *st = g->st[INV_Q_COMMITMENTS];
    tally_err e = bind(g, st, INV_Q_COMMITMENTS, x->account.id, x->start_s, x->end_s, NULL);
    int rc;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        e = grow((void **)&x->commitments, x->n_commitments, &x->cap_commitments,
                 sizeof(tally_commitment));
        if (e)
            break;
        tally_commitment *c = &x->commitments[x->n_commitments++];
        memset(c, 0, sizeof *c);
        c->id = sqlite3_column_int64(st, 0);
        inv_col_text(st, 1, c->sku, sizeof c->sku);
        c->cards = sqlite3_column_int64(st, 2);
        c->from_s = sqlite3_column_int64(st, 3);
        c->to_s = sqlite3_column_int64(st, 4);
    }
    return e ? (sqlite3_reset(st), e) : step_done(g, st, rc);
}

/* One grant row; grants with nothing left are skipped. A stored scope that
 * no longer parses is a ledger error (it was checked when granted). */
static tally_err grant_row(inv_gatherer *g, sqlite3_stmt *st, inv_input *x)
{
    int64_t remaining = sqlite3_column_int64(st, 6);
    if (remaining <= 0)
        return TALLY_OK;
    tally_err e = grow((void **)&x->grants, x->n_grants, &x->cap_grants, sizeof(tally_grant));
    if (e)
        return e;
    tally_grant *gr = &x->grants[x->n_grants];
    memset(gr, 0, sizeof *gr);
    gr->id = sqlite3_column_int64(st, 0);
    const char *kind = (const char *)sqlite3_column_text(st, 1);
    const char *scope = (const char *)sqlite3_column_text(st, 5);
    const char *why = NULL;
    if (tally_grant_kind_from_name(kind, &gr->kind) != TALLY_OK ||
        tally_scope_parse(scope ? scope : "", &gr->scope, &why) != TALLY_OK) {
        snprintf(g->l->errmsg, sizeof g->l->errmsg, "grant %lld: bad kind or scope",
                 (long long)gr->id);
        return TALLY_DB;
    }
    gr->priority = sqlite3_column_int(st, 2);
    gr->effective_s = sqlite3_column_int64(st, 3);
    gr->expires_s =
        sqlite3_column_type(st, 4) == SQLITE_NULL ? TALLY_TIME_MAX : sqlite3_column_int64(st, 4);
    gr->remaining_minor = remaining;
    x->n_grants++;
    return TALLY_OK;
}

static tally_err read_grants(inv_gatherer *g, inv_input *x)
{
    sqlite3_stmt *st = g->st[INV_Q_GRANTS];
    tally_err e =
        bind(g, st, INV_Q_GRANTS, x->account.id, x->start_s, x->end_s, x->account.currency);
    int rc;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW)
        e = grant_row(g, st, x);
    return e ? (sqlite3_reset(st), e) : step_done(g, st, rc);
}

typedef struct usage_ctx {
    inv_gatherer *g;
    inv_input *x;
} usage_ctx;

static tally_err shard_intervals(void *ctx, sqlite3_stmt *st, int64_t snap_seq)
{
    usage_ctx *c = ctx;
    (void)snap_seq;
    return read_intervals(c->g, st, c->x);
}

static tally_err shard_points(void *ctx, sqlite3_stmt *st, int64_t snap_seq)
{
    usage_ctx *c = ctx;
    (void)snap_seq;
    return read_points(c->g, st, c->x);
}

/* The account's intervals and points: from this database, or from main.db
 * and the shards holding the account. */
static tally_err read_usage(inv_gatherer *g, inv_input *x)
{
    tally_err e;
    if (!g->l->shards) {
        e = x->intervals_given ? TALLY_OK : read_intervals(g, g->st[INV_Q_INTERVALS], x);
        if (e)
            return e;
        return g->raw_points ? read_points(g, g->st[INV_Q_POINTS], x) : read_points_hourly(g, x);
    }
    usage_ctx c = {g, x};
    e = ledger_usage_each(g->l, x->account.id, LEDGER_USAGE_INTERVALS, queries[INV_Q_INTERVALS], 0,
                          shard_intervals, &c);
    if (!e)
        e = ledger_usage_each(g->l, x->account.id, LEDGER_USAGE_POINTS, queries[INV_Q_POINTS], 0,
                              shard_points, &c);
    return e;
}

tally_err inv_gather(inv_gatherer *g, const tally_account *acct, int64_t start_s, int64_t end_s,
                     bool with_grants, inv_input *x)
{
    const tally_currency *ccy = tally_currency_find(acct->currency);
    if (!ccy)
        return TALLY_UNKNOWN_CURRENCY;
    x->account = *acct;
    x->start_s = start_s;
    x->end_s = end_s;
    x->n_points = x->n_commitments = x->n_grants = 0;
    x->n_in_window = 0;
    if (x->intervals_given && g->l->shards)
        return TALLY_INTERNAL; /* the cache serves plain ledgers only */
    if (!x->intervals_given)
        x->n_intervals = 0;
    for (size_t i = 0; x->intervals_given && i < x->n_intervals; i++)
        if (x->intervals[i].start_s < end_s && x->intervals[i].end_s > start_s)
            x->n_in_window++;
    tally_err e = read_commitments(g, x);
    if (!e && with_grants) /* first: their windows decide which hours are read whole */
        e = read_grants(g, x);
    if (!e)
        e = read_usage(g, x);
    if (e)
        return e;
    x->in = (tally_rating_input){
        .account = x->account.id,
        .minor_digits = ccy->minor_digits,
        .period_start_s = start_s,
        .period_end_s = end_s,
        .cards = g->as_of_s == INT64_MAX ? g->cards : g->cards_as_of,
        .n_cards = g->as_of_s == INT64_MAX ? g->n_cards : g->n_cards_as_of,
        .spot = g->as_of_s == INT64_MAX ? g->spot : g->spot_as_of,
        .n_spot = g->as_of_s == INT64_MAX ? g->n_spot : g->n_spot_as_of,
        .intervals = x->intervals,
        .n_intervals = x->n_intervals,
        .points = x->points,
        .n_points = x->n_points,
        .commitments = x->commitments,
        .n_commitments = x->n_commitments,
        .grants = x->grants,
        .n_grants = x->n_grants,
    };
    return TALLY_OK;
}
