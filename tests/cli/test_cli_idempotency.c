/* `tally credit grant ... --idempotency-key KEY`: a retried top-up prints
 * the first run's grant id and exits 0, a key reused for another grant
 * exits 2 with one line and stores nothing, and processes racing with one
 * key store one grant. `tally ingest` of the same file again stores its
 * quarantined lines once: each line's origin names the file, the line and
 * its hash, however long the file's name. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"
#include "tally/ledger_sql.h"

typedef struct cli_fx {
    char dir[512];
    char db[600];
    char base[1300]; /* "--db ... --key ..." */
} cli_fx;

static void fx_init(cli_fx *f, const char *tag)
{
    snprintf(f->dir, sizeof f->dir, "%s", tu_tmpdir(tag));
    snprintf(f->db, sizeof f->db, "%s/tally.db", f->dir);
    snprintf(f->base, sizeof f->base, "--db '%s' --key '%s/tally.key'", f->db, f->dir);
    assert_int_equal(tu_tally(NULL, "%s init >/dev/null", f->base), 0);
    assert_int_equal(tu_tally(NULL, "%s keygen >/dev/null", f->base), 0);
}

static tally_err first_col(void *ctx, int ncols, const char *const *cols)
{
    long long *out = ctx;
    *out = ncols > 0 && cols[0] ? strtoll(cols[0], NULL, 10) : -1;
    return TALLY_OK;
}

static long long query_int(const cli_fx *f, const char *sql)
{
    tally_ledger *l = NULL;
    char why[256] = "";
    if (tally_ledger_open(f->db, &l, why, sizeof why) != TALLY_OK)
        fail_msg("open: %s", why);
    long long v = -1;
    if (tally_ledger_query(l, sql, NULL, 0, first_col, &v) != TALLY_OK)
        fail_msg("%s: %s", sql, tally_ledger_errmsg(l));
    tally_ledger_close(l);
    return v;
}

/* Runs `tally <base> credit grant <args>`; stdout in out, stderr in err. */
static int grant(const cli_fx *f, tally_buf *out, tally_buf *err, const char *args)
{
    char err_path[700];
    snprintf(err_path, sizeof err_path, "%s/grant.err", f->dir);
    tally_buf_reset(out);
    int rc = tu_tally(out, "%s credit grant %s 2>'%s'", f->base, args, err_path);
    tally_buf_reset(err);
    assert_int_equal(tu_read_file(err_path, err), 0);
    return rc;
}

static void test_retry_prints_the_same_grant(void **state)
{
    (void)state;
    cli_fx f;
    fx_init(&f, "cli-idem-retry");
    tally_buf first, out, err;
    tally_buf_init(&first, 0);
    tally_buf_init(&out, 0);
    tally_buf_init(&err, 0);
    assert_int_equal(grant(&f, &first, &err, "acme 100.00 --kind prepaid --idempotency-key t-1"),
                     0);
    assert_true(first.len > 1);
    /* The same top-up again, with the amount spelled differently and the
     * defaults spelled out: the same id, exit 0, nothing more stored. */
    static const char *const retries[] = {
        "acme 100.00 --kind prepaid --idempotency-key t-1",
        "acme 100 --kind prepaid --idempotency-key t-1",
        "acme 100.0 --kind prepaid --currency CNY --priority 50 --idempotency-key t-1",
    };
    for (size_t i = 0; i < sizeof retries / sizeof *retries; i++) {
        if (grant(&f, &out, &err, retries[i]) != 0)
            fail_msg("%s: %s", retries[i], err.data ? err.data : "");
        assert_string_equal(out.data, first.data);
        assert_int_equal(err.len, 0);
    }
    /* A retry seconds later: the effective time defaulted to now is not
     * part of the request. */
    tally_buf_reset(&out);
    assert_int_equal(tu_sh(&out,
                           "TALLY_NOW=\"$(date -u -d '+5 seconds' +%%Y-%%m-%%dT%%H:%%M:%%SZ)\" "
                           "'%s' %s credit grant acme 100 --kind prepaid --idempotency-key t-1",
                           TALLY_BINARY, f.base),
                     0);
    assert_string_equal(out.data, first.data);
    assert_int_equal(query_int(&f, "SELECT count(*) FROM grants"), 1);
    assert_int_equal(query_int(&f, "SELECT count(*) FROM idempotency_keys"), 1);
    /* Without a key, the same command grants again. */
    assert_int_equal(grant(&f, &out, &err, "acme 100.00 --kind prepaid"), 0);
    assert_string_not_equal(out.data, first.data);
    assert_int_equal(query_int(&f, "SELECT count(*) FROM grants"), 2);
    assert_int_equal(tu_tally(NULL, "%s verify >/dev/null", f.base), 0);
    tally_buf_release(&first);
    tally_buf_release(&out);
    tally_buf_release(&err);
}

static void test_other_request_refused(void **state)
{
    (void)state;
    cli_fx f;
    fx_init(&f, "cli-idem-mismatch");
    tally_buf out, err;
    tally_buf_init(&out, 0);
    tally_buf_init(&err, 0);
    assert_int_equal(grant(&f, &out, &err,
                           "acme 100.00 --kind prepaid --effective 2026-03-01T00:00:00Z "
                           "--idempotency-key t-1"),
                     0);
    static const char *const others[] = {
        "acme 100.01 --kind prepaid --effective 2026-03-01T00:00:00Z --idempotency-key t-1",
        "acme 100.00 --kind coupon --effective 2026-03-01T00:00:00Z --idempotency-key t-1",
        "acme 100.00 --kind prepaid --idempotency-key t-1", /* now, not 2026-03-01 */
        "acme 100.00 --kind prepaid --effective 2026-03-01T00:00:00Z --expires "
        "2027-03-01T00:00:00Z --idempotency-key t-1",
        "globex 100.00 --kind prepaid --effective 2026-03-01T00:00:00Z --idempotency-key t-1",
    };
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
        int rc = grant(&f, &out, &err, others[i]);
        if (rc != 2)
            fail_msg("%s: exit %d, not 2", others[i], rc);
        assert_int_equal(out.len, 0);
        /* One clear line on stderr. */
        assert_non_null(err.data);
        assert_non_null(strstr(err.data, "idempotency key \"t-1\" was already used for a "
                                         "different request"));
        assert_true(strchr(err.data, '\n') == err.data + err.len - 1);
    }
    assert_int_equal(query_int(&f, "SELECT count(*) FROM grants"), 1);
    assert_int_equal(query_int(&f, "SELECT count(*) FROM entries"), 1);
    assert_int_equal(query_int(&f, "SELECT count(*) FROM accounts WHERE id = 'globex'"), 0);
    tally_buf_release(&out);
    tally_buf_release(&err);
}

static void test_bad_keys(void **state)
{
    (void)state;
    cli_fx f;
    fx_init(&f, "cli-idem-bad");
    char long_key[257], args[600];
    memset(long_key, 'k', 256);
    long_key[256] = '\0';
    tally_buf out, err;
    tally_buf_init(&out, 0);
    tally_buf_init(&err, 0);
    snprintf(args, sizeof args, "acme 10 --kind prepaid --idempotency-key %s", long_key);
    assert_int_equal(grant(&f, &out, &err, args), 2);
    assert_non_null(strstr(err.data, "--idempotency-key must be 1 to 255"));
    assert_int_equal(grant(&f, &out, &err, "acme 10 --kind prepaid --idempotency-key ''"), 2);
    assert_int_equal(grant(&f, &out, &err, "acme 10 --kind prepaid --idempotency-key 'a b'"), 2);
    /* Bad amounts are refused as before, key or not. */
    assert_int_equal(grant(&f, &out, &err, "acme -5 --kind prepaid --idempotency-key k"), 2);
    assert_int_equal(grant(&f, &out, &err, "acme 1.001 --kind prepaid --idempotency-key k"), 2);
    assert_int_equal(grant(&f, &out, &err, "acme 1000000000.01 --kind prepaid --idempotency-key k"),
                     2);
    assert_int_equal(query_int(&f, "SELECT count(*) FROM grants"), 0);
    assert_int_equal(query_int(&f, "SELECT count(*) FROM idempotency_keys"), 0);
    /* 255 characters are fine, and the refused key was not used up. */
    long_key[255] = '\0';
    snprintf(args, sizeof args, "acme 10 --kind prepaid --idempotency-key %s", long_key);
    assert_int_equal(grant(&f, &out, &err, args), 0);
    assert_int_equal(grant(&f, &out, &err, "acme 10 --kind prepaid --idempotency-key k"), 0);
    assert_int_equal(query_int(&f, "SELECT count(*) FROM grants"), 2);
    tally_buf_release(&out);
    tally_buf_release(&err);
}

/* Eight processes started together with one key: every one exits 0 and
 * prints the same id, and one grant is stored. */
static void test_racing_retries(void **state)
{
    (void)state;
    cli_fx f;
    fx_init(&f, "cli-idem-race");
    enum { N = 8 };
    int rc = tu_sh(NULL,
                   "cd '%s' && for i in 1 2 3 4 5 6 7 8; do "
                   "( '%s' %s credit grant acme 250.00 --kind prepaid --idempotency-key race-1 "
                   ">out.$i 2>err.$i; echo $? >rc.$i ) & done; wait",
                   f.dir, TALLY_BINARY, f.base);
    assert_int_equal(rc, 0);
    tally_buf first, b;
    tally_buf_init(&first, 0);
    tally_buf_init(&b, 0);
    for (int i = 1; i <= N; i++) {
        char path[700];
        snprintf(path, sizeof path, "%s/rc.%d", f.dir, i);
        tally_buf_reset(&b);
        assert_int_equal(tu_read_file(path, &b), 0);
        if (strcmp(b.data, "0\n") != 0) {
            tu_sh(NULL, "cat '%s/err.%d' >&2", f.dir, i);
            fail_msg("process %d exited %s", i, b.data);
        }
        snprintf(path, sizeof path, "%s/out.%d", f.dir, i);
        tally_buf_reset(&b);
        assert_int_equal(tu_read_file(path, &b), 0);
        assert_true(b.len > 1);
        if (i == 1)
            assert_int_equal(tally_buf_append(&first, b.data, b.len), TALLY_OK);
        else
            assert_string_equal(b.data, first.data);
    }
    assert_int_equal(query_int(&f, "SELECT count(*) FROM grants"), 1);
    assert_int_equal(query_int(&f, "SELECT count(*) FROM entries"), 1);
    assert_int_equal(query_int(&f, "SELECT count(*) FROM idempotency_keys"), 1);
    assert_int_equal(tu_tally(NULL, "%s verify >/dev/null", f.base), 0);
    tally_buf_release(&first);
    tally_buf_release(&b);
}

/* Writes two bad lines and a good one to path. */
static void write_lines(const char *path)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("not json\n"
          "{\"specversion\":\"1.0\",\"id\":\"e-1\",\"source\":\"//h\",\"type\":"
          "\"accelerator.usage\",\"subject\":\"acme\",\"time\":\"2026-03-01T00:00:00Z\","
          "\"data\":{\"instance\":\"i-1\",\"sku\":\"h100\",\"pricing\":\"on_demand\","
          "\"cards\":1,\"seconds\":10}}\n"
          "also not json\n",
          f);
    assert_int_equal(fclose(f), 0);
}

static void test_ingest_again(void **state)
{
    (void)state;
    cli_fx f;
    fx_init(&f, "ingest-again");
    /* A path past the 224 bytes that once cut the line number off. */
    char name[160], path[1000];
    memset(name, 'n', 150);
    name[150] = '\0';
    snprintf(path, sizeof path, "%s/%s", f.dir, name);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/%s/%s.ndjson", f.dir, name, name);
    write_lines(path);
    for (int i = 0; i < 2; i++)
        assert_int_equal(tu_tally(NULL, "%s ingest '%s' >/dev/null", f.base, path), 0);
    assert_int_equal(query_int(&f, "SELECT count(*) FROM quarantine"), 2);
    assert_int_equal(query_int(&f, "SELECT count(*) FROM quarantine WHERE origin GLOB "
                                   "'file:*nnn~[0-9a-f]*:[13]:[0-9a-f][0-9a-f][0-9a-f][0-9a-f]"
                                   "[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]"
                                   "[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'"),
                     2);
    assert_int_equal(query_int(&f, "SELECT sum(events) FROM usage_batches"), 1);
    assert_int_equal(tu_tally(NULL, "%s verify >/dev/null", f.base), 0);
    /* Another file whose long name starts the same stores its lines too. */
    char other[1100];
    snprintf(other, sizeof other, "%s/%s/%s-2.ndjson", f.dir, name, name);
    write_lines(other);
    assert_int_equal(tu_tally(NULL, "%s ingest '%s' >/dev/null", f.base, other), 0);
    assert_int_equal(query_int(&f, "SELECT count(*) FROM quarantine"), 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_retry_prints_the_same_grant),
        cmocka_unit_test(test_other_request_refused),
        cmocka_unit_test(test_bad_keys),
        cmocka_unit_test(test_racing_retries),
        cmocka_unit_test(test_ingest_again),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
