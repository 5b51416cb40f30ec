/* Late events and back-dated prices (SPEC sections 2 and 4):
 *   - a late event that dissolves minimum top-ups nets an invoice below
 *     zero: it is finalized with 0.00 due and an `adjustment` credit for the
 *     rest, which later charges consume, and `verify` accepts it (also after
 *     a void);
 *   - a spot price set back-dated into a finalized month does not re-price
 *     that month when a late event re-rates it;
 *   - a property test: random late events, price changes and voids, with
 *     verify and "no negative amount due" asserted after every finalize.
 *     TALLY_PROPERTY_SEED=<n> reproduces a run; TALLY_PROPERTY_ROUNDS=<n>
 *     runs longer. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "../../ledger/ledger_int.h"
#include "tally/embed.h"
#include "tally/ingest.h"
#include "tally/invoice.h"
#include "tally/sign.h"
#include "tally/ledger_sql.h"

typedef struct fx {
    tally_ledger *l;
    char dir[512];
    char db[600];
    char key[600];
    int next_id;
    int64_t now_s;
} fx;

/* Sets the ledger's clock (TALLY_NOW). */
static void clock_at(fx *f, int64_t t)
{
    char s[40];
    f->now_s = t;
    assert_int_equal(tally_time_format(t, s, sizeof s), TALLY_OK);
    setenv("TALLY_NOW", s, 1);
}

static int64_t at(const char *s)
{
    int64_t t;
    assert_int_equal(tally_time_parse(s, strlen(s), &t), TALLY_OK);
    return t;
}

static void fx_open(fx *f, const char *tag, const char *now)
{
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "%s", tu_tmpdir(tag));
    snprintf(f->db, sizeof f->db, "%s/t.db", f->dir);
    snprintf(f->key, sizeof f->key, "%s/t.key", f->dir);
    clock_at(f, at("2026-01-01T00:00:00Z"));
    f->l = tu_open_priced(f->db);
    assert_int_equal(tally_keygen(f->key, 0), TALLY_OK);
    clock_at(f, at(now));
}

static void verify_ok(fx *f)
{
    char why[512] = "";
    tu_assert_conservation(f->l);
    if (tally_ledger_verify(f->l, f->key, why, sizeof why) != TALLY_OK)
        fail_msg("verify: %s", why);
}

static void fx_close(fx *f)
{
    verify_ok(f);
    tally_ledger_close(f->l);
}

static void accel(fx *f, const char *account, int64_t t, const char *sku, const char *pricing,
                  int seconds)
{
    char ev[1024], ts[40];
    assert_int_equal(tally_time_format(t, ts, sizeof ts), TALLY_OK);
    snprintf(ev, sizeof ev,
             "{\"specversion\":\"1.0\",\"id\":\"ev-%d\",\"source\":\"test\",\"type\":"
             "\"accelerator.usage\",\"subject\":\"%s\",\"time\":\"%s\",\"data\":{\"instance\":"
             "\"i-%s\",\"sku\":\"%s\",\"pricing\":\"%s\",\"cards\":1,\"seconds\":%d}}",
             ++f->next_id, account, ts, sku, sku, pricing, seconds);
    tally_batch *b = NULL;
    tally_reject rej;
    char origin[64];
    snprintf(origin, sizeof origin, "test:%d", f->next_id);
    assert_int_equal(tally_batch_create(f->l, &b), TALLY_OK);
    assert_int_equal(tally_ingest_message(b, ev, strlen(ev), origin, tally_now_s(), &rej),
                     TALLY_OK);
    if (rej.reason[0])
        fail_msg("event rejected: %s %s (%s)", rej.reason, rej.detail, ev);
    tally_batch_stats st;
    assert_int_equal(tally_batch_commit(b, &st, NULL), TALLY_OK);
    tally_batch_destroy(b);
}

typedef struct seen {
    tally_invoice_summary s[8];
    size_t n;
} seen;

static void on_invoice(void *ctx, const tally_invoice_summary *s)
{
    seen *v = ctx;
    if (v->n < 8)
        v->s[v->n++] = *s;
}

static void run_ok(fx *f, const char *period, bool finalize, seen *v)
{
    char why[512] = "";
    memset(v, 0, sizeof *v);
    tally_invoice_run_opts o = {.period = period,
                                .finalize = finalize,
                                .key_path = f->key,
                                .on_invoice = on_invoice,
                                .ctx = v};
    tally_err e = tally_invoice_run(f->l, &o, why, sizeof why);
    if (e)
        fail_msg("run %s: %s: %s", period, tally_err_name(e), why);
}

static int64_t count(fx *f, const char *sql)
{
    int64_t n = -1;
    sqlite3_stmt *st;
    assert_int_equal(ledger_prepare(f->l, sql, &st), TALLY_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
}

/* Document id in format fmt holds text. */
static void shown_has(fx *f, const char *id, tally_doc_format fmt, const char *text)
{
    tally_buf raw;
    tally_buf_init(&raw, 0);
    assert_int_equal(tally_invoice_show(f->l, id, fmt, &raw), TALLY_OK);
    if (!strstr(raw.data, text))
        fail_msg("%s lacks %s: %s", id, text, raw.data);
    tally_buf_release(&raw);
}

static void doc_has(fx *f, const char *id, const char *text)
{
    shown_has(f, id, TALLY_FORMAT_JSON, text);
}

static void no_negative_due(fx *f)
{
    assert_int_equal(count(f, "SELECT count(*) FROM invoices WHERE doc_type = 'invoice' "
                              "AND amount_due_minor < 0"),
                     0);
}

/* Two runs of 20 s, 70 s apart, each topped up to 60 s. A late event in the
 * gap joins them into one run of more than a minute: the top-ups dissolve
 * and April, carrying only that adjustment, nets below zero. */
static void test_gap_closing_event(void **state)
{
    (void)state;
    fx f;
    seen v;
    fx_open(&f, "late-gap", "2026-04-01T01:00:00Z");
    accel(&f, "acme", at("2026-03-10T10:00:00Z"), "h100", "on_demand", 20);
    accel(&f, "acme", at("2026-03-10T10:01:30Z"), "h100", "on_demand", 20);
    run_ok(&f, "2026-03", true, &v);
    assert_int_equal(v.s[0].amount_due_minor, 9); /* 2 x 60 s at 2.58/h: 0.04 + 0.04 + ... */
    clock_at(&f, at("2026-05-01T01:00:00Z"));
    accel(&f, "acme", at("2026-03-10T10:00:20Z"), "h100", "on_demand", 40);
    accel(&f, "acme", at("2026-03-10T10:01:00Z"), "h100", "on_demand", 30);
    run_ok(&f, "2026-04", false, &v); /* a draft shows the credit it would issue */
    doc_has(&f, "draft:acme:2026-04",
            "\"credit_issued\":{\"grant_id\":null,\"kind\":\"adjustment\"");
    doc_has(&f, "draft:acme:2026-04", "\"amount_due\":\"0.00\"");
    run_ok(&f, "2026-04", true, &v);
    doc_has(&f, "INV-2026-000002", "\"credit_issued\":{\"grant_id\":1,\"kind\":\"adjustment\"");
    shown_has(&f, "INV-2026-000002", TALLY_FORMAT_HTML, "Adjustment credit issued");
    assert_int_equal(v.n, 1);
    assert_true(v.s[0].subtotal_minor < 0);
    assert_int_equal(v.s[0].amount_due_minor, 0);
    no_negative_due(&f);
    /* The rest is an adjustment credit of the account: no expiry, no scope. */
    assert_int_equal(count(&f, "SELECT count(*) FROM grants WHERE account = 'acme' AND "
                               "kind = 'adjustment' AND expires_s IS NULL AND scope = ''"),
                     1);
    int64_t credit = count(&f, "SELECT amount_minor FROM grants WHERE kind = 'adjustment'");
    assert_int_equal(credit, -v.s[0].subtotal_minor);
    verify_ok(&f);
    /* May's usage consumes it. */
    clock_at(&f, at("2026-06-01T01:00:00Z"));
    accel(&f, "acme", at("2026-05-10T10:00:00Z"), "h100", "on_demand", 3600);
    run_ok(&f, "2026-05", true, &v);
    assert_int_equal(v.s[0].subtotal_minor, 258);
    assert_int_equal(v.s[0].credits_minor, credit);
    assert_int_equal(v.s[0].amount_due_minor, 258 - credit);
    verify_ok(&f);
    /* The invoice that issued the credit cannot be voided while May has used
     * it; after May's void it can, and both periods are invoiced afresh. */
    char cn[64];
    clock_at(&f, at("2026-06-01T02:00:00Z"));
    assert_int_equal(tally_invoice_void(f.l, "INV-2026-000002", "test", f.key, cn, sizeof cn),
                     TALLY_FINALIZED);
    assert_non_null(strstr(tally_ledger_errmsg(f.l), "void them first"));
    assert_int_equal(tally_invoice_void(f.l, "INV-2026-000003", "test", f.key, cn, sizeof cn),
                     TALLY_OK);
    assert_int_equal(tally_invoice_void(f.l, "INV-2026-000002", "test", f.key, cn, sizeof cn),
                     TALLY_OK);
    doc_has(&f, cn, "\"credit_issued\":{\"grant_id\":1,\"kind\":\"adjustment\",\"amount\":\"-0.");
    verify_ok(&f);
    clock_at(&f, at("2026-06-01T03:00:00Z"));
    run_ok(&f, "2026-04", true, &v);
    assert_int_equal(v.s[0].amount_due_minor, 0);
    assert_int_equal(v.s[0].subtotal_minor, -credit);
    run_ok(&f, "2026-05", true, &v);
    assert_int_equal(v.s[0].amount_due_minor, 258 - credit);
    no_negative_due(&f);
    /* Exactly one live adjustment credit's worth was used, once. */
    assert_int_equal(count(&f, "SELECT sum(b.credit_minor - b.debit_minor) FROM balances b "
                               "JOIN grants g ON b.ledger_acct = 'grant:' || g.id "
                               "WHERE g.kind = 'adjustment'"),
                     0);
    fx_close(&f);
}

/* The fixture card with h100 on demand at 3.00, in force from March 15. */
static void load_card_b(fx *f)
{
    const tally_embedded *card = tally_embedded_find("fixtures/pricebook/ratecard.json");
    assert_non_null(card);
    char *body = malloc(card->len + 1);
    assert_non_null(body);
    memcpy(body, card->data, card->len);
    body[card->len] = '\0';
    char *id = strstr(body, "pricebook-2026-01"), *from = strstr(body, "2026-01-01T00:00:00Z");
    char *h100 = strstr(body, "\"on_demand\": \"2.58\"");
    assert_true(id && from && h100);
    memcpy(id, "pricebook-2026-03", 17);
    memcpy(from, "2026-03-15", 10);
    memcpy(h100 + 14, "3.00", 4);
    char why[256] = "";
    if (tally_ledger_ratecard_load(f->l, body, card->len, why, sizeof why) != TALLY_OK)
        fail_msg("card b: %s", why);
    free(body);
}

/* A back-dated spot price for a finalized March, then a late event for
 * March: March is re-rated with the prices as they stood when it was
 * finalized, so the adjustment is only the late usage. */
static void test_backdated_spot(void **state)
{
    (void)state;
    fx f;
    seen v;
    fx_open(&f, "late-spot", "2026-04-01T01:00:00Z");
    accel(&f, "acme", at("2026-03-10T10:00:00Z"), "rtx4090", "spot", 3600);
    run_ok(&f, "2026-03", true, &v);
    assert_int_equal(v.s[0].amount_due_minor, 50);
    clock_at(&f, at("2026-04-02T00:00:00Z"));
    assert_int_equal(tally_ledger_spot_set(f.l, "rtx4090", 260000000, at("2026-03-01T00:00:00Z")),
                     TALLY_OK);
    clock_at(&f, at("2026-04-03T00:00:00Z"));
    accel(&f, "acme", at("2026-03-20T10:00:00Z"), "h100", "on_demand", 3600);
    accel(&f, "acme", at("2026-04-02T10:00:00Z"), "rtx4090", "spot", 3600);
    run_ok(&f, "2026-04", true, &v);
    /* 2.58 for March's late h100 hour; April's spot hour at the new 0.26. */
    assert_int_equal(v.s[0].subtotal_minor, 258 + 26);
    assert_int_equal(count(&f, "SELECT count(*) FROM invoice_lines WHERE kind = 'adjustment' "
                               "AND sku = 'rtx4090'"),
                     0);
    /* A rate card back-dated to March 15 (h100 at 3.00), then a late March
     * hour: billed at March's 2.58, while May's hour costs 3.00. */
    clock_at(&f, at("2026-04-04T00:00:00Z"));
    load_card_b(&f);
    clock_at(&f, at("2026-06-01T00:00:00Z"));
    accel(&f, "acme", at("2026-03-25T10:00:00Z"), "h100", "on_demand", 3600);
    accel(&f, "acme", at("2026-05-02T10:00:00Z"), "h100", "on_demand", 3600);
    run_ok(&f, "2026-05", true, &v);
    assert_int_equal(v.s[0].subtotal_minor, 300 + 258);
    assert_int_equal(count(&f, "SELECT count(*) FROM invoice_lines WHERE kind = 'adjustment' "
                               "AND unit_price_nano = 3000000000"),
                     0);
    fx_close(&f);
}

/* ---- The property test ---------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int64_t rnd(uint64_t *s, int64_t n)
{
    return (int64_t)(rng_next(s) % (uint64_t)n);
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return dflt;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    return *end ? dflt : (uint64_t)v;
}

#define P_MONTHS 8

static const char *const p_accounts[] = {"acme", "beta"};

static void p_period(int m, char out[8])
{
    snprintf(out, 8, "2026-%02u", (unsigned)(m + 1) % 13u);
}

static int64_t p_month_start(int m)
{
    char p[8];
    int64_t start, end;
    p_period(m, p);
    assert_int_equal(tally_period_bounds(p, "UTC", &start, &end), TALLY_OK);
    return start;
}

/* A usage event of month m: mostly short runs crowded into a few minutes of
 * one morning, so that late events join runs and dissolve their minimum
 * top-ups; sometimes an hour-long run. */
static void p_usage(fx *f, uint64_t *s, int m)
{
    static const char *const skus[] = {"h100", "h100", "rtx4090", "tpu-v5e"};
    const char *sku = skus[rnd(s, 4)];
    const char *pricing = strcmp(sku, "h100") == 0 || rnd(s, 3) == 0 ? "on_demand" : "spot";
    int64_t t = p_month_start(m) + 36000 + rnd(s, 6) * 45;
    int seconds = (int)(rnd(s, 8) == 0 ? 1 + rnd(s, 3600) : 1 + rnd(s, 20));
    accel(f, p_accounts[rnd(s, 2)], t, sku, pricing, seconds);
}

static void p_spot(fx *f, uint64_t *s, int upto)
{
    const char *sku = rnd(s, 2) ? "rtx4090" : "tpu-v5e";
    int64_t from = p_month_start((int)rnd(s, upto + 1)) + rnd(s, 28 * 86400);
    int64_t price = (10 + rnd(s, 200)) * 10000000; /* 0.10 .. 2.09 */
    assert_int_equal(tally_ledger_spot_set(f->l, sku, price, from), TALLY_OK);
}

/* Voids a random live invoice and finalizes its period afresh. */
static void p_void(fx *f, uint64_t *s)
{
    int64_t n = count(f, "SELECT count(*) FROM invoices i WHERE doc_type = 'invoice' AND NOT "
                         "EXISTS (SELECT 1 FROM invoices c WHERE c.refers_to = i.id)");
    if (n == 0)
        return;
    char sql[512], id[64], period[8], cn[64];
    snprintf(sql, sizeof sql,
             "SELECT id, period FROM invoices i WHERE doc_type = 'invoice' AND NOT EXISTS "
             "(SELECT 1 FROM invoices c WHERE c.refers_to = i.id) ORDER BY seq LIMIT 1 OFFSET "
             "%" PRId64,
             rnd(s, n));
    sqlite3_stmt *st;
    assert_int_equal(ledger_prepare(f->l, sql, &st), TALLY_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    snprintf(id, sizeof id, "%s", (const char *)sqlite3_column_text(st, 0));
    snprintf(period, sizeof period, "%s", (const char *)sqlite3_column_text(st, 1));
    sqlite3_finalize(st);
    char why[256] = "";
    tally_err e = tally_invoice_void(f->l, id, "property", f->key, cn, sizeof cn);
    if (e == TALLY_FINALIZED && strstr(tally_ledger_errmsg(f->l), "void them first"))
        return; /* its adjustment credit is spent: refused, nothing written */
    if (e)
        fail_msg("void %s: %s", id, tally_err_name(e));
    (void)why;
    seen v;
    run_ok(f, period, true, &v);
}

static void p_finalize(fx *f, int m, uint64_t seed)
{
    char p[8], why[512] = "";
    seen v;
    p_period(m, p);
    run_ok(f, p, true, &v);
    if (tally_ledger_verify(f->l, f->key, why, sizeof why) != TALLY_OK)
        fail_msg("seed %" PRIu64 ", after finalizing %s: verify: %s", seed, p, why);
    if (count(f, "SELECT count(*) FROM invoices WHERE doc_type = 'invoice' AND "
                 "amount_due_minor < 0") != 0)
        fail_msg("seed %" PRIu64 ", after finalizing %s: a negative amount due", seed, p);
    if (count(f, "SELECT count(*) FROM balances WHERE ledger_acct LIKE 'grant:%' AND "
                 "credit_minor < debit_minor") != 0)
        fail_msg("seed %" PRIu64 ", after finalizing %s: a grant spent more than it held", seed, p);
}

/* One month: usage, then at the start of the next month late events, price
 * changes and voids, interleaved, then the finalize. */
static void p_month(fx *f, uint64_t *s, int m, uint64_t seed)
{
    clock_at(f, p_month_start(m + 1) + 3600);
    for (int64_t i = rnd(s, 3) ? 0 : 1 + rnd(s, 4); i > 0; i--)
        p_usage(f, s, m);
    for (int i = 0; i < 10; i++) {
        clock_at(f, f->now_s + 61);
        int64_t what = rnd(s, 10);
        if (what < 5 && m > 0)
            p_usage(f, s, (int)rnd(s, m)); /* late */
        else if (what < 8)
            p_spot(f, s, m);
        else if (what < 9)
            p_void(f, s);
        else
            p_usage(f, s, m);
    }
    clock_at(f, f->now_s + 61);
    p_finalize(f, m, seed);
}

static void test_property(void **state)
{
    (void)state;
    uint64_t seed = env_u64("TALLY_PROPERTY_SEED", 20260401);
    uint64_t rounds = env_u64("TALLY_PROPERTY_ROUNDS", 12);
    for (uint64_t r = 0; r < rounds; r++) {
        uint64_t s = (seed + r) * 0x9E3779B97F4A7C15ull | 1;
        fx f;
        fx_open(&f, "late-prop", "2026-01-01T01:00:00Z");
        for (int m = 0; m < P_MONTHS; m++)
            p_month(&f, &s, m, seed + r);
        print_message("seed %" PRIu64 ": %" PRId64 " invoices, %" PRId64 " credit notes, %" PRId64
                      " adjustment credits, %" PRId64 " spot points\n",
                      seed + r,
                      count(&f, "SELECT count(*) FROM invoices WHERE doc_type = 'invoice'"),
                      count(&f, "SELECT count(*) FROM invoices WHERE doc_type = 'credit_note'"),
                      count(&f, "SELECT count(*) FROM grants WHERE kind = 'adjustment'"),
                      count(&f, "SELECT count(*) FROM spot_prices"));
        fx_close(&f);
    }
}

/* The late test looks for usage only within twice the longest minimum
 * billable duration of a period's edges (ledger/invoice_gather.c,
 * late_margin: 120 s with the fixture's 60 s minimums). Against re-rating
 * every earlier period whatever arrived (TALLY_LATE_ALWAYS=1), over random
 * short runs around the end of January and the start of February, both
 * finalized early, and late events just past January's end or just
 * before February's start, up to a day away: the February and March drafts are the same for every
 * account, to the fen, and verify re-rating everything finds the balances
 * stored at each commit. */
static void margin_round(uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull | 1;
    static const char *const accounts[] = {"acme", "globex", "initech"};
    int64_t feb = at("2026-02-01T00:00:00Z"), mar = at("2026-03-01T00:00:00Z");
    fx f;
    fx_open(&f, "late-margin", "2026-01-20T00:00:00Z");
    for (int i = 0; i < 6; i++) { /* January's end and February's start */
        clock_at(&f, feb);
        accel(&f, accounts[rnd(&s, 3)], feb - 1 - rnd(&s, rnd(&s, 2) ? 50 : 400), "h100",
              "on_demand", (int)(1 + rnd(&s, 50)));
    } /* half of them within 50 s of the end: runs that cross into February */
    clock_at(&f, feb + rnd(&s, 120));
    seen v;
    run_ok(&f, "2026-01", true, &v);
    for (int i = 0; i < 6; i++) {
        clock_at(&f, feb + 700); /* after January's invoice: late for it if near */
        accel(&f, accounts[rnd(&s, 3)], feb + rnd(&s, 400), "h100", "on_demand",
              (int)(1 + rnd(&s, 50)));
    }
    clock_at(&f, mar + rnd(&s, 120));
    run_ok(&f, "2026-02", true, &v);
    /* A few late events (more would re-rate a period through rows inside
     * it and hide a margin too small), all past January's end or all
     * before February's start. */
    static const int64_t near[] = {1, 30, 59, 60, 61, 90, 119, 120, 121, 150, 299, 3600, 86399};
    int64_t side = rnd(&s, 2) ? 1 : -1;
    for (int64_t i = 1 + rnd(&s, 3); i > 0; i--) {
        clock_at(&f, f.now_s + 61);
        int seconds = (int)(1 + rnd(&s, 80));
        int64_t off = near[rnd(&s, sizeof near / sizeof *near)] + rnd(&s, 20) - 10;
        int64_t t = side > 0 ? feb + (off < 0 ? 0 : off) : feb - seconds - (off < 1 ? 1 : off);
        accel(&f, accounts[rnd(&s, 3)], t, "h100", "on_demand", seconds);
    }
    static const char *const periods[] = {"2026-02", "2026-03"};
    for (size_t a = 0; a < 3; a++) {
        char known[128];
        snprintf(known, sizeof known, "SELECT count(*) FROM accounts WHERE id = '%s'", accounts[a]);
        if (count(&f, known) == 0)
            continue; /* no event of this round named it */
        for (size_t p = 0; p < 2; p++) {
            tally_invoice_summary got[2];
            for (int k = 0; k < 2; k++) {
                if (k)
                    setenv("TALLY_LATE_ALWAYS", "1", 1);
                seen o = {0};
                tally_invoice_run_opts opts = {.period = periods[p],
                                               .account = accounts[a],
                                               .key_path = f.key,
                                               .on_invoice = on_invoice,
                                               .ctx = &o};
                char why[512] = "";
                tally_err e = tally_invoice_run(f.l, &opts, why, sizeof why);
                unsetenv("TALLY_LATE_ALWAYS");
                if (e)
                    fail_msg("seed %" PRIu64 ": draft: %s", seed, why);
                got[k] = o.n ? o.s[0] : (tally_invoice_summary){0};
            }
            if (got[0].subtotal_minor != got[1].subtotal_minor ||
                got[0].credits_minor != got[1].credits_minor ||
                got[0].amount_due_minor != got[1].amount_due_minor)
                fail_msg("seed %" PRIu64 ", %s %s: drafts %" PRId64 " with the margin, %" PRId64
                         " re-rating everything",
                         seed, accounts[a], periods[p], got[0].subtotal_minor,
                         got[1].subtotal_minor);
        }
    }
    /* The balances stored at each commit (with the margin) are what verify
     * recomputes re-rating everything. */
    setenv("TALLY_LATE_ALWAYS", "1", 1);
    char why[512] = "";
    tally_err e = tally_ledger_verify(f.l, f.key, why, sizeof why);
    unsetenv("TALLY_LATE_ALWAYS");
    if (e)
        fail_msg("seed %" PRIu64 ": verify re-rating everything: %s", seed, why);
    fx_close(&f);
}

static void test_late_margin(void **state)
{
    (void)state;
    uint64_t seed = env_u64("TALLY_PROPERTY_SEED", 20261202);
    uint64_t rounds = env_u64("TALLY_PROPERTY_ROUNDS", 12) * 5;
    for (uint64_t r = 0; r < rounds; r++)
        margin_round(seed + r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gap_closing_event),
        cmocka_unit_test(test_backdated_spot),
        cmocka_unit_test(test_property),
        cmocka_unit_test(test_late_margin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
