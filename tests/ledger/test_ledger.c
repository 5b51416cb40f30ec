/* Tests for the ledger core: opening and migrations, accounts, rate cards,
 * spot prices, commitments, grants and postings, generic queries, and the
 * append-only triggers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"
#include "../../ledger/ledger_int.h"
#include "tally/embed.h"
#include "tally/ledger_sql.h"

static char db_path[600];

static const char *fixture_card(size_t *len)
{
    const tally_embedded *f = tally_embedded_find("fixtures/pricebook/ratecard.json");
    assert_non_null(f);
    *len = f->len;
    return f->data;
}

static tally_ledger *open_fresh(const char *tag)
{
    tally_ledger *l = NULL;
    char why[256] = "";
    snprintf(db_path, sizeof db_path, "%s/t.db", tu_tmpdir(tag));
    tally_err e = tally_ledger_open(db_path, &l, why, sizeof why);
    if (e != TALLY_OK)
        fail_msg("open: %s", why);
    return l;
}

static tally_ledger *open_with_card(const char *tag)
{
    tally_ledger *l = open_fresh(tag);
    size_t len;
    const char *card = fixture_card(&len);
    char why[256] = "";
    tally_err e = tally_ledger_ratecard_load(l, card, len, why, sizeof why);
    if (e != TALLY_OK)
        fail_msg("load: %s", why);
    return l;
}

/* First column of the first row, as text ("" when no row). */
static tally_err first_col(void *ctx, int ncols, const char *const *cols)
{
    char *out = ctx;
    if (!out[0])
        snprintf(out, 256, "%s", ncols > 0 && cols[0] ? cols[0] : "(null)");
    return TALLY_OK;
}

static void query1(tally_ledger *l, const char *sql, char out[256])
{
    out[0] = '\0';
    tally_err e = tally_ledger_query(l, sql, NULL, 0, first_col, out);
    if (e != TALLY_OK)
        fail_msg("%s: %s", sql, tally_ledger_errmsg(l));
}

static long long query_int(tally_ledger *l, const char *sql)
{
    char out[256];
    query1(l, sql, out);
    return strtoll(out, NULL, 10);
}

/* ---- Opening ---------------------------------------------------------------- */

static void test_open_twice(void **state)
{
    (void)state;
    tally_ledger *l = open_fresh("ledger-open");
    char out[256];
    query1(l, "SELECT journal_mode FROM pragma_journal_mode", out);
    assert_string_equal(out, "wal");
    assert_true(query_int(l, "SELECT user_version FROM pragma_user_version") >= 1);
    query1(l, "SELECT foreign_keys FROM pragma_foreign_keys", out);
    assert_string_equal(out, "1");
    long long v = query_int(l, "SELECT user_version FROM pragma_user_version");
    tally_ledger_close(l);

    char why[256];
    assert_int_equal(tally_ledger_open(db_path, &l, why, sizeof why), TALLY_OK);
    assert_int_equal(query_int(l, "SELECT user_version FROM pragma_user_version"), v);
    assert_int_equal(query_int(l, "SELECT count(*) FROM meta WHERE key = 'usage_seq'"), 1);
    /* A ledger from a newer tally is refused. */
    assert_int_equal(tally_ledger_exec(l, "PRAGMA user_version = 999"), TALLY_OK);
    tally_ledger_close(l);
    l = (tally_ledger *)1;
    assert_int_equal(tally_ledger_open(db_path, &l, why, sizeof why), TALLY_UNSUPPORTED);
    assert_null(l);
    assert_non_null(strstr(why, "newer"));
}

static void test_open_bad_path(void **state)
{
    (void)state;
    tally_ledger *l = NULL;
    char why[256] = "";
    tally_err e = tally_ledger_open("/nonexistent-dir/x/t.db", &l, why, sizeof why);
    assert_int_not_equal(e, TALLY_OK);
    assert_null(l);
    assert_true(why[0] != '\0');
}

/* "DIR/" names a ledger directory: it is created, never a file called DIR. */
static void test_open_dir_slash(void **state)
{
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s/ledger/", tu_tmpdir("ledger-slash"));
    tally_ledger *l = NULL;
    char why[256] = "";
    assert_int_equal(tally_ledger_open(path, &l, why, sizeof why), TALLY_OK);
    tally_ledger_close(l);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    char main_db[700];
    snprintf(main_db, sizeof main_db, "%smain.db", path);
    assert_int_equal(stat(main_db, &sb), 0);
    assert_true(S_ISREG(sb.st_mode));
}

static void test_now(void **state)
{
    (void)state;
    setenv("TALLY_NOW", "2026-03-01T12:00:00Z", 1);
    assert_int_equal(tally_now_s(), 1772366400);
    unsetenv("TALLY_NOW");
    assert_true(tally_now_s() > 1700000000);
    assert_string_equal(tally_event_result_name(TALLY_RESULT_CONFLICT), "conflict");
}

/* ---- Accounts ------------------------------------------------------------ */

static void test_accounts(void **state)
{
    (void)state;
    tally_ledger *l = open_fresh("ledger-acct");
    tally_account a;
    /* No card yet and no currency: nothing to take one from. */
    assert_int_equal(tally_ledger_account_set(l, "acme", NULL, NULL, NULL), TALLY_UNKNOWN_CURRENCY);
    assert_int_equal(tally_ledger_account_set(l, "acme", "USD", NULL, "Acme"), TALLY_OK);
    assert_int_equal(tally_ledger_account_get(l, "acme", &a), TALLY_OK);
    assert_string_equal(a.currency, "USD");
    assert_string_equal(a.timezone, "UTC");
    assert_string_equal(a.name, "Acme");
    assert_int_equal(tally_ledger_account_set(l, "acme", NULL, "Asia/Shanghai", NULL), TALLY_OK);
    assert_int_equal(tally_ledger_account_get(l, "acme", &a), TALLY_OK);
    assert_string_equal(a.timezone, "Asia/Shanghai");
    assert_string_equal(a.name, "Acme");
    assert_string_equal(a.currency, "USD");

    static const char *const bad_tz[] = {
        "Mars/Base", "../../etc/passwd", "/etc/localtime", "Asia/../Asia/Tokyo", "zone.tab", "",
        "Asia/"};
    for (size_t i = 0; i < sizeof bad_tz / sizeof *bad_tz; i++) {
        assert_int_equal(tally_ledger_account_set(l, "acme", NULL, bad_tz[i], NULL), TALLY_INVAL);
        assert_non_null(strstr(tally_ledger_errmsg(l), "time zone"));
    }
    assert_int_equal(tally_ledger_account_set(l, "acme", "XXX", NULL, NULL),
                     TALLY_UNKNOWN_CURRENCY);
    assert_int_equal(tally_ledger_account_set(l, "acme", "usd", NULL, NULL),
                     TALLY_UNKNOWN_CURRENCY);
    assert_int_equal(tally_ledger_account_set(l, "", NULL, NULL, NULL), TALLY_INVAL);
    assert_int_equal(tally_ledger_account_get(l, "nobody", &a), TALLY_NOT_FOUND);

    /* With a card, a new account takes the card's currency. */
    size_t len;
    const char *card = fixture_card(&len);
    assert_int_equal(tally_ledger_ratecard_load(l, card, len, NULL, 0), TALLY_OK);
    assert_int_equal(tally_ledger_account_set(l, "beta", NULL, NULL, NULL), TALLY_OK);
    assert_int_equal(tally_ledger_account_get(l, "beta", &a), TALLY_OK);
    assert_string_equal(a.currency, "CNY");
    tally_account made;
    assert_int_equal(ledger_account_ensure(l, "gamma", &made), TALLY_OK);
    assert_string_equal(made.id, "gamma");
    assert_int_equal(tally_ledger_account_get(l, "gamma", &a), TALLY_OK);
    assert_string_equal(a.currency, "CNY");
    assert_string_equal(a.timezone, "UTC");
    assert_string_equal(made.currency, a.currency);
    assert_string_equal(made.timezone, a.timezone);
    assert_int_equal(ledger_account_ensure(l, "gamma", &made), TALLY_OK);
    assert_string_equal(made.id, ""); /* it existed */

    /* Once invoiced, the currency is fixed. */
    assert_int_equal(tally_ledger_exec(l, "INSERT INTO invoices(seq, id, doc_type, year, number, "
                                          "account, period, currency, subtotal_minor, "
                                          "credits_minor, amount_due_minor, usage_seq, doc, hash, "
                                          "prev_hash, signature, finalized_at) VALUES (1, "
                                          "'INV-2026-000001', 'invoice', 2026, 1, 'beta', "
                                          "'2026-01', 'CNY', 0, 0, 0, 0, x'', '', '', '', 0)"),
                     TALLY_OK);
    assert_int_equal(tally_ledger_account_set(l, "beta", "USD", NULL, NULL), TALLY_FINALIZED);
    assert_int_equal(tally_ledger_account_set(l, "beta", "CNY", NULL, "Beta"), TALLY_OK);
    /* So is the time zone: moving period edges under a finalized invoice
     * could bill the same usage twice. Restating the same zone is fine. */
    assert_int_equal(tally_ledger_account_get(l, "beta", &a), TALLY_OK);
    const char *other_tz = strcmp(a.timezone, "UTC") == 0 ? "Asia/Shanghai" : "UTC";
    assert_int_equal(tally_ledger_account_set(l, "beta", NULL, other_tz, NULL), TALLY_FINALIZED);
    assert_int_equal(tally_ledger_account_set(l, "beta", NULL, a.timezone, NULL), TALLY_OK);
    tally_ledger_close(l);
}

/* ---- Rate cards -------------------------------------------------------------- */

static tally_err load_str(tally_ledger *l, const char *json, char *why)
{
    return tally_ledger_ratecard_load(l, json, strlen(json), why, 256);
}

#define CARD_HEAD(id, from)                                                                        \
    "{\"id\":\"" id "\",\"currency\":\"CNY\",\"effective_from\":\"" from "\",\"accelerators\":"

static void test_ratecard_load(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("ledger-card");
    char why[256];
    size_t len;
    const char *card = fixture_card(&len);
    assert_int_equal(tally_ledger_ratecard_load(l, card, len, why, sizeof why), TALLY_EXISTS);
    assert_non_null(strstr(why, "already loaded"));
    assert_int_equal(query_int(l, "SELECT count(*) FROM spot_prices WHERE origin = "
                                  "'pricebook-2026-01'"),
                     3);

    /* The same card re-spaced and re-ordered is the same card. */
    tally_buf b;
    tally_buf_init(&b, 0);
    assert_int_equal(tally_buf_puts(&b, "  {\"tokens\": {\"*\": {\"output\": \"8.00\", \"input\": "
                                        "\"4.00\"}}, "),
                     TALLY_OK);
    assert_int_equal(tally_buf_append(&b, card + 1, len - 1), TALLY_OK);
    assert_int_equal(tally_ledger_ratecard_load(l, b.data, b.len, why, sizeof why), TALLY_EXISTS);
    tally_buf_release(&b);

    /* Same id, other prices; other id, same effective_from. */
    assert_int_equal(
        load_str(l,
                 CARD_HEAD("pricebook-2026-01",
                           "2026-01-01T00:00:00Z") "{\"h100\":{\"on_demand\":\"9.99\"}}}",
                 why),
        TALLY_EXISTS_DIFFERENT);
    assert_int_equal(
        load_str(l,
                 CARD_HEAD("other", "2026-01-01T00:00:00Z") "{\"h100\":{\"on_demand\":\"2.58\"}}}",
                 why),
        TALLY_EXISTS_DIFFERENT);
    /* A newer card loads; one in another currency does not. */
    assert_int_equal(
        load_str(l,
                 CARD_HEAD("pricebook-2026-04",
                           "2026-04-01T00:00:00+08:00") "{\"h100\":{\"on_demand\":\"2.40\","
                                                        "\"reserved\":\"1.50\"}}}",
                 why),
        TALLY_OK);
    assert_int_equal(load_str(l,
                              "{\"id\":\"usd\",\"currency\":\"USD\",\"effective_from\":"
                              "\"2026-05-01T00:00:00Z\",\"accelerators\":{\"h100\":{\"on_"
                              "demand\":\"2\"}}}",
                              why),
                     TALLY_PARSE);
    assert_non_null(strstr(why, "currency"));

    const tally_ratecard *const *cards;
    size_t n;
    assert_int_equal(ledger_cards(l, &cards, &n), TALLY_OK);
    assert_int_equal(n, 2);
    assert_string_equal(cards[0]->id, "pricebook-2026-01");
    assert_string_equal(cards[1]->id, "pricebook-2026-04");
    assert_int_equal(cards[1]->effective_from_s, 1775001600 - 8 * 3600);
    const tally_sku_price *sp = tally_ratecard_sku(cards[0], "a100-40g");
    assert_non_null(sp);
    assert_int_equal(sp->on_demand_nano, 1900000000);
    assert_int_equal(sp->reserved_nano, 1140000000);
    assert_int_equal(sp->min_billable_s, 60);
    assert_false(sp->has_spot);
    int64_t price;
    assert_int_equal(
        tally_ratecard_dim_price(cards[0], TALLY_METER_TRAFFIC, "internet", "egress", &price),
        TALLY_OK);
    assert_int_equal(price, 500000000);
    assert_int_equal(tally_ratecard_dim_price(cards[0], TALLY_METER_STORAGE, "ssd", "", &price),
                     TALLY_OK);
    assert_int_equal(price, 600000);
    tally_ledger_close(l);
}

static void test_ratecard_bad(void **state)
{
    (void)state;
    static const struct {
        const char *json, *why;
    } cases[] = {
        {"{\"id\":", "JSON"},
        {"[1,2]", "object"},
        {CARD_HEAD("x", "2026-01-01T00:00:00Z") "{\"h100\":{\"on_demand\":2.58}}}", "string"},
        {CARD_HEAD("x", "2026-01-01T00:00:00Z") "{\"h100\":{\"on_demand\":\"2.5800000001\"}}}",
         "on_demand"},
        {CARD_HEAD("x", "2026-01-01T00:00:00Z") "{\"h100\":{\"reserved\":\"1\"}}}", "on_demand"},
        {CARD_HEAD("x", "2026-01-01T00:00:00Z") "{\"h100\":{\"on_demand\":\"1\",\"od\":\"1\"}}}",
         "unknown field"},
        {CARD_HEAD("x", "yesterday") "{\"h100\":{\"on_demand\":\"1\"}}}", "effective_from"},
        {CARD_HEAD("x", "2026-01-01T00:00:00Z") "{}}", "accelerators"},
        {CARD_HEAD("x", "2026-01-01T00:00:00Z") "{\"h100\":{\"on_demand\":\"-1\"}}}", "on_demand"},
        {CARD_HEAD("x", "2026-01-01T00:00:00Z") "{\"h 100\":{\"on_demand\":\"1\"}}}", "SKU"},
        {CARD_HEAD("x", "2026-01-01T00:00:00Z") "{\"h100\":{\"on_demand\":\"1\",\"spot\":[]}}}",
         "spot"},
        {CARD_HEAD("x", "2026-01-01T00:00:00Z") "{\"h100\":{\"on_demand\":\"1\",\"spot\":[{"
                                                "\"from\":\"2026-01-01T00:00:00Z\",\"price\":"
                                                "\"1\"},{\"from\":\"2026-01-01T00:00:00Z\","
                                                "\"price\":\"2\"}]}}}",
         "same from"},
        {CARD_HEAD("x", "2026-01-01T00:00:00Z") "{\"h100\":{\"on_demand\":\"1\"}},\"storage\":{"
                                                "\"ssd\":0.5}}",
         "storage.ssd"},
        {CARD_HEAD("x", "2026-01-01T00:00:00Z") "{\"h100\":{\"on_demand\":\"1\"}},\"traffic\":{"
                                                "\"internet\":{\"up\":\"1\"}}}",
         "traffic.internet.up"},
        {CARD_HEAD("x", "2026-01-01T00:00:00Z") "{\"h100\":{\"on_demand\":\"1\"}}} trailing",
         "JSON"},
        {"{\"id\":\"x\",\"currency\":\"XYZ\",\"effective_from\":\"2026-01-01T00:00:00Z\","
         "\"accelerators\":{\"h100\":{\"on_demand\":\"1\"}}}",
         "currency"},
        {CARD_HEAD("x", "2026-01-01T00:00:00Z") "{\"h100\":{\"on_demand\":\"1\","
                                                "\"min_billable_seconds\":\"60\"}}}",
         "min_billable_seconds"},
        /* Prices a month of maximal usage could not be rated with
         * (tally_price_max_nano): 100,000.00 per card-hour, 10.00 per GB-day
         * and per GB, 1,000.00 per million tokens. */
        {CARD_HEAD("x", "2026-01-01T00:00:00Z") "{\"h100\":{\"on_demand\":\"100000.01\"}}}",
         "accelerators.h100: price above the largest allowed, 100000.00 per card-hour"},
        {CARD_HEAD("x", "2026-01-01T00:00:00Z") "{\"h100\":{\"on_demand\":\"1\",\"spot\":[{"
                                                "\"from\":\"2026-01-01T00:00:00Z\",\"price\":"
                                                "\"9223372036.854775807\"}]}}}",
         "accelerators.h100: price above"},
        {CARD_HEAD("x", "2026-01-01T00:00:00Z") "{\"h100\":{\"on_demand\":\"1\"}},\"storage\":{"
                                                "\"ssd\":\"10.000000001\"}}",
         "storage.ssd: price above the largest allowed, 10.00 per GB-day"},
        {CARD_HEAD("x", "2026-01-01T00:00:00Z") "{\"h100\":{\"on_demand\":\"1\"}},\"traffic\":{"
                                                "\"internet\":{\"egress\":\"11\"}}}",
         "traffic.internet: price above"},
        {CARD_HEAD("x", "2026-01-01T00:00:00Z") "{\"h100\":{\"on_demand\":\"1\"}},\"tokens\":{"
                                                "\"*\":{\"output\":\"1000.01\"}}}",
         "tokens.output: price above the largest allowed, 1000.00 per million tokens"},
    };
    tally_ledger *l = open_fresh("ledger-badcard");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char why[256] = "";
        tally_err e = load_str(l, cases[i].json, why);
        if (e != TALLY_PARSE || !strstr(why, cases[i].why))
            fail_msg("case %zu: %s, why \"%s\" lacks \"%s\"", i, tally_err_name(e), why,
                     cases[i].why);
    }
    /* Ten fractional digits: the reason says so. */
    char why[256] = "";
    assert_int_equal(
        load_str(
            l,
            CARD_HEAD("x", "2026-01-01T00:00:00Z") "{\"h100\":{\"on_demand\":\"1.0000000001\"}}}",
            why),
        TALLY_PARSE);
    assert_non_null(strstr(why, "accelerators.h100.on_demand"));
    assert_int_equal(query_int(l, "SELECT count(*) FROM ratecards"), 0);
    /* Not NUL-terminated: the length bounds the parse. */
    const char ok[] = CARD_HEAD("y", "2026-01-01T00:00:00Z") "{\"h100\":{\"on_demand\":\"1\"}}}";
    char buf[sizeof ok + 8];
    memcpy(buf, ok, sizeof ok - 1);
    memset(buf + sizeof ok - 1, '}', sizeof buf - (sizeof ok - 1));
    assert_int_equal(tally_ledger_ratecard_load(l, buf, sizeof ok - 1, why, sizeof why), TALLY_OK);
    tally_ledger_close(l);
}

/* A card loaded through another connection is seen without reopening. */
static void test_ratecard_cache(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("ledger-cache"), *l2;
    const tally_ratecard *const *cards;
    size_t n;
    char why[256];
    assert_int_equal(ledger_cards(l, &cards, &n), TALLY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(tally_ledger_open(db_path, &l2, why, sizeof why), TALLY_OK);
    assert_int_equal(
        load_str(l2,
                 CARD_HEAD("later", "2026-06-01T00:00:00Z") "{\"h100\":{\"on_demand\":\"2.00\"}}}",
                 why),
        TALLY_OK);
    tally_ledger_close(l2);
    assert_int_equal(ledger_cards(l, &cards, &n), TALLY_OK);
    assert_int_equal(n, 2);
    assert_string_equal(cards[1]->id, "later");
    /* Rate cards cannot be edited in place. */
    assert_int_equal(tally_ledger_exec(l, "UPDATE ratecards SET currency = 'USD'"), TALLY_DB);
    assert_int_equal(tally_ledger_exec(l, "DELETE FROM ratecards"), TALLY_DB);
    tally_ledger_close(l);
}

/* ---- Spot, commitments ------------------------------------------------------- */

static void test_spot_and_commitments(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("ledger-spot");
    int64_t t0 = 1772366400; /* 2026-03-01 */
    assert_int_equal(tally_ledger_spot_set(l, "h200", 100, t0), TALLY_NOT_FOUND);
    assert_int_equal(tally_ledger_spot_set(l, "h100", 100, t0), TALLY_NO_PRICE);
    assert_int_equal(tally_ledger_spot_set(l, "rtx4090", -1, t0), TALLY_INVAL);
    assert_int_equal(tally_ledger_spot_set(l, "rtx4090", 800000000, t0), TALLY_OK);
    tally_spot_point *pts;
    int64_t *entered;
    size_t n;
    assert_int_equal(ledger_spot_points(l, &pts, &entered, &n), TALLY_OK);
    assert_int_equal(n, 4);
    assert_string_equal(pts[3].sku, "rtx4090");
    assert_int_equal(pts[3].price_nano, 800000000);
    assert_int_equal(pts[3].from_s, t0);
    /* bitemporal: when it was entered, besides when it takes effect */
    assert_true(entered[3] <= tally_now_s() && entered[3] >= tally_now_s() - 60);
    free(pts);
    free(entered);

    int64_t id = 0;
    assert_int_equal(tally_ledger_commit_add(l, "acme", "tpu-v4-64", 1, t0, t0 + 86400, &id),
                     TALLY_NO_PRICE);
    assert_int_equal(tally_ledger_commit_add(l, "acme", "h200", 1, t0, t0 + 86400, &id),
                     TALLY_NO_PRICE);
    assert_int_equal(tally_ledger_commit_add(l, "acme", "h100", 0, t0, t0 + 86400, &id),
                     TALLY_INVAL);
    assert_int_equal(tally_ledger_commit_add(l, "acme", "h100", 1, t0, t0, &id), TALLY_INVAL);
    /* Before the first card takes effect there is no reserved price. */
    assert_int_equal(tally_ledger_commit_add(l, "acme", "h100", 1, 0, t0, &id), TALLY_NO_PRICE);
    assert_int_equal(query_int(l, "SELECT count(*) FROM accounts"), 0);
    assert_int_equal(tally_ledger_commit_add(l, "acme", "h100", 8, t0, t0 + 86400 * 30, &id),
                     TALLY_OK);
    assert_true(id > 0);
    tally_account a;
    assert_int_equal(tally_ledger_account_get(l, "acme", &a), TALLY_OK);
    assert_string_equal(a.currency, "CNY");
    assert_int_equal(query_int(l, "SELECT cards FROM commitments WHERE sku = 'h100'"), 8);
    tally_ledger_close(l);
}

/* ---- Grants and postings ---------------------------------------------------- */

static void test_grants(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("ledger-grant");
    char why[256] = "";
    int64_t id = 0;
    tally_grant_spec g = {.account = "acme",
                          .kind = TALLY_GRANT_TRIAL,
                          .amount_minor = 1000,
                          .currency = NULL,
                          .priority = 10,
                          .effective_s = 1772366400,
                          .expires_s = 1772366400 + 30 * 86400,
                          .scope = ""};
    assert_int_equal(tally_ledger_grant_add(l, &g, &id, why, sizeof why), TALLY_OK);
    assert_true(id > 0);
    tally_grant_spec c = g;
    c.kind = TALLY_GRANT_COUPON;
    c.amount_minor = 50000;
    c.currency = "CNY";
    c.expires_s = TALLY_TIME_MAX;
    c.scope = "sku=a100-40g|a100-80g|h100,pricing=reserved";
    assert_int_equal(tally_ledger_grant_add(l, &c, &id, why, sizeof why), TALLY_OK);
    assert_int_equal(query_int(l, "SELECT count(*) FROM grants WHERE expires_s IS NULL"), 1);
    char q[256], out[256];
    snprintf(q, sizeof q,
             "SELECT credit_minor - debit_minor FROM balances WHERE ledger_acct = 'grant:%lld'",
             (long long)id);
    assert_int_equal(query_int(l, q), 50000);
    query1(l,
           "SELECT debit_minor FROM balances WHERE ledger_acct = 'promotions:trial' AND "
           "currency = 'CNY'",
           out);
    assert_string_equal(out, "1000");
    tu_assert_conservation(l);

    c.scope = "sku=";
    assert_int_equal(tally_ledger_grant_add(l, &c, &id, why, sizeof why), TALLY_PARSE);
    assert_non_null(strstr(why, "scope"));
    c.scope = NULL;
    c.currency = "USD";
    assert_int_equal(tally_ledger_grant_add(l, &c, &id, why, sizeof why), TALLY_CURRENCY_MISMATCH);
    c.currency = NULL;
    c.amount_minor = 0;
    assert_int_equal(tally_ledger_grant_add(l, &c, &id, why, sizeof why), TALLY_INVAL);
    c.amount_minor = 5;
    c.expires_s = c.effective_s;
    assert_int_equal(tally_ledger_grant_add(l, &c, &id, why, sizeof why), TALLY_INVAL);
    assert_int_equal(query_int(l, "SELECT count(*) FROM grants"), 2);
    assert_int_equal(query_int(l, "SELECT count(*) FROM entries"), 2);
    tu_assert_conservation(l);
    tally_ledger_close(l);
}

static void test_post(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("ledger-post");
    ledger_posting p[3] = {{"receivable:acme", 3982}, {"revenue:accelerator", -3982}};
    assert_int_equal(ledger_post(l, "invoice", "INV-X", "CNY", p, 2), TALLY_OK);
    p[1].amount_minor = -3981;
    assert_int_equal(ledger_post(l, "invoice", "INV-Y", "CNY", p, 2), TALLY_INVAL);
    ledger_posting big[2] = {{"a", INT64_MAX}, {"b", INT64_MAX}};
    assert_int_equal(ledger_post(l, "invoice", "INV-Z", "CNY", big, 2), TALLY_INVAL);
    /* Inside a caller's transaction, rolled back with it. */
    assert_int_equal(ledger_begin(l), TALLY_OK);
    p[1].amount_minor = -3982;
    assert_int_equal(ledger_post(l, "invoice", "INV-W", "CNY", p, 2), TALLY_OK);
    ledger_rollback(l);
    assert_int_equal(query_int(l, "SELECT count(*) FROM entries"), 1);
    assert_int_equal(query_int(l, "SELECT count(*) FROM postings"), 2);
    tu_assert_conservation(l);

    /* Posted rows are append-only. */
    assert_int_equal(tally_ledger_exec(l, "UPDATE postings SET debit_minor = 1"), TALLY_DB);
    assert_non_null(strstr(tally_ledger_errmsg(l), "append-only"));
    assert_int_equal(tally_ledger_exec(l, "DELETE FROM postings"), TALLY_DB);
    assert_int_equal(tally_ledger_exec(l, "DELETE FROM entries"), TALLY_DB);
    assert_int_equal(query_int(l, "SELECT count(*) FROM postings"), 2);
    tu_assert_conservation(l);
    tally_ledger_close(l);
}

/* ---- Generic queries ---------------------------------------------------------- */

static tally_err stop_after_one(void *ctx, int ncols, const char *const *cols)
{
    (void)ncols;
    (void)cols;
    (*(int *)ctx)++;
    return TALLY_EXISTS;
}

static void test_query(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("ledger-query");
    const char *params[] = {"pricebook-2026-01", NULL};
    char out[256] = "";
    assert_int_equal(tally_ledger_query(l, "SELECT currency FROM ratecards WHERE id = ?1", params,
                                        1, first_col, out),
                     TALLY_OK);
    assert_string_equal(out, "CNY");
    out[0] = '\0';
    assert_int_equal(tally_ledger_query(l, "SELECT ?1 IS NULL", params + 1, 1, first_col, out),
                     TALLY_OK);
    assert_string_equal(out, "1");
    int calls = 0;
    assert_int_equal(
        tally_ledger_query(l, "SELECT id FROM spot_prices", NULL, 0, stop_after_one, &calls),
        TALLY_EXISTS);
    assert_int_equal(calls, 1);
    assert_int_equal(tally_ledger_query(l, "DELETE FROM offsets", NULL, 0, stop_after_one, &calls),
                     TALLY_DB);
    assert_int_equal(
        tally_ledger_query(l, "SELECT 1; DELETE FROM offsets", NULL, 0, stop_after_one, &calls),
        TALLY_DB);
    assert_int_equal(tally_ledger_query(l, "SELEC 1", NULL, 0, stop_after_one, &calls), TALLY_DB);
    assert_true(strlen(tally_ledger_errmsg(l)) > 0);
    int64_t next;
    assert_int_equal(tally_ledger_offset_get(l, "usage", 0, &next), TALLY_OK);
    assert_int_equal(next, -1);
    tally_ledger_counts cnt;
    assert_int_equal(tally_ledger_counts_get(l, &cnt), TALLY_OK);
    assert_int_equal(cnt.dedupe_keys + cnt.quarantined + cnt.intervals + cnt.points, 0);
    tally_ledger_close(l);
}

/* The bytes of the chain's canonical form (ledger/chain.c) are part of
 * every stored hash: pinned here, so that a faster encoder cannot change
 * them without failing. */
static void test_canon_bytes(void **state)
{
    (void)state;
    tally_ledger *l = open_fresh("ledger-canon");
    char out[256] = "";
    query1(l,
           "SELECT hex(tally_canon(NULL, 0, 42, -7, 9223372036854775807, -9223372036854775808, "
           "'ab', '', 'caf' || char(233), x'00ff', x''))",
           out);
    /* n;i0;i42;i-7;i<max>;i<min>;t2:ab;t0:;t5:caf\xc3\xa9;b2:\x00\xff;b0:; */
    assert_string_equal(out, "6E3B69303B6934323B692D373B69393232333337323033363835343737353830"
                             "373B692D393232333337323033363835343737353830383B74323A61623B7430"
                             "3A3B74353A636166C3A93B62323A00FF3B62303A3B");
    query1(l, "SELECT hex(tally_canon())", out);
    assert_string_equal(out, "");
    query1(l, "SELECT tally_sha256(tally_canon('x', 1))", out);
    assert_string_equal(out, "74a9ae20afa07b7c5a01f5116d6c2547201270071d211751c13f106157e69036");
    assert_int_equal(tally_ledger_exec(l, "SELECT tally_canon(1.5)"), TALLY_DB);
    tally_ledger_close(l);
}

/* A gap the meter stops at is recorded open once, the offset unmoved; the
 * accepted row after it closes it; tally_ledger_gap_stats counts both per
 * partition; every row is chained and verify holds. */
static void test_gap_open_and_stats(void **state)
{
    (void)state;
    tally_ledger *l = open_with_card("gap-open");
    tally_batch *b;
    tally_batch_stats st;
    assert_int_equal(tally_batch_create(l, &b), TALLY_OK);
    assert_int_equal(tally_batch_set_offset(b, "usage", 3, -1, 100), TALLY_OK);
    assert_int_equal(tally_batch_commit(b, &st, NULL), TALLY_OK);
    tally_batch_destroy(b);
    tally_offset_gap g = {.topic = "usage",
                          .partition = 3,
                          .from = 100,
                          .to = 900,
                          .kind = "nope",
                          .stored_next = 100,
                          .log_start = 900,
                          .log_end = 950};
    bool rec = true;
    assert_int_equal(tally_ledger_gap_open(l, &g, &rec), TALLY_INVAL);
    assert_false(rec);
    g.kind = "retention";
    g.stored_next = 50; /* not the stored offset: nothing to record */
    assert_int_equal(tally_ledger_gap_open(l, &g, &rec), TALLY_OK);
    assert_false(rec);
    g.stored_next = 100;
    assert_int_equal(tally_ledger_gap_open(l, &g, &rec), TALLY_OK);
    assert_true(rec);
    assert_int_equal(tally_ledger_gap_open(l, &g, &rec), TALLY_OK); /* stopped there again */
    assert_false(rec);
    g.partition = 1; /* no stored offset at all */
    assert_int_equal(tally_ledger_gap_open(l, &g, &rec), TALLY_OK);
    assert_false(rec);
    g.partition = 3;
    assert_int_equal(query_int(l, "SELECT count(*) FROM offset_gaps WHERE state = 'open'"), 1);
    assert_int_equal(query_int(l, "SELECT next_offset FROM offsets"), 100);
    tally_gap_stats *gs = NULL;
    size_t n = 0;
    assert_int_equal(tally_ledger_gap_stats(l, &gs, &n), TALLY_OK);
    assert_int_equal(n, 1);
    assert_string_equal(gs[0].topic, "usage");
    assert_int_equal(gs[0].partition, 3);
    assert_int_equal(gs[0].open, 1);
    assert_int_equal(gs[0].open_messages, 800);
    assert_int_equal(gs[0].accepted, 0);
    free(gs);
    assert_int_equal(tally_ledger_gap_accept(l, &g), TALLY_OK);
    assert_int_equal(tally_ledger_gap_stats(l, &gs, &n), TALLY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(gs[0].open, 0);
    assert_int_equal(gs[0].accepted, 1);
    assert_int_equal(gs[0].accepted_messages, 800);
    free(gs);
    /* A later gap of that partition is a new open one; only accepted
     * restarts count for the origins' epoch. */
    tally_offset_gap r = {.topic = "usage",
                          .partition = 3,
                          .from = 0,
                          .to = 10,
                          .kind = "restarted",
                          .stored_next = 900,
                          .log_start = 0,
                          .log_end = 10};
    assert_int_equal(tally_ledger_gap_open(l, &r, &rec), TALLY_OK);
    assert_true(rec);
    int64_t epoch = -1;
    assert_int_equal(tally_ledger_gap_epoch(l, "usage", 3, &epoch), TALLY_OK);
    assert_int_equal(epoch, 0);
    assert_int_equal(tally_ledger_gap_stats(l, &gs, &n), TALLY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(gs[0].open, 1);
    assert_int_equal(gs[0].open_messages, 10);
    assert_int_equal(gs[0].accepted, 1);
    free(gs);
    assert_int_equal(query_int(l, "SELECT count(*) FROM ledger_chain WHERE tbl = 'offset_gaps'"),
                     3);
    assert_int_not_equal(tally_ledger_exec(l, "UPDATE offset_gaps SET state = 'accepted'"),
                         TALLY_OK);
    char why[512] = "";
    if (tally_ledger_verify(l, NULL, why, sizeof why) != TALLY_OK)
        fail_msg("verify: %s", why);
    tally_ledger_close(l);
}

/* ledger_grow: room for one more, doubling from first; a size that cannot
 * be allocated leaves the array as it was. */
static void test_grow(void **state)
{
    (void)state;
    int *v = NULL;
    size_t cap = 0;
    assert_int_equal(ledger_grow((void **)&v, 0, &cap, sizeof *v, 4), TALLY_OK);
    assert_int_equal(cap, 4);
    v[3] = 7;
    assert_int_equal(ledger_grow((void **)&v, 3, &cap, sizeof *v, 4), TALLY_OK);
    assert_int_equal(cap, 4); /* room already */
    assert_int_equal(ledger_grow((void **)&v, 4, &cap, sizeof *v, 4), TALLY_OK);
    assert_int_equal(cap, 8);
    assert_int_equal(v[3], 7);
    int *before = v;
    assert_int_equal(ledger_grow((void **)&v, 8, &cap, SIZE_MAX / 8, 4), TALLY_NOMEM);
    assert_ptr_equal(v, before);
    assert_int_equal(cap, 8);
    free(v);
}

int main(void)
{
    unsetenv("TALLY_NOW");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_twice),
        cmocka_unit_test(test_open_bad_path),
        cmocka_unit_test(test_open_dir_slash),
        cmocka_unit_test(test_now),
        cmocka_unit_test(test_accounts),
        cmocka_unit_test(test_ratecard_load),
        cmocka_unit_test(test_ratecard_bad),
        cmocka_unit_test(test_ratecard_cache),
        cmocka_unit_test(test_spot_and_commitments),
        cmocka_unit_test(test_grants),
        cmocka_unit_test(test_post),
        cmocka_unit_test(test_query),
        cmocka_unit_test(test_gap_open_and_stats),
        cmocka_unit_test(test_canon_bytes),
        cmocka_unit_test(test_grow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
