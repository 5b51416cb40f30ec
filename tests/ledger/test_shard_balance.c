/* Prepaid balances of accounts that meters write into the shards of a
 * ledger directory (include/tally/balance.h, ledger/shard_balance.c,
 * schemas/014_balance_pending.sql), through the library as `tally meter`
 * uses it:
 *
 *   - a shard commit leaves a balance_pending row; the flush refreshes
 *     main.db's balance to what a draft invoice run shows, to the fen, and
 *     writes balance.low, balance.exhausted and account.suspend once; a
 *     second flush changes nothing; `tally verify` accepts the directory
 *     both before the flush (a balance behind only by pending usage) and
 *     after it, and names a balance edited by hand;
 *   - a crash between the shard commit and the flush: reacquiring the shard
 *     flushes, or the publisher's tally_balance_sweep does when nobody
 *     takes it; a flush over a mark moved back announces nothing again;
 *   - main.db held by another writer: the flush returns at once without an
 *     error, the rows stay pending, and the next flush completes them;
 *   - TALLY_NO_BALANCES=1: shards record nothing. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"
#include "proc.h"
#include "tally/balance.h"
#include "tally/embed.h"
#include "tally/ingest.h"
#include "tally/invoice.h"
#include "tally/ledger_sql.h"
#include "tally/shard.h"
#include "tally/sign.h"

#define NOW    "2026-03-20T00:00:00Z"
#define TOPIC  "usage"
#define ACCT   "acme"
#define GRANT  1000 /* 10.00 CNY, prepaid */
#define LOW    300  /* 3.00 */
#define HOURS  4    /* of one h100 on demand at 2.58: 10.32, so both marks are crossed */
#define CHARGE 1032

typedef struct fx {
    char dir[512], key[600], main_db[600];
    tally_ledger *l; /* the directory */
    tally_shard_set *s;
    int next_id;
} fx;

static int64_t at(const char *s)
{
    int64_t t;
    assert_int_equal(tally_time_parse(s, strlen(s), &t), TALLY_OK);
    return t;
}

static void open_dir(fx *f)
{
    char why[256] = "";
    if (tally_ledger_open(f->dir, &f->l, why, sizeof why) != TALLY_OK)
        fail_msg("open %s: %s", f->dir, why);
    assert_int_equal(tally_shard_set_create(f->l, "test", &f->s), TALLY_OK);
}

static void close_dir(fx *f)
{
    tally_shard_set_destroy(f->s);
    tally_ledger_close(f->l);
    f->s = NULL;
    f->l = NULL;
}

/* A directory with a rate card, and in main.db the account with a prepaid
 * grant and a low mark (the stop mark stays 0.00). */
static void fx_open(fx *f, const char *tag)
{
    memset(f, 0, sizeof *f);
    setenv("TALLY_NOW", NOW, 1);
    snprintf(f->dir, sizeof f->dir, "%s/ledger", tu_tmpdir(tag));
    snprintf(f->key, sizeof f->key, "%s.key", f->dir);
    snprintf(f->main_db, sizeof f->main_db, "%s/main.db", f->dir);
    assert_int_equal(mkdir(f->dir, 0755), 0);
    open_dir(f);
    char why[256] = "";
    const tally_embedded *card = tally_embedded_find("fixtures/pricebook/ratecard.json");
    assert_non_null(card);
    if (tally_ledger_ratecard_load(f->l, card->data, card->len, why, sizeof why) != TALLY_OK)
        fail_msg("ratecard: %s", why);
    assert_int_equal(tally_keygen(f->key, 0), TALLY_OK);
    assert_int_equal(tally_ledger_account_set(f->l, ACCT, NULL, NULL, NULL), TALLY_OK);
    tally_grant_spec g = {.account = ACCT,
                          .kind = TALLY_GRANT_PREPAID,
                          .amount_minor = GRANT,
                          .priority = 10,
                          .effective_s = at("2026-03-01T00:00:00Z"),
                          .expires_s = TALLY_TIME_MAX,
                          .scope = ""};
    int64_t id;
    if (tally_ledger_grant_add(f->l, &g, &id, why, sizeof why) != TALLY_OK)
        fail_msg("grant: %s", why);
    int64_t low = LOW, stop = 0;
    tally_limits_change c = {.low_minor = &low, .stop_at_minor = &stop};
    if (tally_limits_set(f->l, ACCT, &c, why, sizeof why) != TALLY_OK)
        fail_msg("limits: %s", why);
}

static void assert_verified(fx *f)
{
    char why[512] = "";
    if (tally_ledger_verify(f->l, f->key, why, sizeof why) != TALLY_OK)
        fail_msg("verify: %s", why);
}

static void fx_close(fx *f)
{
    tally_shard_set_destroy(f->s);
    f->s = NULL;
    tu_assert_conservation(f->l);
    assert_verified(f);
    tally_ledger_close(f->l);
}

static tally_shard *take(fx *f, int32_t p)
{
    return tu_shard_take(f->s, TOPIC, p);
}

/* The first column of sql's first row (-1: no row, INT64_MIN: NULL). */
static int64_t value(tally_ledger *l, const char *sql)
{
    return tu_query_int(l, sql, NULL);
}

static int64_t n_events(fx *f, const char *type)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM outbox WHERE subject = '" ACCT "' AND type = '%s'", type);
    return value(f->l, sql);
}

static int64_t n_balance_events(fx *f)
{
    return value(f->l, "SELECT count(*) FROM outbox WHERE subject = '" ACCT
                       "' AND (type LIKE 'balance.%' OR type LIKE 'account.%' OR type LIKE "
                       "'volume.%')");
}

/* The crossings of one exhaustion, each once. */
static void assert_crossed_once(fx *f)
{
    assert_int_equal(n_events(f, "balance.low"), 1);
    assert_int_equal(n_events(f, "balance.exhausted"), 1);
    assert_int_equal(n_events(f, "account.suspend"), 1);
    assert_int_equal(n_balance_events(f), 3);
    assert_int_equal(
        value(f->l, "SELECT event_seq FROM account_balances WHERE account = '" ACCT "'"), 3);
}

/* Commits hours of one h100 on demand of ACCT, from 2026-03-10 + from_h
 * hours, into partition p's shard, as the meter does. */
static void commit_usage(fx *f, int32_t p, int from_h, int hours)
{
    tally_shard *sh = take(f, p);
    tally_batch *b = NULL;
    assert_int_equal(tally_shard_batch(sh, &b), TALLY_OK);
    int64_t t0 = at("2026-03-10T00:00:00Z") + (int64_t)from_h * 3600;
    for (int h = 0; h < hours; h++) {
        char ev[512], ts[40], origin[64];
        assert_int_equal(tally_time_format(t0 + (int64_t)h * 3600, ts, sizeof ts), TALLY_OK);
        snprintf(ev, sizeof ev,
                 "{\"specversion\":\"1.0\",\"id\":\"u-%d\",\"source\":\"//gpu\","
                 "\"type\":\"accelerator.usage\",\"subject\":\"" ACCT "\",\"time\":\"%s\","
                 "\"data\":{\"instance\":\"i-1\",\"sku\":\"h100\",\"pricing\":\"on_demand\","
                 "\"cards\":1,\"seconds\":3600}}",
                 ++f->next_id, ts);
        snprintf(origin, sizeof origin, "test:%d", f->next_id);
        tally_reject rej;
        assert_int_equal(tally_ingest_message(b, ev, strlen(ev), origin, tally_now_s(), &rej),
                         TALLY_OK);
        if (rej.reason[0])
            fail_msg("rejected: %s %s", rej.reason, rej.detail);
    }
    int64_t next = -1;
    assert_int_equal(tally_ledger_offset_get(tally_shard_ledger(sh), TOPIC, p, &next), TALLY_OK);
    assert_int_equal(tally_batch_set_offset(b, TOPIC, p, next, (next < 0 ? 0 : next) + hours),
                     TALLY_OK);
    assert_int_equal(tally_shard_prepare(sh), TALLY_OK);
    tally_batch_stats st;
    tally_err e = tally_batch_commit(b, &st, NULL);
    if (e)
        fail_msg("commit: %s (%s)", tally_err_str(e), tally_ledger_errmsg(tally_shard_ledger(sh)));
    assert_int_equal(st.accepted, hours);
}

/* Rows of the shard's balance_pending above main.db's mark for it. */
static int64_t pending(fx *f, int32_t p)
{
    char sql[256];
    tally_ledger *sl = tally_shard_ledger(take(f, p));
    int64_t mark = value(f->l, "SELECT coalesce(max(seq), 0) FROM shard_balance_marks");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM balance_pending WHERE seq > %" PRId64, mark);
    return value(sl, sql);
}

static void flush(fx *f)
{
    tally_err e = tally_shard_set_balances_flush(f->s);
    if (e)
        fail_msg("flush: %s (%s)", tally_err_str(e), tally_ledger_errmsg(f->l));
}

typedef struct draft {
    tally_invoice_summary s;
    int n;
} draft;

static void on_draft(void *ctx, const tally_invoice_summary *s)
{
    draft *d = ctx;
    d->s = *s;
    d->n++;
}

/* main.db's stored balance equals a draft invoice run of the open period. */
static void assert_balance_is_draft(fx *f)
{
    draft d = {0};
    tally_invoice_run_opts o = {.period = "2026-03",
                                .account = ACCT,
                                .key_path = f->key,
                                .on_invoice = on_draft,
                                .ctx = &d};
    char why[512] = "";
    if (tally_invoice_run(f->l, &o, why, sizeof why) != TALLY_OK)
        fail_msg("draft: %s", why);
    assert_int_equal(d.n, 1);
    assert_int_equal(d.s.subtotal_minor, CHARGE);
    assert_int_equal(d.s.credits_minor, GRANT);
    tally_balance b;
    assert_int_equal(tally_balance_get(f->l, ACCT, &b), TALLY_OK);
    assert_int_equal(b.running_minor, d.s.subtotal_minor);
    assert_int_equal(b.covered_minor, d.s.credits_minor);
    assert_int_equal(b.credits_minor, GRANT - d.s.credits_minor);
    assert_int_equal(b.balance_minor, -d.s.amount_due_minor);
    assert_int_equal(b.state, TALLY_BALANCE_EXHAUSTED);
}

/* What the account's stored balance is, as one comparable string. */
static void balance_row(fx *f, char *out, size_t cap)
{
    snprintf(out, cap, "%" PRId64 "/%" PRId64 "/%" PRId64 "/%" PRId64,
             value(f->l, "SELECT balance_minor FROM account_balances WHERE account = '" ACCT "'"),
             value(f->l, "SELECT running_minor FROM account_balances WHERE account = '" ACCT "'"),
             value(f->l, "SELECT event_seq FROM account_balances WHERE account = '" ACCT "'"),
             value(f->l, "SELECT count(*) FROM outbox"));
}

/* ---- Tests ------------------------------------------------------------------------ */

static void test_flush_refreshes_main(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "shard-balance-flush");
    commit_usage(&f, 3, 0, HOURS);
    /* Committed in the shard, not yet in main.db: behind, not tampered. */
    assert_int_equal(pending(&f, 3), 1);
    tally_ledger *sl = tally_shard_ledger(take(&f, 3));
    assert_int_equal(value(sl, "SELECT lo_s FROM balance_pending"), at("2026-03-10T00:00:00Z"));
    assert_int_equal(value(sl, "SELECT hi_s - lo_s FROM balance_pending"), HOURS * 3600 - 1);
    assert_int_equal(n_balance_events(&f), 0);
    assert_verified(&f);

    flush(&f);
    assert_int_equal(pending(&f, 3), 0);
    assert_crossed_once(&f);
    assert_balance_is_draft(&f);

    char before[128], after[128];
    balance_row(&f, before, sizeof before);
    flush(&f);
    balance_row(&f, after, sizeof after);
    assert_string_equal(before, after);
    assert_crossed_once(&f);

    /* More usage after the flush: the row's span is replaced, not widened. */
    commit_usage(&f, 3, 10, 1);
    assert_int_equal(value(sl, "SELECT hi_s - lo_s FROM balance_pending"), 3599);
    flush(&f);
    assert_int_equal(pending(&f, 3), 0);
    assert_int_equal(value(f.l, "SELECT running_minor FROM account_balances"), CHARGE + 258);
    assert_crossed_once(&f); /* still exhausted: nothing new to announce */
    fx_close(&f);
}

static void test_verify_names_edited_balance(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "shard-balance-verify");
    commit_usage(&f, 0, 0, HOURS);
    flush(&f);
    assert_verified(&f);
    assert_int_equal(tally_ledger_exec(f.l, "UPDATE account_balances SET balance_minor = 5000, "
                                            "credits_minor = 5000 + running_minor - covered_minor, "
                                            "state = 'ok', exhausted_since_s = NULL"),
                     TALLY_OK);
    char why[512] = "";
    assert_int_equal(tally_ledger_verify(f.l, f.key, why, sizeof why), TALLY_TAMPERED);
    assert_non_null(strstr(why, "balance of account " ACCT));
    tally_shard_set_destroy(f.s);
    tally_ledger_close(f.l);
}

static void test_crash_before_flush(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "shard-balance-crash");
    commit_usage(&f, 5, 0, HOURS);
    close_dir(&f); /* the meter dies between the shard commit and its flush */
    open_dir(&f);
    assert_int_equal(n_balance_events(&f), 0);
    (void)take(&f, 5); /* the next holder flushes on acquisition */
    assert_int_equal(pending(&f, 5), 0);
    assert_crossed_once(&f);
    assert_balance_is_draft(&f);

    /* main.db's mark moved back (a restore, say): the holder's next flush
     * sees it and refreshes the rows again, and nothing is announced
     * twice; so does the publisher's sweep. */
    char before[128], after[128];
    balance_row(&f, before, sizeof before);
    assert_int_equal(tally_ledger_exec(f.l, "UPDATE shard_balance_marks SET seq = 0"), TALLY_OK);
    assert_int_equal(pending(&f, 5), 1);
    flush(&f);
    assert_int_equal(pending(&f, 5), 0);
    assert_int_equal(tally_ledger_exec(f.l, "UPDATE shard_balance_marks SET seq = 0"), TALLY_OK);
    int64_t n = 0;
    assert_int_equal(tally_balance_sweep(f.l, tally_now_s(), &n), TALLY_OK);
    assert_int_equal(n, 1);
    assert_int_equal(pending(&f, 5), 0);
    balance_row(&f, after, sizeof after);
    assert_string_equal(before, after);
    assert_crossed_once(&f);
    fx_close(&f);
}

static void test_sweep_catches_up(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "shard-balance-sweep");
    commit_usage(&f, 1, 0, HOURS);
    close_dir(&f); /* died before its flush; nobody takes partition 1 */
    char why[256] = "";
    assert_int_equal(tally_ledger_open(f.dir, &f.l, why, sizeof why), TALLY_OK);
    int64_t n = 0;
    assert_int_equal(tally_balance_sweep(f.l, tally_now_s(), &n), TALLY_OK);
    assert_int_equal(n, 1);
    assert_crossed_once(&f);
    assert_balance_is_draft(&f);
    assert_int_equal(tally_balance_sweep(f.l, tally_now_s(), &n), TALLY_OK);
    assert_int_equal(n, 0);
    assert_crossed_once(&f);
    assert_int_equal(tally_shard_set_create(f.l, "test", &f.s), TALLY_OK);
    assert_int_equal(pending(&f, 1), 0);
    fx_close(&f);
}

static void test_busy_main(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "shard-balance-busy");
    tally_ledger *other = NULL;
    char why[256] = "";
    assert_int_equal(tally_ledger_open(f.main_db, &other, why, sizeof why), TALLY_OK);
    assert_int_equal(tally_ledger_exec(other, "BEGIN IMMEDIATE"), TALLY_OK); /* an invoice run */
    commit_usage(&f, 2, 0, HOURS);
    int64_t t0 = tu_ms();
    flush(&f); /* TALLY_OK: the rows wait */
    int64_t waited = tu_ms() - t0;
    assert_true(waited < 1500);
    assert_int_equal(pending(&f, 2), 1);
    assert_int_equal(n_balance_events(&f), 0);
    assert_int_equal(tally_ledger_exec(other, "COMMIT"), TALLY_OK);
    tally_ledger_close(other);
    flush(&f);
    assert_int_equal(pending(&f, 2), 0);
    assert_crossed_once(&f);
    assert_balance_is_draft(&f);
    fx_close(&f);
}

static void test_no_balances(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "shard-balance-off");
    setenv("TALLY_NO_BALANCES", "1", 1);
    commit_usage(&f, 4, 0, HOURS); /* the shard is opened with balances off */
    unsetenv("TALLY_NO_BALANCES");
    assert_int_equal(value(tally_shard_ledger(take(&f, 4)), "SELECT count(*) FROM balance_pending"),
                     0);
    flush(&f);
    assert_int_equal(n_balance_events(&f), 0);
    tally_shard_set_destroy(f.s);
    tally_ledger_close(f.l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flush_refreshes_main),
        cmocka_unit_test(test_verify_names_edited_balance),
        cmocka_unit_test(test_crash_before_flush),
        cmocka_unit_test(test_sweep_catches_up),
        cmocka_unit_test(test_busy_main),
        cmocka_unit_test(test_no_balances),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
