/* Billing periods and calendar days in IANA time zones.
 *
 * A period "YYYY-MM" runs from local midnight on the 1st of the month to
 * local midnight on the 1st of the next, in the account's time zone. The
 * zone's rules are asked only one question: the UTC offset in force at a
 * UTC instant (zone.c reads it from the zone's TZif file, as the C library
 * would, without the library's one process-wide TZ). The rest is integer
 * arithmetic on civil dates, so no mktime() guessing around DST changes:
 *
 *   - a local time L (civil seconds as if UTC) happens at t = L - off(t);
 *     the offsets in force a day and a half either side of L are the only
 *     candidates, and the earliest t that maps back to L wins (a repeated
 *     local midnight, at a fall-back change, starts the day at its first
 *     occurrence);
 *   - a local midnight that does not exist (a spring-forward change at
 *     midnight) starts the day at the change itself, found by bisection.
 *
 * Safe to call from any thread: nothing here touches the environment or the
 * C library's time zone state. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tally/period.h"
#include "civil_int.h"
#include "zone_int.h"

#define SPAN_S 129600 /* a day and a half: further than any UTC offset */

tally_err tally_period_parse(const char *period, int *year, int *month)
{
    if (!period || strlen(period) != 7 || period[4] != '-')
        return TALLY_INVAL;
    int v[6];
    for (int i = 0; i < 7; i++) {
        if (i == 4)
            continue;
        if (period[i] < '0' || period[i] > '9')
            return TALLY_INVAL;
        v[i < 4 ? i : i - 1] = period[i] - '0';
    }
    int y = v[0] * 1000 + v[1] * 100 + v[2] * 10 + v[3];
    int m = v[4] * 10 + v[5];
    if (y < 1970 || y > 9998 || m < 1 || m > 12)
        return TALLY_INVAL;
    *year = y;
    *month = m;
    return TALLY_OK;
}

static bool is_utc(const char *tz)
{
    return strcmp(tz, "UTC") == 0 || strcmp(tz, "Etc/UTC") == 0;
}

/* A name the zone directory may hold: no absolute path, no "..", only the
 * bytes IANA names use. */
static bool tz_name_ok(const char *tz)
{
    if (!tz || !*tz || strlen(tz) > 63)
        return false;
    if (tz[0] == '/' || tz[0] == ':' || strstr(tz, ".."))
        return false;
    for (const char *p = tz; *p; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '/' || c == '_' || c == '-' || c == '+';
        if (!ok)
            return false;
    }
    return true;
}

bool tally_tz_valid(const char *tz)
{
    if (tz && is_utc(tz))
        return true;
    const tally_zone *z;
    return tz_name_ok(tz) && zone_get(tz, &z) == TALLY_OK;
}

/* The zone named tz: NULL for UTC, else a loaded zone. */
static tally_err zone_of(const char *tz, const tally_zone **z)
{
    *z = NULL;
    if (tz && is_utc(tz))
        return TALLY_OK;
    return tz_name_ok(tz) ? zone_get(tz, z) : TALLY_INVAL;
}

/* The UTC offset (seconds east) in force at t in zone z. */
static int64_t offset_at(const tally_zone *z, int64_t t)
{
    return z ? zone_offset(z, t) : 0;
}

/* The first UTC instant at or after local civil time `local`. */
static int64_t local_to_utc(const tally_zone *z, int64_t local)
{
    int64_t cand[2] = {offset_at(z, local - SPAN_S), offset_at(z, local + SPAN_S)};
    int64_t best = INT64_MAX;
    for (int i = 0; i < 2; i++) {
        int64_t t = local - cand[i];
        if (offset_at(z, t) == cand[i] && t < best)
            best = t;
    }
    if (best != INT64_MAX)
        return best;
    /* A gap: the local time is skipped. The day starts at the change, the
     * first instant whose offset is the later one. */
    int64_t lo = local - (cand[0] > cand[1] ? cand[0] : cand[1]);
    int64_t hi = local - (cand[0] < cand[1] ? cand[0] : cand[1]);
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (offset_at(z, mid) == cand[1])
            hi = mid;
        else
            lo = mid + 1;
    }
    return hi;
}

static int64_t local_midnight(const tally_zone *z, int y, int m, int d)
{
    return local_to_utc(z, civil_days_from(y, m, d) * 86400);
}

tally_err tally_period_bounds(const char *period, const char *tz_name, int64_t *start_s,
                              int64_t *end_s)
{
    int y, m;
    if (tally_period_parse(period, &y, &m) != TALLY_OK)
        return TALLY_INVAL;
    const tally_zone *z;
    tally_err e = zone_of(tz_name ? tz_name : "UTC", &z);
    if (e)
        return e;
    *start_s = local_midnight(z, y, m, 1);
    *end_s = local_midnight(z, m == 12 ? y + 1 : y, m == 12 ? 1 : m + 1, 1);
    return TALLY_OK;
}

/* The local civil date holding t. */
static void local_date(const tally_zone *z, int64_t t, int *y, int *m, int *d)
{
    int64_t local = t + offset_at(z, t);
    int64_t year;
    civil_from_days(civil_floor_div(local, 86400), &year, m, d);
    *y = (int)year;
}

tally_err tally_day_bounds(const char *tz, int64_t t_s, int64_t *start_s, int64_t *end_s,
                           char *label, size_t cap)
{
    const tally_zone *z;
    tally_err e = zone_of(tz, &z);
    if (e)
        return e;
    int y, m, d;
    local_date(z, t_s, &y, &m, &d);
    int64_t day = civil_days_from(y, m, d);
    *start_s = local_to_utc(z, day * 86400);
    *end_s = local_to_utc(z, (day + 1) * 86400);
    if (label)
        snprintf(label, cap, "%04d-%02d-%02d", y, m, d);
    return TALLY_OK;
}

tally_err tally_period_of(const char *tz, int64_t t_s, char *period, size_t cap)
{
    const tally_zone *z;
    tally_err e = zone_of(tz, &z);
    if (e)
        return e;
    int y, m, d;
    local_date(z, t_s, &y, &m, &d);
    snprintf(period, cap, "%04d-%02d", y, m);
    return TALLY_OK;
}

void tally_period_step(const char *period, int delta, char *out, size_t cap)
{
    int y = 1970, m = 1;
    if (tally_period_parse(period, &y, &m) != TALLY_OK) {
        snprintf(out, cap, "%s", "");
        return;
    }
    int idx = y * 12 + (m - 1) + delta;
    snprintf(out, cap, "%04d-%02d", idx / 12, idx % 12 + 1);
}
