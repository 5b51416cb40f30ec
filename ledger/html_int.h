/* Internal to the invoice HTML page (ledger/html.c, ledger/html_chart.c). */
#ifndef TALLY_HTML_INT_H
#define TALLY_HTML_INT_H

#include <stddef.h>
#include <stdint.h>

#include "ledger_int.h"
#include "tally/buf.h"

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

/* Appends the usage chart of an account over [start_s, end_s): one bar chart
 * per meter with usage, a bar per local day in tz (inline SVG). Reads
 * usage_intervals and usage_points. A time zone that cannot be resolved gives
 * a note instead of the chart. Errors (in w->e): TALLY_DB, TALLY_NOMEM. */
void html_usage_chart(html_w *w, tally_ledger *l, const char *account, const char *tz,
                      int64_t start_s, int64_t end_s);

#endif
