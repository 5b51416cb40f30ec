/* Calendar arithmetic in IANA time zones: billing periods ("YYYY-MM") and
 * local days. libc only: a zone is entered by setting TZ, so these are not
 * for concurrent use from several threads. */
#ifndef TALLY_PERIOD_H
#define TALLY_PERIOD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tally/err.h"

/* Parses "YYYY-MM" (exactly 7 bytes, year 1970..9998, month 01..12).
 * Errors: TALLY_INVAL. */
TALLY_MUST_CHECK tally_err tally_period_parse(const char *period, int *year, int *month);

/* Whether tz names a zone Tally can use: "UTC" or a file under the zoneinfo
 * directory ($TZDIR or /usr/share/zoneinfo), with no "..", no leading '/'. */
bool tally_tz_valid(const char *tz);

/* The UTC bounds [start, end) of the local calendar day holding t_s in tz,
 * and its label "YYYY-MM-DD" (cap >= 11). Errors: TALLY_INVAL. */
TALLY_MUST_CHECK tally_err tally_day_bounds(const char *tz, int64_t t_s, int64_t *start_s,
                                            int64_t *end_s, char *label, size_t cap);

/* The period "YYYY-MM" holding t_s in tz (cap >= 8). Errors: TALLY_INVAL. */
TALLY_MUST_CHECK tally_err tally_period_of(const char *tz, int64_t t_s, char *period, size_t cap);

/* The period before or after "YYYY-MM" (delta -1 or +1), into out (cap >= 8). */
void tally_period_step(const char *period, int delta, char *out, size_t cap);

/* The UTC bounds [start, end) of period "YYYY-MM" in an IANA time zone.
 * Errors: TALLY_INVAL. */
TALLY_MUST_CHECK tally_err tally_period_bounds(const char *period, const char *tz_name,
                                               int64_t *start_s, int64_t *end_s);

#endif
