/* Idempotency keys (schemas/011_idempotency.sql): a retried request that
 * carries the key of one already stored is answered with what that request
 * made, and nothing is written again.
 *
 * A request's fingerprint is the SHA-256 (lower-case hex) of its canonical
 * form, serialized as tally_canon() serializes a row (ledger/chain.c: text
 * "t<bytes>:<text>;", integer "i<decimal>;", absent "n;"), of, in order:
 *
 *   "credit.grant"   the key's scope (the operation), so that the forms of
 *                    different operations never collide
 *   account          the target account
 *   kind             its name ("prepaid", ...)
 *   amount_minor     in minor units: "10", "10.0" and "10.00" are one amount
 *   currency         the grant's: the one asked for, else the account's
 *   priority         after the default (50) is filled in
 *   effective_s      the client's; absent when it gave none, since "now"
 *                    differs on every retry
 *   expires_s        absent when the grant never expires
 *   scope            its text as given ("" for everything)
 *
 * The defaults that do not depend on the clock (priority 50, no expiry, no
 * scope) are filled in before hashing: leaving such a field out and sending
 * its default are the same request. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ledger_int.h"
#include "tally/sign.h"
#include "tally/utf8.h"

bool tally_idempotency_key_ok(const char *key)
{
    if (!key)
        return false;
    size_t n = strnlen(key, TALLY_IDEMPOTENCY_KEY_MAX + 1);
    if (n == 0 || n > TALLY_IDEMPOTENCY_KEY_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)key[i] < 0x21 || (unsigned char)key[i] > 0x7e)
            return false;
    return true;
}

static tally_err canon_text(tally_buf *b, const char *s)
{
    size_t n = strlen(s);
    tally_err e = tally_buf_printf(b, "t%zu:", n);
    if (e == TALLY_OK && n > 0)
        e = tally_buf_append(b, s, n);
    return e == TALLY_OK ? tally_buf_puts(b, ";") : e;
}

static tally_err canon_int(tally_buf *b, bool present, int64_t v)
{
    return present ? tally_buf_printf(b, "i%" PRId64 ";", v) : tally_buf_puts(b, "n;");
}

tally_err ledger_idem_grant_hash(const tally_grant_spec *g, const char *currency, char hex[65])
{
    tally_buf b;
    tally_buf_init(&b, 0);
    tally_err e = canon_text(&b, LEDGER_IDEM_GRANT);
    if (e == TALLY_OK)
        e = canon_text(&b, g->account);
    if (e == TALLY_OK)
        e = canon_text(&b, tally_grant_kind_name(g->kind));
    if (e == TALLY_OK)
        e = canon_int(&b, true, g->amount_minor);
    if (e == TALLY_OK)
        e = canon_text(&b, currency);
    if (e == TALLY_OK)
        e = canon_int(&b, true, g->priority);
    if (e == TALLY_OK)
        e = canon_int(&b, !g->effective_defaulted, g->effective_s);
    if (e == TALLY_OK)
        e = canon_int(&b, g->expires_s != TALLY_TIME_MAX, g->expires_s);
    if (e == TALLY_OK)
        e = canon_text(&b, g->scope ? g->scope : "");
    if (e == TALLY_OK)
        tally_sha256_hex(b.data, b.len, hex);
    tally_buf_release(&b);
    return e;
}

tally_err ledger_idem_check(tally_ledger *l, const char *scope, const char *key,
                            const char hash[65], int64_t *id)
{
    sqlite3_stmt *st;
    *id = 0;
    tally_err e = ledger_prepare(l,
                                 "SELECT grant_id, request_sha256 FROM idempotency_keys "
                                 "WHERE scope = ?1 AND key = ?2",
                                 &st);
    if (e != TALLY_OK)
        return e;
    sqlite3_bind_text(st, 1, scope, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW)
        return ledger_finish(l, st, rc); /* SQLITE_DONE: a new key */
    int64_t stored_id = sqlite3_column_int64(st, 0);
    const char *stored = (const char *)sqlite3_column_text(st, 1);
    bool same = stored && strcmp(stored, hash) == 0;
    sqlite3_finalize(st);
    if (!same) {
        snprintf(l->errmsg, sizeof l->errmsg,
                 "idempotency key \"%.*s%s\" was already used for a different request "
                 "(grant %" PRId64 "); nothing was stored",
                 tally_utf8_cut(key, 64), key, strlen(key) > 64 ? "..." : "", stored_id);
        return TALLY_EXISTS_DIFFERENT;
    }
    snprintf(l->errmsg, sizeof l->errmsg,
             "already recorded under this idempotency key (grant %" PRId64 ")", stored_id);
    *id = stored_id;
    return TALLY_EXISTS;
}

tally_err ledger_idem_record(tally_ledger *l, const char *scope, const char *key,
                             const char hash[65], const char *account, int64_t id)
{
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(l,
                                 "INSERT INTO idempotency_keys(scope, key, request_sha256, "
                                 "account, grant_id, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                                 &st);
    if (e != TALLY_OK)
        return e;
    sqlite3_bind_text(st, 1, scope, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, hash, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, account, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, id);
    sqlite3_bind_int64(st, 6, tally_now_s());
    return ledger_finish(l, st, sqlite3_step(st));
}
