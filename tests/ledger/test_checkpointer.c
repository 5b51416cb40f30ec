/* The WAL checkpointer (ledger/checkpointer.c): while it runs, the writer's
 * commits leave the checkpoints to its thread and the WAL stays bounded;
 * once it has stopped, SQLite's own autocheckpoint is back on the writer;
 * and whatever was committed is there, intact, after reopening. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"
#include "../../ledger/ledger_int.h"
#include "tally/ledger_sql.h"

#define PAGES_PER_COMMIT 1200 /* over the 1,000 that wake the thread */
#define COMMITS          40   /* about 190 MB written in all */
/* The WAL holds at most the writer's bound (16,000 pages) and one more
 * commit (the writer waits for a checkpoint running on the thread, then
 * runs its own). */
#define WAL_BOUND ((int64_t)(16000 + PAGES_PER_COMMIT + 100) * (4096 + 24))

static char path[600], wal[620];

static tally_ledger *open_ledger(void)
{
    tally_ledger *l = NULL;
    char why[512] = "";
    if (tally_ledger_open(path, &l, why, sizeof why) != TALLY_OK)
        fail_msg("open %s: %s", path, why);
    return l;
}

static int64_t wal_size(void)
{
    struct stat st;
    return stat(wal, &st) == 0 ? (int64_t)st.st_size : 0;
}

/* One transaction of about PAGES_PER_COMMIT new pages. */
static void write_pages(tally_ledger *l)
{
    static const char sql[] =
        "BEGIN IMMEDIATE; WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s "
        "WHERE n < 1200) INSERT INTO scratch(x) SELECT randomblob(3900) FROM s; COMMIT;";
    if (tally_ledger_exec(l, sql) != TALLY_OK)
        fail_msg("write: %s", tally_ledger_errmsg(l));
}

static int64_t max_wal_over(tally_ledger *l, int commits)
{
    int64_t most = 0;
    for (int i = 0; i < commits; i++) {
        write_pages(l);
        int64_t n = wal_size();
        most = n > most ? n : most;
    }
    return most;
}

static void test_thread_checkpoints(void **state)
{
    (void)state;
    unsetenv("TALLY_CHECKPOINT");
    tally_ledger *l = open_ledger();
    assert_int_equal(tally_ledger_exec(l, "CREATE TABLE scratch(x BLOB) STRICT"), TALLY_OK);
    ledger_ckpt *c = NULL;
    assert_int_equal(ledger_ckpt_start(l, &c), TALLY_OK);
    assert_non_null(c);
    int64_t most = max_wal_over(l, COMMITS);
    int64_t pages = 0, inline_runs = 0;
    ledger_ckpt_stop(c, &pages, &inline_runs);
    print_message("the thread copied %lld pages; the writer checkpointed %lld times; WAL at "
                  "most %lld bytes\n",
                  (long long)pages, (long long)inline_runs, (long long)most);
    /* The thread did the copying: most of what was written went through
     * it (a checkpoint on a connection that never read the file would
     * copy nothing, and leave it all to the writer). */
    assert_true(pages >= (int64_t)COMMITS * PAGES_PER_COMMIT / 2);
    assert_true(most <= WAL_BOUND);
    /* SQLite's own autocheckpoint again (the hook no longer points at the
     * freed checkpointer): the WAL stays small. */
    assert_true(max_wal_over(l, 5) <= WAL_BOUND);
    tally_ledger_close(l);
    l = open_ledger();
    assert_int_equal(tu_query_int(l, "SELECT count(*) FROM scratch", NULL),
                     (COMMITS + 5) * PAGES_PER_COMMIT);
    assert_int_equal(tu_query_int(l,
                                  "SELECT count(*) FROM pragma_integrity_check WHERE "
                                  "integrity_check <> 'ok'",
                                  NULL),
                     0);
    tally_ledger_close(l);
}

/* Asked to keep checkpoints on the writer: no thread. */
static void test_writer_keeps_them(void **state)
{
    (void)state;
    setenv("TALLY_CHECKPOINT", "writer", 1);
    tally_ledger *l = open_ledger();
    ledger_ckpt *c = (ledger_ckpt *)1;
    assert_int_equal(ledger_ckpt_start(l, &c), TALLY_OK);
    assert_null(c);
    ledger_ckpt_stop(c, NULL, NULL); /* NULL: nothing to stop */
    unsetenv("TALLY_CHECKPOINT");
    tally_ledger_close(l);
}

static int setup(void **state)
{
    (void)state;
    const char *dir = tu_tmpdir("checkpointer");
    snprintf(path, sizeof path, "%s/l.db", dir);
    snprintf(wal, sizeof wal, "%s-wal", path);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_thread_checkpoints),
        cmocka_unit_test(test_writer_keeps_them),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
