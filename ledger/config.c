/* Configuration: accounts, runtime spot prices, commitments and credit
 * grants. Each public function is one transaction; on failure nothing is
 * written and tally_ledger_errmsg() says why in one line. */
#include <assert.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ledger_int.h"
#include "tally/utf8.h"

#define ZONEINFO_DIR     "/usr/share/zoneinfo"
#define ACCOUNT_NAME_CAP sizeof(((tally_account *)0)->name)

static tally_err failf(tally_ledger *l, tally_err e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records a one-line reason for tally_ledger_errmsg() and returns e. */
static tally_err failf(tally_ledger *l, tally_err e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->errmsg, sizeof l->errmsg, fmt, ap);
    va_end(ap);
    return e;
}

/* Account ids come from CloudEvents subjects: any printable text that fits. */
static bool valid_account_id(const char *id)
{
    size_t n = id ? strnlen(id, TALLY_NAME_MAX) : 0;
    if (n == 0 || n == TALLY_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)id[i] < 0x20 || id[i] == 0x7f)
            return false;
    return true;
}

/* A plain relative IANA name ("Asia/Shanghai") naming a TZif file under the
 * zoneinfo directory ($TZDIR or /usr/share/zoneinfo), or "UTC". */
static bool valid_timezone(const char *tz)
{
    size_t n = strnlen(tz, 64);
    if (strcmp(tz, "UTC") == 0)
        return true;
    if (n == 0 || n == 64 || tz[0] == '/' || tz[n - 1] == '/' || strstr(tz, "..") ||
        strstr(tz, "//") ||
        strspn(tz, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                   "0123456789_+-/") != n)
        return false;
    const char *dir = getenv("TZDIR");
    char path[512], magic[4];
    if (tally_fmt(path, sizeof path, "%s/%s", dir && *dir ? dir : ZONEINFO_DIR, tz) != TALLY_OK)
        return false; /* a cut path would name another zone */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    struct stat sb;
    bool ok = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) &&
              read(fd, magic, sizeof magic) == (ssize_t)sizeof magic &&
              memcmp(magic, "TZif", 4) == 0;
    close(fd);
    return ok;
}

static tally_err step_done(tally_ledger *l, sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    tally_err e = rc == SQLITE_DONE ? TALLY_OK : ledger_sqlite_err(l, rc);
    sqlite3_finalize(st);
    return e;
}

/* Commits when e is TALLY_OK, else rolls back; returns the outcome. */
static tally_err finish(tally_ledger *l, tally_err e)
{
    if (e == TALLY_OK)
        return ledger_commit(l);
    ledger_rollback(l);
    return e;
}

/* ---- Accounts -------------------------------------------------------------- */

static tally_err account_read(tally_ledger *l, const char *id, tally_account *out, bool *found)
{
    sqlite3_stmt *st;
    *found = false;
    memset(out, 0, sizeof *out);
    tally_err e =
        ledger_cached(l, "SELECT currency, timezone, name FROM accounts WHERE id = ?1", &st);
    if (e != TALLY_OK)
        return e;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *found = true;
        snprintf(out->id, sizeof out->id, "%s", id);
        snprintf(out->currency, sizeof out->currency, "%s", sqlite3_column_text(st, 0));
        snprintf(out->timezone, sizeof out->timezone, "%s", sqlite3_column_text(st, 1));
        snprintf(out->name, sizeof out->name, "%s", sqlite3_column_text(st, 2));
        rc = SQLITE_DONE;
    }
    return ledger_cached_done(l, st, rc);
}

/* The newest rate card's currency, else fallback (may be NULL). */
static tally_err default_currency(tally_ledger *l, const char *fallback, char out[4])
{
    const tally_ratecard *const *cards;
    size_t n;
    tally_err e = ledger_cards(l, &cards, &n);
    if (e != TALLY_OK)
        return e;
    const char *c = n ? cards[n - 1]->currency : fallback;
    if (!c || !tally_currency_find(c))
        return failf(l, TALLY_UNKNOWN_CURRENCY, "%s",
                     "no currency given and no rate card loaded to take it from");
    snprintf(out, 4, "%s", c);
    return TALLY_OK;
}

tally_err tally_ledger_currency_for(tally_ledger *l, const char *account, const char *wanted,
                                    char out[4])
{
    out[0] = '\0';
    if (wanted) {
        if (strlen(wanted) != 3)
            return failf(l, TALLY_UNKNOWN_CURRENCY, "unknown currency \"%.16s\"", wanted);
        snprintf(out, 4, "%s", wanted);
        return TALLY_OK;
    }
    tally_account a;
    tally_err e = account ? tally_ledger_account_get(l, account, &a) : TALLY_NOT_FOUND;
    if (e == TALLY_OK)
        snprintf(out, 4, "%s", a.currency);
    return e == TALLY_NOT_FOUND ? default_currency(l, NULL, out) : e;
}

static tally_err account_write(tally_ledger *l, const tally_account *a, bool update)
{
    sqlite3_stmt *st;
    tally_err e =
        ledger_cached(/* the meter inserts every new account it sees */
                      l,
                      update ? "UPDATE accounts SET currency = ?2, timezone = ?3, name = ?4 WHERE "
                               "id = ?1"
                             : "INSERT INTO accounts(id, currency, timezone, name, created_at) "
                               "VALUES (?1, ?2, ?3, ?4, ?5)",
                      &st);
    if (e != TALLY_OK)
        return e;
    sqlite3_bind_text(st, 1, a->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, a->currency, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, a->timezone, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, a->name, -1, SQLITE_STATIC);
    if (!update)
        sqlite3_bind_int64(st, 5, tally_now_s());
    return ledger_cached_done(l, st, sqlite3_step(st));
}

static tally_err has_invoices(tally_ledger *l, const char *id, bool *yes)
{
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(l, "SELECT 1 FROM invoices WHERE account = ?1 LIMIT 1", &st);
    if (e != TALLY_OK)
        return e;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    *yes = rc == SQLITE_ROW;
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        e = ledger_sqlite_err(l, rc);
    sqlite3_finalize(st);
    return e;
}

/* Inside a transaction: creates the account if missing, with the newest
 * card's currency (or fallback_currency when no card is loaded) and UTC. */
static tally_err account_ensure(tally_ledger *l, const char *id, const char *fallback_currency,
                                tally_account *created)
{
    tally_account a;
    bool found;
    if (created)
        created->id[0] = '\0';
    if (!valid_account_id(id))
        return failf(l, TALLY_INVAL, "bad account id \"%.*s\"", tally_utf8_cut(id ? id : "", 63),
                     id ? id : "");
    tally_err e = account_read(l, id, &a, &found);
    if (e != TALLY_OK || found)
        return e;
    snprintf(a.id, sizeof a.id, "%s", id);
    snprintf(a.timezone, sizeof a.timezone, "UTC");
    e = default_currency(l, fallback_currency, a.currency);
    if (e == TALLY_OK)
        e = account_write(l, &a, false);
    if (e == TALLY_OK && created)
        *created = a;
    return e;
}

tally_err ledger_account_ensure(tally_ledger *l, const char *account, tally_account *created)
{
    return account_ensure(l, account, NULL, created);
}

static tally_err check_account_args(tally_ledger *l, const char *id, const char *currency,
                                    const char *timezone, const char *name)
{
    if (!valid_account_id(id))
        return failf(l, TALLY_INVAL, "bad account id \"%.*s\"", tally_utf8_cut(id ? id : "", 63),
                     id ? id : "");
    if (currency && !tally_currency_find(currency))
        return failf(l, TALLY_UNKNOWN_CURRENCY, "unknown currency \"%.16s\"", currency);
    if (timezone && !valid_timezone(timezone))
        return failf(l, TALLY_INVAL, "unknown time zone \"%.64s\" (use an IANA name or UTC)",
                     timezone);
    if (name && strnlen(name, ACCOUNT_NAME_CAP) == ACCOUNT_NAME_CAP)
        return failf(l, TALLY_INVAL, "%s", "account name longer than 127 bytes");
    return TALLY_OK;
}

/* Applies the given fields to a (read from the ledger, or fresh defaults). */
static tally_err account_merge(tally_ledger *l, tally_account *a, bool found, const char *currency,
                               const char *timezone, const char *name)
{
    bool invoiced = false;
    tally_err e = TALLY_OK;
    bool new_currency = found && currency && strcmp(currency, a->currency) != 0;
    /* A new time zone would move period edges under finalized invoices, so
     * the same usage could be billed in two periods. */
    bool new_timezone = found && timezone && strcmp(timezone, a->timezone) != 0;
    if (new_currency || new_timezone) {
        e = has_invoices(l, a->id, &invoiced);
        if (e == TALLY_OK && invoiced)
            return failf(l, TALLY_FINALIZED, "account %s has invoices; its %s is fixed", a->id,
                         new_currency ? "currency" : "time zone");
    }
    if (!found)
        e = default_currency(l, currency, a->currency);
    if (currency)
        snprintf(a->currency, sizeof a->currency, "%s", currency);
    if (timezone)
        snprintf(a->timezone, sizeof a->timezone, "%s", timezone);
    if (name)
        snprintf(a->name, sizeof a->name, "%s", name);
    return e;
}

tally_err tally_ledger_account_set(tally_ledger *l, const char *id, const char *currency,
                                   const char *timezone, const char *name)
{
    tally_account a;
    bool found;
    tally_err e = check_account_args(l, id, currency, timezone, name);
    if (e != TALLY_OK)
        return e;
    if ((e = ledger_begin(l)) != TALLY_OK)
        return e;
    e = account_read(l, id, &a, &found);
    if (e == TALLY_OK && !found) {
        snprintf(a.id, sizeof a.id, "%s", id);
        snprintf(a.timezone, sizeof a.timezone, "UTC");
    }
    if (e == TALLY_OK)
        e = account_merge(l, &a, found, currency, timezone, name);
    if (e == TALLY_OK)
        e = account_write(l, &a, found);
    /* the periods are the time zone's, the grants that count the currency's */
    if (e == TALLY_OK && found && (timezone || currency))
        e = ledger_balance_rezone(l, id);
    return finish(l, e);
}

tally_err tally_ledger_account_get(tally_ledger *l, const char *id, tally_account *out)
{
    bool found;
    tally_err e = account_read(l, id, out, &found);
    if (e == TALLY_OK && !found)
        return failf(l, TALLY_NOT_FOUND, "no account \"%.*s\"", tally_utf8_cut(id, 63), id);
    return e;
}

/* ---- Spot prices and commitments ------------------------------------------ */

/* The bound a rate card's prices have (tally_price_max_nano), in the cards'
 * currency. Errors: TALLY_RANGE. */
static tally_err check_spot_max(tally_ledger *l, const tally_ratecard *card, int64_t price_nano)
{
    const tally_currency *cur = tally_currency_find(card->currency);
    int64_t max = tally_price_max_nano(TALLY_METER_ACCELERATOR, cur ? cur->minor_digits : 0);
    char text[48] = "?";
    if (price_nano <= max)
        return TALLY_OK;
    if (tally_price_format(max, 2, text, sizeof text) != TALLY_OK)
        snprintf(text, sizeof text, "?");
    return failf(l, TALLY_RANGE, "a spot price is at most %s per card-hour", text);
}

tally_err tally_ledger_spot_set(tally_ledger *l, const char *sku, int64_t price_nano,
                                int64_t from_s)
{
    const tally_ratecard *const *cards;
    size_t n;
    bool listed = false, spot = false;
    sqlite3_stmt *st;
    if (price_nano < 0)
        return failf(l, TALLY_INVAL, "%s", "a spot price cannot be negative");
    tally_err e = ledger_cards(l, &cards, &n);
    for (size_t i = 0; e == TALLY_OK && i < n; i++) {
        const tally_sku_price *sp = tally_ratecard_sku(cards[i], sku);
        listed |= sp != NULL;
        spot |= sp && sp->has_spot;
    }
    if (e == TALLY_OK && !listed)
        return failf(l, TALLY_NOT_FOUND, "no rate card lists SKU \"%.*s\"", tally_utf8_cut(sku, 63),
                     sku);
    if (e == TALLY_OK && !spot)
        return failf(l, TALLY_NO_PRICE, "SKU %.*s is not offered on spot", tally_utf8_cut(sku, 63),
                     sku);
    if (e == TALLY_OK)
        e = check_spot_max(l, cards[0], price_nano);
    if (e == TALLY_OK)
        e = ledger_prepare(l,
                           "INSERT INTO spot_prices(sku, from_s, price_nano, origin, "
                           "created_at, entered_at) VALUES (?1, ?2, ?3, 'runtime', ?4, ?4)",
                           &st);
    if (e != TALLY_OK)
        return e;
    sqlite3_bind_text(st, 1, sku, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, from_s);
    sqlite3_bind_int64(st, 3, price_nano);
    sqlite3_bind_int64(st, 4, tally_now_s());
    if ((e = ledger_begin(l)) != TALLY_OK) {
        sqlite3_finalize(st);
        return e;
    }
    e = step_done(l, st);
    if (e == TALLY_OK) /* every running charge on spot may change */
        e = ledger_balance_refresh_all(l, "price");
    return finish(l, e);
}

/* Every card in force during [from_s, to_s) must have a reserved price. */
static tally_err check_reserved(tally_ledger *l, const char *sku, int64_t from_s, int64_t to_s)
{
    const tally_ratecard *const *cards;
    size_t n;
    tally_err e = ledger_cards(l, &cards, &n);
    if (e != TALLY_OK)
        return e;
    const tally_ratecard *first = tally_ratecard_at(cards, n, from_s);
    const tally_sku_price *sp = tally_ratecard_sku(first, sku);
    bool ok = sp && sp->has_reserved;
    for (size_t i = 0; ok && i < n; i++) {
        if (cards[i]->effective_from_s <= from_s || cards[i]->effective_from_s >= to_s)
            continue;
        sp = tally_ratecard_sku(cards[i], sku);
        ok = sp && sp->has_reserved;
    }
    return ok ? TALLY_OK
              : failf(l, TALLY_NO_PRICE, "SKU %.*s has no reserved price for that time",
                      tally_utf8_cut(sku, 63), sku);
}

static tally_err insert_commitment(tally_ledger *l, const char *account, const char *sku,
                                   int64_t cards, int64_t from_s, int64_t to_s, int64_t *id)
{
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(l,
                                 "INSERT INTO commitments(account, sku, cards, from_s, to_s, "
                                 "created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                                 &st);
    if (e != TALLY_OK)
        return e;
    sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, sku, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, cards);
    sqlite3_bind_int64(st, 4, from_s);
    sqlite3_bind_int64(st, 5, to_s);
    sqlite3_bind_int64(st, 6, tally_now_s());
    e = step_done(l, st);
    if (e == TALLY_OK && id)
        *id = sqlite3_last_insert_rowid(l->db);
    return e;
}

tally_err tally_ledger_commit_add(tally_ledger *l, const char *account, const char *sku,
                                  int64_t cards, int64_t from_s, int64_t to_s, int64_t *id_out)
{
    if (cards <= 0)
        return failf(l, TALLY_INVAL, "%s", "a commitment needs at least one card");
    if (to_s <= from_s)
        return failf(l, TALLY_INVAL, "%s", "a commitment must end after it starts");
    if (!sku || !*sku || strnlen(sku, TALLY_NAME_MAX) == TALLY_NAME_MAX)
        return failf(l, TALLY_INVAL, "%s", "bad SKU");
    tally_err e = ledger_begin(l);
    if (e != TALLY_OK)
        return e;
    e = check_reserved(l, sku, from_s, to_s);
    if (e == TALLY_OK)
        e = account_ensure(l, account, NULL, NULL);
    if (e == TALLY_OK)
        e = insert_commitment(l, account, sku, cards, from_s, to_s, id_out);
    if (e == TALLY_OK)
        e = ledger_balance_refresh(l, account, "commitment");
    return finish(l, e);
}

/* ---- Grants ---------------------------------------------------------------- */

static tally_err check_grant(tally_ledger *l, const tally_grant_spec *g, char *why, size_t cap)
{
    tally_scope scope;
    const char *scope_why = NULL;
    tally_err e = TALLY_OK;
    if (!valid_account_id(g->account))
        e = failf(l, TALLY_INVAL, "bad account id \"%.*s\"",
                  tally_utf8_cut(g->account ? g->account : "", 63), g->account ? g->account : "");
    else if ((unsigned)g->kind >= TALLY_GRANT_KIND_COUNT)
        e = failf(l, TALLY_INVAL, "%s", "unknown grant kind");
    else if (g->amount_minor <= 0)
        e = failf(l, TALLY_INVAL, "%s", "a grant's amount must be positive");
    else if (g->expires_s <= g->effective_s)
        e = failf(l, TALLY_INVAL, "%s", "a grant must expire after it takes effect");
    else if (g->scope && tally_scope_parse(g->scope, &scope, &scope_why) != TALLY_OK)
        e = failf(l, TALLY_PARSE, "bad scope: %s", scope_why ? scope_why : "malformed");
    else if (g->idempotency_key && !tally_idempotency_key_ok(g->idempotency_key))
        e = failf(l, TALLY_INVAL,
                  "an idempotency key is 1 to %d printable ASCII characters "
                  "without spaces",
                  TALLY_IDEMPOTENCY_KEY_MAX);
    if (e != TALLY_OK && why && cap)
        snprintf(why, cap, "%s", l->errmsg);
    return e;
}

/* SPEC section 4: at most TALLY_GRANT_MAX_MAJOR in the grant's currency
 * (TALLY_RANGE); the caller's transaction then stores nothing. */
static tally_err check_grant_max(tally_ledger *l, const tally_grant_spec *g, const char *currency)
{
    const tally_currency *cur = tally_currency_find(currency);
    if (!cur)
        return failf(l, TALLY_UNKNOWN_CURRENCY, "unknown currency %.3s", currency);
    int64_t max = tally_grant_max_minor(cur);
    if (g->amount_minor <= max)
        return TALLY_OK;
    char text[48] = "?";
    if (tally_amount_format(max, cur->minor_digits, text, sizeof text) != TALLY_OK)
        snprintf(text, sizeof text, "%lld", (long long)TALLY_GRANT_MAX_MAJOR);
    return failf(l, TALLY_RANGE, "a grant is at most %s %s", text, cur->code);
}

tally_err ledger_grant_insert(tally_ledger *l, const tally_grant_spec *g, const char *currency,
                              int64_t *id)
{
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(l,
                                 "INSERT INTO grants(account, kind, amount_minor, currency, "
                                 "priority, effective_s, expires_s, scope, created_at) "
                                 "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                                 &st);
    if (e != TALLY_OK)
        return e;
    sqlite3_bind_text(st, 1, g->account, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, tally_grant_kind_name(g->kind), -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, g->amount_minor);
    sqlite3_bind_text(st, 4, currency, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 5, g->priority);
    sqlite3_bind_int64(st, 6, g->effective_s);
    if (g->expires_s == TALLY_TIME_MAX)
        sqlite3_bind_null(st, 7);
    else
        sqlite3_bind_int64(st, 7, g->expires_s);
    sqlite3_bind_text(st, 8, g->scope ? g->scope : "", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 9, tally_now_s());
    e = step_done(l, st);
    *id = sqlite3_last_insert_rowid(l->db);
    return e;
}

/* Dr promotions:<kind>, Cr grant:<id>: the grant's balance is a liability. */
static tally_err post_grant(tally_ledger *l, const tally_grant_spec *g, const char *currency,
                            int64_t id)
{
    ledger_posting p[2];
    char ref[32];
    snprintf(p[0].acct, sizeof p[0].acct, "promotions:%s", tally_grant_kind_name(g->kind));
    p[0].amount_minor = g->amount_minor;
    snprintf(p[1].acct, sizeof p[1].acct, "grant:%lld", (long long)id);
    p[1].amount_minor = -g->amount_minor;
    snprintf(ref, sizeof ref, "%lld", (long long)id);
    return ledger_post(l, "grant", ref, currency, p, 2);
}

/* With an idempotency key: the request's fingerprint in hash, and whether
 * the key was used before (TALLY_EXISTS, *id its grant; or
 * TALLY_EXISTS_DIFFERENT). Without one: TALLY_OK. */
static tally_err grant_key_check(tally_ledger *l, const tally_grant_spec *g, const char *currency,
                                 char hash[65], int64_t *id)
{
    if (!g->idempotency_key)
        return TALLY_OK;
    tally_err e = ledger_idem_grant_hash(g, currency, hash);
    if (e != TALLY_OK)
        return e;
    return ledger_idem_check(l, LEDGER_IDEM_GRANT, g->idempotency_key, hash, id);
}

tally_err tally_ledger_grant_add(tally_ledger *l, const tally_grant_spec *g, int64_t *id_out,
                                 char *why, size_t cap)
{
    tally_account a;
    bool found;
    int64_t id = 0;
    char hash[65] = "";
    tally_err e = check_grant(l, g, why, cap);
    if (e != TALLY_OK || (e = ledger_begin(l)) != TALLY_OK)
        return e;
    e = account_ensure(l, g->account, g->currency, NULL);
    if (e == TALLY_OK)
        e = account_read(l, g->account, &a, &found);
    if (e == TALLY_OK && g->currency && strcmp(g->currency, a.currency) != 0)
        e = failf(l, TALLY_CURRENCY_MISMATCH, "the account's currency is %s", a.currency);
    if (e == TALLY_OK)
        e = check_grant_max(l, g, a.currency);
    if (e == TALLY_OK)
        e = grant_key_check(l, g, a.currency, hash, &id);
    if (e == TALLY_OK)
        e = ledger_grant_insert(l, g, a.currency, &id);
    if (e == TALLY_OK)
        e = post_grant(l, g, a.currency, id);
    /* The key in the grant's own transaction: both are stored, or neither. */
    if (e == TALLY_OK && g->idempotency_key)
        e = ledger_idem_record(l, LEDGER_IDEM_GRANT, g->idempotency_key, hash, g->account, id);
    if (e == TALLY_OK)
        e = ledger_balance_refresh(l, g->account, "grant");
    e = finish(l, e); /* a replay (TALLY_EXISTS) rolls back: it writes nothing */
    if ((e == TALLY_OK || e == TALLY_EXISTS) && id_out)
        *id_out = id;
    if (e != TALLY_OK && why && cap)
        snprintf(why, cap, "%s", l->errmsg);
    return e;
}
