/* Group commit of invoice runs (ledger/invoice_run.c): accounts are
 * finalized GROUP accounts per transaction, each under a savepoint of its
 * own. 600 accounts make three groups: acct-0000..0255, 0256..0511 and
 * 0512..0599. Each test fails the run somewhere around the second group
 * and checks what is left:
 *  - an account whose last posting aborts (a TEMP trigger), after its
 *    invoice rows and outbox event were written: the accounts before it are
 *    finalized (the first group and the second's first 44), it and the
 *    later ones are not;
 *  - an account whose insert rolls the whole transaction back: only the
 *    first group is finalized, and the error says the rest of the second
 *    was not committed;
 *  - an account whose insert aborts where the group's signed documents
 *    are stored: the group is run again account by account, with the
 *    outcome of the first case;
 *  - a file that cannot be written after the first group committed: all
 *    of that group is reported and its other files written, then the run
 *    stops naming the file;
 *  - the second group's commit failing its WAL sync (the fault VFS): the
 *    first group is finalized; after reopening, the second is there whole
 *    or not at all;
 *  - a dead disk, and a power cut, from a call N on inside the second
 *    group's commit: every group whose commit was acknowledged is there
 *    after reopening, the one in flight whole or not at all.
 * Every time: invoice numbers are gapless (1..count), each finalized
 * account has exactly one outbox event, `verify` passes (the documents'
 * chain, signatures, postings, the ledger's chain), the conservation checks
 * hold, on_invoice saw exactly the committed invoices in account order, and
 * the output directory holds files for those alone; then a re-run with
 * the fault gone finalizes the rest. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "faultvfs.h"
#include "tally/ingest.h"
#include "tally/invoice.h"
#include "tally/ledger_sql.h"
#include "tally/sign.h"

#define ACCOUNTS 600
#define GROUP    256 /* GROUP_ACCOUNTS in ledger/invoice_run.c */
#define FAILING  300 /* the account a trigger fails: the 45th of the second group */

static struct {
    char dir[512], base[600], work[600], key[600], out[600];
} D;

typedef struct seen {
    size_t n;
    bool in_order; /* the i-th call was acct-<i> */
    size_t already;
    int64_t arm_at; /* on_progress at this many accounts arms the fault (0: never) */
    unsigned ops;   /* the fault to arm (mode OFF: only counts) */
    int64_t nth;
    tally_fault_mode mode;
    int64_t armed_ops, delivered_ops; /* counted calls at arm_at, at on_invoice of acct-0256 */
} seen;

static void on_invoice(void *ctx, const tally_invoice_summary *s)
{
    seen *v = ctx;
    char want[32];
    snprintf(want, sizeof want, "acct-%04zu", v->n);
    v->in_order &= strcmp(s->account, want) == 0 && s->finalized;
    v->already += s->already_finalized;
    if (v->n == GROUP)
        v->delivered_ops = tally_faultvfs_count(TALLY_FAULT_ANY);
    v->n++;
}

static void on_progress(void *ctx, size_t done, size_t total)
{
    seen *v = ctx;
    (void)total;
    if (!v->arm_at || (int64_t)done != v->arm_at)
        return;
    v->armed_ops = tally_faultvfs_count(TALLY_FAULT_ANY);
    if (v->mode != TALLY_FAULT_OFF)
        tally_faultvfs_arm(v->mode, v->ops, v->nth, TALLY_FAULT_EIO);
}

static tally_ledger *open_ledger(const char *path)
{
    tally_ledger *l = NULL;
    char why[512] = "";
    if (tally_ledger_open(path, &l, why, sizeof why) != TALLY_OK)
        fail_msg("open %s: %s", path, why);
    return l;
}

/* The run of March with an output directory; why receives the error. */
static tally_err run(tally_ledger *l, seen *v, char *why, size_t cap)
{
    v->n = 0;
    v->already = 0;
    v->in_order = true;
    tally_invoice_run_opts o = {.period = "2026-03",
                                .finalize = true,
                                .out_dir = D.out,
                                .key_path = D.key,
                                .on_invoice = on_invoice,
                                .on_progress = on_progress,
                                .ctx = v};
    why[0] = '\0';
    return tally_invoice_run(l, &o, why, cap);
}

/* Files (not directories) named <account>-2026-03.json in the output
 * directory. */
static int64_t json_files(void)
{
    DIR *d = opendir(D.out);
    if (!d)
        return errno == ENOENT ? 0 : -1;
    int64_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        n += len > 5 && strcmp(de->d_name + len - 5, ".json") == 0 && de->d_type == DT_REG;
    }
    closedir(d);
    return n;
}

static bool file_of(int account)
{
    char path[700];
    snprintf(path, sizeof path, "%s/acct-%04d-2026-03.json", D.out, account);
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The ledger holds invoices for exactly acct-0000 .. acct-<n-1>, numbered
 * 1..n, with their outbox events, and passes verify and the conservation
 * checks. */
static void assert_finalized(tally_ledger *l, int64_t n)
{
    assert_int_equal(tu_query_int(l, "SELECT count(*) FROM invoices", NULL), n);
    assert_int_equal(tu_query_int(l,
                                  "SELECT count(DISTINCT account) FROM invoices WHERE doc_type = "
                                  "'invoice' AND year = 2026 AND period = '2026-03'",
                                  NULL),
                     n);
    if (n > 0) {
        char last[32];
        snprintf(last, sizeof last, "acct-%04lld", (long long)(n - 1));
        assert_int_equal(tu_query_int(l, "SELECT count(*) FROM invoices WHERE account <= ?1", last),
                         n);
    }
    assert_int_equal(tu_query_int(l, "SELECT coalesce(max(number), 0) FROM invoices", NULL), n);
    assert_int_equal(
        tu_query_int(l, "SELECT count(*) FROM outbox WHERE type = 'invoice.finalized'", NULL), n);
    tu_assert_conservation(l);
    char why[512] = "";
    if (tally_ledger_verify(l, D.key, why, sizeof why) != TALLY_OK)
        fail_msg("verify: %s", why);
}

/* work.db (no WAL, no shm) as a copy of base.db, and no output files. */
static void fresh_work(void)
{
    tu_copy_db(D.base, D.work);
    assert_int_equal(tu_sh(NULL, "rm -rf '%s'", D.out), 0);
}

/* After a failed run: the fault gone, a re-run finalizes the rest, reports
 * the earlier invoices as already finalized and writes every file. */
static void rerun_completes(tally_ledger *l, int64_t stored)
{
    seen v = {0};
    char why[512];
    if (run(l, &v, why, sizeof why) != TALLY_OK)
        fail_msg("re-run: %s", why);
    assert_int_equal(v.n, ACCOUNTS);
    assert_true(v.in_order);
    assert_int_equal(v.already, stored);
    assert_int_equal(json_files(), ACCOUNTS);
    assert_finalized(l, ACCOUNTS);
}

/* One h100 hour per account in March 2026, a signing key, closed cleanly
 * (one file). */
static int setup(void **state)
{
    (void)state;
    setenv("TALLY_NOW", "2026-04-02T00:00:00Z", 1);
    /* The faults are counted in the run's own writes: no checkpointing
     * thread doing I/O beside it (ledger/checkpointer.c). */
    setenv("TALLY_CHECKPOINT", "writer", 1);
    if (access("/dev/shm", W_OK) == 0) /* the shim decides what is durable */
        setenv("TALLY_TEST_TMP", "/dev/shm/tally-tests", 1);
    if (tally_faultvfs_install() != TALLY_OK)
        return -1;
    snprintf(D.dir, sizeof D.dir, "%s", tu_tmpdir("invoice-group"));
    snprintf(D.base, sizeof D.base, "%s/base.db", D.dir);
    snprintf(D.work, sizeof D.work, "%s/work.db", D.dir);
    snprintf(D.key, sizeof D.key, "%s/t.key", D.dir);
    snprintf(D.out, sizeof D.out, "%s/out", D.dir);
    if (tally_keygen(D.key, 0) != TALLY_OK)
        return -1;
    tally_ledger *l = tu_open_priced(D.base);
    tally_batch *b = NULL;
    assert_int_equal(tally_batch_create(l, &b), TALLY_OK);
    char ev[512], origin[32];
    for (int a = 0; a < ACCOUNTS; a++) {
        int len = snprintf(ev, sizeof ev,
                           "{\"specversion\":\"1.0\",\"id\":\"ev-%d\",\"source\":\"test\","
                           "\"type\":\"accelerator.usage\",\"subject\":\"acct-%04d\",\"time\":"
                           "\"2026-03-10T00:00:00Z\",\"data\":{\"instance\":\"i-1\",\"sku\":"
                           "\"h100\",\"pricing\":\"on_demand\",\"cards\":1,\"seconds\":3600}}",
                           a, a);
        snprintf(origin, sizeof origin, "test:%d", a);
        assert_int_equal(tally_ingest_message(b, ev, (size_t)len, origin, tally_now_s(), NULL),
                         TALLY_OK);
    }
    tally_batch_stats st;
    assert_int_equal(tally_batch_commit(b, &st, NULL), TALLY_OK);
    assert_int_equal(st.accepted, ACCOUNTS);
    tally_batch_destroy(b);
    tally_ledger_close(l);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tally_faultvfs_disarm();
    return tu_sh(NULL, "rm -rf '%s'", D.dir) == 0 ? 0 : -1;
}

/* The posting of acct-0300's receivable fails (a statement error): the run
 * stops there, naming it; the 300 accounts before it are finalized and
 * reported, their files written, and nothing of acct-0300 or later exists
 * (neither its invoice rows nor its outbox event, written before the
 * failure). */
/* A fresh run with the temporary trigger fail_one (sql) on its connection:
 * *rc is the run's result. */
static tally_ledger *run_with_trigger(const char *sql, seen *v, char *why, size_t cap,
                                      tally_err *rc)
{
    fresh_work();
    tally_ledger *l = open_ledger(D.work);
    assert_int_equal(tally_ledger_exec(l, sql), TALLY_OK);
    *rc = run(l, v, why, cap);
    return l;
}

/* Drops fail_one; a re-run finishes what the failed run left (stored
 * finalized before it). */
static void rerun_without_trigger(tally_ledger *l, int64_t stored)
{
    assert_int_equal(tally_ledger_exec(l, "DROP TRIGGER fail_one"), TALLY_OK);
    rerun_completes(l, stored);
    tally_ledger_close(l);
}

static void test_account_fails_mid_group(void **state)
{
    (void)state;
    seen v = {0};
    char why[512];
    tally_err rc;
    /* The last leg of its entry: its invoice rows, outbox event and the
     * entry's other legs are written by then. */
    tally_ledger *l = run_with_trigger("CREATE TEMP TRIGGER fail_one BEFORE INSERT ON postings "
                                       "WHEN NEW.ledger_acct = 'receivable:acct-0300' "
                                       "BEGIN SELECT RAISE(ABORT, 'injected failure'); END",
                                       &v, why, sizeof why, &rc);
    assert_int_equal(rc, TALLY_DB);
    assert_non_null(strstr(why, "account acct-0300"));
    assert_non_null(strstr(why, "injected failure"));
    assert_null(strstr(why, "not committed"));
    assert_int_equal(v.n, FAILING);
    assert_true(v.in_order);
    assert_int_equal(json_files(), FAILING);
    assert_true(file_of(FAILING - 1));
    assert_false(file_of(FAILING));
    assert_finalized(l, FAILING);
    assert_int_equal(tu_query_int(l, "SELECT count(*) FROM entries", NULL), FAILING);
    rerun_without_trigger(l, FAILING);
}

/* The insert of acct-0300 rolls the transaction back: SQLite ends it, so the
 * second group's first 44 accounts are lost with it, and the error says so;
 * only the first group is finalized and reported. */
static void test_transaction_ends_mid_group(void **state)
{
    (void)state;
    seen v = {0};
    char why[512];
    tally_err rc;
    tally_ledger *l = run_with_trigger("CREATE TEMP TRIGGER fail_one BEFORE INSERT ON invoices "
                                       "WHEN NEW.account = 'acct-0300' "
                                       "BEGIN SELECT RAISE(ROLLBACK, 'injected rollback'); END",
                                       &v, why, sizeof why, &rc);
    assert_int_not_equal(rc, TALLY_OK);
    assert_non_null(strstr(why, "account acct-0300"));
    assert_non_null(strstr(why, "injected rollback"));
    assert_non_null(strstr(why, "the 44 invoices before it in its group were not committed"));
    assert_int_equal(v.n, GROUP);
    assert_true(v.in_order);
    assert_int_equal(json_files(), GROUP);
    assert_finalized(l, GROUP);
    rerun_without_trigger(l, GROUP);
}

/* A file of acct-0100 cannot be written (a directory stands where its JSON
 * goes): the first group is committed, so all 256 of its invoices are
 * reported, and every other file of the group is written; the run stops
 * after the group with the file named, and a re-run writes it. */
/* A run in which a directory stands where file (in D.out) is to be: it fails naming account's file,
 * with reported invoices reported in order and finalized; then the blocker goes and a re-run writes
 * the rest. check runs in between. */
static void run_blocked(const char *file, const char *account, int64_t reported,
                        void (*check)(void))
{
    fresh_work();
    char blocker[700], want[96], twice[96];
    snprintf(blocker, sizeof blocker, "%s/%s", D.out, file);
    snprintf(want, sizeof want, "account %s: cannot write", account);
    snprintf(twice, sizeof twice, "account %s: account", account); /* named once */
    assert_int_equal(tu_sh(NULL, "mkdir -p '%s'", blocker), 0);
    tally_ledger *l = open_ledger(D.work);
    seen v = {0};
    char why[512];
    assert_int_equal(run(l, &v, why, sizeof why), TALLY_IO);
    assert_non_null(strstr(why, want));
    assert_null(strstr(why, twice));
    assert_int_equal(v.n, reported);
    assert_true(v.in_order);
    assert_finalized(l, reported);
    check();
    assert_int_equal(tu_sh(NULL, "rmdir '%s'", blocker), 0);
    rerun_completes(l, reported);
    tally_ledger_close(l);
}

static void first_group_files(void)
{
    assert_int_equal(json_files(), GROUP - 1);
    assert_false(file_of(100));
    assert_true(file_of(101));
}

/* A file of acct-0100 cannot be written (a directory stands where its JSON
 * goes): the first group is committed, so all 256 of its invoices are
 * reported, and every other file of the group is written; the run stops
 * after the group with the file named, and a re-run writes it. The files
 * are written on the run's writer threads while the second group runs
 * (that group is then rolled back), and in place
 * (TALLY_INVOICE_FILES_IN_PLACE=1): the same outcome. */
static void test_file_fails_after_commit(void **state)
{
    (void)state;
    run_blocked("acct-0100-2026-03.json", "acct-0100", GROUP, first_group_files);
    setenv("TALLY_INVOICE_FILES_IN_PLACE", "1", 1);
    run_blocked("acct-0100-2026-03.json", "acct-0100", GROUP, first_group_files);
    unsetenv("TALLY_INVOICE_FILES_IN_PLACE");
}

static void every_json_file(void)
{
    assert_int_equal(json_files(), ACCOUNTS);
}

/* A file of the last group fails: every invoice is committed and
 * reported, the run's error names the file, and a re-run writes it. */
static void test_last_file_fails(void **state)
{
    (void)state;
    run_blocked("acct-0590-2026-03.html", "acct-0590", ACCOUNTS, every_json_file);
}

/* The second group's commit fails its WAL sync: the error names the group's
 * accounts; on this connection only the first group is there. After
 * reopening (WAL recovery may find the frames whole), the second group is
 * there entirely or not at all, and nothing is reported that is not. */
static void test_commit_sync_fails(void **state)
{
    (void)state;
    fresh_work();
    tally_ledger *l = open_ledger(D.work);
    seen v = {
        .arm_at = GROUP + 1, .ops = TALLY_FAULT_SYNC, .nth = 1, .mode = TALLY_FAULT_FAIL_ONCE};
    char why[512];
    assert_int_equal(run(l, &v, why, sizeof why), TALLY_IO);
    assert_int_equal(tally_faultvfs_failed(), 1);
    tally_faultvfs_disarm();
    assert_non_null(strstr(why, "accounts acct-0256 to acct-0511: committing their group failed"));
    assert_int_equal(v.n, GROUP);
    assert_true(v.in_order);
    assert_int_equal(json_files(), GROUP);
    assert_finalized(l, GROUP);
    tally_ledger_close(l);
    l = open_ledger(D.work);
    int64_t stored = tu_query_int(l, "SELECT count(*) FROM invoices", NULL);
    assert_true(stored == GROUP || stored == 2 * GROUP);
    assert_finalized(l, stored);
    rerun_completes(l, stored);
    tally_ledger_close(l);
}

/* A dead disk from the second group's call n on; with cut, also a power cut
 * (unsynced writes lost, torn by sector when torn_seed is not 0). Returns
 * the invoices stored after reopening. */
static int64_t dead_disk_at(int64_t n, bool cut, uint64_t torn_seed)
{
    fresh_work();
    tally_faultvfs_track(cut);
    tally_ledger *l = open_ledger(D.work);
    seen v = {
        .arm_at = GROUP + 1, .ops = TALLY_FAULT_ANY, .nth = n, .mode = TALLY_FAULT_FAIL_STICKY};
    char why[512];
    tally_err e = run(l, &v, why, sizeof why);
    tally_ledger_close(l);
    tally_faultvfs_disarm();
    if (cut)
        assert_int_equal(tally_faultvfs_power_cut(torn_seed), TALLY_OK);
    tally_faultvfs_track(false);
    assert_true(v.in_order);
    assert_int_equal(json_files(), (int64_t)v.n); /* files only for what was reported */
    if (e == TALLY_OK)
        fail_msg("call %lld: the run succeeded on a dead disk", (long long)n);
    l = open_ledger(D.work);
    int64_t stored = tu_query_int(l, "SELECT count(*) FROM invoices", NULL);
    /* Acknowledged groups are durable; the one in flight is whole or absent. */
    int64_t next = (int64_t)v.n + GROUP < ACCOUNTS ? (int64_t)v.n + GROUP : ACCOUNTS;
    if (stored != (int64_t)v.n && stored != next)
        fail_msg("call %lld%s: %zu invoices reported, %lld stored (%s)", (long long)n,
                 cut ? " (power cut)" : "", v.n, (long long)stored, why);
    assert_finalized(l, stored);
    rerun_completes(l, stored);
    tally_ledger_close(l);
    return stored;
}

static void test_dead_disk_in_commit(void **state)
{
    (void)state;
    /* The calls of the second group's commit (and the checkpoint it may
     * run), counted in a clean run. */
    fresh_work();
    tally_ledger *l = open_ledger(D.work);
    seen v = {.arm_at = GROUP + 1};
    char why[512];
    assert_int_equal(run(l, &v, why, sizeof why), TALLY_OK);
    tally_ledger_close(l);
    int64_t ops = v.delivered_ops - v.armed_ops;
    assert_true(ops >= 2);
    long whole = 0, absent = 0, cuts = 0;
    int64_t picks[] = {1, 2, 3, ops / 8, ops / 4, ops / 2, 3 * ops / 4, ops - 1, ops, ops + 1};
    for (size_t i = 0; i < sizeof picks / sizeof *picks; i++)
        for (int cut = 0; cut < 2; cut++, cuts++) {
            if (picks[i] < 1)
                continue;
            int64_t stored = dead_disk_at(picks[i], cut, cut && i % 2 ? (uint64_t)i * 31 + 5 : 0);
            whole += stored > GROUP;
            absent += stored == GROUP;
        }
    printf("dead disk or power cut at %ld points of the %lld calls of a group's commit: the group "
           "whole %ld times, absent %ld\n",
           cuts, (long long)ops, whole, absent);
}

/* The store of acct-0300's invoice fails (a statement error) at the end of
 * its group, where the group's signed documents are stored: the group is
 * rolled back and run again one account at a time, so the outcome is the
 * one of a failure inside acct-0300's own savepoint: the 300 accounts
 * before it are finalized and reported, their files written, and nothing
 * of acct-0300 or later exists. */
static void test_store_fails_at_group_end(void **state)
{
    (void)state;
    seen v = {0};
    char why[512];
    tally_err rc;
    tally_ledger *l = run_with_trigger("CREATE TEMP TRIGGER fail_one BEFORE INSERT ON invoices "
                                       "WHEN NEW.account = 'acct-0300' "
                                       "BEGIN SELECT RAISE(ABORT, 'injected failure'); END",
                                       &v, why, sizeof why, &rc);
    assert_int_equal(rc, TALLY_DB);
    assert_non_null(strstr(why, "account acct-0300"));
    assert_non_null(strstr(why, "injected failure"));
    assert_null(strstr(why, "not committed"));
    assert_int_equal(v.n, FAILING);
    assert_true(v.in_order);
    assert_int_equal(json_files(), FAILING);
    assert_true(file_of(FAILING - 1));
    assert_false(file_of(FAILING));
    assert_finalized(l, FAILING);
    assert_int_equal(tu_query_int(l, "SELECT count(*) FROM entries", NULL), FAILING);
    rerun_without_trigger(l, FAILING);
}

typedef struct names {
    char name[64][64];
    size_t n;
} names;

static tally_err add_name(void *ctx, int ncols, const char *const *cols)
{
    names *t = ctx;
    assert_int_equal(ncols, 1);
    assert_true(t->n < 64);
    snprintf(t->name[t->n++], sizeof t->name[0], "%s", cols[0]);
    return TALLY_OK;
}

/* Every table of l's database holds the same rows as in the database at
 * other (ledger_chain: the same rows chained, in any order); returns how
 * many tables were compared. */
static size_t assert_same_rows(tally_ledger *l, const char *other)
{
    char sql[1024];
    snprintf(sql, sizeof sql, "ATTACH '%s' AS other", other);
    assert_int_equal(tally_ledger_exec(l, sql), TALLY_OK);
    names t = {0};
    assert_int_equal(tally_ledger_query(l,
                                        "SELECT name FROM main.sqlite_master WHERE type = 'table' "
                                        "AND name NOT LIKE 'sqlite_%' ORDER BY name",
                                        NULL, 0, add_name, &t),
                     TALLY_OK);
    for (size_t i = 0; i < t.n; i++) {
        const char *n = t.name[i];
        /* the chain links rows in the order they were written: the same
         * rows, each with the same row hash, in another order */
        const char *cols = strcmp(n, "ledger_chain") == 0 ? "tbl, row_key, row_hash" : "*";
        snprintf(sql, sizeof sql,
                 "SELECT (SELECT count(*) FROM main.\"%s\") - (SELECT count(*) FROM other.\"%s\") "
                 "+ (SELECT count(*) FROM (SELECT %s FROM main.\"%s\" EXCEPT "
                 "SELECT %s FROM other.\"%s\")) + (SELECT count(*) FROM (SELECT %s FROM "
                 "other.\"%s\" EXCEPT SELECT %s FROM main.\"%s\"))",
                 n, n, cols, n, cols, n, cols, n, cols, n);
        if (tu_query_int(l, sql, NULL) != 0)
            fail_msg("table %s differs", n);
    }
    assert_int_equal(tally_ledger_exec(l, "DETACH other"), TALLY_OK);
    return t.n;
}

/* Finalizing a group stores its signed documents at the group's end; the
 * ledger it leaves is the one left by finalizing the accounts one run at a
 * time (each its own group of one), row for row in every table: numbers,
 * document chain links, signatures, entries, grants, outbox events and
 * balances (the ledger's own chain links the same rows in the order they
 * were written),
 * with an account already finalized, accounts with credits and an account
 * with nothing to bill among the pending ones. */
static void test_group_equals_one_by_one(void **state)
{
    (void)state;
    char one_by_one[700];
    snprintf(one_by_one, sizeof one_by_one, "%s/one-by-one.db", D.dir);
    fresh_work();
    tally_ledger *l = open_ledger(D.work);
    tally_invoice_run_opts o = {.period = "2026-03", .finalize = true, .key_path = D.key};
    char why[512] = "";
    o.account = "acct-0010"; /* already finalized when the others are */
    if (tally_invoice_run(l, &o, why, sizeof why) != TALLY_OK)
        fail_msg("acct-0010: %s", why);
    assert_int_equal(tally_ledger_account_set(l, "acct-0100a", NULL, NULL, NULL), TALLY_OK);
    for (int a = 3; a < ACCOUNTS; a += 7) {
        char id[32];
        snprintf(id, sizeof id, "acct-%04d", a);
        tally_grant_spec g = {.account = id,
                              .kind = TALLY_GRANT_COUPON,
                              .amount_minor = 100 + a,
                              .priority = 50,
                              .effective_s = 1772323200, /* 2026-03-01 */
                              .expires_s = TALLY_TIME_MAX};
        int64_t gid;
        assert_int_equal(tally_ledger_grant_add(l, &g, &gid, why, sizeof why), TALLY_OK);
    }
    tally_ledger_close(l);
    tu_copy_db(D.work, one_by_one);
    l = open_ledger(one_by_one);
    for (int a = 0; a < ACCOUNTS; a++) {
        char id[32];
        snprintf(id, sizeof id, "acct-%04d", a);
        o.account = id;
        if (tally_invoice_run(l, &o, why, sizeof why) != TALLY_OK)
            fail_msg("%s: %s", id, why);
    }
    tally_ledger_close(l);
    l = open_ledger(D.work);
    seen v = {.in_order = true};
    o.account = NULL;
    o.on_invoice = on_invoice; /* acct-0010's result comes between pending ones */
    o.ctx = &v;
    if (tally_invoice_run(l, &o, why, sizeof why) != TALLY_OK)
        fail_msg("run: %s", why);
    assert_int_equal(v.n, ACCOUNTS);
    assert_true(v.in_order);
    assert_int_equal(v.already, 1);
    assert_finalized(l, ACCOUNTS);
    assert_true(assert_same_rows(l, one_by_one) >= 10);
    tally_ledger_close(l);
}

/* Accounts in eight time zones (and UTC): the files the writer threads
 * render while the run finalizes the next group are byte for byte the files
 * written in place. When periods and days were computed by switching the
 * process's TZ, a thread could compute in another thread's zone: on a run
 * of 1,200 such accounts, 126 usage charts came out wrong. */
static void test_zones_on_writer_threads(void **state)
{
    (void)state;
    static const char *const zones[] = {
        "Asia/Shanghai",       "America/New_York", "Europe/Berlin",   "Asia/Kolkata",
        "Australia/Lord_Howe", "America/St_Johns", "Pacific/Chatham", "America/Sao_Paulo"};
    char out_threads[700], out_in_place[700];
    snprintf(out_threads, sizeof out_threads, "%s-threads", D.out);
    snprintf(out_in_place, sizeof out_in_place, "%s-in-place", D.out);
    for (int in_place = 0; in_place < 2; in_place++) {
        fresh_work();
        tally_ledger *l = open_ledger(D.work);
        for (int a = 0; a < ACCOUNTS; a++) {
            char id[32];
            snprintf(id, sizeof id, "acct-%04d", a);
            if (a % 3 != 0)
                assert_int_equal(tally_ledger_account_set(l, id, NULL, zones[a % 8], NULL),
                                 TALLY_OK);
        }
        if (in_place)
            setenv("TALLY_INVOICE_FILES_IN_PLACE", "1", 1);
        seen v = {0};
        char why[512];
        tally_err e = run(l, &v, why, sizeof why);
        unsetenv("TALLY_INVOICE_FILES_IN_PLACE");
        if (e != TALLY_OK)
            fail_msg("run: %s", why);
        assert_int_equal(json_files(), ACCOUNTS);
        tally_ledger_close(l);
        assert_int_equal(tu_sh(NULL, "rm -rf '%s' && mv '%s' '%s'",
                               in_place ? out_in_place : out_threads, D.out,
                               in_place ? out_in_place : out_threads),
                         0);
    }
    assert_int_equal(tu_sh(NULL, "diff -r '%s' '%s' >&2", out_threads, out_in_place), 0);
    assert_int_equal(tu_sh(NULL, "rm -rf '%s' '%s'", out_threads, out_in_place), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_account_fails_mid_group),
        cmocka_unit_test(test_transaction_ends_mid_group),
        cmocka_unit_test(test_store_fails_at_group_end),
        cmocka_unit_test(test_group_equals_one_by_one),
        cmocka_unit_test(test_file_fails_after_commit),
        cmocka_unit_test(test_last_file_fails),
        cmocka_unit_test(test_commit_sync_fails),
        cmocka_unit_test(test_dead_disk_in_commit),
        cmocka_unit_test(test_zones_on_writer_threads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
