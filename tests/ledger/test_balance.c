/* Unit tests of the prepaid balances (SPEC section 9, ledger/balance.c,
 * ledger/balance_api.c): which periods are running charges, the state
 * machine and its events, the clock (TALLY_NOW) with tally_balance_sweep,
 * limits refused on bad input, and `tally verify` over the balance tables.
 * tests/ledger/test_balance_diff.c compares the balances with the invoice
 * engine on random streams. */
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tally/balance.h"
#include "tally/embed.h"
#include "tally/ingest.h"
#include "tally/invoice.h"
#include "tally/ledger_sql.h"
#include "tally/outbox.h"
#include "tally/sign.h"

typedef struct fx {
    tally_ledger *l;
    char dir[512];
    char db[600];
    char key[600];
    int next_id;
    tally_batch *b;
} fx;

static int64_t at(const char *s)
{
    int64_t t;
    assert_int_equal(tally_time_parse(s, strlen(s), &t), TALLY_OK);
    return t;
}

static void clock_at(int64_t t)
{
    char s[40];
    assert_int_equal(tally_time_format(t, s, sizeof s), TALLY_OK);
    setenv("TALLY_NOW", s, 1);
}

static void fx_open(fx *f, const char *tag, const char *now)
{
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "%s", tu_tmpdir(tag));
    snprintf(f->db, sizeof f->db, "%s/t.db", f->dir);
    snprintf(f->key, sizeof f->key, "%s/t.key", f->dir);
    clock_at(at("2025-12-20T00:00:00Z"));
    char why[256] = "";
    if (tally_ledger_open(f->db, &f->l, why, sizeof why) != TALLY_OK)
        fail_msg("open: %s", why);
    const tally_embedded *card = tally_embedded_find("fixtures/pricebook/ratecard.json");
    assert_non_null(card);
    if (tally_ledger_ratecard_load(f->l, card->data, card->len, why, sizeof why) != TALLY_OK)
        fail_msg("ratecard: %s", why);
    assert_int_equal(tally_keygen(f->key, 0), TALLY_OK);
    clock_at(at(now));
}

static void fx_close(fx *f)
{
    char why[512] = "";
    tu_assert_conservation(f->l);
    if (tally_ledger_verify(f->l, f->key, why, sizeof why) != TALLY_OK)
        fail_msg("verify: %s", why);
    tally_ledger_close(f->l);
}

/* ---- Usage ------------------------------------------------------------------ */

static void queue(fx *f, const char *account, const char *type, int64_t t, const char *data)
{
    char ev[1024], ts[40], origin[64];
    assert_int_equal(tally_time_format(t, ts, sizeof ts), TALLY_OK);
    snprintf(ev, sizeof ev,
             "{\"specversion\":\"1.0\",\"id\":\"ev-%d\",\"source\":\"test\",\"type\":\"%s\","
             "\"subject\":\"%s\",\"time\":\"%s\",\"data\":%s}",
             ++f->next_id, type, account, ts, data);
    snprintf(origin, sizeof origin, "test:%d", f->next_id);
    if (!f->b)
        assert_int_equal(tally_batch_create(f->l, &f->b), TALLY_OK);
    tally_reject rej;
    assert_int_equal(tally_ingest_message(f->b, ev, strlen(ev), origin, tally_now_s(), &rej),
                     TALLY_OK);
    if (rej.reason[0])
        fail_msg("event rejected: %s %s (%s)", rej.reason, rej.detail, ev);
}

/* Queues cards x sku of instance over [t, t + seconds), in events of at most an hour. */
static void accel(fx *f, const char *account, const char *instance, const char *sku,
                  const char *pricing, int cards, int64_t t, int64_t seconds)
{
    while (seconds > 0) {
        int64_t s = seconds > 3600 ? 3600 : seconds;
        char data[256];
        snprintf(data, sizeof data,
                 "{\"instance\":\"%s\",\"sku\":\"%s\",\"pricing\":\"%s\",\"cards\":%d,"
                 "\"seconds\":%" PRId64 "}",
                 instance, sku, pricing, cards, s);
        queue(f, account, "accelerator.usage", t, data);
        t += s;
        seconds -= s;
    }
}

/* Commits what was queued, in one batch. */
static void commit(fx *f)
{
    tally_batch_stats st;
    tally_err e = tally_batch_commit(f->b, &st, NULL);
    if (e)
        fail_msg("commit: %s (%s)", tally_err_str(e), tally_ledger_errmsg(f->l));
    assert_int_equal(st.quarantined, 0);
    tally_batch_destroy(f->b);
    f->b = NULL;
}

/* ---- Reading back ------------------------------------------------------------- */

static int64_t num(const char *s)
{
    return s ? strtoll(s, NULL, 10) : 0;
}

static tally_err one_value(void *ctx, int n, const char *const *c)
{
    (void)n;
    *(int64_t *)ctx = c[0] ? num(c[0]) : INT64_MIN;
    return TALLY_OK;
}

/* The first column of the first row of sql (INT64_MIN for NULL, -1 for no row). */
static int64_t query1(fx *f, const char *sql, const char *param)
{
    int64_t v = -1;
    const char *params[] = {param};
    tally_err e = tally_ledger_query(f->l, sql, params, param ? 1 : 0, one_value, &v);
    if (e)
        fail_msg("%s: %s", sql, tally_ledger_errmsg(f->l));
    return v;
}

/* The running period's subtotal, or -1 when the account has none for it. */
static int64_t running(fx *f, const char *account, const char *period)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT subtotal_minor FROM running_periods WHERE account = ?1 AND period = '%s'",
             period);
    return query1(f, sql, account);
}

static int64_t n_running(fx *f, const char *account)
{
    return query1(f, "SELECT count(*) FROM running_periods WHERE account = ?1", account);
}

/* When the account's balance is due a refresh by the clock (INT64_MIN: never). */
static int64_t next_check(fx *f, const char *account)
{
    return query1(f, "SELECT next_check_s FROM account_balances WHERE account = ?1", account);
}

typedef struct one_invoice {
    tally_invoice_summary s;
    int n;
} one_invoice;

static void on_invoice(void *ctx, const tally_invoice_summary *s)
{
    one_invoice *v = ctx;
    v->s = *s;
    v->n++;
}

/* One account's invoice (or draft) of a period. */
static tally_invoice_summary invoice(fx *f, const char *account, const char *period, bool finalize)
{
    one_invoice v = {0};
    tally_invoice_run_opts o = {.period = period,
                                .finalize = finalize,
                                .account = account,
                                .key_path = f->key,
                                .on_invoice = on_invoice,
                                .ctx = &v};
    char why[512] = "";
    if (tally_invoice_run(f->l, &o, why, sizeof why) != TALLY_OK)
        fail_msg("invoice run %s: %s", period, why);
    assert_int_equal(v.n, 1);
    return v.s;
}

static tally_balance balance(fx *f, const char *account)
{
    tally_balance b;
    assert_int_equal(tally_balance_get(f->l, account, &b), TALLY_OK);
    return b;
}

/* ---- Which periods run -------------------------------------------------------- */

/* A commitment bills each period it overlaps in full, as a draft of the
 * period shows, from the period's start: an account with a commitment and
 * no usage has running charges, and the next period joins them when the
 * clock reaches it (the balance's next check). Found by test_balance_diff:
 * the periods of a commitment were never rated. */
static void test_commitment_periods(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "bal-commit", "2025-12-20T00:00:00Z");
    /* 1 x a100-40g reserved at 1.14 per card-hour, Jan 10 to Feb 20 */
    assert_int_equal(tally_ledger_commit_add(f.l, "acme", "a100-40g", 1, at("2026-01-10T00:00:00Z"),
                                             at("2026-02-20T00:00:00Z"), NULL),
                     TALLY_OK);
    /* December: it starts in a later period; looked at again on January 1 */
    tally_balance b = balance(&f, "acme");
    assert_int_equal(b.running_minor, 0);
    assert_int_equal(next_check(&f, "acme"), at("2026-01-01T00:00:00Z"));

    clock_at(at("2026-01-05T00:00:00Z")); /* a read finds it due */
    b = balance(&f, "acme");
    assert_int_equal(running(&f, "acme", "2026-01"), 60192); /* 22 days x 24 x 1.14 */
    assert_int_equal(invoice(&f, "acme", "2026-01", false).subtotal_minor, 60192);
    assert_int_equal(running(&f, "acme", "2026-02"), -1); /* not yet */
    assert_int_equal(b.running_minor, 60192);

    clock_at(at("2026-02-02T00:00:00Z"));
    int64_t n = 0;
    assert_int_equal(tally_balance_sweep(f.l, tally_now_s(), &n), TALLY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(running(&f, "acme", "2026-02"), 51984); /* 19 days */
    assert_int_equal(invoice(&f, "acme", "2026-02", false).subtotal_minor, 51984);
    assert_int_equal(balance(&f, "acme").running_minor, 60192 + 51984);
    /* nothing after February: no next check */
    assert_int_equal(next_check(&f, "acme"), INT64_MIN);

    /* finalized, January leaves the running charges; February stays */
    tally_invoice_summary jan = invoice(&f, "acme", "2026-01", true);
    assert_true(jan.finalized);
    assert_int_equal(jan.subtotal_minor, 60192);
    assert_int_equal(running(&f, "acme", "2026-01"), -1);
    assert_int_equal(balance(&f, "acme").running_minor, 51984);
    fx_close(&f);
}

/* Late usage of a finalized period is billed on the next invoice as
 * adjustment lines; the balance counts them on the first open period after
 * it, whose draft shows them and whose invoice, finalized next, carries
 * them, even when that period has no usage of its own. Found by
 * test_balance_diff: a late event for January arriving on March 2, with
 * February idle and not yet finalized, was counted on March while
 * February's invoice billed it. */
static void test_late_usage_period(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "bal-late", "2026-01-20T00:00:00Z");
    accel(&f, "acme", "i-1", "h100", "on_demand", 1, at("2026-01-10T00:00:00Z"), 3600);
    commit(&f);
    clock_at(at("2026-02-03T00:00:00Z"));
    assert_int_equal(invoice(&f, "acme", "2026-01", true).subtotal_minor, 258);
    assert_int_equal(n_running(&f, "acme"), 0);

    clock_at(at("2026-03-02T00:00:00Z")); /* late for January; February still open */
    accel(&f, "acme", "i-2", "h100", "on_demand", 1, at("2026-01-15T00:00:00Z"), 3600);
    commit(&f);
    assert_int_equal(running(&f, "acme", "2026-02"), 258);
    assert_int_equal(running(&f, "acme", "2026-03"), -1);
    assert_int_equal(invoice(&f, "acme", "2026-02", false).subtotal_minor, 258);
    tally_invoice_summary feb = invoice(&f, "acme", "2026-02", true);
    assert_int_equal(feb.subtotal_minor, 258);
    assert_int_equal(n_running(&f, "acme"), 0);
    assert_int_equal(balance(&f, "acme").running_minor, 0);

    clock_at(at("2026-03-05T00:00:00Z")); /* late again: February is finalized now */
    accel(&f, "acme", "i-3", "h100", "on_demand", 1, at("2026-01-20T00:00:00Z"), 3600);
    commit(&f);
    assert_int_equal(running(&f, "acme", "2026-02"), -1);
    assert_int_equal(running(&f, "acme", "2026-03"), 258);
    assert_int_equal(invoice(&f, "acme", "2026-03", false).subtotal_minor, 258);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commitment_periods),
        cmocka_unit_test(test_late_usage_period),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
