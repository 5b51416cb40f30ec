/* tally_rate_period end to end on inputs built in C: the PRICEBOOK worked
 * examples, spot, reserved, minimums, insurance, credits, edges, overflow,
 * and tally_lines_diff. */
#include <stdlib.h>

#include "testutil.h"

#include "rating_fixture.h"

#define MAXN 64

typedef struct fx {
    tally_ratecard cards[4];
    const tally_ratecard *card_ptrs[4];
    size_t n_cards;
    tally_spot_point spot[16];
    size_t n_spot;
    tally_interval iv[MAXN];
    size_t n_iv;
    tally_point pt[MAXN];
    size_t n_pt;
    tally_commitment cm[8];
    size_t n_cm;
    tally_grant gr[8];
    size_t n_gr;
    tally_line extra[8];
    size_t n_extra;
    tally_rating_input in;
    tally_rating_result out;
    char why[256];
} fx;

static fx *fx_new(int64_t start_s, int64_t end_s)
{
    fx *f = calloc(1, sizeof *f);

    assert_non_null(f);
    f->cards[0] = pb_card();
    f->n_cards = 1;
    memcpy(f->spot, pb_spot, sizeof pb_spot);
    f->n_spot = sizeof pb_spot / sizeof pb_spot[0];
    f->in.account = "acct-1";
    f->in.minor_digits = 2;
    f->in.period_start_s = start_s;
    f->in.period_end_s = end_s;
    return f;
}

static fx *fx_march(void)
{
    return fx_new(T_2026_03, T_2026_04);
}

static tally_err fx_rate(fx *f)
{
    for (size_t i = 0; i < f->n_cards; i++)
        f->card_ptrs[i] = &f->cards[i];
    tally_rating_result_release(&f->out);
    f->in.cards = f->card_ptrs;
    f->in.n_cards = f->n_cards;
    f->in.spot = f->spot;
    f->in.n_spot = f->n_spot;
    f->in.intervals = f->iv;
    f->in.n_intervals = f->n_iv;
    f->in.points = f->pt;
    f->in.n_points = f->n_pt;
    f->in.commitments = f->cm;
    f->in.n_commitments = f->n_cm;
    f->in.grants = f->gr;
    f->in.n_grants = f->n_gr;
    f->in.extra_lines = f->extra;
    f->in.n_extra_lines = f->n_extra;
    f->why[0] = '\0';
    return tally_rate_period(&f->in, &f->out, f->why, sizeof f->why);
}

static void fx_ok(fx *f)
{
    tally_err err = fx_rate(f);
    if (err != TALLY_OK)
        fail_msg("rate: %s (%s)", tally_err_name(err), f->why);
}

static void fx_free(fx *f)
{
    tally_rating_result_release(&f->out);
    free(f);
}

static const tally_line *find(const fx *f, tally_line_kind kind, const char *sku,
                              tally_pricing pricing, bool migration, int64_t price)
{
    for (size_t i = 0; i < f->out.n_lines; i++) {
        const tally_line *l = &f->out.lines[i];
        if (l->kind == kind && strcmp(l->sku, sku) == 0 && l->pricing == pricing &&
            l->migration == migration && l->unit_price_nano == price)
            return l;
    }
    return NULL;
}

static size_t count_kind(const fx *f, tally_line_kind kind)
{
    size_t n = 0;
    for (size_t i = 0; i < f->out.n_lines; i++)
        n += f->out.lines[i].kind == kind;
    return n;
}

/* Lines add up, credits add up per line and in total, nothing negative. */
static void check_totals(const fx *f)
{
    int64_t sub = 0, cred = 0;
    for (size_t i = 0; i < f->out.n_lines; i++) {
        const tally_line *l = &f->out.lines[i];
        int64_t used = 0;
        sub += l->amount_minor;
        for (size_t k = 0; k < f->out.n_credits; k++)
            if (f->out.credits[k].line_index == i)
                used += f->out.credits[k].amount_minor;
        assert_int_equal(used, l->credited_minor);
        assert_true(l->credited_minor >= 0);
        assert_true(l->credited_minor <= (l->amount_minor > 0 ? l->amount_minor : 0));
    }
    for (size_t k = 0; k < f->out.n_credits; k++)
        cred += f->out.credits[k].amount_minor;
    assert_int_equal(sub, f->out.subtotal_minor);
    assert_int_equal(cred, f->out.total_credits_minor);
    assert_int_equal(sub - cred + f->out.credit_issued_minor, f->out.amount_due_minor);
    assert_true(f->out.amount_due_minor >= 0 && f->out.credit_issued_minor >= 0);
    assert_true(f->out.credit_issued_minor == 0 || f->out.amount_due_minor == 0);
    if (sub >= 0) {
        assert_true(cred <= sub);
        assert_true(f->out.amount_due_minor >= 0);
    }
}

/* What grant id used in total. */
static int64_t used_by(const fx *f, int64_t grant_id)
{
    int64_t n = 0;
    for (size_t k = 0; k < f->out.n_credits; k++)
        if (f->out.credits[k].grant_id == grant_id)
            n += f->out.credits[k].amount_minor;
    return n;
}

#define ADD_IV(f, x) ((f)->iv[(f)->n_iv++] = (x))
#define ADD_PT(f, x) ((f)->pt[(f)->n_pt++] = (x))
#define ADD_CM(f, x) ((f)->cm[(f)->n_cm++] = (x))
#define ADD_GR(f, x) ((f)->gr[(f)->n_gr++] = (x))
#define OD           TALLY_PRICING_ON_DEMAND
#define SPOT         TALLY_PRICING_SPOT
#define RES          TALLY_PRICING_RESERVED
#define MAR(d, h, m) (T_2026_03 + ((d)-1) * DAY + (h)*HOUR + (m)*60)
#define USAGE        TALLY_LINE_USAGE

/* ---- PRICEBOOK worked examples ---------------------------------------------------- */

static void example_a100_39_82(void **state)
{
    fx *f = fx_march();
    ADD_IV(f, accel("i-1", "a100-40g", OD, 8, MAR(2, 10, 0), MAR(2, 10, 0) + 9432));
    fx_ok(f);
    assert_int_equal(f->out.n_lines, 1);
    const tally_line *l = find(f, USAGE, "a100-40g", OD, false, NANO(1, 90));
    assert_non_null(l);
    assert_true(l->quantity == 75456);
    assert_int_equal(l->amount_minor, 3982);
    assert_int_equal(f->out.amount_due_minor, 3982);
    check_totals(f);
    fx_free(f);
}

static void example_tpu_trial(void **state)
{
    fx *f = fx_march();
    ADD_IV(f, accel("i-1", "tpu-v4-64", OD, 1, MAR(3, 0, 0), MAR(3, 5, 0)));
    ADD_GR(f, grant(7, TALLY_GRANT_TRIAL, 10, T_2026_03, T_2026_03 + 30 * DAY, 1000));
    fx_ok(f);
    assert_int_equal(f->out.subtotal_minor, 950);
    assert_int_equal(f->out.total_credits_minor, 950);
    assert_int_equal(f->out.amount_due_minor, 0);
    assert_int_equal(f->out.n_credits, 1);
    assert_int_equal(f->out.credits[0].grant_id, 7);
    assert_int_equal(f->out.credits[0].kind, TALLY_GRANT_TRIAL);
    assert_int_equal(f->out.credits[0].line_index, 0);
    assert_int_equal(f->gr[0].remaining_minor - used_by(f, 7), 50); /* 0.50 carries over */
    assert_int_equal(f->out.lines[0].credited_minor, 950);
    check_totals(f);
    fx_free(f);
}

static void example_spot_change(void **state)
{
    fx *f = fx_march();
    f->spot[f->n_spot++] = (tally_spot_point){"rtx4090", MAR(2, 12, 0), NANO(0, 80)};
    ADD_IV(f, accel("i-1", "rtx4090", SPOT, 1, MAR(2, 11, 30), MAR(2, 12, 30)));
    fx_ok(f);
    assert_int_equal(f->out.n_lines, 2);
    assert_int_equal(f->out.lines[0].unit_price_nano, NANO(0, 50)); /* canonical: by price */
    assert_int_equal(f->out.lines[0].amount_minor, 25);
    assert_int_equal(f->out.lines[1].unit_price_nano, NANO(0, 80));
    assert_int_equal(f->out.lines[1].amount_minor, 40);
    assert_int_equal(f->out.subtotal_minor, 65);
    check_totals(f);
    fx_free(f);
}

static void example_h100_minimum(void **state)
{
    fx *f = fx_march();
    ADD_IV(f, accel("i-1", "h100", OD, 1, MAR(2, 10, 0), MAR(2, 10, 0) + 20));
    fx_ok(f);
    assert_int_equal(f->out.n_lines, 2);
    const tally_line *u = find(f, USAGE, "h100", OD, false, NANO(2, 58));
    const tally_line *m = find(f, TALLY_LINE_MINIMUM, "h100", OD, false, NANO(2, 58));
    assert_non_null(u);
    assert_non_null(m);
    assert_true(u->quantity == 20);
    assert_true(m->quantity == 40);
    assert_int_equal(f->out.subtotal_minor, 4);
    check_totals(f);
    fx_free(f);
}

/* ---- Spot ---------------------------------------------------------------------- */

static void spot_change_inside_one_event(void **state)
{
    fx *f = fx_march();
    int64_t t = MAR(2, 8, 0);
    /* two points at the same second: the later one in the input wins */
    f->spot[f->n_spot++] = (tally_spot_point){"rtx4090", t + 40, NANO(0, 70)};
    f->spot[f->n_spot++] = (tally_spot_point){"rtx4090", t + 40, NANO(0, 80)};
    ADD_IV(f, accel("i-1", "rtx4090", SPOT, 2, t, t + 100));
    fx_ok(f);
    const tally_line *a = find(f, USAGE, "rtx4090", SPOT, false, NANO(0, 50));
    const tally_line *b = find(f, USAGE, "rtx4090", SPOT, false, NANO(0, 80));
    assert_non_null(a);
    assert_non_null(b);
    assert_true(a->quantity == 80);
    assert_true(b->quantity == 120);
    assert_null(find(f, USAGE, "rtx4090", SPOT, false, NANO(0, 70)));
    check_totals(f);
    fx_free(f);
}

static void spot_without_point_has_no_price(void **state)
{
    fx *f = fx_march();
    f->n_spot = 0;
    ADD_IV(f, accel("i-1", "rtx4090", SPOT, 1, MAR(2, 8, 0), MAR(2, 9, 0)));
    assert_int_equal(fx_rate(f), TALLY_NO_PRICE);
    assert_true(strstr(f->why, "rtx4090") != NULL);
    assert_null(f->out.lines);
    assert_int_equal(f->out.n_lines, 0);
    fx_free(f);
}

static void no_price_for_unknown_sku_or_class(void **state)
{
    fx *f = fx_march();
    ADD_IV(f, accel("i-1", "b200", OD, 1, MAR(2, 8, 0), MAR(2, 9, 0)));
    assert_int_equal(fx_rate(f), TALLY_NO_PRICE);
    assert_true(strstr(f->why, "b200") != NULL);
    f->n_iv = 0;
    ADD_IV(f, storage("v-1", "tape", 1, MAR(2, 8, 0), MAR(2, 9, 0)));
    assert_int_equal(fx_rate(f), TALLY_NO_PRICE);
    f->n_iv = 0;
    ADD_IV(f, accel("i-1", "tpu-v4-64", RES, 1, MAR(2, 8, 0), MAR(2, 9, 0)));
    assert_int_equal(fx_rate(f), TALLY_NO_PRICE);
    f->n_iv = 0;
    ADD_PT(f, point(TALLY_METER_TRAFFIC, "moon", "egress", MAR(2, 8, 0), 10));
    assert_int_equal(fx_rate(f), TALLY_NO_PRICE);
    fx_free(f);
}

/* ---- Reserved -------------------------------------------------------------------- */

static void commitment_overage_idle_days(void **state)
{
    fx *f = fx_march();
    ADD_CM(f, commitment(1, "a100-40g", 2, T_2026_03 - 10 * DAY, T_2026_04 + 10 * DAY));
    ADD_IV(f, accel("r-1", "a100-40g", RES, 3, MAR(5, 0, 0), MAR(5, 10, 0)));
    fx_ok(f);
    assert_int_equal(f->out.n_lines, 3);
    const tally_line *u = &f->out.lines[0], *c = &f->out.lines[1], *o = &f->out.lines[2];
    assert_int_equal(u->kind, USAGE);
    assert_int_equal(u->pricing, RES);
    assert_true(u->quantity == 108000);
    assert_int_equal(u->unit_price_nano, 0);
    assert_int_equal(u->amount_minor, 0);
    assert_int_equal(c->kind, TALLY_LINE_COMMITMENT);
    assert_true(c->quantity == 2 * 31 * DAY); /* idle days billed too */
    assert_int_equal(c->unit_price_nano, NANO(1, 14));
    assert_int_equal(c->amount_minor, 169632);
    assert_int_equal(o->kind, TALLY_LINE_OVERAGE);
    assert_int_equal(o->pricing, RES);
    assert_true(o->quantity == 36000);
    assert_int_equal(o->unit_price_nano, NANO(1, 90));
    assert_int_equal(o->amount_minor, 1900);
    assert_int_equal(count_kind(f, TALLY_LINE_MINIMUM), 0);
    check_totals(f);
    fx_free(f);
}

static void commitment_partial_and_overlapping_usage(void **state)
{
    fx *f = fx_march();
    int64_t t = MAR(25, 0, 0);
    ADD_CM(f, commitment(1, "h100", 1, MAR(21, 0, 0), TALLY_TIME_MAX));
    ADD_CM(f, commitment(2, "h100", 2, t, t + 100));
    /* 4 cards over [t, t+100) minus 3 committed, then 4 over [t+100, t+150) minus 1 */
    ADD_IV(f, accel("r-1", "h100", RES, 2, t, t + 150));
    ADD_IV(f, accel("r-2", "h100", RES, 2, t + 50, t + 150));
    /* reserved usage of another SKU is not covered by the h100 commitment */
    ADD_IV(f, accel("r-3", "a100-80g", RES, 1, t, t + 3600));
    fx_ok(f);
    const tally_line *c = find(f, TALLY_LINE_COMMITMENT, "h100", RES, false, NANO(1, 55));
    assert_non_null(c);
    assert_true(c->quantity == 11 * DAY + 2 * 100);
    const tally_line *o = find(f, TALLY_LINE_OVERAGE, "h100", RES, false, NANO(2, 58));
    assert_non_null(o);
    assert_true(o->quantity == 1 * 50 + 3 * 50); /* [t+50,t+100): 4-3; [t+100,t+150): 4-1 */
    const tally_line *o2 = find(f, TALLY_LINE_OVERAGE, "a100-80g", RES, false, NANO(2, 30));
    assert_non_null(o2);
    assert_true(o2->quantity == 3600);
    assert_int_equal(o2->amount_minor, 230);
    check_totals(f);
    fx_free(f);
}

/* ---- Minimums ---------------------------------------------------------------------- */

static void two_short_runs_topped_up(void **state)
{
    fx *f = fx_march();
    int64_t t = MAR(10, 12, 0);
    ADD_IV(f, accel("i-1", "h100", OD, 1, t, t + 10));
    ADD_IV(f, accel("i-1", "h100", OD, 1, t + 200, t + 220)); /* gap 190 > 60: new run */
    ADD_IV(f, accel("i-2", "h100", OD, 1, t, t + 10));
    ADD_IV(f, accel("i-2", "h100", OD, 1, t + 50, t + 60)); /* gap 40: one run of 60 s */
    fx_ok(f);
    const tally_line *m = find(f, TALLY_LINE_MINIMUM, "h100", OD, false, NANO(2, 58));
    assert_non_null(m);
    assert_true(m->quantity == 50 + 40);
    assert_int_equal(m->amount_minor, 6); /* 90 s x 2.58 / 3600 = 0.0645 */
    const tally_line *u = find(f, USAGE, "h100", OD, false, NANO(2, 58));
    assert_true(u->quantity == 50);
    assert_int_equal(count_kind(f, TALLY_LINE_MINIMUM), 1);
    check_totals(f);
    fx_free(f);
}

static void minimum_uses_most_cards_and_spot_price(void **state)
{
    fx *f = fx_march();
    int64_t t = MAR(10, 12, 0);
    ADD_IV(f, accel("i-1", "a100-40g", OD, 2, t, t + 20));
    ADD_IV(f, accel("i-1", "a100-40g", OD, 1, t + 10, t + 30)); /* 3 cards at once */
    ADD_IV(f, accel("s-1", "rtx4090", SPOT, 1, t, t + 30));
    /* reserved and migration runs get no top-up */
    ADD_IV(f, accel("r-1", "h100", RES, 1, t, t + 5));
    tally_interval mig = accel("m-1", "h100", OD, 1, t, t + 5);
    mig.migration = true;
    ADD_IV(f, mig);
    fx_ok(f);
    const tally_line *m = find(f, TALLY_LINE_MINIMUM, "a100-40g", OD, false, NANO(1, 90));
    assert_non_null(m);
    assert_true(m->quantity == 3 * 60 - 60);
    m = find(f, TALLY_LINE_MINIMUM, "rtx4090", SPOT, false, NANO(0, 50));
    assert_non_null(m);
    assert_true(m->quantity == 30);
    assert_int_equal(count_kind(f, TALLY_LINE_MINIMUM), 2);
    check_totals(f);
    fx_free(f);
}

static void runs_crossing_period_edges(void **state)
{
    fx *f = fx_march();
    /* starts in February: February tops it up, March bills only its 20 s */
    ADD_IV(f, accel("x", "h100", OD, 1, T_2026_03 - 10, T_2026_03 + 20));
    /* starts in March, ends in April: March bills 10 s and the top-up */
    ADD_IV(f, accel("y", "h100", OD, 1, T_2026_04 - 10, T_2026_04 + 10));
    fx_ok(f);
    const tally_line *u = find(f, USAGE, "h100", OD, false, NANO(2, 58));
    const tally_line *m = find(f, TALLY_LINE_MINIMUM, "h100", OD, false, NANO(2, 58));
    assert_true(u->quantity == 30);
    assert_non_null(m);
    assert_true(m->quantity == 40);

    fx *feb = fx_new(T_2026_02, T_2026_03);
    ADD_IV(feb, f->iv[0]);
    ADD_IV(feb, f->iv[1]);
    fx_ok(feb);
    assert_true(find(feb, USAGE, "h100", OD, false, NANO(2, 58))->quantity == 10);
    assert_true(find(feb, TALLY_LINE_MINIMUM, "h100", OD, false, NANO(2, 58))->quantity == 30);

    fx *apr = fx_new(T_2026_04, T_2026_05);
    ADD_IV(apr, f->iv[1]);
    fx_ok(apr);
    assert_true(find(apr, USAGE, "h100", OD, false, NANO(2, 58))->quantity == 10);
    assert_int_equal(count_kind(apr, TALLY_LINE_MINIMUM), 0);
    fx_free(apr);
    fx_free(feb);
    fx_free(f);
}

/* ---- Insurance ----------------------------------------------------------------------- */

static void insurance_waiver_nets_zero(void **state)
{
    fx *f = fx_march();
    tally_interval mig = accel("m-1", "h100", OD, 1, MAR(3, 0, 0), MAR(3, 1, 0));
    mig.migration = true;
    ADD_IV(f, mig);
    mig.start_s = MAR(3, 2, 0);
    mig.end_s = mig.start_s + 20; /* short, but migration is never topped up */
    ADD_IV(f, mig);
    ADD_IV(f, accel("n-1", "h100", OD, 1, MAR(3, 0, 0), MAR(3, 1, 0)));
    ADD_GR(f, grant(1, TALLY_GRANT_TRIAL, 10, T_2026_03, TALLY_TIME_MAX, 1000));
    fx_ok(f);
    assert_int_equal(f->out.n_lines, 3);
    const tally_line *n = find(f, USAGE, "h100", OD, false, NANO(2, 58));
    const tally_line *m = find(f, USAGE, "h100", OD, true, NANO(2, 58));
    const tally_line *ins = find(f, TALLY_LINE_INSURANCE, "h100", OD, true, NANO(2, 58));
    assert_non_null(n);
    assert_non_null(m);
    assert_non_null(ins);
    assert_true(m->quantity == 3620);
    assert_int_equal(m->amount_minor, 259);
    assert_true(ins->quantity == m->quantity);
    assert_int_equal(ins->amount_minor, -259);
    assert_int_equal(f->out.subtotal_minor, 258);
    assert_int_equal(f->out.total_credits_minor, 258); /* only the non-migration line */
    assert_int_equal(m->credited_minor, 0);
    assert_int_equal(ins->credited_minor, 0);
    assert_int_equal(n->credited_minor, 258);
    assert_int_equal(count_kind(f, TALLY_LINE_MINIMUM), 0);
    check_totals(f);
    fx_free(f);
}

/* ---- Credits ------------------------------------------------------------------------- */

static void trial_expiring_mid_month(void **state)
{
    fx *f = fx_march();
    int64_t eff = T_2026_02 + 14 * DAY; /* expires 2026-03-17 */
    ADD_GR(f, grant(3, TALLY_GRANT_TRIAL, 10, eff, eff + 30 * DAY, 1000));
    ADD_IV(f, accel("i-1", "tpu-v4-64", OD, 1, MAR(5, 0, 0), MAR(5, 1, 0)));
    ADD_IV(f, accel("i-1", "tpu-v4-64", OD, 1, MAR(20, 0, 0), MAR(20, 1, 0)));
    fx_ok(f);
    assert_int_equal(f->out.n_lines, 1);
    assert_int_equal(f->out.subtotal_minor, 380);
    assert_int_equal(used_by(f, 3), 190); /* only the usage before expiry */
    assert_int_equal(f->out.amount_due_minor, 190);
    check_totals(f);
    fx_free(f);
}

static void credit_is_exact_per_window(void **state)
{
    fx *f = fx_march();
    int64_t cut = MAR(10, 0, 0);
    static tally_sku_price skus[sizeof pb_skus / sizeof pb_skus[0]];
    memcpy(skus, pb_skus, sizeof skus);
    skus[0].min_billable_s = 0; /* no top-up: only the usage itself */
    f->cards[0].skus = skus;
    /* 9 s each side of the expiry: 0.00475 each, 0.0095 -> 0.01 in all */
    ADD_GR(f, grant(1, TALLY_GRANT_TRIAL, 10, T_2026_03, cut, 1000));
    ADD_GR(f, grant(2, TALLY_GRANT_GOODWILL, 20, cut, TALLY_TIME_MAX, 1000));
    ADD_IV(f, accel("i-1", "a100-40g", OD, 1, cut - 9, cut + 9));
    fx_ok(f);
    assert_int_equal(f->out.subtotal_minor, 1);
    assert_int_equal(used_by(f, 1), 0);
    assert_int_equal(used_by(f, 2), 0);
    check_totals(f);

    /* 30 s before (0.0158 -> 0.02) and 6 s after: the line is 0.019 -> 0.02 */
    f->iv[0] = accel("i-1", "a100-40g", OD, 1, cut - 30, cut + 6);
    fx_ok(f);
    assert_int_equal(f->out.subtotal_minor, 2);
    assert_int_equal(used_by(f, 1), 2);
    assert_int_equal(used_by(f, 2), 0);
    check_totals(f);
    fx_free(f);
}

/* What a grant paid is taken from the earliest usage in its window, so an
 * overlapping later grant pays only what is left inside its own window. */
static void overlapping_windows_never_pay_twice(void **state)
{
    fx *f = fx_march();
    ADD_GR(f, grant(1, TALLY_GRANT_TRIAL, 10, T_2026_03, MAR(15, 0, 0), 100000));
    ADD_GR(f, grant(2, TALLY_GRANT_GOODWILL, 20, MAR(10, 0, 0), T_2026_04, 100000));
    ADD_IV(f, accel("i-1", "tpu-v4-64", OD, 1, MAR(5, 0, 0), MAR(5, 1, 0)));
    ADD_IV(f, accel("i-1", "tpu-v4-64", OD, 1, MAR(12, 0, 0), MAR(12, 1, 0)));
    fx_ok(f);
    assert_int_equal(used_by(f, 1), 380); /* both hours lie in its window */
    assert_int_equal(used_by(f, 2), 0);

    f->gr[0].remaining_minor = 100; /* pays 1.00 of the 5 March hour */
    fx_ok(f);
    assert_int_equal(used_by(f, 1), 100);
    assert_int_equal(used_by(f, 2), 190); /* the 12 March hour, untouched by grant 1 */
    assert_int_equal(f->out.amount_due_minor, 90);
    check_totals(f);
    fx_free(f);
}

static void scoped_coupon_pays_reserved_only(void **state)
{
    fx *f = fx_march();
    const char *why = NULL;
    tally_grant c = grant(9, TALLY_GRANT_COUPON, 20, T_2026_01, TALLY_TIME_MAX, 200000);
    assert_int_equal(
        tally_scope_parse("sku=a100-40g|a100-80g|h100,pricing=reserved", &c.scope, &why), TALLY_OK);
    ADD_GR(f, c);
    ADD_CM(f, commitment(1, "h100", 1, T_2026_03, T_2026_04));
    ADD_IV(f, accel("r-1", "h100", RES, 2, MAR(4, 0, 0), MAR(4, 1, 0)));
    ADD_IV(f, accel("o-1", "a100-40g", OD, 1, MAR(4, 0, 0), MAR(4, 1, 0)));
    ADD_IV(f, accel("s-1", "rtx4090", RES, 1, MAR(4, 0, 0), MAR(4, 1, 0)));
    fx_ok(f);
    const tally_line *cl = find(f, TALLY_LINE_COMMITMENT, "h100", RES, false, NANO(1, 55));
    const tally_line *ol = find(f, TALLY_LINE_OVERAGE, "h100", RES, false, NANO(2, 58));
    const tally_line *od = find(f, USAGE, "a100-40g", OD, false, NANO(1, 90));
    const tally_line *rtx = find(f, TALLY_LINE_OVERAGE, "rtx4090", RES, false, NANO(1, 98));
    assert_int_equal(cl->amount_minor, 115320);
    assert_int_equal(ol->amount_minor, 258);
    assert_int_equal(cl->credited_minor, 115320);
    assert_int_equal(ol->credited_minor, 258);
    assert_int_equal(od->credited_minor, 0);
    assert_int_equal(rtx->credited_minor, 0); /* reserved, but not an A100/H100 */
    assert_int_equal(used_by(f, 9), 115578);
    assert_int_equal(f->out.amount_due_minor, 190 + 198);
    check_totals(f);
    fx_free(f);
}

static void grant_order_priority_expiry_age(void **state)
{
    fx *f = fx_march();
    /* cpu-container 35 h = 3.50 */
    ADD_IV(f, accel("c-1", "cpu-container", OD, 1, MAR(2, 0, 0), MAR(2, 0, 0) + 35 * HOUR));
    ADD_GR(f, grant(1, TALLY_GRANT_PREPAID, 10, T_2026_01, TALLY_TIME_MAX, 100));
    ADD_GR(f, grant(4, TALLY_GRANT_PREPAID, 10, T_2026_01, T_2026_05, 100));
    ADD_GR(f, grant(2, TALLY_GRANT_PREPAID, 10, T_2026_01, T_2026_05, 100));
    ADD_GR(f, grant(3, TALLY_GRANT_GOODWILL, 5, T_2026_01, TALLY_TIME_MAX, 100));
    fx_ok(f);
    assert_int_equal(f->out.subtotal_minor, 350);
    assert_int_equal(f->out.n_credits, 4);
    assert_int_equal(f->out.credits[0].grant_id, 3);
    assert_int_equal(f->out.credits[1].grant_id, 2);
    assert_int_equal(f->out.credits[2].grant_id, 4);
    assert_int_equal(f->out.credits[3].grant_id, 1);
    assert_int_equal(f->out.credits[3].amount_minor, 50);
    assert_int_equal(f->out.amount_due_minor, 0);
    check_totals(f);
    fx_free(f);
}

static void invoice_never_negative(void **state)
{
    fx *f = fx_march();
    ADD_IV(f, accel("c-1", "cpu-container", OD, 1, MAR(2, 0, 0), MAR(2, 0, 0) + 35 * HOUR));
    ADD_GR(f, grant(1, TALLY_GRANT_PREPAID, 10, T_2026_01, TALLY_TIME_MAX, 100000));
    fx_ok(f);
    assert_int_equal(f->out.total_credits_minor, 350);
    assert_int_equal(f->out.amount_due_minor, 0);
    check_totals(f);

    /* an extra (adjustment) line is billed but never paid by a grant */
    f->extra[f->n_extra++] = (tally_line){.kind = TALLY_LINE_ADJUSTMENT,
                                          .adjusts = USAGE,
                                          .meter = TALLY_METER_ACCELERATOR,
                                          .pricing = OD,
                                          .sku = "h100",
                                          .quantity = 3600,
                                          .unit_price_nano = NANO(2, 58),
                                          .amount_minor = 258,
                                          .credited_minor = 99,
                                          .original_period = "2026-02"};
    fx_ok(f);
    assert_int_equal(f->out.n_lines, 2);
    assert_int_equal(f->out.lines[1].kind, TALLY_LINE_ADJUSTMENT);
    assert_int_equal(f->out.lines[1].credited_minor, 0);
    assert_int_equal(f->out.subtotal_minor, 608);
    assert_int_equal(f->out.total_credits_minor, 350);
    assert_int_equal(f->out.amount_due_minor, 258);
    check_totals(f);

    /* a negative adjustment larger than the usage: no credit is used, the
     * amount due is 0 and the rest is a credit to issue (SPEC section 4) */
    f->extra[0].amount_minor = -500;
    f->extra[0].quantity = -7000;
    fx_ok(f);
    assert_int_equal(f->out.subtotal_minor, -150);
    assert_int_equal(f->out.total_credits_minor, 0);
    assert_int_equal(f->out.amount_due_minor, 0);
    assert_int_equal(f->out.credit_issued_minor, 150);
    check_totals(f);
    fx_free(f);
}

/* ---- Other meters ------------------------------------------------------------------- */

static void storage_all_month(void **state)
{
    fx *f = fx_march();
    ADD_IV(f, storage("v-1", "ssd", 500000000000LL, T_2026_03 - DAY, T_2026_04 + DAY));
    fx_ok(f);
    assert_int_equal(f->out.n_lines, 1);
    assert_int_equal(f->out.lines[0].meter, TALLY_METER_STORAGE);
    assert_int_equal(f->out.lines[0].pricing, TALLY_PRICING_NONE);
    assert_true(f->out.lines[0].quantity == (__int128)500000000000LL * 31 * DAY);
    assert_int_equal(f->out.lines[0].amount_minor, 930); /* 500 GB x 31 d x 0.0006 */
    check_totals(f);
    fx_free(f);
}

static void traffic_egress_and_internal(void **state)
{
    fx *f = fx_march();
    ADD_PT(f, point(TALLY_METER_TRAFFIC, "internet", "egress", MAR(2, 0, 0), 1500000000LL));
    ADD_PT(f, point(TALLY_METER_TRAFFIC, "internet", "egress", MAR(9, 0, 0), 500000000LL));
    ADD_PT(f, point(TALLY_METER_TRAFFIC, "internet", "ingress", MAR(2, 0, 0), 3000000000LL));
    ADD_PT(f, point(TALLY_METER_TRAFFIC, "internal", "egress", MAR(2, 0, 0), 5000000000LL));
    ADD_PT(f, point(TALLY_METER_TRAFFIC, "internet", "egress", T_2026_04, 1000000000LL));
    fx_ok(f);
    assert_int_equal(f->out.n_lines, 3);
    assert_string_equal(f->out.lines[0].sku, "internal");
    assert_int_equal(f->out.lines[0].amount_minor, 0);
    assert_string_equal(f->out.lines[1].dim2, "egress");
    assert_true(f->out.lines[1].quantity == 2000000000LL); /* April's point is not billed */
    assert_int_equal(f->out.lines[1].amount_minor, 100);
    assert_string_equal(f->out.lines[2].dim2, "ingress");
    assert_int_equal(f->out.lines[2].amount_minor, 0);
    assert_int_equal(f->out.subtotal_minor, 100);
    check_totals(f);
    fx_free(f);
}

static void tokens_input_output(void **state)
{
    fx *f = fx_march();
    static const tally_dim_price toks[] = {
        {"*", "input", NANO(4, 0)}, {"*", "output", NANO(8, 0)}, {"m1", "input", NANO(2, 0)}};
    f->cards[0].tokens = toks;
    f->cards[0].n_tokens = 3;
    ADD_PT(f, point(TALLY_METER_TOKENS, "m2", "input", MAR(2, 0, 0), 1500000));
    ADD_PT(f, point(TALLY_METER_TOKENS, "m2", "output", MAR(2, 0, 0), 250000));
    ADD_PT(f, point(TALLY_METER_TOKENS, "m1", "input", MAR(2, 0, 0), 1000000));
    fx_ok(f);
    assert_int_equal(f->out.n_lines, 3);
    assert_string_equal(f->out.lines[0].sku, "m1");
    assert_int_equal(f->out.lines[0].amount_minor, 200); /* model price wins over "*" */
    assert_int_equal(f->out.lines[1].amount_minor, 600);
    assert_int_equal(f->out.lines[2].amount_minor, 200);
    ADD_PT(f, point(TALLY_METER_TOKENS, "m2", "cached", MAR(2, 0, 0), 1));
    assert_int_equal(fx_rate(f), TALLY_NO_PRICE);
    fx_free(f);
}

/* ---- Cards, edges, overflow ------------------------------------------------------ */

static void ratecard_change_mid_period(void **state)
{
    fx *f = fx_march();
    static tally_sku_price skus[sizeof pb_skus / sizeof pb_skus[0]];
    memcpy(skus, pb_skus, sizeof skus);
    skus[0].on_demand_nano = NANO(2, 0);
    f->cards[1] = pb_card();
    f->cards[1].effective_from_s = MAR(15, 0, 0);
    f->cards[1].skus = skus;
    f->n_cards = 2;
    ADD_IV(f, accel("i-1", "a100-40g", OD, 1, MAR(14, 12, 0), MAR(15, 12, 0)));
    fx_ok(f);
    assert_int_equal(f->out.n_lines, 2);
    assert_int_equal(f->out.lines[0].unit_price_nano, NANO(1, 90));
    assert_int_equal(f->out.lines[0].amount_minor, 2280);
    assert_int_equal(f->out.lines[1].unit_price_nano, NANO(2, 0));
    assert_int_equal(f->out.lines[1].amount_minor, 2400);
    check_totals(f);
    fx_free(f);
}

static void usage_clipped_to_period(void **state)
{
    fx *f = fx_march();
    ADD_IV(f, accel("i-1", "a100-40g", OD, 2, T_2026_03 - HOUR, T_2026_03 + HOUR));
    ADD_IV(f, accel("i-2", "a100-40g", OD, 2, T_2026_04 - HOUR, T_2026_04 + HOUR));
    ADD_IV(f, accel("i-3", "a100-40g", OD, 2, T_2026_04, T_2026_04 + HOUR)); /* April */
    fx_ok(f);
    assert_int_equal(f->out.n_lines, 1);
    assert_true(f->out.lines[0].quantity == 4 * HOUR);
    assert_int_equal(f->out.lines[0].amount_minor, 760);
    fx_free(f);
}

static void overflow_is_reported(void **state)
{
    fx *f = fx_march();
    ADD_IV(f, accel("i-1", "a100-40g", OD, INT64_MAX, T_2026_03, T_2026_04));
    assert_int_equal(fx_rate(f), TALLY_OVERFLOW);
    assert_true(f->why[0] != '\0');
    assert_null(f->out.lines);

    /* two lines that each fit (5.7 and 7.7 * 10^18 fen) but whose sum does not */
    f->n_iv = 0;
    ADD_IV(f, accel("i-1", "a100-40g", OD, 30000000000000000LL, MAR(2, 0, 0), MAR(2, 1, 0)));
    fx_ok(f);
    assert_int_equal(f->out.subtotal_minor, 30000000000000000LL * 190);
    ADD_IV(f, accel("i-2", "h100", OD, 30000000000000000LL, MAR(2, 0, 0), MAR(2, 1, 0)));
    assert_int_equal(fx_rate(f), TALLY_OVERFLOW);
    assert_true(strstr(f->why, "subtotal") != NULL);

    /* bad input is refused, not rated */
    f->n_iv = 0;
    ADD_IV(f, accel("i-1", "a100-40g", OD, 1, MAR(2, 0, 0), MAR(1, 0, 0)));
    assert_int_equal(fx_rate(f), TALLY_INVAL);
    f->n_iv = 0;
    f->in.period_end_s = f->in.period_start_s;
    assert_int_equal(fx_rate(f), TALLY_INVAL);
    fx_free(f);
}

/* ---- Diff ------------------------------------------------------------------------------ */

static tally_line mkline(tally_line_kind kind, const char *sku, int64_t price, __int128 qty,
                         int64_t amount)
{
    tally_line l = {.kind = kind,
                    .adjusts = kind,
                    .meter = TALLY_METER_ACCELERATOR,
                    .pricing = OD,
                    .unit_price_nano = price,
                    .quantity = qty,
                    .amount_minor = amount};
    snprintf(l.sku, sizeof l.sku, "%s", sku);
    return l;
}

static void diff_makes_adjustments(void **state)
{
    tally_line now[] = {mkline(USAGE, "a100-40g", NANO(1, 90), 7200, 380),
                        mkline(USAGE, "h100", NANO(2, 58), 3600, 258),
                        mkline(TALLY_LINE_MINIMUM, "h100", NANO(2, 58), 40, 3)};
    tally_line billed[] = {mkline(USAGE, "a100-40g", NANO(1, 90), 3600, 190),
                           mkline(USAGE, "h100", NANO(2, 58), 3600, 258),
                           mkline(TALLY_LINE_ADJUSTMENT, "tpu-v4-64", NANO(1, 90), 100, 5),
                           mkline(TALLY_LINE_MINIMUM, "h100", NANO(2, 58), 40, 3)};
    billed[2].adjusts = USAGE;
    tally_line *out = NULL;
    size_t n = 99;

    assert_int_equal(tally_lines_diff(now, 3, billed, 4, "2026-03", &out, &n), TALLY_OK);
    assert_int_equal(n, 2);
    assert_int_equal(out[0].kind, TALLY_LINE_ADJUSTMENT);
    assert_int_equal(out[0].adjusts, USAGE);
    assert_string_equal(out[0].sku, "a100-40g");
    assert_true(out[0].quantity == 3600);
    assert_int_equal(out[0].amount_minor, 190);
    assert_string_equal(out[0].original_period, "2026-03");
    assert_string_equal(out[1].sku, "tpu-v4-64");
    assert_true(out[1].quantity == -100);
    assert_int_equal(out[1].amount_minor, -5);

    /* adjustments become extra lines of the next period, never credited */
    fx *f = fx_new(T_2026_04, T_2026_05);
    memcpy(f->extra, out, n * sizeof *out);
    f->n_extra = n;
    ADD_GR(f, grant(1, TALLY_GRANT_PREPAID, 10, T_2026_01, TALLY_TIME_MAX, 100000));
    fx_ok(f);
    assert_int_equal(f->out.subtotal_minor, 185);
    assert_int_equal(f->out.total_credits_minor, 0);
    assert_int_equal(f->out.amount_due_minor, 185);
    fx_free(f);
    free(out);

    /* nothing changed: no lines */
    assert_int_equal(tally_lines_diff(now, 3, now, 3, "2026-03", &out, &n), TALLY_OK);
    assert_int_equal(n, 0);
    free(out);
    /* overflow */
    now[0].amount_minor = INT64_MAX;
    billed[0].amount_minor = -1;
    assert_int_equal(tally_lines_diff(now, 1, billed, 1, "2026-03", &out, &n), TALLY_OVERFLOW);
    assert_null(out);
}

static void names_and_units(void **state)
{
    tally_grant_kind g;
    tally_line_kind l;

    for (int i = 0; i < TALLY_GRANT_KIND_COUNT; i++) {
        assert_int_equal(tally_grant_kind_from_name(tally_grant_kind_name(i), &g), TALLY_OK);
        assert_int_equal(g, i);
    }
    for (int i = 0; i < TALLY_LINE_KIND_COUNT; i++) {
        assert_int_equal(tally_line_kind_from_name(tally_line_kind_name(i), &l), TALLY_OK);
        assert_int_equal(l, i);
    }
    assert_string_equal(tally_grant_kind_name(TALLY_GRANT_COUPON), "coupon");
    assert_string_equal(tally_grant_kind_name(TALLY_GRANT_ADJUSTMENT), "adjustment");
    assert_string_equal(tally_line_kind_name(TALLY_LINE_OVERAGE), "overage");
    assert_int_equal(tally_grant_kind_from_name("Trial", &g), TALLY_NOT_FOUND);
    assert_int_equal(tally_line_kind_from_name(NULL, &l), TALLY_NOT_FOUND);
    assert_string_equal(tally_line_kind_name(TALLY_LINE_KIND_COUNT), "unknown");
    assert_int_equal(tally_meter_unit_divisor(TALLY_METER_ACCELERATOR), 3600);
    assert_int_equal(tally_meter_unit_divisor(TALLY_METER_STORAGE), 86400000000000LL);
    assert_int_equal(tally_meter_unit_divisor(TALLY_METER_TRAFFIC), 1000000000LL);
    assert_int_equal(tally_meter_unit_divisor(TALLY_METER_TOKENS), 1000000LL);
    assert_int_equal(tally_meter_unit_divisor(TALLY_METER_COUNT), 0);
    assert_string_equal(tally_meter_unit(TALLY_METER_STORAGE), "byte-second");
    assert_string_equal(tally_meter_price_unit(TALLY_METER_TOKENS), "million tokens");
    tally_rating_result_release(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(example_a100_39_82),
        cmocka_unit_test(example_tpu_trial),
        cmocka_unit_test(example_spot_change),
        cmocka_unit_test(example_h100_minimum),
        cmocka_unit_test(spot_change_inside_one_event),
        cmocka_unit_test(spot_without_point_has_no_price),
        cmocka_unit_test(no_price_for_unknown_sku_or_class),
        cmocka_unit_test(commitment_overage_idle_days),
        cmocka_unit_test(commitment_partial_and_overlapping_usage),
        cmocka_unit_test(two_short_runs_topped_up),
        cmocka_unit_test(minimum_uses_most_cards_and_spot_price),
        cmocka_unit_test(runs_crossing_period_edges),
        cmocka_unit_test(insurance_waiver_nets_zero),
        cmocka_unit_test(trial_expiring_mid_month),
        cmocka_unit_test(credit_is_exact_per_window),
        cmocka_unit_test(overlapping_windows_never_pay_twice),
        cmocka_unit_test(scoped_coupon_pays_reserved_only),
        cmocka_unit_test(grant_order_priority_expiry_age),
        cmocka_unit_test(invoice_never_negative),
        cmocka_unit_test(storage_all_month),
        cmocka_unit_test(traffic_egress_and_internal),
        cmocka_unit_test(tokens_input_output),
        cmocka_unit_test(ratecard_change_mid_period),
        cmocka_unit_test(usage_clipped_to_period),
        cmocka_unit_test(overflow_is_reported),
        cmocka_unit_test(diff_makes_adjustments),
        cmocka_unit_test(names_and_units),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
