/* The invoice page's usage chart: quantity used per local day, per meter.
 *
 * What is charted, and why: the quantity of each meter used on each calendar
 * day of the period in the account's time zone, in the meter's price unit
 * (card-hours, GB-days, GB, million tokens). Quantities are exact sums of the
 * stored usage (intervals are split at local midnights; points fall on the
 * day that holds them), so the chart never disagrees with the ledger; money
 * per day would need every line re-rated and rounded per day, and those
 * rounded days would not add up to the invoice's lines. Usage recorded after
 * the invoice was finalized (billed later as adjustments) shows here too.
 *
 * Everything is integer arithmetic: bar heights are q * height / top with
 * the axis top a "nice" number (html_chart_axis) just above the largest day,
 * so the tallest bar fills at least three quarters of the plot; a day with
 * any usage at all gets a bar of at least MIN_BAR_H, so it stays visible. */
#include <stdlib.h>
#include <string.h>

#include "document_int.h"
#include "tally/period.h"
#include "tally/rating.h"

#define MAX_DAYS  62 /* a month is at most 31 local days; more means bad input */
#define SVG_W     860
#define SVG_H     170
#define PLOT_X    74
#define PLOT_Y    12
#define PLOT_W    (SVG_W - PLOT_X - 8)
#define PLOT_H    (SVG_H - PLOT_Y - 30)
#define MIN_BAR_H 3 /* viewBox units: about 3 px on screen and 1 mm in print */

typedef struct chart_days {
    size_t n;
    int64_t start_s[MAX_DAYS], end_s[MAX_DAYS];
    char label[MAX_DAYS][11];
    __int128 qty[TALLY_METER_COUNT][MAX_DAYS]; /* base units */
} chart_days;

static const struct {
    const char *title;
    const char *color;
} meter_style[TALLY_METER_COUNT] = {
    [TALLY_METER_ACCELERATOR] = {"Accelerator usage", "#2563eb"},
    [TALLY_METER_STORAGE] = {"Storage", "#0d9488"},
    [TALLY_METER_TRAFFIC] = {"Network traffic", "#7c3aed"},
    [TALLY_METER_TOKENS] = {"Inference tokens", "#d97706"},
};

static tally_err make_days(chart_days *d, const char *tz, int64_t start_s, int64_t end_s)
{
    d->n = 0;
    for (int64_t t = start_s; t < end_s;) {
        if (d->n == MAX_DAYS)
            return TALLY_INVAL;
        int64_t ds, de;
        tally_err e = tally_day_bounds(tz, t, &ds, &de, d->label[d->n], sizeof d->label[d->n]);
        if (e)
            return e;
        if (de <= t)
            return TALLY_INVAL;
        d->start_s[d->n] = ds < start_s ? start_s : ds;
        d->end_s[d->n] = de > end_s ? end_s : de;
        d->n++;
        t = de;
    }
    return TALLY_OK;
}

/* Adds weight x the overlap of [s, e) with each day. */
static void add_interval(chart_days *d, int m, int64_t weight, int64_t s, int64_t e)
{
    for (size_t i = 0; i < d->n; i++) {
        int64_t lo = s > d->start_s[i] ? s : d->start_s[i];
        int64_t hi = e < d->end_s[i] ? e : d->end_s[i];
        if (hi > lo)
            d->qty[m][i] += (__int128)weight * (hi - lo);
    }
}

static void add_point(chart_days *d, int m, int64_t qty, int64_t t)
{
    for (size_t i = 0; i < d->n; i++)
        if (t >= d->start_s[i] && t < d->end_s[i]) {
            d->qty[m][i] += qty;
            return;
        }
}

static tally_err load_interval(void *ctx, int m, int64_t weight, int64_t start_s, int64_t end_s)
{
    if (m >= 0 && m < TALLY_METER_COUNT && weight >= 0) /* else: tally verify reports it */
        add_interval(ctx, m, weight, start_s, end_s);
    return TALLY_OK;
}

static tally_err load_point(void *ctx, int m, int64_t qty, int64_t t_s, int64_t unused)
{
    (void)unused;
    if (m >= 0 && m < TALLY_METER_COUNT && qty >= 0)
        add_point(ctx, m, qty, t_s);
    return TALLY_OK;
}

/* Sums the account's stored usage into the days. */
static tally_err load_usage(const tally_page_source *src, chart_days *d, const char *account,
                            int64_t start_s, int64_t end_s)
{
    tally_err e = src->usage(src->ctx, account, start_s, end_s, false, load_interval, d);
    return e ? e : src->usage(src->ctx, account, start_s, end_s, true, load_point, d);
}

/* Axis tops and their tick steps in tenths of a power of ten: 1 (0.2 apart),
 * 1.2 (0.2), 1.5 (0.5), 2 (0.5), 2.5 (0.5), 3 (0.5), 4 (1), 5 (1), 6 (1), 8 (2).
 * Consecutive tops are at most a third apart. */
static const struct {
    int top, step;
} nice_tops[] = {{10, 2}, {12, 2},  {15, 5},  {20, 5},  {25, 5},
                 {30, 5}, {40, 10}, {50, 10}, {60, 10}, {80, 20}};

html_axis html_chart_axis(__int128 max, int64_t divisor)
{
    __int128 need = (max * HTML_AXIS_SCALE + divisor - 1) / divisor;
    for (__int128 p = 1;; p *= 10)
        for (size_t i = 0; i < sizeof nice_tops / sizeof *nice_tops; i++)
            if (nice_tops[i].top * p >= need)
                return (html_axis){nice_tops[i].top * p, nice_tops[i].step * p,
                                   nice_tops[i].top / nice_tops[i].step};
}

int html_human_frac(__int128 q, __int128 divisor)
{
    __int128 a = q < 0 ? -q : q;
    if (a >= divisor)
        return 2;
    int frac = 2;
    __int128 scaled = a * 100;
    while (frac < 6 && scaled < divisor * 100) {
        scaled *= 10;
        frac++;
    }
    return frac;
}

static void grid(html_w *w, html_axis ax)
{
    for (int i = 0; i <= ax.steps; i++) {
        int y = PLOT_Y + PLOT_H - PLOT_H * i / ax.steps;
        char v[64];
        html_decimal(v, sizeof v, ax.step * i, HTML_AXIS_SCALE, 8);
        hw_fmt(w, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" class=\"%s\"/>", PLOT_X, y,
               PLOT_X + PLOT_W, y, i == 0 ? "axis" : "grid");
        hw_fmt(w, "<text x=\"%d\" y=\"%d\" class=\"ylab\">%s</text>", PLOT_X - 8, y + 4, v);
    }
}

static void bars(html_w *w, const chart_days *d, int m, html_axis ax, int64_t divisor,
                 const char *unit)
{
    int n = (int)d->n, slot = PLOT_W / n, bw = slot > 6 ? slot - 4 : slot - 1;
    for (int i = 0; i < n; i++) {
        __int128 q = d->qty[m][i];
        int x = PLOT_X + PLOT_W * i / n + (slot - bw) / 2;
        int h = (int)(q * HTML_AXIS_SCALE * PLOT_H / (ax.top * divisor));
        if (q > 0 && h < MIN_BAR_H)
            h = MIN_BAR_H;
        if (q > 0) {
            char v[64];
            html_decimal(v, sizeof v, q, divisor, 6);
            hw_fmt(w, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\">", x,
                   PLOT_Y + PLOT_H - h, bw, h, meter_style[m].color);
            char units[96];
            hw_fmt(w, "<title>%s: %s ", d->label[i], v);
            hw_esc(w, strcmp(v, "1") == 0 ? unit : html_unit_plural(unit, units, sizeof units));
            hw_raw(w, "</title></rect>");
        }
        const char *day = d->label[i] + 8;
        hw_fmt(w, "<text x=\"%d\" y=\"%d\" class=\"xlab\">%s</text>", x + bw / 2,
               PLOT_Y + PLOT_H + 16, day[0] == '0' ? day + 1 : day);
    }
}

static void one_chart(html_w *w, const chart_days *d, int m)
{
    __int128 max = 0, total = 0;
    for (size_t i = 0; i < d->n; i++) {
        max = d->qty[m][i] > max ? d->qty[m][i] : max;
        total += d->qty[m][i];
    }
    if (max == 0)
        return;
    int64_t divisor = tally_meter_unit_divisor((tally_meter)m);
    const char *unit = tally_meter_price_unit((tally_meter)m);
    html_axis ax = html_chart_axis(max, divisor);
    char t[64], exact[64];
    html_decimal(t, sizeof t, total, divisor, html_human_frac(total, divisor));
    html_decimal(exact, sizeof exact, total, divisor, 6);
    hw_raw(w, "<figure class=\"chart\"><figcaption><span>");
    hw_esc(w, meter_style[m].title);
    char units[96];
    html_unit_plural(unit, units, sizeof units);
    hw_raw(w, " per day <span class=\"muted\">(");
    hw_esc(w, units);
    hw_raw(w, ")</span></span><span class=\"muted\" title=\"");
    hw_fmt(w, "%s ", exact); /* the exact figure on hover; the invoice lines have it too */
    hw_esc(w, units);
    hw_fmt(w, "\">%s%s ", strcmp(t, exact) != 0 ? "about " : "", t);
    hw_esc(w, units);
    hw_raw(w, " in the period</span></figcaption>");
    hw_fmt(w, "<svg viewBox=\"0 0 %d %d\" width=\"100%%\" role=\"img\" aria-label=\"", SVG_W,
           SVG_H);
    hw_esc(w, meter_style[m].title);
    hw_raw(w, " per day\">");
    grid(w, ax);
    bars(w, d, m, ax, divisor, unit);
    hw_raw(w, "</svg></figure>");
}

void html_usage_chart(html_w *w, const tally_page_source *src, const char *account, const char *tz,
                      int64_t start_s, int64_t end_s)
{
    if (w->e)
        return;
    chart_days *d = calloc(1, sizeof *d);
    if (!d) {
        w->e = TALLY_NOMEM;
        return;
    }
    if (make_days(d, tz, start_s, end_s) != TALLY_OK) {
        /* a time zone this system cannot resolve: the page is still useful */
        hw_raw(w, "<p class=\"muted\">The usage chart is not available: unknown time zone.</p>");
        goto out_days;
    }
    tally_err e = load_usage(src, d, account, start_s, end_s);
    if (e != TALLY_OK) {
        w->e = e;
        goto out_days;
    }
    size_t before = w->b->len;
    for (int m = 0; m < TALLY_METER_COUNT; m++)
        one_chart(w, d, m);
    if (!w->e && w->b->len == before)
        hw_raw(w, "<p class=\"muted\">No metered usage is recorded for this period.</p>");
out_days:
    free(d);
}
