/* Time zones from TZif files (RFC 8536); see zone_int.h for why.
 *
 * A zone is its transitions (64-bit times of version 2 and later files,
 * 32-bit ones of version 1), the UTC offset of each local time type, and
 * the footer's POSIX TZ string ("EST5EDT,M3.2.0,M11.1.0"), which gives the
 * offsets after the last transition. The answers are the C library's own
 * (glibc's tzfile.c and tzset.c read the same files the same way), which
 * tests/base/test_zone.c checks for every zone installed, at every
 * transition and across 1900-2200:
 *   - before the first transition (or with none and no footer): the first
 *     standard-time type, or type 0 if all are daylight time;
 *   - at or after the last transition, with a footer: its rule, evaluated
 *     for the UTC year of the instant;
 *   - otherwise the type of the last transition at or before the instant.
 * Leap-second records (the right/ zones) are skipped: an offset is civil
 * time minus UTC, and Tally's instants are POSIX seconds. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "civil_int.h"
#include "zone_int.h"

/* One DST change of a POSIX TZ rule: Jn (day 1-365, February 29 never
 * counted), n (day 0-365) or Mm.w.d (weekday d of week w of month m), at
 * `time` seconds of local time (the time in force before the change). */
typedef struct zone_rule {
    enum { RULE_JULIAN1, RULE_DAY0, RULE_MONTH } kind;
    int day, month, week, wday;
    int32_t time;
} zone_rule;

typedef struct zone_posix {
    int32_t std_off, dst_off; /* seconds east of UTC */
    bool has_dst;
    zone_rule start, end; /* of daylight time */
} zone_posix;

struct tally_zone {
    size_t n_trans, n_types;
    int64_t *trans; /* ascending */
    uint8_t *trans_type;
    int32_t *type_off;
    uint8_t *type_dst;
    bool has_footer;
    zone_posix footer;
};

/* ---- the POSIX TZ string ---------------------------------------------- */

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* A number of at most max_digits digits, no more than max. */
static bool parse_num(const char **p, int max_digits, int max, int *out)
{
    int v = 0, n = 0;
    while (is_digit(**p) && n < max_digits) {
        v = v * 10 + (**p - '0');
        (*p)++;
        n++;
    }
    if (n == 0 || v > max)
        return false;
    *out = v;
    return true;
}

/* [+|-]hh[:mm[:ss]], hours at most max_h. */
static bool parse_hms(const char **p, int max_h, int32_t *out)
{
    int sign = 1, h = 0, m = 0, s = 0;
    if (**p == '+' || **p == '-')
        sign = *(*p)++ == '-' ? -1 : 1;
    if (!parse_num(p, 3, max_h, &h))
        return false;
    if (**p == ':') {
        (*p)++;
        if (!parse_num(p, 2, 59, &m))
            return false;
        if (**p == ':') {
            (*p)++;
            if (!parse_num(p, 2, 59, &s))
                return false;
        }
    }
    *out = sign * (h * 3600 + m * 60 + s);
    return true;
}

/* A zone abbreviation: three or more letters, or <...> of letters, digits,
 * '+' and '-'. */
static bool parse_abbr(const char **p)
{
    const char *s = *p;
    size_t n = 0;
    if (*s == '<') {
        for (s++; *s && *s != '>'; s++, n++)
            if (!(is_digit(*s) || *s == '+' || *s == '-' || (*s >= 'A' && *s <= 'Z') ||
                  (*s >= 'a' && *s <= 'z')))
                return false;
        if (*s != '>' || n < 3)
            return false;
        *p = s + 1;
        return true;
    }
    while ((s[n] >= 'A' && s[n] <= 'Z') || (s[n] >= 'a' && s[n] <= 'z'))
        n++;
    if (n < 3)
        return false;
    *p = s + n;
    return true;
}

static bool parse_rule(const char **p, zone_rule *r)
{
    if (**p == 'J') {
        (*p)++;
        r->kind = RULE_JULIAN1;
        if (!parse_num(p, 3, 365, &r->day) || r->day < 1)
            return false;
    } else if (**p == 'M') {
        (*p)++;
        r->kind = RULE_MONTH;
        if (!parse_num(p, 2, 12, &r->month) || r->month < 1 || *(*p)++ != '.' ||
            !parse_num(p, 1, 5, &r->week) || r->week < 1 || *(*p)++ != '.' ||
            !parse_num(p, 1, 6, &r->wday))
            return false;
    } else {
        r->kind = RULE_DAY0;
        if (!parse_num(p, 3, 365, &r->day))
            return false;
    }
    r->time = 7200; /* 02:00 unless given */
    if (**p == '/') {
        (*p)++;
        return parse_hms(p, 167, &r->time); /* RFC 8536 extends POSIX's 24 to 167 */
    }
    return true;
}

/* "std offset [dst [offset] ,start[/time],end[/time]]"; an offset is
 * written west of UTC ("EST5" is UTC-5). */
static bool parse_posix(const char *s, zone_posix *z)
{
    const char *p = s;
    int32_t west;
    memset(z, 0, sizeof *z);
    if (!parse_abbr(&p) || !parse_hms(&p, 24, &west))
        return false;
    z->std_off = -west;
    if (*p == '\0')
        return true;
    if (!parse_abbr(&p))
        return false;
    z->has_dst = true;
    z->dst_off = z->std_off + 3600;
    if (*p != ',') {
        if (!parse_hms(&p, 24, &west))
            return false;
        z->dst_off = -west;
    }
    /* zic always writes the rules; a zone without them is refused */
    if (*p++ != ',' || !parse_rule(&p, &z->start) || *p++ != ',' || !parse_rule(&p, &z->end))
        return false;
    return *p == '\0';
}

/* ---- evaluating a rule -------------------------------------------------- */

/* The day number on which rule r falls in year y. */
static int64_t rule_day(const zone_rule *r, int64_t y)
{
    int64_t jan1 = civil_days_from(y, 1, 1);
    if (r->kind == RULE_JULIAN1)
        return jan1 + r->day - 1 + (civil_is_leap(y) && r->day >= 60);
    if (r->kind == RULE_DAY0)
        return jan1 + r->day;
    int64_t first = civil_days_from(y, r->month, 1);
    int wday1 = (int)((first % 7 + 11) % 7); /* 1970-01-01 was a Thursday (4) */
    int d = 1 + (r->wday - wday1 + 7) % 7 + (r->week - 1) * 7;
    while (d > civil_days_in_month(y, r->month))
        d -= 7; /* week 5 is the last such weekday */
    return first + d - 1;
}

static int32_t posix_offset(const zone_posix *z, int64_t t)
{
    if (!z->has_dst)
        return z->std_off;
    int64_t y; /* the UTC year of t, as the C library takes it */
    int m, d;
    civil_from_days(civil_floor_div(t, 86400), &y, &m, &d);
    /* the start is given in standard time, the end in daylight time */
    int64_t start = rule_day(&z->start, y) * 86400 + z->start.time - z->std_off;
    int64_t end = rule_day(&z->end, y) * 86400 + z->end.time - z->dst_off;
    bool dst = start < end ? (t >= start && t < end) : (t < end || t >= start);
    return dst ? z->dst_off : z->std_off;
}

/* ---- the TZif file ------------------------------------------------------ */

typedef struct tzif_counts {
    uint32_t isut, isstd, leap, time, type, chars;
} tzif_counts;

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const unsigned char *p)
{
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

/* The 44-byte header at p; its version byte in *version. */
static bool tzif_header(const unsigned char *p, size_t left, tzif_counts *c, char *version)
{
    if (left < 44 || memcmp(p, "TZif", 4) != 0)
        return false;
    *version = (char)p[4];
    *c = (tzif_counts){be32(p + 20), be32(p + 24), be32(p + 28),
                       be32(p + 32), be32(p + 36), be32(p + 40)};
    /* RFC 8536: isut and isstd counts are 0 or typecnt; at least one type */
    return c->type >= 1 && c->type <= 256 && c->chars >= 1 &&
           (c->isut == 0 || c->isut == c->type) && (c->isstd == 0 || c->isstd == c->type);
}

/* The bytes of a data block after its header; 0 if the counts are too big. */
static size_t tzif_block(const tzif_counts *c, size_t time_size)
{
    if (c->time > ZONE_FILE_MAX || c->leap > ZONE_FILE_MAX)
        return 0;
    return (size_t)c->time * (time_size + 1) + (size_t)c->type * 6 + c->chars +
           (size_t)c->leap * (time_size + 4) + c->isstd + c->isut;
}

static tally_err zone_alloc(const tzif_counts *c, tally_zone **out)
{
    tally_zone *z = calloc(1, sizeof *z);
    if (!z)
        return TALLY_NOMEM;
    z->n_trans = c->time;
    z->n_types = c->type;
    z->trans = malloc((c->time ? c->time : 1) * sizeof *z->trans);
    z->trans_type = malloc(c->time ? c->time : 1);
    z->type_off = malloc(c->type * sizeof *z->type_off);
    z->type_dst = malloc(c->type);
    if (!z->trans || !z->trans_type || !z->type_off || !z->type_dst) {
        zone_free(z);
        return TALLY_NOMEM;
    }
    *out = z;
    return TALLY_OK;
}

/* Reads a data block whose times are time_size bytes each. */
static tally_err read_block(const unsigned char *p, const tzif_counts *c, size_t time_size,
                            tally_zone *z)
{
    for (size_t i = 0; i < c->time; i++) {
        const unsigned char *t = p + i * time_size;
        z->trans[i] = time_size == 8 ? be64(t) : (int64_t)(int32_t)be32(t);
        if (i > 0 && z->trans[i] <= z->trans[i - 1])
            return TALLY_INVAL;
    }
    p += (size_t)c->time * time_size;
    for (size_t i = 0; i < c->time; i++) {
        z->trans_type[i] = p[i];
        if (p[i] >= c->type)
            return TALLY_INVAL;
    }
    p += c->time;
    for (size_t i = 0; i < c->type; i++, p += 6) {
        int32_t off = (int32_t)be32(p);
        if (off < -25 * 3600 || off > 26 * 3600 || p[4] > 1 || p[5] >= c->chars)
            return TALLY_INVAL;
        z->type_off[i] = off;
        z->type_dst[i] = p[4];
    }
    return TALLY_OK;
}

/* The footer "\n<TZ string>\n" at p (version 2 and later). */
static tally_err read_footer(const unsigned char *p, size_t left, tally_zone *z)
{
    if (left < 2 || p[0] != '\n')
        return TALLY_INVAL;
    const unsigned char *nl = memchr(p + 1, '\n', left - 1);
    size_t n = nl ? (size_t)(nl - p - 1) : 0;
    if (!nl || n >= 128)
        return TALLY_INVAL;
    if (n == 0)
        return TALLY_OK; /* no rule: the last type stays in force */
    char s[128];
    memcpy(s, p + 1, n);
    s[n] = '\0';
    if (!parse_posix(s, &z->footer))
        return TALLY_INVAL;
    z->has_footer = true;
    return TALLY_OK;
}

tally_err zone_parse(const unsigned char *data, size_t len, tally_zone **out)
{
    tzif_counts c;
    char version;
    if (!tzif_header(data, len, &c, &version))
        return TALLY_INVAL;
    size_t v1 = tzif_block(&c, 4);
    if (v1 == 0 && (c.time || c.leap))
        return TALLY_INVAL;
    if (44 + v1 > len)
        return TALLY_INVAL;
    const unsigned char *p = data + 44;
    size_t time_size = 4;
    if (version >= '2') { /* the 64-bit header and block follow the first */
        p += v1;
        if (!tzif_header(p, len - (size_t)(p - data), &c, &version))
            return TALLY_INVAL;
        p += 44;
        time_size = 8;
    }
    size_t block = tzif_block(&c, time_size);
    if ((block == 0 && (c.time || c.leap)) || block > len - (size_t)(p - data))
        return TALLY_INVAL;
    tally_zone *z = NULL;
    tally_err e = zone_alloc(&c, &z);
    if (!e)
        e = read_block(p, &c, time_size, z);
    if (!e && time_size == 8)
        e = read_footer(p + block, len - (size_t)(p - data) - block, z);
    if (e) {
        zone_free(z);
        return e;
    }
    *out = z;
    return TALLY_OK;
}

void zone_free(tally_zone *z)
{
    if (!z)
        return;
    free(z->trans);
    free(z->trans_type);
    free(z->type_off);
    free(z->type_dst);
    free(z);
}

int64_t zone_offset(const tally_zone *z, int64_t t)
{
    if (z->n_trans == 0 && z->has_footer)
        return posix_offset(&z->footer, t);
    if (z->n_trans == 0 || t < z->trans[0]) {
        for (size_t i = 0; i < z->n_types; i++)
            if (!z->type_dst[i])
                return z->type_off[i];
        return z->type_off[0];
    }
    if (t >= z->trans[z->n_trans - 1] && z->has_footer)
        return posix_offset(&z->footer, t);
    size_t lo = 0, hi = z->n_trans; /* the last transition at or before t */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (z->trans[mid] <= t)
            lo = mid;
        else
            hi = mid;
    }
    return z->type_off[z->trans_type[lo]];
}

/* ---- loading and keeping zones ------------------------------------------ */

static tally_err read_file(const char *path, unsigned char **data, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOMEM ? TALLY_NOMEM : TALLY_INVAL;
    struct stat st;
    tally_err e = TALLY_INVAL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        st.st_size > ZONE_FILE_MAX)
        goto out_fd;
    *len = (size_t)st.st_size;
    *data = malloc(*len);
    e = *data ? TALLY_OK : TALLY_NOMEM;
    for (size_t got = 0; !e && got < *len;) {
        ssize_t n = read(fd, *data + got, *len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            e = TALLY_INVAL;
        else
            got += (size_t)n;
    }
    if (e) {
        free(*data);
        *data = NULL;
    }
out_fd:
    close(fd);
    return e;
}

typedef struct zone_slot {
    char path[512];
    tally_zone *zone;
} zone_slot;

static pthread_mutex_t zones_mu = PTHREAD_MUTEX_INITIALIZER;
static zone_slot *zones; /* ZONE_CACHE_MAX slots, allocated on first use */
static size_t n_zones;

static tally_err load(const char *path, tally_zone **out)
{
    unsigned char *data;
    size_t len;
    tally_err e = read_file(path, &data, &len);
    if (e)
        return e;
    e = zone_parse(data, len, out);
    free(data);
    return e;
}

tally_err zone_get(const char *name, const tally_zone **z)
{
    const char *dir = getenv("TZDIR");
    char path[512];
    int n = snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : "/usr/share/zoneinfo", name);
    if (n <= 0 || (size_t)n >= sizeof path)
        return TALLY_INVAL;
    pthread_mutex_lock(&zones_mu);
    tally_err e = TALLY_OK;
    for (size_t i = 0; i < n_zones; i++)
        if (strcmp(zones[i].path, path) == 0) {
            *z = zones[i].zone;
            goto out;
        }
    if (n_zones == ZONE_CACHE_MAX) {
        e = TALLY_TOO_LARGE;
        goto out;
    }
    if (!zones && !(zones = calloc(ZONE_CACHE_MAX, sizeof *zones))) {
        e = TALLY_NOMEM;
        goto out;
    }
    /* loaded under the lock: a zone is read once, however many ask */
    tally_zone *loaded;
    e = load(path, &loaded);
    if (e)
        goto out;
    memcpy(zones[n_zones].path, path, (size_t)n + 1);
    zones[n_zones++].zone = loaded;
    *z = loaded;
out:
    pthread_mutex_unlock(&zones_mu);
    return e;
}
