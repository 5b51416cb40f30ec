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
#include "../../ledger/ledger_int.h"

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
    f->l = tu_open_priced(f->db);
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

static void storage(fx *f, const char *account, const char *volume, int64_t gb, int64_t t,
                    int64_t seconds)
{
    char data[256];
    snprintf(data, sizeof data,
             "{\"volume\":\"%s\",\"class\":\"ssd\",\"bytes\":%" PRId64 ",\"seconds\":%" PRId64 "}",
             volume, gb * 1000000000, seconds);
    queue(f, account, "storage.usage", t, data);
}

/* Commits what was queued and keeps the batch for the next commit, as a
 * meter does (its balance cache lives on: ledger/balance_cache.c). */
static void commit_keep(fx *f)
{
    tally_batch_stats st;
    tally_err e = tally_batch_commit(f->b, &st, NULL);
    if (e)
        fail_msg("commit: %s (%s)", tally_err_str(e), tally_ledger_errmsg(f->l));
    assert_int_equal(st.quarantined, 0);
}

/* Commits what was queued, in one batch of its own. */
static void commit(fx *f)
{
    commit_keep(f);
    tally_batch_destroy(f->b);
    f->b = NULL;
}

/* ---- Reading back ------------------------------------------------------------- */

static int64_t query1(fx *f, const char *sql, const char *param)
{
    return tu_query_int(f->l, sql, param);
}

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

static void grant(fx *f, const char *account, tally_grant_kind kind, int64_t amount_minor,
                  int priority, int64_t effective_s, int64_t expires_s)
{
    tally_grant_spec g = {.account = account,
                          .kind = kind,
                          .amount_minor = amount_minor,
                          .priority = priority,
                          .effective_s = effective_s,
                          .expires_s = expires_s,
                          .scope = ""};
    char why[256] = "";
    int64_t id;
    if (tally_ledger_grant_add(f->l, &g, &id, why, sizeof why) != TALLY_OK)
        fail_msg("grant: %s", why);
}

static void limits(fx *f, const char *account, const int64_t *low, int64_t stop, int64_t release)
{
    tally_limits_change c = {
        .low_minor = low, .clear_low = !low, .stop_at_minor = &stop, .release_after_s = &release};
    char why[256] = "";
    if (tally_limits_set(f->l, account, &c, why, sizeof why) != TALLY_OK)
        fail_msg("limits: %s", why);
}

/* The account's balance events in the outbox, oldest first. */
typedef struct bal_event {
    char id[160], type[40];
    json_object *doc; /* the CloudEvent */
    json_object *data;
} bal_event;

typedef struct bal_events {
    bal_event v[32];
    size_t n;
} bal_events;

static tally_err event_row(void *ctx, int n, const char *const *c)
{
    bal_events *x = ctx;
    (void)n;
    assert_true(x->n < 32);
    bal_event *e = &x->v[x->n++];
    snprintf(e->id, sizeof e->id, "%s", c[0]);
    snprintf(e->type, sizeof e->type, "%s", c[1]);
    e->doc = json_tokener_parse(c[2]);
    assert_non_null(e->doc);
    assert_true(json_object_object_get_ex(e->doc, "data", &e->data));
    return TALLY_OK;
}

static void events_load(fx *f, const char *account, bal_events *x)
{
    x->n = 0;
    const char *params[] = {account};
    assert_int_equal(tally_ledger_query(f->l,
                                        "SELECT event_id, type, CAST(payload AS TEXT) FROM outbox "
                                        "WHERE subject = ?1 AND (type LIKE 'balance.%' OR type "
                                        "LIKE 'account.%' OR type LIKE 'volume.%') ORDER BY id",
                                        params, 1, event_row, x),
                     TALLY_OK);
}

static void events_free(bal_events *x)
{
    for (size_t i = 0; i < x->n; i++)
        json_object_put(x->v[i].doc);
    x->n = 0;
}

static const char *jstr(json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : NULL;
}

/* Event i of x is type, with id "<type>:<account>:<n>", in state `state`. */
static void expect_event(const bal_events *x, size_t i, const char *type, const char *account,
                         int n, const char *state, const char *cause)
{
    char id[160];
    snprintf(id, sizeof id, "%s:%s:%d", type, account, n);
    if (i >= x->n)
        fail_msg("event %zu (%s) missing: only %zu", i, id, x->n);
    const bal_event *e = &x->v[i];
    if (strcmp(e->type, type) != 0 || strcmp(e->id, id) != 0)
        fail_msg("event %zu: %s (%s), wanted %s", i, e->id, e->type, id);
    assert_string_equal(jstr(e->doc, "id"), id);
    assert_string_equal(jstr(e->doc, "type"), type);
    assert_string_equal(jstr(e->doc, "subject"), account);
    assert_string_equal(jstr(e->data, "account"), account);
    assert_string_equal(jstr(e->data, "state"), state);
    assert_string_equal(jstr(e->data, "cause"), cause);
}

/* The "instance" (or "volume") names of a list in an event's data, sorted. */
static void names_of(const bal_event *e, const char *list, const char *key, char *out, size_t cap)
{
    json_object *a;
    out[0] = '\0';
    assert_true(json_object_object_get_ex(e->data, list, &a));
    const char *names[16];
    size_t n = json_object_array_length(a);
    assert_true(n <= 16);
    for (size_t i = 0; i < n; i++)
        names[i] = jstr(json_object_array_get_idx(a, i), key);
    for (size_t i = 1; i < n; i++) /* insertion sort */
        for (size_t j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            const char *t = names[j];
            names[j] = names[j - 1];
            names[j - 1] = t;
        }
    for (size_t i = 0; i < n; i++)
        snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? "," : "", names[i]);
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

/* Usage on the last day of a period, while the clock is still in it: the
 * refresh looks a day past the usage for a neighbour it may change, but
 * never into a period that has not begun, where a commitment would bill
 * running charges too early. Found by test_balance_diff
 * (TALLY_BALDIFF_SEED=1796186667). */
static void test_usage_at_period_end(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "bal-period-end", "2026-01-31T22:00:00Z");
    assert_int_equal(tally_ledger_commit_add(f.l, "acme", "a100-40g", 1, at("2026-01-10T00:00:00Z"),
                                             at("2026-02-20T00:00:00Z"), NULL),
                     TALLY_OK);
    clock_at(at("2026-01-31T23:30:00Z"));
    accel(&f, "acme", "i-1", "h100", "on_demand", 1, at("2026-01-31T23:00:00Z"), 1800);
    commit(&f);
    assert_int_equal(running(&f, "acme", "2026-02"), -1);
    assert_int_equal(running(&f, "acme", "2026-01"),
                     invoice(&f, "acme", "2026-01", false).subtotal_minor);
    fx_close(&f);
}

/* An invoice's own usage_seq, by its seq. */
static int64_t own_usage_seq(fx *f, int64_t seq)
{
    char s[24];
    snprintf(s, sizeof s, "%" PRId64, seq);
    return query1(f, "SELECT usage_seq FROM invoices WHERE seq = ?1", s);
}

/* inv_history (ledger/invoice_adjust.c) against the query it replaced, kept
 * here as the reference: for every earlier live invoice, the usage_seq up
 * to which its period is billed is its own or that of a later live invoice
 * carrying an adjustment for the period. (Which one cannot be seen in an
 * invoice: it only spares re-rating a period with nothing new.) Returns how
 * many rows are billed past their own usage_seq. */
static int expect_history(fx *f, const char *account, const char *period)
{
    static const char *const ref =
        "SELECT i.seq, i.period, max(i.usage_seq, coalesce((SELECT max(j.usage_seq) "
        "FROM invoices j WHERE j.account = i.account AND j.doc_type = 'invoice' "
        "AND j.seq > i.seq AND NOT EXISTS (SELECT 1 FROM invoices c WHERE c.account = "
        "j.account AND c.period = j.period AND c.doc_type = 'credit_note' AND c.refers_to = "
        "j.id) AND EXISTS (SELECT 1 FROM invoice_lines x WHERE x.invoice_seq = j.seq AND "
        "x.original_period = i.period)), 0)) FROM invoices i WHERE i.account = ?1 "
        "AND i.doc_type = 'invoice' AND i.period < ?2 AND NOT EXISTS (SELECT 1 FROM invoices "
        "c WHERE c.account = i.account AND c.period = i.period AND c.doc_type = "
        "'credit_note' AND c.refers_to = i.id) ORDER BY i.period";
    inv_gatherer *g = NULL;
    assert_int_equal(inv_gatherer_create(f->l, &g), TALLY_OK);
    inv_past *h = NULL;
    size_t n = 0;
    assert_int_equal(inv_history(g, account, period, &h, &n), TALLY_OK);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(f->l->db, ref, -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, period, -1, SQLITE_STATIC);
    size_t i = 0;
    int raised = 0;
    for (; sqlite3_step(st) == SQLITE_ROW; i++) {
        assert_true(i < n);
        assert_int_equal(h[i].seq, sqlite3_column_int64(st, 0));
        assert_string_equal(h[i].period, (const char *)sqlite3_column_text(st, 1));
        assert_int_equal(h[i].billed_to, sqlite3_column_int64(st, 2));
        raised += h[i].billed_to > own_usage_seq(f, h[i].seq);
    }
    assert_int_equal(i, n);
    sqlite3_finalize(st);
    free(h);
    inv_gatherer_destroy(g);
    return raised;
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
    /* February's invoice adjusted January: January is billed to its seq,
     * before whichever period is asked */
    assert_int_equal(expect_history(&f, "acme", "2026-04"), 1);
    assert_int_equal(expect_history(&f, "acme", "2026-02"), 1);
    assert_int_equal(expect_history(&f, "acme", "2026-01"), 0);
    fx_close(&f);
}

/* A void brings back the late adjustments the voided invoice carried:
 * they are counted again on the first open period after the period they
 * adjust, like any pending adjustment (and as the refresh finds them from
 * scratch, which `tally verify` does), even when that period is idle. */
static void test_void_pending_adjustments(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "bal-void", "2026-01-20T00:00:00Z");
    accel(&f, "acme", "i-1", "h100", "on_demand", 1, at("2026-01-10T00:00:00Z"), 3600);
    commit(&f);
    clock_at(at("2026-02-03T00:00:00Z"));
    assert_int_equal(invoice(&f, "acme", "2026-01", true).subtotal_minor, 258);
    clock_at(at("2026-03-10T00:00:00Z")); /* February had nothing and is not run */
    accel(&f, "acme", "i-1", "h100", "on_demand", 1, at("2026-03-05T00:00:00Z"), 3600);
    accel(&f, "acme", "i-2", "h100", "on_demand", 1, at("2026-01-15T00:00:00Z"), 3600);
    commit(&f);
    assert_int_equal(running(&f, "acme", "2026-02"), 258); /* January's adjustment */
    assert_int_equal(running(&f, "acme", "2026-03"), 258);

    clock_at(at("2026-04-02T00:00:00Z")); /* March finalized, February never run again */
    tally_invoice_summary mar = invoice(&f, "acme", "2026-03", true);
    assert_int_equal(mar.subtotal_minor, 516);
    assert_int_equal(n_running(&f, "acme"), 0);
    assert_int_equal(expect_history(&f, "acme", "2026-04"), 1); /* March adjusted January */

    char cn[80];
    assert_int_equal(tally_invoice_void(f.l, mar.invoice_id, "test", f.key, cn, sizeof cn),
                     TALLY_OK);
    assert_int_equal(running(&f, "acme", "2026-02"), 258);
    assert_int_equal(running(&f, "acme", "2026-03"), 258);
    assert_int_equal(invoice(&f, "acme", "2026-02", false).subtotal_minor, 258);
    assert_int_equal(balance(&f, "acme").running_minor, 516);
    assert_int_equal(expect_history(&f, "acme", "2026-04"), 0); /* March is void */
    fx_close(&f);
}

/* A new currency (allowed while the account has no invoice) is the
 * balance's currency at once: the grants of the old one no longer count,
 * and tally verify finds the stored balance as it recomputes it. */
static void test_currency_change(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "bal-currency", "2026-03-10T00:00:00Z");
    grant(&f, "eps", TALLY_GRANT_PREPAID, 5000, 50, at("2026-03-01T00:00:00Z"), TALLY_TIME_MAX);
    tally_balance b = balance(&f, "eps");
    assert_string_equal(b.currency, "CNY");
    assert_int_equal(b.credits_minor, 5000);
    assert_int_equal(tally_ledger_account_set(f.l, "eps", "USD", NULL, NULL), TALLY_OK);
    b = balance(&f, "eps");
    assert_string_equal(b.currency, "USD");
    assert_int_equal(b.credits_minor, 0);
    fx_close(&f); /* verify */
}

/* ---- The state machine and its events ------------------------------------------ */

/* One batch that takes the balance from above the low mark to below the
 * stop mark announces both crossings in order, then the suspension, each
 * with a stable id; account.suspend lists the instances that reported
 * usage in the 10 minutes before the latest usage, each once. A top-up
 * brings the account back: balance.recovered, and account.resume when it
 * was exhausted. */
static void test_low_and_stop_at_once(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "bal-events", "2026-03-01T00:00:00Z");
    grant(&f, "acme", TALLY_GRANT_PREPAID, 10000, 50, at("2026-01-01T00:00:00Z"), TALLY_TIME_MAX);
    int64_t low = 5000;
    limits(&f, "acme", &low, 0, TALLY_BALANCE_RELEASE_DEFAULT);
    tally_balance b = balance(&f, "acme");
    assert_int_equal(b.balance_minor, 10000);
    assert_int_equal(b.state, TALLY_BALANCE_OK);
    assert_true(b.controlled);
    bal_events x;
    events_load(&f, "acme", &x);
    assert_int_equal(x.n, 0);

    int64_t t = at("2026-03-10T12:00:00Z");
    clock_at(t);
    accel(&f, "acme", "i-1", "h100", "on_demand", 8, t - 6 * 3600, 6 * 3600); /* 123.84 */
    accel(&f, "acme", "i-2", "a100-40g", "on_demand", 1, t - 7200, 3600);     /* 1.90, early */
    accel(&f, "acme", "i-4", "cpu-container", "on_demand", 1, t - 1200, 600); /* ends at t - 600 */
    accel(&f, "acme", "i-5", "cpu-container", "on_demand", 1, t - 1200, 601); /* ends at t - 599 */
    accel(&f, "acme", "i-3", "rtx4090", "spot", 1, t - 300, 240);
    storage(&f, "acme", "v-1", 500, t - 3600, 3600);
    commit(&f);

    events_load(&f, "acme", &x);
    assert_int_equal(x.n, 3);
    /* each event names the state it announces: ok -> low, then low -> exhausted */
    expect_event(&x, 0, TALLY_EVENT_BALANCE_LOW, "acme", 1, "low", "usage");
    assert_string_equal(jstr(x.v[0].data, "previous_state"), "ok");
    assert_string_equal(jstr(x.v[1].data, "previous_state"), "low");
    expect_event(&x, 1, TALLY_EVENT_BALANCE_EXHAUSTED, "acme", 2, "exhausted", "usage");
    expect_event(&x, 2, TALLY_EVENT_ACCOUNT_SUSPEND, "acme", 3, "exhausted", "usage");
    assert_string_equal(jstr(x.v[0].data, "previous_state"), "ok");
    char names[256];
    names_of(&x.v[2], "instances", "instance", names, sizeof names);
    assert_string_equal(names, "i-1,i-3,i-5");
    b = balance(&f, "acme");
    assert_int_equal(b.state, TALLY_BALANCE_EXHAUSTED);
    assert_true(b.balance_minor < 0);
    assert_string_equal(jstr(x.v[2].data, "state"), "exhausted");
    events_free(&x);

    /* a top-up into the low band: recovered, resumed */
    grant(&f, "acme", TALLY_GRANT_PREPAID, 6000, 50, t, TALLY_TIME_MAX);
    b = balance(&f, "acme");
    assert_int_equal(b.state, TALLY_BALANCE_LOW);
    events_load(&f, "acme", &x);
    assert_int_equal(x.n, 5);
    expect_event(&x, 3, TALLY_EVENT_BALANCE_RECOVERED, "acme", 4, "low", "grant");
    expect_event(&x, 4, TALLY_EVENT_ACCOUNT_RESUME, "acme", 5, "low", "grant");
    assert_string_equal(jstr(x.v[3].data, "previous_state"), "exhausted");
    events_free(&x);

    /* above the low mark: recovered only; another top-up: nothing */
    grant(&f, "acme", TALLY_GRANT_PREPAID, 5000, 50, t, TALLY_TIME_MAX);
    grant(&f, "acme", TALLY_GRANT_PREPAID, 100, 50, t, TALLY_TIME_MAX);
    assert_int_equal(balance(&f, "acme").state, TALLY_BALANCE_OK);
    events_load(&f, "acme", &x);
    assert_int_equal(x.n, 6);
    expect_event(&x, 5, TALLY_EVENT_BALANCE_RECOVERED, "acme", 6, "ok", "grant");
    assert_string_equal(jstr(x.v[5].data, "previous_state"), "low");
    events_free(&x);
    fx_close(&f);
}

/* acct's running charges equal the draft of its one open period, which its
 * grants pay in full, and its credits what is left of granted after
 * earlier invoices used used. */
static void expect_draft(fx *f, const char *account, const char *period, int64_t granted,
                         int64_t used)
{
    tally_invoice_summary d = invoice(f, account, period, false);
    tally_balance b = balance(f, account);
    assert_true(d.subtotal_minor > 0);
    assert_int_equal(b.running_minor, d.subtotal_minor);
    assert_int_equal(b.covered_minor, d.credits_minor);
    assert_int_equal(b.credits_minor, granted - used - d.credits_minor);
}

static int64_t rows_of(fx *f, const char *resource)
{
    return query1(f, "SELECT count(*) FROM usage_intervals WHERE resource = ?1", resource);
}

/* One batch kept from commit to commit, as the meter keeps one: what its
 * refreshes remember between commits (ledger/balance_cache.c) must follow
 * its own interval rows as they are added, grow and merge (an event that
 * fills a gap deletes one of two rows), and give way to a top-up and a stop
 * mark set through another connection, to late usage for an invoiced
 * period, and to limits set on this connection. Each step is checked
 * against a draft run; verify recomputes everything at the end. */
static void test_batch_cache(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "bal-cache", "2026-03-10T12:00:00Z");
    int64_t t = at("2026-03-10T12:00:00Z");
    grant(&f, "acme", TALLY_GRANT_PREPAID, 20000, 50, at("2026-01-01T00:00:00Z"), TALLY_TIME_MAX);
    accel(&f, "acme", "i-0", "rtx4090", "on_demand", 1, at("2026-02-20T00:00:00Z"), 3600);
    commit(&f);
    int64_t used = invoice(&f, "acme", "2026-02", true).credits_minor;

    accel(&f, "acme", "i-1", "rtx4090", "on_demand", 1, t - 6 * 3600, 3600);
    commit_keep(&f); /* the cache reads March */
    accel(&f, "acme", "i-1", "rtx4090", "on_demand", 1, t - 4 * 3600, 3600); /* a gap before */
    accel(&f, "acme", "i-2", "a100-40g", "on_demand", 2, t - 3600, 1800);
    commit_keep(&f); /* new rows, from the cache */
    assert_int_equal(rows_of(&f, "i-1"), 2);
    accel(&f, "acme", "i-1", "rtx4090", "on_demand", 1, t - 5 * 3600, 3600);
    commit_keep(&f); /* the gap is filled: one row grows, the other goes */
    assert_int_equal(rows_of(&f, "i-1"), 1);
    /* Only reads until the next commit: a draft run writes (drafts), and
     * any write empties the cache. 3 h of rtx4090 at 1.98 and one card-hour
     * of a100-40g at 1.90. */
    tally_balance before = balance(&f, "acme");
    assert_int_equal(before.running_minor, 3 * 198 + 190);
    assert_int_equal(before.state, TALLY_BALANCE_OK);

    /* a top-up and a stop mark set by another process (the server): commits
     * by another connection that leave the state as it was */
    tally_ledger *other = NULL;
    char why[256] = "";
    if (tally_ledger_open(f.db, &other, why, sizeof why) != TALLY_OK)
        fail_msg("open: %s", why);
    tally_grant_spec g = {.account = "acme",
                          .kind = TALLY_GRANT_PREPAID,
                          .amount_minor = 5000,
                          .priority = 50,
                          .effective_s = at("2026-01-01T00:00:00Z"),
                          .expires_s = TALLY_TIME_MAX,
                          .scope = ""};
    int64_t id;
    assert_int_equal(tally_ledger_grant_add(other, &g, &id, why, sizeof why), TALLY_OK);
    int64_t stop = before.balance_minor + 5000 - 100; /* the next hour of i-1 crosses it */
    int64_t release = TALLY_BALANCE_RELEASE_DEFAULT;
    tally_limits_change lc = {
        .clear_low = true, .stop_at_minor = &stop, .release_after_s = &release};
    assert_int_equal(tally_limits_set(other, "acme", &lc, why, sizeof why), TALLY_OK);
    tally_ledger_close(other);
    assert_int_equal(balance(&f, "acme").state, TALLY_BALANCE_OK);

    accel(&f, "acme", "i-1", "rtx4090", "on_demand", 1, t - 3 * 3600, 3600);
    commit_keep(&f);
    expect_draft(&f, "acme", "2026-03", 25000, used);
    assert_int_equal(balance(&f, "acme").state, TALLY_BALANCE_EXHAUSTED);
    bal_events x;
    events_load(&f, "acme", &x);
    assert_int_equal(x.n, 2);
    expect_event(&x, 0, TALLY_EVENT_BALANCE_EXHAUSTED, "acme", 1, "exhausted", "usage");
    expect_event(&x, 1, TALLY_EVENT_ACCOUNT_SUSPEND, "acme", 2, "exhausted", "usage");
    events_free(&x);

    /* late usage for the invoiced February: its adjustment joins March */
    accel(&f, "acme", "i-0", "rtx4090", "on_demand", 1, at("2026-02-21T00:00:00Z"), 3600);
    commit_keep(&f);
    tally_invoice_summary mar = invoice(&f, "acme", "2026-03", false);
    assert_int_equal(balance(&f, "acme").running_minor, mar.subtotal_minor);
    expect_draft(&f, "acme", "2026-03", 25000, used);

    /* limits on this connection: the next commit's state follows them */
    tally_balance b = balance(&f, "acme");
    int64_t low = b.balance_minor + 1;
    limits(&f, "acme", &low, b.balance_minor - 150, TALLY_BALANCE_RELEASE_DEFAULT);
    assert_int_equal(balance(&f, "acme").state, TALLY_BALANCE_LOW);
    accel(&f, "acme", "i-2", "a100-40g", "on_demand", 2, t - 1800, 1800);
    commit_keep(&f);
    assert_int_equal(balance(&f, "acme").state, TALLY_BALANCE_EXHAUSTED);
    expect_draft(&f, "acme", "2026-03", 25000, used);
    tally_batch_destroy(f.b);
    f.b = NULL;
    fx_close(&f); /* verify recomputes the stored balance from the ledger */
}

/* Early in a month an account has two open periods, and each refresh rates
 * both: the kept batch's cache holds a window of interval rows for each
 * (ledger/balance_cache.c), and its writes must reach every window a row
 * belongs to (a gather reads a day either side, so rows near the month's
 * start are in both). Commit after commit, rows grow, start, and merge (a
 * filled gap deletes one) in both months; each period's running total is
 * checked against the hours put in, at 1.98 an hour of rtx4090. */
static void test_batch_cache_two_periods(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "bal-cache-two", "2026-03-01T12:00:00Z");
    int64_t feb = at("2026-02-28T12:00:00Z"), mar = at("2026-03-01T00:00:00Z");
    accel(&f, "acme", "i-1", "rtx4090", "on_demand", 1, feb, 3600);
    accel(&f, "acme", "i-2", "rtx4090", "on_demand", 1, mar, 3600);
    commit_keep(&f); /* the cache reads both months */
    int64_t hours = 1;
    for (int r = 0; r < 3; r++) {
        /* in each month, a row after a gap ... */
        accel(&f, "acme", "i-1", "rtx4090", "on_demand", 1, feb + (2 * r + 2) * 3600, 3600);
        accel(&f, "acme", "i-2", "rtx4090", "on_demand", 1, mar + (2 * r + 2) * 3600, 3600);
        hours++;
        commit_keep(&f);
        assert_int_equal(rows_of(&f, "i-1"), 2);
        assert_int_equal(running(&f, "acme", "2026-02"), 198 * hours);
        assert_int_equal(running(&f, "acme", "2026-03"), 198 * hours + 99 * r);
        /* ... then the gap filled: one row grows, the other goes */
        accel(&f, "acme", "i-1", "rtx4090", "on_demand", 1, feb + (2 * r + 1) * 3600, 3600);
        accel(&f, "acme", "i-2", "rtx4090", "on_demand", 1, mar + (2 * r + 1) * 3600, 3600);
        accel(&f, "acme", "i-3", "rtx4090", "on_demand", 1, mar + r * 3600, 1800);
        hours++;
        commit_keep(&f);
        assert_int_equal(rows_of(&f, "i-1"), 1);
        assert_int_equal(rows_of(&f, "i-2"), 1);
        assert_int_equal(running(&f, "acme", "2026-02"), 198 * hours);
        assert_int_equal(running(&f, "acme", "2026-03"), 198 * hours + 99 * (r + 1));
    }
    assert_int_equal(balance(&f, "acme").running_minor, 2 * 198 * hours + 99 * 3);
    tally_batch_destroy(f.b);
    f.b = NULL;
    fx_close(&f); /* verify recomputes the stored balance from the ledger */
}

/* More accounts in one commit than the batch keeps known (known_max,
 * ACCOUNTS_KNOWN_MAX in use, 4 here): the set starts again mid-commit and
 * its places go to other accounts, while each account's entry among those
 * the commit touched must stay its own (batch_commit.c, touch). a-0 gets
 * usage before and after the reset; a-4 takes a-0's old place; then a
 * second commit of the same batch touches them again. Every account's
 * running total is its own hours at 1.98. */
static void test_known_accounts_reset(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "bal-known-reset", "2026-03-10T12:00:00Z");
    int64_t t = at("2026-03-02T00:00:00Z");
    char name[16];
    int hours[6] = {0};
    for (int i = 0; i < 6; i++) {
        snprintf(name, sizeof name, "a-%d", i);
        accel(&f, name, "i-0", "rtx4090", "on_demand", 1, t + i * 3600, 3600);
        if (i == 0)
            f.b->known_max = 4; /* the batch exists once something is queued */
        hours[i]++;
    }
    const int again[][2] = {{0, 8}, {4, 9}, {0, 10}};
    for (int k = 0; k < 2; k++) {
        for (size_t j = 0; j < sizeof again / sizeof *again; j++) {
            snprintf(name, sizeof name, "a-%d", again[j][0]);
            accel(&f, name, "i-0", "rtx4090", "on_demand", 1, t + (again[j][1] + 3 * k) * 3600,
                  3600);
            hours[again[j][0]]++;
        }
        commit_keep(&f);
        assert_true(f.b->n_accounts < 6); /* the known set did start again */
        for (int i = 0; i < 6; i++) {
            snprintf(name, sizeof name, "a-%d", i);
            assert_int_equal(running(&f, name, "2026-03"), 198 * hours[i]);
        }
    }
    tally_batch_destroy(f.b);
    f.b = NULL;
    fx_close(&f);
}

/* More open periods than the cache has windows for an account (five months
 * never invoiced): the windows are taken in turn and the rest is read from
 * the ledger, and every month's running total stays right, commit after
 * commit of a kept batch. */
static void test_batch_cache_many_periods(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "bal-cache-many", "2026-05-15T12:00:00Z");
    static const char *const months[] = {"2026-01", "2026-02", "2026-03", "2026-04", "2026-05"};
    enum { N = sizeof months / sizeof *months };
    int64_t t0[N];
    for (int m = 0; m < N; m++) {
        char when[32];
        snprintf(when, sizeof when, "%s-10T00:00:00Z", months[m]);
        t0[m] = at(when);
    }
    for (int r = 0; r < 3; r++) {
        for (int m = 0; m < N; m++)
            accel(&f, "acme", "i-1", "rtx4090", "on_demand", 1, t0[m] + r * 3600, 3600);
        commit_keep(&f);
        for (int m = 0; m < N; m++)
            assert_int_equal(running(&f, "acme", months[m]), 198 * (r + 1));
    }
    assert_int_equal(balance(&f, "acme").running_minor, 198 * 3 * N);
    tally_batch_destroy(f.b);
    f.b = NULL;
    fx_close(&f);
}

static void tokens(fx *f, const char *account, const char *kind, int64_t n, int64_t t)
{
    char data[128];
    snprintf(data, sizeof data, "{\"model\":\"m-1\",\"kind\":\"%s\",\"tokens\":%" PRId64 "}", kind,
             n);
    queue(f, account, "tokens.usage", t, data);
}

/* The late-usage adjustments a kept batch remembers for an invoiced
 * account (ledger/balance_cache.c) give way to its own writes into the
 * invoiced period, commit after commit with nothing else writing in
 * between: a late interval, a late point, an interval that fills a gap in
 * the period (one row grows, the other goes); usage after the period
 * keeps them. Each commit's stored running charge is checked against
 * what the adjustment must add; verify recomputes everything at the end. */
static void test_batch_cache_late(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "bal-cache-late", "2026-03-02T00:00:00Z");
    accel(&f, "acme", "i-0", "rtx4090", "on_demand", 1, at("2026-02-10T00:00:00Z"), 3600);
    accel(&f, "acme", "i-0", "rtx4090", "on_demand", 1, at("2026-02-10T03:00:00Z"), 3600);
    commit_keep(&f); /* the batch remembers i-0's two rows */
    assert_int_equal(invoice(&f, "acme", "2026-02", true).subtotal_minor, 2 * 198);

    int64_t t = at("2026-03-10T00:00:00Z");
    clock_at(t + 86400);
    accel(&f, "acme", "i-1", "rtx4090", "on_demand", 1, t, 3600);
    commit_keep(&f); /* adjustments for March worked out: none */
    int64_t want = 198;
    assert_int_equal(running(&f, "acme", "2026-03"), want);
    accel(&f, "acme", "i-1", "rtx4090", "on_demand", 1, t + 3600, 3600);
    commit_keep(&f); /* March's own usage: they are kept */
    want += 198;
    assert_int_equal(running(&f, "acme", "2026-03"), want);

    accel(&f, "acme", "i-2", "rtx4090", "on_demand", 1, at("2026-02-20T00:00:00Z"), 3600);
    commit_keep(&f); /* a late interval: one hour more for February */
    want += 198;
    assert_int_equal(running(&f, "acme", "2026-03"), want);
    accel(&f, "acme", "i-1", "rtx4090", "on_demand", 1, t + 7200, 3600);
    commit_keep(&f);
    want += 198;
    assert_int_equal(running(&f, "acme", "2026-03"), want);

    tokens(&f, "acme", "output", 1000000, at("2026-02-25T00:00:00Z"));
    commit_keep(&f); /* a late point: a million output tokens, 8.00 */
    want += 800;
    assert_int_equal(running(&f, "acme", "2026-03"), want);
    tokens(&f, "acme", "input", 1000000, t + 600);
    commit_keep(&f);
    want += 400;
    assert_int_equal(running(&f, "acme", "2026-03"), want);

    /* fills February's gap between 01:00 and 03:00: the row before grows,
     * the row after goes */
    accel(&f, "acme", "i-0", "rtx4090", "on_demand", 1, at("2026-02-10T01:00:00Z"), 7200);
    commit_keep(&f);
    want += 2 * 198;
    assert_int_equal(rows_of(&f, "i-0"), 1);
    assert_int_equal(running(&f, "acme", "2026-03"), want);
    accel(&f, "acme", "i-1", "rtx4090", "on_demand", 1, t + 3 * 3600, 3600);
    commit_keep(&f);
    want += 198;
    assert_int_equal(running(&f, "acme", "2026-03"), want);
    assert_int_equal(invoice(&f, "acme", "2026-03", false).subtotal_minor, want);
    tally_batch_destroy(f.b);
    f.b = NULL;
    fx_close(&f); /* verify recomputes the stored balance from the ledger */
}

/* volume.release once the account has stayed exhausted for its release
 * grace: found by tally_balance_sweep when the clock gets there, announced
 * once, with the volumes. */
static void test_volume_release(void **state)
{
    (void)state;
    fx f;
    int64_t t0 = at("2026-03-10T00:00:00Z");
    fx_open(&f, "bal-release", "2026-03-10T00:00:00Z");
    grant(&f, "beta", TALLY_GRANT_PREPAID, 100, 50, at("2026-03-01T00:00:00Z"), TALLY_TIME_MAX);
    limits(&f, "beta", NULL, 0, 2 * 86400);
    accel(&f, "beta", "i-1", "h100", "on_demand", 1, t0 - 3600, 3600);
    storage(&f, "beta", "v-1", 500, t0 - 3600, 3600);
    commit(&f);
    bal_events x;
    events_load(&f, "beta", &x);
    assert_int_equal(x.n, 2); /* no low mark: exhausted, suspend */
    expect_event(&x, 0, TALLY_EVENT_BALANCE_EXHAUSTED, "beta", 1, "exhausted", "usage");
    expect_event(&x, 1, TALLY_EVENT_ACCOUNT_SUSPEND, "beta", 2, "exhausted", "usage");
    events_free(&x);
    assert_int_equal(next_check(&f, "beta"), t0 + 2 * 86400);

    int64_t n = -1;
    clock_at(t0 + 2 * 86400 - 1); /* not yet */
    assert_int_equal(tally_balance_sweep(f.l, tally_now_s(), &n), TALLY_OK);
    assert_int_equal(n, 0);
    assert_int_equal(balance(&f, "beta").state, TALLY_BALANCE_EXHAUSTED);
    events_load(&f, "beta", &x);
    assert_int_equal(x.n, 2);
    events_free(&x);

    clock_at(t0 + 2 * 86400);
    assert_int_equal(tally_balance_sweep(f.l, tally_now_s(), &n), TALLY_OK);
    assert_int_equal(n, 1);
    events_load(&f, "beta", &x);
    assert_int_equal(x.n, 3);
    expect_event(&x, 2, TALLY_EVENT_VOLUME_RELEASE, "beta", 3, "exhausted", "clock");
    char names[256];
    names_of(&x.v[2], "volumes", "volume", names, sizeof names);
    assert_string_equal(names, "v-1");
    assert_string_equal(jstr(x.v[2].data, "exhausted_since"), "2026-03-10T00:00:00Z");
    events_free(&x);
    assert_int_equal(next_check(&f, "beta"), INT64_MIN);

    /* only once: later sweeps, reads and usage announce nothing more */
    clock_at(t0 + 5 * 86400);
    assert_int_equal(tally_balance_sweep(f.l, tally_now_s(), &n), TALLY_OK);
    assert_int_equal(n, 0);
    assert_int_equal(balance(&f, "beta").state, TALLY_BALANCE_EXHAUSTED);
    storage(&f, "beta", "v-1", 500, t0 + 86400, 3600);
    commit(&f);
    events_load(&f, "beta", &x);
    assert_int_equal(x.n, 3);
    events_free(&x);
    fx_close(&f);
}

/* A grant that expires stops counting as credits when the clock passes its
 * expiry: the sweep moves the balance (and the state) then. What it paid
 * for usage inside its window stays paid. */
static void test_grant_expiry(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "bal-expiry", "2026-03-01T00:00:00Z");
    int64_t expires = at("2026-03-10T00:00:00Z");
    grant(&f, "gamma", TALLY_GRANT_TRIAL, 5000, 10, at("2026-02-01T00:00:00Z"), expires);
    grant(&f, "gamma", TALLY_GRANT_PREPAID, 1000, 50, at("2026-02-01T00:00:00Z"), TALLY_TIME_MAX);
    int64_t low = 2000;
    limits(&f, "gamma", &low, 0, TALLY_BALANCE_RELEASE_DEFAULT);
    clock_at(at("2026-03-02T12:00:00Z"));
    accel(&f, "gamma", "i-1", "h100", "on_demand", 1, at("2026-03-02T00:00:00Z"), 3600);
    commit(&f);
    tally_balance b = balance(&f, "gamma");
    assert_int_equal(b.running_minor, 258);
    assert_int_equal(b.covered_minor, 258); /* the trial voucher, priority 10 */
    assert_int_equal(b.credits_minor, 5000 - 258 + 1000);
    assert_int_equal(b.balance_minor, 5742);
    assert_int_equal(next_check(&f, "gamma"), expires);

    clock_at(expires + 3600);
    /* what is stored has not moved yet ... */
    assert_int_equal(
        query1(&f, "SELECT credits_minor FROM account_balances WHERE account = ?1", "gamma"), 5742);
    int64_t n = 0;
    assert_int_equal(tally_balance_sweep(f.l, tally_now_s(), &n), TALLY_OK);
    assert_int_equal(n, 1);
    /* ... the sweep moves it: the voucher is gone, what it paid stays paid */
    b = balance(&f, "gamma");
    assert_int_equal(b.credits_minor, 1000);
    assert_int_equal(b.covered_minor, 258);
    assert_int_equal(b.balance_minor, 1000);
    assert_int_equal(b.state, TALLY_BALANCE_LOW);
    assert_int_equal(next_check(&f, "gamma"), INT64_MIN);
    bal_events x;
    events_load(&f, "gamma", &x);
    assert_int_equal(x.n, 1);
    expect_event(&x, 0, TALLY_EVENT_BALANCE_LOW, "gamma", 1, "low", "clock");
    events_free(&x);
    assert_int_equal(tally_balance_sweep(f.l, tally_now_s(), &n), TALLY_OK);
    assert_int_equal(n, 0);
    fx_close(&f);
}

/* ---- Limits: bad input leaves nothing behind -------------------------------------- */

/* What a refused change of limits must leave as it was. */
static void counts(fx *f, int64_t out[5])
{
    out[0] = query1(f, "SELECT count(*) FROM account_limits", NULL);
    out[1] = query1(f, "SELECT count(*) FROM ledger_chain", NULL);
    out[2] = query1(f, "SELECT count(*) FROM outbox", NULL);
    out[3] = query1(f, "SELECT updated_at FROM account_balances WHERE account = ?1", "delta");
    out[4] = query1(f, "SELECT stop_at_minor FROM account_limits WHERE account = ?1", "delta");
}

static void refused(fx *f, const char *account, const int64_t *low, const int64_t *stop,
                    const int64_t *release, tally_err want, const char *why_has)
{
    int64_t before[5], after[5];
    counts(f, before);
    tally_limits_change c = {.low_minor = low, .stop_at_minor = stop, .release_after_s = release};
    char why[256] = "";
    clock_at(tally_now_s() + 1); /* a write now would change updated_at */
    assert_int_equal(tally_limits_set(f->l, account, &c, why, sizeof why), want);
    if (why_has && !strstr(why, why_has))
        fail_msg("why: \"%s\", wanted \"%s\"", why, why_has);
    counts(f, after);
    for (int i = 0; i < 5; i++)
        assert_int_equal(after[i], before[i]);
}

static void test_limits_refused(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "bal-limits", "2026-03-01T00:00:00Z");
    grant(&f, "delta", TALLY_GRANT_PREPAID, 1000, 50, at("2026-02-01T00:00:00Z"), TALLY_TIME_MAX);
    int64_t ok_low = 500;
    limits(&f, "delta", &ok_low, -100, 86400);
    const int64_t max = 100000000000; /* 1,000,000,000.00 CNY in fen */
    int64_t neg = -1, too_long = TALLY_BALANCE_RELEASE_MAX + 1, zero = 0, minus = -500;
    int64_t over = max + 1, under = -max - 1, fine = 1;
    refused(&f, "delta", NULL, NULL, &neg, TALLY_RANGE, "--release-after");
    refused(&f, "delta", NULL, NULL, &too_long, TALLY_RANGE, "--release-after");
    refused(&f, "delta", &minus, NULL, NULL, TALLY_RANGE, "above the stop mark");
    refused(&f, "delta", &zero, &zero, NULL, TALLY_RANGE, "above the stop mark");
    refused(&f, "delta", NULL, &ok_low, NULL, TALLY_RANGE, "above the stop mark"); /* low = stop */
    refused(&f, "delta", &over, NULL, NULL, TALLY_RANGE, "grant bound");
    refused(&f, "delta", &fine, &under, NULL, TALLY_RANGE, "grant bound");
    refused(&f, "nobody", &ok_low, NULL, NULL, TALLY_NOT_FOUND, NULL);
    /* the bound itself is accepted */
    int64_t at_max = max, at_min = -max;
    limits(&f, "delta", &at_max, at_min, 0);
    tally_balance b = balance(&f, "delta");
    assert_int_equal(b.limits.low_minor, max);
    assert_int_equal(b.limits.stop_at_minor, -max);
    assert_int_equal(b.state, TALLY_BALANCE_LOW);

    /* the command line: exit 2, nothing stored */
    tally_ledger_close(f.l);
    tally_buf out;
    tally_buf_init(&out, 0);
    static const char *const bad[] = {"--release-after -1d", "--release-after 3661d",
                                      "--low-balance 0 --stop-at 0", "--low-balance 1000000000.01",
                                      "--stop-at -1000000000.01"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tally_buf_reset(&out);
        int rc = tu_tally(&out, "--db '%s' account set delta %s 2>&1", f.db, bad[i]);
        if (rc != 2)
            fail_msg("account set delta %s: exit %d (%s)", bad[i], rc, out.data);
    }
    tally_buf_release(&out);
    char why[256] = "";
    assert_int_equal(tally_ledger_open(f.db, &f.l, why, sizeof why), TALLY_OK);
    assert_int_equal(balance(&f, "delta").limits.low_minor, max);
    assert_int_equal(query1(&f, "SELECT count(*) FROM account_limits", NULL), 1);
    fx_close(&f);
}

/* ---- Admission ------------------------------------------------------------------- */

static tally_admission admit(fx *f, const char *account, const char *sku, tally_pricing pricing,
                             int64_t cards, int64_t hours)
{
    tally_admission_req r = {.account = account,
                             .sku = sku,
                             .pricing = pricing,
                             .cards = cards,
                             .hours_nano = hours * 1000000000};
    tally_admission a;
    char why[256] = "";
    if (tally_admission_check(f->l, &r, &a, why, sizeof why) != TALLY_OK)
        fail_msg("admission: %s", why);
    return a;
}

/* Reserved usage is billed as the rating bills it: nothing more within the
 * committed cards, on-demand above them (SPEC section 2), not at the
 * commitment's reserved price; the committed cards its instances are
 * already using are not free. */
static void test_admission_reserved(void **state)
{
    (void)state;
    fx f;
    int64_t now = at("2026-03-10T12:00:00Z");
    fx_open(&f, "bal-admission", "2026-03-10T12:00:00Z");
    /* what the rating bills: reserved without a commitment is overage */
    accel(&f, "rb", "i-1", "h100", "reserved", 1, now - 7200, 3600);
    commit(&f);
    assert_int_equal(invoice(&f, "rb", "2026-03", false).subtotal_minor, 258);

    grant(&f, "ra", TALLY_GRANT_PREPAID, 15000, 50, at("2026-03-01T00:00:00Z"), TALLY_TIME_MAX);
    tally_admission a = admit(&f, "ra", "h100", TALLY_PRICING_RESERVED, 8, 10);
    assert_int_equal(a.cost_minor, 20640); /* 8 x 10 x 2.58 */
    assert_int_equal(a.unit_price_nano, 2580000000);
    assert_false(a.allowed);
    assert_int_equal(a.shortfall_minor, 20640 - 15000);
    a = admit(&f, "ra", "h100", TALLY_PRICING_ON_DEMAND, 1, 10);
    assert_int_equal(a.cost_minor, 2580);
    assert_true(a.allowed);

    /* 2 cards committed now: reserved within them costs nothing more */
    grant(&f, "rc", TALLY_GRANT_PREPAID, 100000, 50, at("2026-03-01T00:00:00Z"), TALLY_TIME_MAX);
    assert_int_equal(tally_ledger_commit_add(f.l, "rc", "h100", 2, at("2026-03-10T00:00:00Z"),
                                             at("2026-03-12T00:00:00Z"), NULL),
                     TALLY_OK);
    assert_int_equal(balance(&f, "rc").balance_minor, 100000 - 14880); /* 2 x 48 h x 1.55 */
    a = admit(&f, "rc", "h100", TALLY_PRICING_RESERVED, 2, 10);
    assert_int_equal(a.cost_minor, 0);
    assert_true(a.allowed);
    a = admit(&f, "rc", "h100", TALLY_PRICING_RESERVED, 5, 10);
    assert_int_equal(a.cost_minor, 7740); /* 3 over x 10 x 2.58 */
    /* one of them is in use: one more is free, the second is billed */
    accel(&f, "rc", "i-1", "h100", "reserved", 1, now - 300, 240);
    commit(&f);
    a = admit(&f, "rc", "h100", TALLY_PRICING_RESERVED, 2, 10);
    assert_int_equal(a.cost_minor, 2580);
    /* another SKU's commitment does not count */
    a = admit(&f, "rc", "a100-40g", TALLY_PRICING_RESERVED, 1, 10);
    assert_int_equal(a.cost_minor, 1900);
    fx_close(&f);
}

/* A run shorter than the SKU's minimum billable duration is billed as the
 * minimum (PRICEBOOK: one h100 for 20 s costs 0.04), and so is admitted. */
static void test_admission_minimum(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "bal-admission-min", "2026-03-10T12:00:00Z");
    grant(&f, "rd", TALLY_GRANT_PREPAID, 3, 50, at("2026-03-01T00:00:00Z"), TALLY_TIME_MAX);
    tally_admission_req r = {.account = "rd",
                             .sku = "h100",
                             .pricing = TALLY_PRICING_ON_DEMAND,
                             .cards = 1,
                             .hours_nano = 5555556}; /* 20 s */
    tally_admission a;
    char why[256] = "";
    assert_int_equal(tally_admission_check(f.l, &r, &a, why, sizeof why), TALLY_OK);
    assert_int_equal(a.cost_minor, 4); /* 60 s x 2.58 / 3600 = 0.043 */
    assert_false(a.allowed);
    assert_int_equal(a.shortfall_minor, 1);
    r.hours_nano = 1000000000; /* an hour: no minimum */
    assert_int_equal(tally_admission_check(f.l, &r, &a, why, sizeof why), TALLY_OK);
    assert_int_equal(a.cost_minor, 258);
    fx_close(&f);
}

/* ---- tally verify over the balance tables -------------------------------------------- */

/* The text of a trigger as schemas/012_balance.sql creates it. */
static void trigger_text(const char *name, tally_buf *out)
{
    tally_buf file;
    tally_buf_init(&file, 0);
    assert_int_equal(tu_read_file(tu_src("schemas/012_balance.sql"), &file), 0);
    char want[128];
    snprintf(want, sizeof want, "CREATE TRIGGER %s ", name);
    const char *a = strstr(file.data, want), *z = a ? strstr(a, "END;") : NULL;
    assert_non_null(z);
    assert_int_equal(tally_buf_append(out, a, (size_t)(z + 4 - a)), TALLY_OK);
    tally_buf_release(&file);
}

/* Copies base.db to <name>.db, runs sql on it with the sqlite3 shell (as
 * someone with the file would), then `tally verify`: exit 1 naming want, or
 * with want NULL exit 0. Returns the sqlite3 shell's exit status. */
static int tamper(fx *f, const char *name, const char *sql, const char *want)
{
    tally_buf out;
    tally_buf_init(&out, 0);
    char path[700];
    snprintf(path, sizeof path, "%s/%s.sql", f->dir, name);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(sql, fp);
    assert_int_equal(fclose(fp), 0);
    int sh = tu_sh(
        &out, "cd '%s' && rm -f %s.db* && cp base.db %s.db && sqlite3 -bail %s.db < %s.sql 2>&1",
        f->dir, name, name, name, name);
    tally_buf_reset(&out);
    int rc = tu_tally(&out, "--db '%s/%s.db' --key '%s' verify 2>&1", f->dir, name, f->key);
    if (want ? rc != 1 || !strstr(out.data, want) : rc != 0)
        fail_msg("%s: verify exit %d: %s(wanted %s)", name, rc, out.data, want ? want : "exit 0");
    tally_buf_release(&out);
    return sh;
}

/* account_limits is in the ledger's chain: editing it with sqlite3 is
 * refused by the chain trigger, and done around the trigger it is caught.
 * account_balances and running_periods are derived: any edit, even one
 * that keeps the row's sums consistent (an account un-suspended by raising
 * its credits and balance), is caught by recomputing the balance. */
static void test_verify_tampering(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "bal-tamper", "2026-03-01T00:00:00Z");
    grant(&f, "acme", TALLY_GRANT_PREPAID, 1000, 50, at("2026-02-01T00:00:00Z"),
          at("2026-06-01T00:00:00Z"));
    int64_t low = 500;
    limits(&f, "acme", &low, 0, 3 * 86400);
    clock_at(at("2026-03-10T00:00:00Z"));
    accel(&f, "acme", "i-1", "h100", "on_demand", 1, at("2026-03-09T00:00:00Z"), 4 * 3600);
    accel(&f, "other", "i-9", "h100", "on_demand", 1, at("2026-03-09T00:00:00Z"), 3600);
    commit(&f);
    tally_balance b = balance(&f, "acme");
    assert_int_equal(b.state, TALLY_BALANCE_EXHAUSTED);
    assert_int_equal(b.balance_minor, 1000 - 1032);
    tally_ledger_close(f.l);
    assert_int_equal(tu_sh(NULL, "cd '%s' && cp t.db base.db", f.dir), 0);
    assert_int_equal(tamper(&f, "untouched", "SELECT 1;", NULL), 0);

    /* limits: refused as such, caught around the trigger */
    assert_true(tamper(&f, "limits_plain",
                       "UPDATE account_limits SET stop_at_minor = -100000 WHERE account = 'acme';",
                       NULL) != 0);
    tally_buf q;
    tally_buf_init(&q, 0);
    assert_int_equal(tally_buf_puts(&q, "DROP TRIGGER chain_account_limits_update;\n"
                                        "UPDATE account_limits SET stop_at_minor = -100000 "
                                        "WHERE account = 'acme';\n"),
                     TALLY_OK);
    trigger_text("chain_account_limits_update", &q);
    assert_int_equal(tamper(&f, "limits_hidden", q.data,
                            "FAILED: limits of account acme: changed since chain entry"),
                     0);
    tally_buf_release(&q);

    /* balances: un-suspended by hand, the row's own sums kept right */
    assert_int_equal(
        tamper(&f, "unsuspend",
               "UPDATE account_balances SET credits_minor = credits_minor + 100000, "
               "balance_minor = balance_minor + 100000, state = 'ok', exhausted_since_s = NULL "
               "WHERE account = 'acme';",
               "FAILED: balance of account acme: credits_minor is 100000, but recomputing it "
               "from the ledger gives 0"),
        0);
    assert_int_equal(tamper(&f, "balance_only",
                            "UPDATE account_balances SET balance_minor = 5000, state = 'ok' "
                            "WHERE account = 'acme';",
                            "FAILED: balance of account acme: balance_minor 5000 is not"),
                     0);
    assert_int_equal(tamper(&f, "state_only",
                            "UPDATE account_balances SET state = 'ok', exhausted_since_s = NULL "
                            "WHERE account = 'acme';",
                            "FAILED: balance of account acme: state is ok, but its balance and "
                            "limits give exhausted"),
                     0);
    assert_int_equal(
        tamper(&f, "period_lowered",
               "UPDATE running_periods SET subtotal_minor = 0, credits_minor = 0, due_minor = 0 "
               "WHERE account = "
               "'acme'; UPDATE account_balances SET running_minor = 0, covered_minor = 0, "
               "balance_minor = credits_minor WHERE account = 'acme';",
               "FAILED: balance of account acme: running_minor is 0, but recomputing it from "
               "the ledger gives 1032"),
        0);
    assert_int_equal(
        tamper(&f, "period_dropped",
               "DELETE FROM running_periods WHERE account = 'other'; UPDATE account_balances SET "
               "running_minor = 0, balance_minor = 0 WHERE account = 'other';",
               "FAILED: balance of account other: running_minor is 0, but recomputing it from "
               "the ledger gives 258"),
        0);
    assert_int_equal(tamper(&f, "no_release",
                            "UPDATE account_balances SET next_check_s = NULL WHERE account = "
                            "'acme';",
                            "FAILED: balance of account acme: next_check_s is -1, but "
                            "recomputing gives"),
                     0);
    assert_int_equal(tamper(&f, "events_hidden",
                            "UPDATE account_balances SET event_seq = 0 WHERE account = 'acme';",
                            "FAILED: balance of account acme: event_seq 0, but the outbox holds 3"),
                     0);
    assert_int_equal(tamper(&f, "orphan_period",
                            "INSERT INTO running_periods VALUES ('ghost', '2026-03', 1, 0, 1);",
                            "FAILED: running period 2026-03 of account ghost: the account has no "
                            "stored balance"),
                     0);
    char why[256] = "";
    assert_int_equal(tally_ledger_open(f.db, &f.l, why, sizeof why), TALLY_OK);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commitment_periods),
        cmocka_unit_test(test_usage_at_period_end),
        cmocka_unit_test(test_late_usage_period),
        cmocka_unit_test(test_low_and_stop_at_once),
        cmocka_unit_test(test_volume_release),
        cmocka_unit_test(test_grant_expiry),
        cmocka_unit_test(test_void_pending_adjustments),
        cmocka_unit_test(test_currency_change),
        cmocka_unit_test(test_limits_refused),
        cmocka_unit_test(test_admission_reserved),
        cmocka_unit_test(test_admission_minimum),
        cmocka_unit_test(test_verify_tampering),
        cmocka_unit_test(test_batch_cache),
        cmocka_unit_test(test_batch_cache_late),
        cmocka_unit_test(test_batch_cache_two_periods),
        cmocka_unit_test(test_batch_cache_many_periods),
        cmocka_unit_test(test_known_accounts_reset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
