/* Late usage: adjustments on the next invoice, never a changed invoice.
 *
 * Every finalized invoice records meta.usage_seq at finalization; every usage
 * row carries the usage_seq of the batch that last wrote it. A live finalized
 * period P of the account is "billed up to" the largest usage_seq among its
 * invoice and the later live invoices that carry adjustment lines for P.
 * Usage rows written after that are late if they can change P's lines:
 * inside P, or within twice the longest minimum billable duration of its
 * edges (inv_late_margin: only a short run that starts in P reads usage
 * outside it). For such a P:
 *
 *   now    = P re-rated from the ledger's usage as it is, with the prices as
 *            they stood when P's invoice was finalized (rate cards and spot
 *            points entered by its finalized_at: SPEC section 2, so a price
 *            set back-dated into P never re-prices it), same gather as a
 *            run, no grants: adjustment lines are paid by no credit;
 *   billed = P's own invoice lines (not its adjustments for other periods)
 *            plus adjustment lines naming P on later live invoices, each
 *            taken as the kind it adjusts;
 *   tally_lines_diff(now, billed) -> adjustment lines naming P, appended to
 *   the current period's invoice.
 *
 * A voided period has no live invoice and is not adjusted: the next run for
 * it issues a fresh invoice that rates all its usage and takes back (as
 * negative adjustment lines naming the period itself) the adjustments for it
 * that live invoices already billed. From then on, what was billed for the
 * period is the fresh invoice's own lines plus adjustments on invoices after
 * it.
 *
 * In a ledger directory an invoice's usage_seq is a snapshot of every
 * database's usage_seq (ledger_int.h, ledger directories): usage is late where a database holding
 * the account has rows written after its own seq in the snapshot. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"

typedef struct billed_set {
    tally_line *v;
    size_t n, cap;
} billed_set;

static tally_err push_line(tally_line **v, size_t *n, size_t *cap, const tally_line *ln)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        tally_line *p = realloc(*v, nc * sizeof *p);
        if (!p)
            return TALLY_NOMEM;
        *v = p;
        *cap = nc;
    }
    (*v)[(*n)++] = *ln;
    return TALLY_OK;
}

/* One stored line, as the kind it bills (adjustments as what they adjust). */
static tally_err row_line(sqlite3_stmt *st, tally_line *ln)
{
    tally_err e = inv_line_from_row(st, ln);
    if (!e && ln->kind == TALLY_LINE_ADJUSTMENT)
        ln->kind = ln->adjusts;
    return e;
}

static tally_err load_billed(inv_gatherer *g, const char *account, int64_t seq, const char *period,
                             billed_set *b)
{
    sqlite3_stmt *st = inv_stmt(g, INV_Q_BILLED);
    sqlite3_bind_int64(st, 1, seq);
    sqlite3_bind_text(st, 2, account, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, period, -1, SQLITE_STATIC);
    tally_ledger *l = inv_gatherer_ledger(g);
    tally_err e = TALLY_OK;
    int rc;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        tally_line ln;
        e = row_line(st, &ln);
        if (e)
            snprintf(l->errmsg, sizeof l->errmsg, "a stored line of %s for %s does not parse",
                     account, period);
        else
            e = push_line(&b->v, &b->n, &b->cap, &ln);
    }
    if (!e && rc != SQLITE_DONE)
        e = ledger_sqlite_err(l, rc);
    sqlite3_reset(st);
    return e;
}

typedef struct late_probe {
    tally_ledger *l;
    const char *account;
    int64_t start, end, margin;
    bool late;
} late_probe;

/* One database: whether it holds usage of the account around the period
 * written after seq (INV_Q_LATE). */
static tally_err late_in(void *ctx, sqlite3_stmt *st, int64_t seq)
{
    late_probe *p = ctx;
    if (p->late)
        return TALLY_OK;
    sqlite3_bind_text(st, 1, p->account, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, p->start);
    sqlite3_bind_int64(st, 3, p->end);
    sqlite3_bind_int64(st, 4, seq);
    sqlite3_bind_int64(st, 5, p->margin);
    int rc = sqlite3_step(st);
    tally_err e = TALLY_OK;
    if (rc == SQLITE_ROW)
        p->late = sqlite3_column_int(st, 0) != 0;
    else
        e = ledger_stmt_err(p->l, st, rc);
    sqlite3_reset(st);
    return e;
}

static tally_err is_late(inv_gatherer *g, const char *account, int64_t start, int64_t end,
                         int64_t seq, bool *late)
{
    tally_ledger *l = inv_gatherer_ledger(g);
    late_probe p = {l, account, start, end, inv_late_margin(g), false};
    if (inv_late_always(g)) {
        *late = true;
        return TALLY_OK;
    }
    tally_err e = l->shards ? ledger_usage_each(l, account, LEDGER_USAGE_LATE,
                                                inv_query_sql(INV_Q_LATE), seq, late_in, &p)
                            : late_in(&p, inv_stmt(g, INV_Q_LATE), seq);
    *late = p.late;
    return e;
}

/* Re-rates the period of h over [start, end) and appends its differences to what was billed. */
static tally_err adjust_period(inv_gatherer *g, const tally_account *acct, const inv_past *h,
                               int64_t start, int64_t end, inv_input *scratch, tally_line **lines,
                               size_t *n, size_t *cap, char *why, size_t why_cap)
{
    const char *p = h->period;
    int64_t seq = h->seq;
    inv_gather_as_of(g, h->finalized_at_s); /* the prices as they stood then */
    tally_err e = inv_gather(g, acct, start, end, false, scratch);
    inv_gather_as_of(g, INT64_MAX);
    if (e)
        return e;
    tally_rating_result now = {0};
    billed_set billed = {0};
    tally_line *diff = NULL;
    size_t n_diff = 0;
    e = tally_rate_period(&scratch->in, &now, why, why_cap);
    if (e)
        return e;
    e = load_billed(g, acct->id, seq, p, &billed);
    if (!e)
        e = tally_lines_diff(now.lines, now.n_lines, billed.v, billed.n, p, &diff, &n_diff);
    for (size_t i = 0; !e && i < n_diff; i++)
        e = push_line(lines, n, cap, &diff[i]);
    free(diff);
    free(billed.v);
    tally_rating_result_release(&now);
    return e;
}

/* A live invoice's adjustment lines for an earlier period (INV_Q_ADJUSTED). */
typedef struct adjusted {
    int64_t seq, usage_seq;
    char period[16]; /* "" when the stored text does not fit: it names no period */
} adjusted;

/* Steps st to its end, each row into one more element of *out (size
 * bytes, filled by row); resets st. Errors: TALLY_NOMEM, TALLY_DB. */
static tally_err rows_into(inv_gatherer *g, sqlite3_stmt *st, void **out, size_t *n, size_t size,
                           void (*row)(sqlite3_stmt *st, void *elem))
{
    size_t cap = 0;
    tally_err e = TALLY_OK;
    int rc;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        e = ledger_grow(out, *n, &cap, size, 8);
        if (!e)
            row(st, (char *)*out + (*n)++ * size);
    }
    if (!e && rc != SQLITE_DONE)
        e = ledger_sqlite_err(inv_gatherer_ledger(g), rc);
    sqlite3_reset(st);
    return e;
}

static void adjusted_row(sqlite3_stmt *st, void *elem)
{
    adjusted *a = elem;
    a->seq = sqlite3_column_int64(st, 0);
    a->usage_seq = sqlite3_column_int64(st, 1);
    if ((size_t)sqlite3_column_bytes(st, 2) < sizeof a->period)
        inv_col_text(st, 2, a->period, sizeof a->period);
    else
        a->period[0] = '\0';
}

static tally_err load_adjusted(inv_gatherer *g, const char *account, adjusted **out, size_t *n)
{
    sqlite3_stmt *st = inv_stmt(g, INV_Q_ADJUSTED);
    sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
    return rows_into(g, st, (void **)out, n, sizeof **out, adjusted_row);
}

/* The usage_seq up to which h's period is billed: the largest of its own
 * (at least 0) and those of later live invoices adjusting the period. */
static int64_t billed_to(const inv_past *h, const adjusted *a, size_t n)
{
    int64_t to = h->billed_to > 0 ? h->billed_to : 0;
    for (size_t i = 0; i < n; i++)
        if (a[i].seq > h->seq && a[i].usage_seq > to && strcmp(a[i].period, h->period) == 0)
            to = a[i].usage_seq;
    return to;
}

static void past_row(sqlite3_stmt *st, void *elem)
{
    inv_past *h = elem;
    h->seq = sqlite3_column_int64(st, 0);
    inv_col_text(st, 1, h->period, sizeof h->period);
    inv_col_text(st, 2, h->timezone, sizeof h->timezone);
    h->billed_to = sqlite3_column_int64(st, 3); /* its own usage_seq, until inv_history */
    h->finalized_at_s = sqlite3_column_int64(st, 4);
}

tally_err inv_history(inv_gatherer *g, const char *account, const char *period, inv_past **out,
                      size_t *n)
{
    sqlite3_stmt *st = inv_stmt(g, INV_Q_HISTORY);
    sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, period, -1, SQLITE_STATIC);
    *out = NULL;
    *n = 0;
    tally_err e = rows_into(g, st, (void **)out, n, sizeof **out, past_row);
    adjusted *adj = NULL;
    size_t n_adj = 0;
    if (!e && *n)
        e = load_adjusted(g, account, &adj, &n_adj);
    for (size_t i = 0; !e && i < *n; i++)
        (*out)[i].billed_to = billed_to(&(*out)[i], adj, n_adj);
    free(adj);
    return e;
}

/* Whether the account ever had an invoice for period (INV_Q_EVER). Only
 * adjust_period writes adjustment lines naming a period, and only for one
 * with a live invoice; invoices are never deleted: so a period never
 * invoiced has no adjustments to take back. */
static tally_err invoiced_ever(inv_gatherer *g, const char *account, const char *period, bool *ever)
{
    sqlite3_stmt *st = inv_stmt(g, INV_Q_EVER);
    sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, period, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    tally_err e = TALLY_OK;
    if (rc == SQLITE_ROW)
        *ever = sqlite3_column_int(st, 0) != 0;
    else
        e = ledger_sqlite_err(inv_gatherer_ledger(g), rc);
    sqlite3_reset(st);
    return e;
}

/* A period invoiced afresh after its invoice was voided: its new invoice
 * rates all its usage, so adjustments for it already billed on live invoices
 * are taken back (negated) on it. Invoice seq 0 does not exist, so the
 * billed query returns exactly those adjustment lines. */
static tally_err take_back(inv_gatherer *g, const tally_account *acct, const char *period,
                           tally_line **lines, size_t *n, size_t *cap)
{
    billed_set billed = {0};
    tally_line *diff = NULL;
    size_t n_diff = 0;
    bool ever = true;
    tally_err e = invoiced_ever(g, acct->id, period, &ever);
    if (!e && !ever) /* the common case: the billed query walks all the account's lines */
        return TALLY_OK;
    if (!e)
        e = load_billed(g, acct->id, 0, period, &billed);
    if (!e && billed.n)
        e = tally_lines_diff(NULL, 0, billed.v, billed.n, period, &diff, &n_diff);
    for (size_t i = 0; !e && i < n_diff; i++)
        e = push_line(lines, n, cap, &diff[i]);
    free(diff);
    free(billed.v);
    return e;
}

/* The first instant at or after which no usage row changes what the checks
 * of a period ending at end read: an interval starting a day after it (the
 * gather reads a day either side; the late check less), a point at it. */
static int64_t reads_to(int64_t end)
{
    return end > INT64_MAX - 86400 ? INT64_MAX : end + 86400;
}

tally_err inv_adjustments(inv_gatherer *g, const tally_account *acct, const char *period,
                          inv_input *scratch, tally_line **lines, size_t *n, size_t *cap, char *why,
                          size_t why_cap, int64_t *reads_to_out)
{
    inv_past *hist = NULL;
    size_t n_hist = 0;
    int64_t to = INT64_MIN;
    tally_err e = take_back(g, acct, period, lines, n, cap);
    if (!e)
        e = inv_history(g, acct->id, period, &hist, &n_hist);
    for (size_t i = 0; !e && i < n_hist; i++) {
        int64_t start, end;
        bool late = false;
        const char *tz = hist[i].timezone[0] ? hist[i].timezone : acct->timezone;
        e = tally_period_bounds(hist[i].period, tz, &start, &end);
        if (!e && reads_to(end) > to)
            to = reads_to(end);
        if (!e)
            e = is_late(g, acct->id, start, end, hist[i].billed_to, &late);
        if (!e && late)
            e = adjust_period(g, acct, &hist[i], start, end, scratch, lines, n, cap, why, why_cap);
    }
    free(hist);
    if (reads_to_out)
        *reads_to_out = to;
    return e;
}
