/* Helpers shared by Tally's cmocka tests. Include after <cmocka.h>'s
 * prerequisites; this header pulls them in. */
#ifndef TALLY_TESTUTIL_H
#define TALLY_TESTUTIL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tally/buf.h"
#include "tally/ledger.h"
#include "tally/shard.h"

/* A fresh, empty directory under $TALLY_TEST_TMP (or /tmp) named after tag;
 * the path is static storage valid until the next call. */
const char *tu_tmpdir(const char *tag);

/* Path of a file in the source tree, e.g. tu_src("fixtures/usage/x.ndjson");
 * static storage valid until the next call. */
const char *tu_src(const char *rel);

/* Runs `sh -c cmd`, capturing stdout into out (if not NULL) and returning the
 * exit status (or -1 if it did not exit normally). stderr goes to the test's
 * stderr. */
int tu_sh(tally_buf *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Runs the tally binary with the given argument string (shell syntax). */
int tu_tally(tally_buf *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Whether the n bytes at s are valid UTF-8 throughout (tally_utf8_len). */
bool tu_valid_utf8(const char *s, size_t n);

/* True when the tests run in CI: $CI is set, not empty, not "0"/"false". */
bool tu_in_ci(void);
/* A test that needs an external tool (kcat, chromium) and did not find it:
 * in CI that is a failure (CI must have every tool), elsewhere the test is
 * skipped with a line saying so. Use as TU_REQUIRE_TOOL(have_kcat(), "kcat"). */
#define TU_REQUIRE_TOOL(present, tool)                                                             \
    do {                                                                                           \
        if (!(present)) {                                                                          \
            if (tu_in_ci())                                                                        \
                fail_msg("%s is not installed, and in CI (CI=%s) a test may not skip for it",      \
                         tool, getenv("CI"));                                                      \
            print_message("SKIPPED: %s is not installed; this test did not run\n", tool);          \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* The first column of sql's first row as an integer (INT64_MIN for NULL,
 * -1 for no row), with param bound to ?1 when not NULL; fails the test on
 * an error. */
int64_t tu_query_int(tally_ledger *l, const char *sql, const char *param);

/* Opens (creating) the ledger at path with the fixture price book's rate
 * card loaded (fixtures/pricebook/ratecard.json), failing the test if it
 * cannot. */
tally_ledger *tu_open_priced(const char *path);

/* Takes the shard of (topic, p) into s at once (no wait), failing the test
 * if it cannot. */
tally_shard *tu_shard_take(tally_shard_set *s, const char *topic, int32_t p);

/* work (with no -wal, -shm or -journal beside it) as a byte copy of the
 * closed ledger file base, without a shell; fails the test if it cannot. */
void tu_copy_db(const char *base, const char *work);

/* Reads a whole file into out. Returns 0 on success. */
int tu_read_file(const char *path, tally_buf *out);

/* Asserts the ledger's conservation invariants: debits equal credits per
 * currency, every entry balances, every balance equals the sum of its
 * postings, and every finalized invoice adds up (lines sum to subtotal,
 * credits to total_credits, subtotal - credits = amount_due >= 0). */
void tu_assert_conservation(tally_ledger *l);
/* The same, opening the ledger file at path. */
void tu_assert_conservation_path(const char *db_path);

#endif
