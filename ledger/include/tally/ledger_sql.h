/* Raw SQL on a ledger, for tests, benchmarks and tools only. Product code
 * outside ledger/ never includes this header (scripts/check-layers refuses
 * it): everything else goes through the ledger's own API. */
#ifndef TALLY_LEDGER_SQL_H
#define TALLY_LEDGER_SQL_H

#include "tally/ledger.h"

/* Runs fn for each row of a read-only SQL query with text parameters, for
 * code in this module's other files and for tests; not for untrusted SQL.
 * Column values are passed as strings (NULL for SQL NULL).
 * Errors: TALLY_DB, or what fn returns. */
typedef tally_err (*tally_row_fn)(void *ctx, int ncols, const char *const *cols);
TALLY_MUST_CHECK tally_err tally_ledger_query(tally_ledger *l, const char *sql,
                                              const char *const *params, int nparams,
                                              tally_row_fn fn, void *ctx);

/* Runs SQL statements that write (used by tests and tools; not on hot paths).
 * Errors: TALLY_DB with the message in tally_ledger_errmsg(). */
TALLY_MUST_CHECK tally_err tally_ledger_exec(tally_ledger *l, const char *sql);

#endif
