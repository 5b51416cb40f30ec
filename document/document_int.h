/* Internal to the document layer (html.c, html_chart.c, ratecard_parse.c). */
#ifndef TALLY_DOCUMENT_INT_H
#define TALLY_DOCUMENT_INT_H

#include <stddef.h>
#include <stdint.h>

#include "tally/buf.h"
#include "tally/document.h"

/* An HTML writer with a sticky error: after the first failure every call is
 * a no-op, and the error is returned once at the end. */
typedef struct html_w {
    tally_buf *b;
    tally_err e;
} html_w;

/* Appends trusted markup as is. */
void hw_raw(html_w *w, const char *s);
/* Appends formatted trusted markup (numbers, fixed strings). */
void hw_fmt(html_w *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends text with the HTML special characters escaped. */
void hw_esc(html_w *w, const char *s);

/* Writes q / divisor as a decimal with thousands separators and at most
 * max_frac fractional digits (rounded half-up past them, trailing zeros
 * dropped): 75456 / 3600 -> "20.96". Integer arithmetic only. */
void html_decimal(char *buf, size_t cap, __int128 q, __int128 divisor, int max_frac);

/* A price unit in the plural ("card-hour" -> "card-hours", "GB-day" ->
 * "GB-days"; "GB" and "million tokens" stay), into buf. */
const char *html_unit_plural(const char *unit, char *buf, size_t cap);

/* The number of fractional digits to show a quantity with for people: 2
 * from one price unit up ("20.97"), else enough for 3 significant digits
 * ("0.0167"), at most 6. */
int html_human_frac(__int128 q, __int128 divisor);

/* The usage chart's value axis, in 10^-8 of a price unit (HTML_AXIS_SCALE),
 * for a largest day of max base units (divisor base units per price unit):
 * the top and the tick step, with 3 to 6 steps from 0 to the top, every tick
 * a multiple of 1, 2 or 5 x 10^k, and the top at most a third above max. */
#define HTML_AXIS_SCALE 100000000
typedef struct html_axis {
    __int128 top, step;
    int steps;
} html_axis;
html_axis html_chart_axis(__int128 max, int64_t divisor);

/* Appends the usage chart of an account over [start_s, end_s): one bar chart
 * per meter with usage, a bar per local day in tz (inline SVG), from src's
 * usage rows. A time zone that cannot be resolved gives a note instead of the
 * chart. Errors (in w->e): TALLY_NOMEM, src's. */
void html_usage_chart(html_w *w, const tally_page_source *src, const char *account, const char *tz,
                      int64_t start_s, int64_t end_s);

#endif
