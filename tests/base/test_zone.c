/* Tests for base/zone.c: Tally's reading of TZif files gives the C
 * library's UTC offsets for every installed zone, at every change between
 * 1900 and 2200 (so also where the file's POSIX rule takes over, after
 * 2037) and for hand-written rules; bad files are refused; and periods and
 * days are right while other threads ask for other zones (the C library's
 * TZ is one per process, which is why Tally no longer uses it). */
#define _GNU_SOURCE
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

#include "../../base/zone_int.h"
#include "tally/period.h"

#define ZONEINFO "/usr/share/zoneinfo"
#define T_1900   (-2208988800LL)
#define T_1971   31536000LL /* the C library rates POSIX rules before 1971 as 1970 */
#define T_2200   7258118400LL
#define STEP     (13 * 86400 + 3601) /* every time of day comes round */

static long long libc_offset(long long t)
{
    time_t tt = (time_t)t;
    struct tm tm;
    assert_non_null(localtime_r(&tt, &tm));
    return tm.tm_gmtoff;
}

typedef struct compare_stats {
    size_t zones, changes, instants;
} compare_stats;

/* Compares z with the C library under TZ=tz at samples across [from, 2200)
 * and on both sides of every change between them (found by bisection). */
static void compare(const tally_zone *z, const char *tz, long long from, compare_stats *st)
{
    assert_int_equal(setenv("TZ", tz, 1), 0);
    tzset();
    long long prev_t = from, prev = libc_offset(prev_t);
    for (long long t = from + STEP; t < T_2200; t += STEP) {
        long long off = libc_offset(t);
        if (zone_offset(z, t) != off)
            fail_msg("%s at %lld: tally %lld, C library %lld", tz, t, (long long)zone_offset(z, t),
                     off);
        if (off != prev) { /* the first instant with the new offset */
            long long lo = prev_t, hi = t;
            while (hi - lo > 1) {
                long long mid = lo + (hi - lo) / 2;
                *(libc_offset(mid) == prev ? &lo : &hi) = mid;
            }
            if (zone_offset(z, lo) != libc_offset(lo) || zone_offset(z, hi) != libc_offset(hi))
                fail_msg("%s around the change at %lld: tally %lld/%lld, C library %lld/%lld", tz,
                         hi, (long long)zone_offset(z, lo), (long long)zone_offset(z, hi),
                         libc_offset(lo), libc_offset(hi));
            st->changes++;
        }
        prev = off;
        prev_t = t;
        st->instants++;
    }
    st->zones++;
}

static compare_stats every_zone;

static int one_file(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)ftw;
    const char *name = path + strlen(ZONEINFO) + 1;
    if (type != FTW_F || strncmp(name, "right/", 6) == 0) /* right/: leap seconds */
        return 0;
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static unsigned char data[ZONE_FILE_MAX];
    size_t n = fread(data, 1, sizeof data, f);
    fclose(f);
    if (n < 4 || memcmp(data, "TZif", 4) != 0 || sb->st_size != (off_t)n)
        return 0; /* zone.tab, tzdata.zi and the like */
    tally_zone *z = NULL;
    if (zone_parse(data, n, &z) != TALLY_OK)
        fail_msg("%s: refused", name);
    compare(z, name, T_1900, &every_zone);
    zone_free(z);
    return 0;
}

static void test_every_zone_as_the_c_library(void **state)
{
    (void)state;
    assert_int_equal(nftw(ZONEINFO, one_file, 16, FTW_PHYS), 0);
    unsetenv("TZ");
    tzset();
    print_message("compared %zu zones at %zu instants, %zu changes\n", every_zone.zones,
                  every_zone.instants, every_zone.changes);
    assert_true(every_zone.zones > 300); /* tzdata is installed */
    assert_true(every_zone.changes > 50000);
}

/* A version 2 TZif file with no transitions, one type and the footer. */
static size_t tzif_with_footer(unsigned char *out, size_t cap, const char *footer)
{
    unsigned char hdr[44] = {'T', 'Z', 'i', 'f', '2'};
    hdr[39] = 1; /* typecnt */
    hdr[43] = 4; /* charcnt */
    const unsigned char block[] = {0, 0, 0, 0, 0, 0, 'U', 'T', 'C', 0};
    size_t n = 0;
    for (int copy = 0; copy < 2; copy++) {
        memcpy(out + n, hdr, sizeof hdr);
        memcpy(out + n + sizeof hdr, block, sizeof block);
        n += sizeof hdr + sizeof block;
    }
    n += (size_t)snprintf((char *)out + n, cap - n, "\n%s\n", footer);
    return n;
}

/* POSIX rules written by hand, against the C library reading the same
 * string as TZ, from 1971 (a rule in a zone file only ever applies after
 * its last transition, in this century): negative and past-24 times, the southern hemisphere, half
 * hours, Julian days and a permanent daylight time. */
static void test_rules_as_the_c_library(void **state)
{
    (void)state;
    static const char *const rules[] = {
        "EST5EDT,M3.2.0,M11.1.0",       "<-03>3<-02>,M3.5.0/-2,M10.5.0/-1",
        "IST-2IDT,M3.4.4/26,M10.5.0",   "<+1030>-10:30<+11>-11,M10.1.0,M4.1.0",
        "AEST-10AEDT,M10.1.0,M4.1.0/3", "<+0330>-3:30",
        "XXX3YYY,J60/1,J300/0",         "XXX-1YYY,59/3,300/22:30:15",
        "<+03>-3<+04>,0/0,J365/25",     "GMT0BST,M3.5.0/1,M10.5.0",
    };
    compare_stats st = {0};
    for (size_t i = 0; i < sizeof rules / sizeof *rules; i++) {
        unsigned char file[512];
        size_t n = tzif_with_footer(file, sizeof file, rules[i]);
        tally_zone *z = NULL;
        if (zone_parse(file, n, &z) != TALLY_OK)
            fail_msg("%s: refused", rules[i]);
        compare(z, rules[i], T_1971, &st);
        zone_free(z);
    }
    unsetenv("TZ");
    tzset();
    assert_true(st.changes > 1000);
}

static void test_bad_files_refused(void **state)
{
    (void)state;
    FILE *f = fopen(ZONEINFO "/Europe/Berlin", "rb");
    assert_non_null(f);
    static unsigned char data[1 << 16];
    size_t n = fread(data, 1, sizeof data, f);
    fclose(f);
    tally_zone *z = NULL;
    assert_int_equal(zone_parse(data, n, &z), TALLY_OK);
    zone_free(z);
    for (size_t cut = 0; cut < n; cut++) { /* every truncation, to the footer's last newline */
        z = NULL;
        if (zone_parse(data, cut, &z) != TALLY_INVAL)
            fail_msg("cut at %zu of %zu accepted", cut, n);
    }
    unsigned char bad[sizeof data];
    memcpy(bad, data, n);
    bad[32] = 0x7f; /* an absurd count of transitions in the first header */
    assert_int_equal(zone_parse(bad, n, &z), TALLY_INVAL);
    static const char *const footers[] = {"EST5EDT",
                                          "E5",
                                          "EST5EDT,M13.1.0,M1.1.0",
                                          "EST5EDT,M3.6.0,M11.1.0",
                                          "EST",
                                          "EST5EDT,M3.2.0",
                                          "<AB>5",
                                          "EST5EDT,J0,J5",
                                          "EST99",
                                          "EST5 "};
    for (size_t i = 0; i < sizeof footers / sizeof *footers; i++) {
        unsigned char file[512];
        size_t len = tzif_with_footer(file, sizeof file, footers[i]);
        if (zone_parse(file, len, &z) != TALLY_INVAL)
            fail_msg("footer \"%s\" accepted", footers[i]);
    }
    /* a file in a zone directory that is not a zone */
    const char *dir = tu_tmpdir("zone-bad");
    char path[512];
    snprintf(path, sizeof path, "%s/Not_A_Zone", dir);
    f = fopen(path, "wb");
    assert_non_null(f);
    fputs("hello\n", f);
    fclose(f);
    assert_int_equal(setenv("TZDIR", dir, 1), 0);
    assert_false(tally_tz_valid("Not_A_Zone"));
    assert_false(tally_tz_valid("Europe/Berlin")); /* not in that directory */
    unsetenv("TZDIR");
    assert_true(tally_tz_valid("Europe/Berlin"));
    /* names a tenant might try: paths out of the zone directory, files and
     * directories in it that are not zones, bytes zone names never hold */
    static const char *const hostile[] = {
        "../../etc/passwd",
        "/etc/localtime",
        ":Europe/Berlin",
        "Europe/../Europe/Berlin",
        "zone.tab",
        "tzdata.zi",
        "America",
        "Europe/Berlin\n",
        "Europe/Berlin ",
        "Europe%2fBerlin",
        "",
        "Aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
    for (size_t i = 0; i < sizeof hostile / sizeof *hostile; i++)
        if (tally_tz_valid(hostile[i]))
            fail_msg("\"%s\" accepted", hostile[i]);
    assert_false(tally_tz_valid(NULL));
    int64_t s0, e0;
    assert_int_equal(tally_period_bounds("2026-03", "zone.tab", &s0, &e0), TALLY_INVAL);
}

/* Two threads ask for days in two zones at once. With the C library's one
 * TZ, switched per call, each thread saw the other's zone now and then. */
typedef struct day_job {
    const char *tz;
    int64_t start, end;
    int wrong;
} day_job;

static void *ask_days(void *arg)
{
    day_job *j = arg;
    for (int k = 0; k < 20000; k++) {
        int64_t s, e;
        char label[16];
        if (tally_day_bounds(j->tz, 1772000000 + k, &s, &e, label, sizeof label) != TALLY_OK ||
            s != j->start || e != j->end)
            j->wrong++;
    }
    return NULL;
}

static void test_threads_in_other_zones(void **state)
{
    (void)state;
    /* 2026-02-25T06:13:20Z: 01:13 in New York, 14:13 in Shanghai */
    day_job jobs[2] = {{"America/New_York", 1771995600, 1772082000, 0},
                       {"Asia/Shanghai", 1771948800, 1772035200, 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, ask_days, &jobs[i]), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    assert_int_equal(jobs[0].wrong, 0);
    assert_int_equal(jobs[1].wrong, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_zone_as_the_c_library),
        cmocka_unit_test(test_rules_as_the_c_library),
        cmocka_unit_test(test_bad_files_refused),
        cmocka_unit_test(test_threads_in_other_zones),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
