/* RFC 3339 timestamps <-> UTC seconds, by pure integer arithmetic.
 *
 * Calendar conversion uses the proleptic Gregorian calendar through
 * days-from-civil arithmetic on 400-year eras, so it needs no time zone
 * database and gives the same answer on every machine. Leap seconds are not
 * representable (second 60 is rejected), as in POSIX time. */
#include <string.h>

#include "civil_int.h"
#include "tally/event.h"

#define SECONDS_PER_DAY 86400
#define DAYS_PER_ERA    146097 /* 400 Gregorian years */
/* 0000-01-01T00:00:00Z and 9999-12-31T23:59:59Z in Unix seconds. */
#define TIME_MIN_S (-62167219200LL)
#define TIME_MAX_S 253402300799LL

int64_t civil_floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

bool civil_is_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int civil_days_in_month(int64_t y, int m)
{
    static const unsigned char days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && civil_is_leap(y) ? 29 : days[m - 1];
}

/* Days since 1970-01-01 of the civil date y-m-d (m 1..12, d 1..31). */
int64_t civil_days_from(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = civil_floor_div(y, 400);
    int64_t yoe = y - era * 400;                                   /* 0..399 */
    int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1; /* 0..365, from March */
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;           /* 0..146096 */
    return era * DAYS_PER_ERA + doe - 719468;
}

/* Inverse of civil_days_from. */
void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
    z += 719468;
    int64_t era = civil_floor_div(z, DAYS_PER_ERA);
    int64_t doe = z - era * DAYS_PER_ERA;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

/* Reads exactly n decimal digits at s[*i]; false if any is not a digit. */
static bool digits(const char *s, size_t len, size_t *i, int n, int *out)
{
    if (len - *i < (size_t)n)
        return false;
    int v = 0;
    for (int k = 0; k < n; k++) {
        unsigned char c = (unsigned char)s[*i + (size_t)k];
        if (c < '0' || c > '9')
            return false;
        v = v * 10 + (c - '0');
    }
    *i += (size_t)n;
    *out = v;
    return true;
}

static bool expect(const char *s, size_t len, size_t *i, char a, char b)
{
    if (*i >= len || (s[*i] != a && s[*i] != b))
        return false;
    (*i)++;
    return true;
}

/* Parses the zone suffix at s[*i]: Z, z or +HH:MM / -HH:MM (|offset| <= 23:59),
 * giving the offset east of UTC in seconds. */
static bool parse_zone(const char *s, size_t len, size_t *i, int64_t *offset_s)
{
    if (*i >= len)
        return false;
    char c = s[*i];
    if (c == 'Z' || c == 'z') {
        (*i)++;
        *offset_s = 0;
        return true;
    }
    if (c != '+' && c != '-')
        return false;
    (*i)++;
    int hh, mm;
    if (!digits(s, len, i, 2, &hh) || !expect(s, len, i, ':', ':') || !digits(s, len, i, 2, &mm) ||
        hh > 23 || mm > 59)
        return false;
    *offset_s = (c == '-' ? -1 : 1) * (int64_t)(hh * 3600 + mm * 60);
    return true;
}

tally_err tally_time_parse(const char *s, size_t len, int64_t *out_s)
{
    size_t i = 0;
    int year = 0, mon = 0, day = 0, hh = 0, mi = 0, ss = 0;
    if (!s || !digits(s, len, &i, 4, &year) || !expect(s, len, &i, '-', '-') ||
        !digits(s, len, &i, 2, &mon) || !expect(s, len, &i, '-', '-') ||
        !digits(s, len, &i, 2, &day) || !expect(s, len, &i, 'T', 't') ||
        !digits(s, len, &i, 2, &hh) || !expect(s, len, &i, ':', ':') ||
        !digits(s, len, &i, 2, &mi) || !expect(s, len, &i, ':', ':') || !digits(s, len, &i, 2, &ss))
        return TALLY_PARSE;
    if (mon < 1 || mon > 12 || day < 1 || day > civil_days_in_month(year, mon) || hh > 23 ||
        mi > 59 || ss > 59)
        return TALLY_PARSE;
    if (i < len && s[i] == '.') { /* fraction: at least one digit, truncated */
        size_t start = ++i;
        while (i < len && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == start)
            return TALLY_PARSE;
    }
    int64_t offset_s;
    if (!parse_zone(s, len, &i, &offset_s) || i != len)
        return TALLY_PARSE;
    *out_s =
        civil_days_from(year, mon, day) * SECONDS_PER_DAY + hh * 3600 + mi * 60 + ss - offset_s;
    return TALLY_OK;
}

/* Writes v as exactly n decimal digits (v >= 0). */
static void put_digits(char *p, int64_t v, int n)
{
    for (int k = n - 1; k >= 0; k--) {
        p[k] = (char)('0' + v % 10);
        v /= 10;
    }
}

tally_err tally_time_format(int64_t t_s, char *buf, size_t cap)
{
    if (cap < 21)
        return TALLY_TOO_LARGE;
    if (t_s < TIME_MIN_S || t_s > TIME_MAX_S)
        return TALLY_RANGE;
    int64_t days = civil_floor_div(t_s, SECONDS_PER_DAY);
    int64_t sod = t_s - days * SECONDS_PER_DAY;
    int64_t y;
    int m, d;
    civil_from_days(days, &y, &m, &d);
    memcpy(buf, "0000-00-00T00:00:00Z", 21);
    put_digits(buf, y, 4);
    put_digits(buf + 5, m, 2);
    put_digits(buf + 8, d, 2);
    put_digits(buf + 11, sod / 3600, 2);
    put_digits(buf + 14, sod / 60 % 60, 2);
    put_digits(buf + 17, sod % 60, 2);
    return TALLY_OK;
}
