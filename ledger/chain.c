/* The ledger's own hash chain (schemas/008_chain.sql, SPEC section 5): the
 * SQL functions its triggers use, registered on every connection the ledger
 * opens.
 *
 *   tally_canon(v1, v2, ...)  the canonical serialization of its arguments,
 *                             as a BLOB: for each value a type letter and
 *                             its bytes, lengths written out, so no two
 *                             different rows serialize alike:
 *                               NULL     "n;"
 *                               integer  "i" <decimal> ";"
 *                               text     "t" <byte length> ":" <bytes> ";"
 *                               blob     "b" <byte length> ":" <bytes> ";"
 *                             (reals never occur in Tally's tables; they
 *                             are refused).
 *   tally_sha256(x)           SHA-256 of the bytes of x, lower-case hex.
 *
 * Both are deterministic and innocuous, so they may run in triggers. */
#include <inttypes.h>
#include <stdio.h>

#include "ledger_int.h"
#include "tally/sign.h"

static tally_err canon_value(tally_buf *b, sqlite3_value *v)
{
    switch (sqlite3_value_type(v)) {
    case SQLITE_NULL:
        return tally_buf_puts(b, "n;");
    case SQLITE_INTEGER:
        return tally_buf_printf(b, "i%" PRId64 ";", (int64_t)sqlite3_value_int64(v));
    case SQLITE_TEXT:
    case SQLITE_BLOB: {
        bool text = sqlite3_value_type(v) == SQLITE_TEXT;
        const void *p = text ? (const void *)sqlite3_value_text(v) : sqlite3_value_blob(v);
        int n = sqlite3_value_bytes(v);
        tally_err e = tally_buf_printf(b, "%c%d:", text ? 't' : 'b', n);
        if (e == TALLY_OK && n > 0)
            e = tally_buf_append(b, p, (size_t)n);
        return e == TALLY_OK ? tally_buf_puts(b, ";") : e;
    }
    default:
        return TALLY_INVAL;
    }
}

static void fn_canon(sqlite3_context *cx, int argc, sqlite3_value **argv)
{
    tally_buf b;
    tally_buf_init(&b, 0);
    tally_err e = tally_buf_puts(&b, "");
    for (int i = 0; e == TALLY_OK && i < argc; i++)
        e = canon_value(&b, argv[i]);
    if (e == TALLY_OK)
        sqlite3_result_blob64(cx, b.data, b.len, SQLITE_TRANSIENT);
    else if (e == TALLY_NOMEM)
        sqlite3_result_error_nomem(cx);
    else
        sqlite3_result_error(cx, "tally_canon: a value Tally never stores", -1);
    tally_buf_release(&b);
}

static void fn_sha256(sqlite3_context *cx, int argc, sqlite3_value **argv)
{
    (void)argc;
    char hex[65];
    const void *p = sqlite3_value_blob(argv[0]);
    tally_sha256_hex(p ? p : "", (size_t)sqlite3_value_bytes(argv[0]), hex);
    sqlite3_result_text(cx, hex, 64, SQLITE_TRANSIENT);
}

tally_err ledger_chain_register(sqlite3 *db)
{
    int flags = SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS;
    int rc = sqlite3_create_function(db, "tally_canon", -1, flags, NULL, fn_canon, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_create_function(db, "tally_sha256", 1, flags, NULL, fn_sha256, NULL, NULL);
    return rc == SQLITE_OK ? TALLY_OK : TALLY_DB;
}
