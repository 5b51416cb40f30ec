/* `tally ingest` of a regular file (mapped, its lines queued in place and
 * their pages dropped after each commit) against the same bytes read as a
 * stream from a pipe (copied line by line): the same counts, the
 * same usage and the same quarantine rows, byte for byte, whatever the
 * lines hold, across a commit boundary and with a last line that has no
 * newline. */
#include <stdio.h>
#include <string.h>

#include "testutil.h"

#define LINES_PER_COMMIT 200000 /* INGEST_BATCH in cli/cmd_ingest.c */

static char dir[512];

static int setup(void **state)
{
    (void)state;
    setenv("TALLY_NOW", "2026-04-02T00:00:00Z", 1);
    snprintf(dir, sizeof dir, "%s", tu_tmpdir("cli-ingest"));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return tu_sh(NULL, "rm -rf '%s'", dir) == 0 ? 0 : -1;
}

/* An accelerator report of host-1: id e<n>, 10 s at 2026-03-01 plus 10n s,
 * with the card count given (another count under a used id: a conflict). */
static void gpu(FILE *f, long n, long id, int cards, const char *eol)
{
    long t = 10 * n;
    fprintf(f,
            "{\"specversion\":\"1.0\",\"id\":\"e%ld\",\"source\":\"//host-1\","
            "\"type\":\"accelerator.usage\",\"subject\":\"acme\","
            "\"time\":\"2026-03-%02ldT%02ld:%02ld:%02ldZ\",\"data\":{\"instance\":\"i-1\","
            "\"sku\":\"h100\",\"pricing\":\"on_demand\",\"cards\":%d,\"seconds\":10}}%s",
            id, 1 + t / 86400, t / 3600 % 24, t / 60 % 60, t % 60, cards, eol);
}

/* The stream: good reports, a duplicate, bad JSON, an unknown SKU, a CRLF
 * line, an empty line, a conflict (its line long gone from a stream's read
 * buffer when the commit quarantines it), an over-long line, more than one
 * commit's worth of lines, a conflict as the first line of the second
 * commit (its first version is line 1, on a page the first commit let go),
 * and a last line without its newline. */
static void write_stream(const char *path)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    long n = 0;
    gpu(f, n, n, 1, "\n");
    n++;
    gpu(f, 0, 0, 1, "\n"); /* the same event again */
    fputs("{\"specversion\":\"1.0\",\"id\":\"p1\"\n", f);
    fputs("{\"specversion\":\"1.0\",\"id\":\"p2\",\"source\":\"//x\",\"type\":"
          "\"accelerator.usage\",\"subject\":\"acme\",\"time\":\"2026-03-01T00:00:00Z\","
          "\"data\":{\"instance\":\"i\",\"sku\":\"quantum-9000\",\"pricing\":\"on_demand\"}}\n",
          f);
    gpu(f, n, n, 1, "\r\n");
    n++;
    fputs("\n", f);
    gpu(f, 1, 1, 3, "\n"); /* line 7: e1 with other content, read long before the commit */
    fputs("{\"pad\":\"", f);
    for (int i = 0; i < 100000; i++)
        fputc('x', f);
    fputs("\"}\n", f);
    /* Lines 1-8 hold 3 reports and one empty line, which is no item: the
     * commit's 200,000th item is line 200,001. */
    while (n < LINES_PER_COMMIT - 5) {
        gpu(f, n, n, 1, "\n");
        n++;
    }
    gpu(f, 0, 0, 2, "\n"); /* line 200,002: e0 with other content */
    for (int i = 0; i < 1000; i++, n++)
        gpu(f, n, n, 1, "\n");
    gpu(f, n, n, 1, ""); /* the last line, no newline */
    assert_int_equal(fclose(f), 0);
}

/* The ledger's rows that ingest writes, with the file's name in origins
 * replaced by NAME, into out. */
static void dump(const char *db, const char *name, tally_buf *out)
{
    tally_buf_reset(out);
    int rc = tu_sh(out,
                   "sqlite3 '%s' \"SELECT replace(origin, 'file:%s:', 'file:NAME:'), reason, "
                   "detail, coalesce(source, ''), coalesce(event_id, ''), hex(raw), raw_size, "
                   "coalesce(raw_sha256, '') FROM quarantine ORDER BY origin; SELECT meter, "
                   "account, resource, start_s, end_s, weight FROM usage_intervals ORDER BY 1, 2, "
                   "3, 4\"",
                   db, name);
    assert_int_equal(rc, 0);
}

static void test_mapped_equals_stream(void **state)
{
    (void)state;
    char path[700];
    snprintf(path, sizeof path, "%s/usage.ndjson", dir);
    write_stream(path);
    tally_buf mapped, streamed, a, b;
    tally_buf_init(&mapped, 0);
    tally_buf_init(&streamed, 0);
    tally_buf_init(&a, 0);
    tally_buf_init(&b, 0);
    assert_int_equal(tu_tally(NULL, "--db '%s/a.db' init >/dev/null", dir), 0);
    assert_int_equal(tu_tally(NULL, "--db '%s/b.db' init >/dev/null", dir), 0);
    assert_int_equal(tu_tally(&mapped, "--db '%s/a.db' ingest '%s'", dir, path), 0);
    assert_int_equal(
        tu_sh(&streamed, "cat '%s' | '%s' --db '%s/b.db' ingest -", path, TALLY_BINARY, dir), 0);
    /* 201,000 reports: one a duplicate, two conflicts; 3 lines quarantined
     * (bad JSON, the over-long line, the unknown SKU). */
    assert_string_equal(mapped.data, "accepted=200996 duplicate=1 conflict=2 quarantined=3\n");
    assert_string_equal(streamed.data, mapped.data);
    char a_db[700], b_db[700];
    snprintf(a_db, sizeof a_db, "%s/a.db", dir);
    snprintf(b_db, sizeof b_db, "%s/b.db", dir);
    dump(a_db, path, &a);
    dump(b_db, "stdin", &b);
    assert_string_equal(a.data, b.data);
    /* What the rows hold: the conflict's own line from the second commit,
     * the over-long line's size, every accepted report's 10 s once. */
    assert_non_null(strstr(a.data, "file:NAME:7:"));
    assert_non_null(strstr(a.data, "file:NAME:200002:"));
    assert_non_null(strstr(a.data, "|conflict|"));
    assert_non_null(strstr(a.data, "|too_large|"));
    assert_non_null(strstr(a.data, "|100010|"));
    tally_buf_reset(&b);
    assert_int_equal(tu_sh(&b,
                           "sqlite3 '%s' 'SELECT min(start_s), max(end_s), sum(end_s - start_s) "
                           "FROM usage_intervals'",
                           a_db),
                     0);
    assert_string_equal(b.data, "1772323200|1774333160|2009960\n"); /* 200,996 x 10 s */

    /* The same file again: every report a duplicate but the conflict, which
     * is one again; no row added. */
    tally_buf_reset(&mapped);
    assert_int_equal(tu_tally(&mapped, "--db '%s/a.db' ingest '%s'", dir, path), 0);
    assert_string_equal(mapped.data, "accepted=0 duplicate=200997 conflict=2 quarantined=3\n");
    dump(a_db, path, &b);
    assert_string_equal(a.data, b.data);
    tally_buf_release(&mapped);
    tally_buf_release(&streamed);
    tally_buf_release(&a);
    tally_buf_release(&b);
}

/* An empty file, and a file of one line with no newline: mapped or not,
 * nothing is lost. */
static void test_small_files(void **state)
{
    (void)state;
    char path[700];
    tally_buf out;
    tally_buf_init(&out, 0);
    assert_int_equal(tu_tally(NULL, "--db '%s/c.db' init >/dev/null", dir), 0);
    snprintf(path, sizeof path, "%s/empty.ndjson", dir);
    assert_int_equal(tu_sh(NULL, ": > '%s'", path), 0);
    assert_int_equal(tu_tally(&out, "--db '%s/c.db' ingest '%s'", dir, path), 0);
    assert_string_equal(out.data, "accepted=0 duplicate=0 conflict=0 quarantined=0\n");
    snprintf(path, sizeof path, "%s/one.ndjson", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    gpu(f, 7, 7, 1, "");
    assert_int_equal(fclose(f), 0);
    tally_buf_reset(&out);
    assert_int_equal(tu_tally(&out, "--db '%s/c.db' ingest '%s'", dir, path), 0);
    assert_string_equal(out.data, "accepted=1 duplicate=0 conflict=0 quarantined=0\n");
    tally_buf_release(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mapped_equals_stream),
        cmocka_unit_test(test_small_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
