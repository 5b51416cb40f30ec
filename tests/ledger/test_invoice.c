/* Tests for the invoice engine (ledger/period.c, ledger/invoice_*.c) through
 * the library: period bounds in time zones, drafts, finalization and its
 * numbering, idempotent re-runs, late events as adjustments, voids through
 * credit notes, reports, output files, and bad input that leaves the ledger
 * as it was. Conservation is asserted after every step that writes. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"
#include "../../ledger/ledger_int.h"
#include "tally/embed.h"
#include "tally/ingest.h"
#include "tally/invoice.h"
#include "tally/sign.h"
#include "tally/ledger_sql.h"

#define NOW "2026-06-01T00:00:00Z"

typedef struct fx {
    tally_ledger *l;
    char dir[512];
    char db[600];
    char key[600];
    int next_id;
} fx;

static void fx_open(fx *f, const char *tag)
{
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "%s", tu_tmpdir(tag));
    snprintf(f->db, sizeof f->db, "%s/t.db", f->dir);
    snprintf(f->key, sizeof f->key, "%s/t.key", f->dir);
    setenv("TALLY_NOW", NOW, 1);
    f->l = tu_open_priced(f->db);
    assert_int_equal(tally_keygen(f->key, 0), TALLY_OK);
}

static void fx_close(fx *f)
{
    tu_assert_conservation(f->l);
    char why[512] = "";
    if (tally_ledger_verify(f->l, f->key, why, sizeof why) != TALLY_OK)
        fail_msg("verify: %s", why);
    tally_ledger_close(f->l);
}

/* Ingests one accelerator event. */
static void accel(fx *f, const char *account, const char *time, const char *sku,
                  const char *pricing, int cards, int seconds)
{
    char ev[1024];
    snprintf(ev, sizeof ev,
             "{\"specversion\":\"1.0\",\"id\":\"ev-%d\",\"source\":\"test\",\"type\":"
             "\"accelerator.usage\",\"subject\":\"%s\",\"time\":\"%s\",\"data\":{\"instance\":"
             "\"i-%s\",\"sku\":\"%s\",\"pricing\":\"%s\",\"cards\":%d,\"seconds\":%d}}",
             ++f->next_id, account, time, sku, sku, pricing, cards, seconds);
    tally_batch *b = NULL;
    tally_reject rej;
    char origin[64];
    snprintf(origin, sizeof origin, "test:%d", f->next_id);
    assert_int_equal(tally_batch_create(f->l, &b), TALLY_OK);
    assert_int_equal(tally_ingest_message(b, ev, strlen(ev), origin, tally_now_s(), &rej),
                     TALLY_OK);
    if (rej.reason[0])
        fail_msg("event rejected: %s %s", rej.reason, rej.detail);
    tally_batch_stats st;
    assert_int_equal(tally_batch_commit(b, &st, NULL), TALLY_OK);
    assert_int_equal(st.accepted, 1);
    tally_batch_destroy(b);
}

typedef struct seen {
    tally_invoice_summary s[16];
    size_t n;
    size_t progress_calls, progress_total;
} seen;

static void on_invoice(void *ctx, const tally_invoice_summary *s)
{
    seen *v = ctx;
    assert_true(v->n < 16);
    v->s[v->n++] = *s;
}

static void on_progress(void *ctx, size_t done, size_t total)
{
    seen *v = ctx;
    v->progress_calls++;
    v->progress_total = total;
    assert_true(done <= total);
}

static tally_err run(fx *f, const char *period, bool finalize, const char *out_dir, seen *v,
                     char *why, size_t cap)
{
    memset(v, 0, sizeof *v);
    tally_invoice_run_opts o = {.period = period,
                                .finalize = finalize,
                                .out_dir = out_dir,
                                .key_path = f->key,
                                .on_invoice = on_invoice,
                                .on_progress = on_progress,
                                .ctx = v};
    return tally_invoice_run(f->l, &o, why, cap);
}

static void run_ok(fx *f, const char *period, bool finalize, seen *v)
{
    char why[512] = "";
    tally_err e = run(f, period, finalize, NULL, v, why, sizeof why);
    if (e)
        fail_msg("run %s: %s: %s", period, tally_err_name(e), why);
    tu_assert_conservation(f->l);
}

static json_object *show_json(fx *f, const char *id, tally_buf *raw)
{
    tally_buf_reset(raw);
    assert_int_equal(tally_invoice_show(f->l, id, TALLY_FORMAT_JSON, raw), TALLY_OK);
    json_object *o = json_tokener_parse(raw->data);
    assert_non_null(o);
    return o;
}

static const char *jstr(json_object *o, const char *path)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    json_object *cur = o;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ".", &save); tok; tok = strtok_r(NULL, ".", &save)) {
        json_object *next = NULL;
        if (tok[0] >= '0' && tok[0] <= '9')
            next = json_object_array_get_idx(cur, (size_t)strtol(tok, NULL, 10));
        else if (!json_object_object_get_ex(cur, tok, &next))
            fail_msg("no %s in %s", tok, path);
        cur = next;
    }
    assert_non_null(cur);
    return json_object_get_string(cur);
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

/* ---- Periods ------------------------------------------------------------------ */

static void bounds_are(const char *period, const char *tz, const char *start, const char *end)
{
    int64_t s, e, ws, we;
    assert_int_equal(tally_period_bounds(period, tz, &s, &e), TALLY_OK);
    assert_int_equal(tally_time_parse(start, strlen(start), &ws), TALLY_OK);
    assert_int_equal(tally_time_parse(end, strlen(end), &we), TALLY_OK);
    if (s != ws || e != we)
        fail_msg("%s in %s: got [%lld, %lld), want [%s, %s)", period, tz, (long long)s,
                 (long long)e, start, end);
}

static void test_period_bounds(void **state)
{
    (void)state;
    setenv("TZ", "Europe/Paris", 1);
    bounds_are("2026-03", "UTC", "2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z");
    bounds_are("2026-12", "UTC", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z");
    bounds_are("2024-02", "Etc/UTC", "2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z");
    bounds_are("2026-04", "Asia/Shanghai", "2026-03-31T16:00:00Z", "2026-04-30T16:00:00Z");
    /* DST starts inside March in New York: the month is an hour short. */
    bounds_are("2026-03", "America/New_York", "2026-03-01T05:00:00Z", "2026-04-01T04:00:00Z");
    bounds_are("2026-01", "Asia/Kolkata", "2025-12-31T18:30:00Z", "2026-01-31T18:30:00Z");
    /* Havana: on 2026-11-01 local 00:00-01:00 happens twice; the month starts
     * at the first midnight. */
    bounds_are("2026-11", "America/Havana", "2026-11-01T04:00:00Z", "2026-12-01T05:00:00Z");
    bounds_are("2026-10", "America/Havana", "2026-10-01T04:00:00Z", "2026-11-01T04:00:00Z");
    /* TZ is restored. */
    assert_string_equal(getenv("TZ"), "Europe/Paris");
    unsetenv("TZ");
    bounds_are("2026-04", "Asia/Shanghai", "2026-03-31T16:00:00Z", "2026-04-30T16:00:00Z");
    assert_null(getenv("TZ"));
}

static void test_period_bad_input(void **state)
{
    (void)state;
    int64_t s = 7, e = 7;
    const char *bad[] = {"2026-13", "2026-00", "2026-3",  "26-03",   "2026/03",   "2026-03 ",
                         "",        "abcd-ef", "1969-12", "+026-03", "2026-03-01"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(tally_period_bounds(bad[i], "UTC", &s, &e), TALLY_INVAL);
    assert_int_equal(tally_period_bounds(NULL, "UTC", &s, &e), TALLY_INVAL);
    const char *tz[] = {"Mars/Olympus", "../../etc/passwd", "/etc/localtime", "", "Asia/../UTC",
                        ":UTC",         "Asia/Shang hai"};
    for (size_t i = 0; i < sizeof tz / sizeof *tz; i++)
        assert_int_equal(tally_period_bounds("2026-03", tz[i], &s, &e), TALLY_INVAL);
    assert_int_equal(s, 7);
}

static void day_is(const char *tz, const char *at, const char *start, const char *end,
                   const char *label)
{
    int64_t t, s, e, ws, we;
    char got[16];
    assert_int_equal(tally_time_parse(at, strlen(at), &t), TALLY_OK);
    assert_int_equal(tally_day_bounds(tz, t, &s, &e, got, sizeof got), TALLY_OK);
    assert_int_equal(tally_time_parse(start, strlen(start), &ws), TALLY_OK);
    assert_int_equal(tally_time_parse(end, strlen(end), &we), TALLY_OK);
    assert_string_equal(got, label);
    assert_int_equal(s, ws);
    assert_int_equal(e, we);
}

static void test_day_bounds(void **state)
{
    (void)state;
    /* Havana skips 00:00-01:00 on 2026-03-08: that day starts at the change. */
    day_is("America/Havana", "2026-03-08T12:00:00Z", "2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z",
           "2026-03-08");
    day_is("America/Havana", "2026-03-08T04:59:59Z", "2026-03-07T05:00:00Z", "2026-03-08T05:00:00Z",
           "2026-03-07");
    day_is("Asia/Shanghai", "2026-03-31T17:00:00Z", "2026-03-31T16:00:00Z", "2026-04-01T16:00:00Z",
           "2026-04-01");
    day_is("UTC", "1970-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "1970-01-02T00:00:00Z",
           "1970-01-01");
    char p[8];
    assert_int_equal(tally_period_of("Asia/Shanghai", 1774976400, p, sizeof p), TALLY_OK);
    assert_string_equal(p, "2026-04"); /* 2026-03-31T17:00:00Z */
    tally_period_step("2026-12", 1, p, sizeof p);
    assert_string_equal(p, "2027-01");
    tally_period_step("2026-01", -1, p, sizeof p);
    assert_string_equal(p, "2025-12");
}

/* ---- Drafts and finalization --------------------------------------------------- */

static void test_drafts_recomputed(void **state)
{
    (void)state;
    fx f;
    seen v;
    tally_buf raw;
    tally_buf_init(&raw, 0);
    fx_open(&f, "inv-drafts");
    accel(&f, "acme", "2026-03-10T00:00:00Z", "a100-40g", "on_demand", 8, 3600);
    run_ok(&f, "2026-03", false, &v);
    assert_int_equal(v.n, 1);
    assert_string_equal(v.s[0].invoice_id, "draft:acme:2026-03");
    assert_false(v.s[0].finalized);
    assert_int_equal(v.s[0].subtotal_minor, 1520); /* 8 card-hours x 1.90 */
    assert_int_equal(v.progress_total, 1);
    json_object *d = show_json(&f, "draft:acme:2026-03", &raw);
    assert_string_equal(jstr(d, "status"), "draft");
    assert_string_equal(jstr(d, "number"), "0");
    assert_string_equal(jstr(d, "hash"), "");
    assert_string_equal(jstr(d, "prev_hash"), "");
    assert_string_equal(jstr(d, "lines.0.quantity"), "28800");
    json_object_put(d);
    /* More usage: the next run recomputes the draft. */
    accel(&f, "acme", "2026-03-10T01:00:00Z", "a100-40g", "on_demand", 8, 2232);
    run_ok(&f, "2026-03", false, &v);
    assert_int_equal(v.s[0].subtotal_minor, 2462); /* 46656 card-s x 1.90 / 3600 = 24.624 */
    d = show_json(&f, "draft:acme:2026-03", &raw);
    assert_string_equal(jstr(d, "subtotal"), "24.62");
    json_object_put(d);
    assert_int_equal(count(&f, "SELECT count(*) FROM drafts"), 1);
    assert_int_equal(count(&f, "SELECT count(*) FROM invoices"), 0);
    assert_int_equal(count(&f, "SELECT count(*) FROM entries"), 0);
    /* Nothing in April: no invoice at all. */
    run_ok(&f, "2026-04", false, &v);
    assert_int_equal(v.n, 0);
    tally_buf_release(&raw);
    fx_close(&f);
}

static void test_finalize_numbering(void **state)
{
    (void)state;
    fx f;
    seen v;
    fx_open(&f, "inv-numbers");
    accel(&f, "a-1", "2026-03-02T00:00:00Z", "h100", "on_demand", 1, 3600);
    accel(&f, "a-2", "2026-03-03T00:00:00Z", "h100", "on_demand", 2, 3600);
    accel(&f, "a-3", "2026-03-04T00:00:00Z", "h100", "on_demand", 3, 3600);
    run_ok(&f, "2026-03", false, &v); /* drafts first */
    run_ok(&f, "2026-03", true, &v);
    assert_int_equal(v.n, 3);
    const char *want[] = {"INV-2026-000001", "INV-2026-000002", "INV-2026-000003"};
    for (int i = 0; i < 3; i++) {
        assert_string_equal(v.s[i].invoice_id, want[i]);
        assert_true(v.s[i].finalized);
        assert_false(v.s[i].already_finalized);
        assert_int_equal(v.s[i].amount_due_minor, 258 * (i + 1));
    }
    assert_int_equal(count(&f, "SELECT count(*) FROM drafts"), 0);
    /* A re-run leaves every invoice as it was. */
    tally_buf before, after;
    tally_buf_init(&before, 0);
    tally_buf_init(&after, 0);
    assert_int_equal(tally_invoice_show(f.l, "INV-2026-000002", TALLY_FORMAT_JSON, &before),
                     TALLY_OK);
    accel(&f, "a-4", "2026-03-05T00:00:00Z", "h100", "on_demand", 1, 60);
    run_ok(&f, "2026-03", true, &v);
    assert_int_equal(v.n, 4);
    for (int i = 0; i < 3; i++) {
        assert_string_equal(v.s[i].invoice_id, want[i]);
        assert_true(v.s[i].already_finalized);
    }
    assert_string_equal(v.s[3].invoice_id, "INV-2026-000004");
    assert_false(v.s[3].already_finalized);
    assert_int_equal(tally_invoice_show(f.l, "INV-2026-000002", TALLY_FORMAT_JSON, &after),
                     TALLY_OK);
    assert_int_equal(before.len, after.len);
    assert_memory_equal(before.data, after.data, before.len);
    /* A draft run of a finalized period shows the finalized invoices. */
    run_ok(&f, "2026-03", false, &v);
    assert_int_equal(v.n, 4);
    assert_true(v.s[0].already_finalized);
    /* Numbers run per year of the period, without gaps. */
    accel(&f, "a-2", "2026-04-03T00:00:00Z", "h100", "on_demand", 1, 3600);
    run_ok(&f, "2026-04", true, &v);
    assert_int_equal(v.n, 1);
    assert_string_equal(v.s[0].invoice_id, "INV-2026-000005");
    setenv("TALLY_NOW", "2027-02-01T00:00:00Z", 1);
    accel(&f, "a-1", "2027-01-03T00:00:00Z", "h100", "on_demand", 1, 3600);
    run_ok(&f, "2027-01", true, &v);
    assert_string_equal(v.s[0].invoice_id, "INV-2027-000001");
    assert_int_equal(count(&f, "SELECT count(*) FROM invoices"), 6);
    assert_int_equal(count(&f, "SELECT count(*) FROM entries WHERE kind = 'invoice'"), 6);
    tally_buf_release(&before);
    tally_buf_release(&after);
    fx_close(&f);
}

/* The hash covers the document up to prev_hash plus '}', the chain links,
 * and the signature verifies. */
static void test_hash_chain(void **state)
{
    (void)state;
    fx f;
    seen v;
    tally_buf raw;
    tally_buf_init(&raw, 0);
    fx_open(&f, "inv-chain");
    accel(&f, "a-1", "2026-03-02T00:00:00Z", "tpu-v4-64", "on_demand", 1, 3600);
    accel(&f, "a-2", "2026-03-02T00:00:00Z", "tpu-v4-64", "on_demand", 1, 3600);
    run_ok(&f, "2026-03", true, &v);
    char prev[65] = INV_ZERO_HASH;
    for (int i = 0; i < 2; i++) {
        json_object *d = show_json(&f, v.s[i].invoice_id, &raw);
        assert_string_equal(jstr(d, "prev_hash"), prev);
        char *cut = strstr(raw.data, ",\"hash\":\"");
        assert_non_null(cut);
        assert_int_equal(strlen(cut), strlen(",\"hash\":\"\",\"signature\":\"\"}") + 64 + 128);
        cut[0] = '}';
        char h[65];
        tally_sha256_hex(raw.data, (size_t)(cut - raw.data) + 1, h);
        assert_string_equal(jstr(d, "hash"), h);
        char sig[129];
        snprintf(sig, sizeof sig, "%s", jstr(d, "signature"));
        assert_int_equal(tally_verify_hash(f.key, h, sig), TALLY_OK);
        memcpy(prev, h, sizeof prev);
        json_object_put(d);
    }
    tally_buf_release(&raw);
    fx_close(&f);
}

/* ---- Late events ----------------------------------------------------------------- */

static void test_late_event(void **state)
{
    (void)state;
    fx f;
    seen v;
    tally_buf march, raw;
    tally_buf_init(&march, 0);
    tally_buf_init(&raw, 0);
    fx_open(&f, "inv-late");
    accel(&f, "acme", "2026-03-10T00:00:00Z", "h100", "on_demand", 1, 3600);
    run_ok(&f, "2026-03", true, &v);
    assert_string_equal(v.s[0].invoice_id, "INV-2026-000001");
    assert_int_equal(tally_invoice_show(f.l, "INV-2026-000001", TALLY_FORMAT_JSON, &march),
                     TALLY_OK);
    /* Usage for March arrives after March was finalized; none in April. */
    accel(&f, "acme", "2026-03-20T00:00:00Z", "h100", "on_demand", 2, 1800);
    run_ok(&f, "2026-04", false, &v);
    assert_int_equal(v.n, 1); /* the account is in the run for its adjustment alone */
    assert_int_equal(v.s[0].subtotal_minor, 258);
    json_object *d = show_json(&f, "draft:acme:2026-04", &raw);
    assert_string_equal(jstr(d, "lines.0.kind"), "adjustment");
    assert_string_equal(jstr(d, "lines.0.original_period"), "2026-03");
    assert_string_equal(jstr(d, "lines.0.adjusts"), "usage");
    assert_string_equal(jstr(d, "lines.0.quantity"), "3600");
    assert_string_equal(jstr(d, "lines.0.amount"), "2.58");
    json_object_put(d);
    /* Finalized: April carries it; March is byte-identical. */
    run_ok(&f, "2026-04", true, &v);
    assert_string_equal(v.s[0].invoice_id, "INV-2026-000002");
    assert_int_equal(v.s[0].amount_due_minor, 258);
    tally_buf_reset(&raw);
    assert_int_equal(tally_invoice_show(f.l, "INV-2026-000001", TALLY_FORMAT_JSON, &raw), TALLY_OK);
    assert_int_equal(raw.len, march.len);
    assert_memory_equal(raw.data, march.data, raw.len);
    /* Billed once: May has nothing to adjust. */
    run_ok(&f, "2026-05", false, &v);
    assert_int_equal(v.n, 0);
    /* A second late event for March goes on May, only its difference. */
    accel(&f, "acme", "2026-03-25T00:00:00Z", "h100", "on_demand", 1, 30);
    accel(&f, "acme", "2026-05-02T00:00:00Z", "h100", "on_demand", 1, 3600);
    run_ok(&f, "2026-05", true, &v);
    d = show_json(&f, "INV-2026-000003", &raw);
    assert_string_equal(jstr(d, "lines.0.kind"), "usage");
    assert_string_equal(jstr(d, "lines.1.kind"), "adjustment");
    assert_string_equal(jstr(d, "lines.1.quantity"), "30");
    assert_string_equal(jstr(d, "lines.1.amount"), "0.02");
    assert_string_equal(jstr(d, "lines.2.kind"), "adjustment");
    assert_string_equal(jstr(d, "lines.2.adjusts"), "minimum");
    assert_string_equal(jstr(d, "lines.2.quantity"), "30");
    json_object_put(d);
    tally_buf_reset(&raw);
    assert_int_equal(tally_invoice_show(f.l, "INV-2026-000001", TALLY_FORMAT_JSON, &raw), TALLY_OK);
    assert_memory_equal(raw.data, march.data, raw.len);
    tally_buf_release(&march);
    tally_buf_release(&raw);
    fx_close(&f);
}

/* ---- Voids ----------------------------------------------------------------------- */

static json_object *balance(fx *f, tally_buf *raw)
{
    tally_buf_reset(raw);
    assert_int_equal(tally_balance_report(f->l, "acme", raw), TALLY_OK);
    json_object *o = json_tokener_parse(raw->data);
    assert_non_null(o);
    return o;
}

static void test_void(void **state)
{
    (void)state;
    fx f;
    seen v;
    tally_buf raw;
    tally_buf_init(&raw, 0);
    fx_open(&f, "inv-void");
    tally_grant_spec g = {.account = "acme",
                          .kind = TALLY_GRANT_TRIAL,
                          .amount_minor = 1000,
                          .priority = 10,
                          .effective_s = 1772323200, /* 2026-03-01 */
                          .expires_s = TALLY_TIME_MAX};
    int64_t gid = 0;
    const char *hours[] = {"2026-03-10T00:00:00Z", "2026-03-10T01:00:00Z", "2026-03-10T02:00:00Z",
                           "2026-03-10T03:00:00Z", "2026-03-10T04:00:00Z"};
    for (int i = 0; i < 5; i++)
        accel(&f, "acme", hours[i], "tpu-v4-64", "on_demand", 1, 3600);
    assert_int_equal(tally_ledger_grant_add(f.l, &g, &gid, NULL, 0), TALLY_OK);
    run_ok(&f, "2026-03", true, &v);
    assert_int_equal(v.s[0].subtotal_minor, 950);
    assert_int_equal(v.s[0].credits_minor, 950);
    assert_int_equal(v.s[0].amount_due_minor, 0);
    json_object *b = balance(&f, &raw);
    assert_string_equal(jstr(b, "grants.0.remaining"), "0.50");
    assert_string_equal(jstr(b, "credits_remaining"), "0.50");
    json_object_put(b);
    char cn[64] = "";
    assert_int_equal(tally_invoice_void(f.l, "INV-2026-000001", "wrong rate", f.key, cn, sizeof cn),
                     TALLY_OK);
    assert_string_equal(cn, "CN-2026-000001");
    tu_assert_conservation(f.l);
    json_object *d = show_json(&f, cn, &raw);
    assert_string_equal(jstr(d, "type"), "credit_note");
    assert_string_equal(jstr(d, "refers_to"), "INV-2026-000001");
    assert_string_equal(jstr(d, "reason"), "wrong rate");
    assert_string_equal(jstr(d, "subtotal"), "-9.50");
    assert_string_equal(jstr(d, "total_credits"), "-9.50");
    assert_string_equal(jstr(d, "amount_due"), "0.00");
    assert_string_equal(jstr(d, "lines.0.quantity"), "-18000");
    assert_string_equal(jstr(d, "lines.0.credits.0.amount"), "-9.50");
    assert_string_equal(jstr(d, "credits_applied.0.amount"), "-9.50");
    json_object_put(d);
    b = balance(&f, &raw);
    assert_string_equal(jstr(b, "grants.0.remaining"), "10.00");
    json_object_put(b);
    /* Voiding again, or voiding the credit note, is refused. */
    assert_int_equal(tally_invoice_void(f.l, "INV-2026-000001", "x", f.key, cn, sizeof cn),
                     TALLY_FINALIZED);
    assert_int_equal(tally_invoice_void(f.l, "CN-2026-000001", "x", f.key, cn, sizeof cn),
                     TALLY_FINALIZED);
    assert_int_equal(tally_invoice_void(f.l, "INV-2026-000099", "x", f.key, cn, sizeof cn),
                     TALLY_NOT_FOUND);
    tally_buf_reset(&raw);
    assert_int_equal(tally_invoice_list(f.l, "acme", &raw), TALLY_OK);
    assert_non_null(strstr(raw.data, "\"invoice_id\":\"INV-2026-000001\",\"type\":\"invoice\","
                                     "\"period\":\"2026-03\",\"status\":\"void\""));
    /* The next finalizing run issues a fresh invoice with the credit again. */
    run_ok(&f, "2026-03", true, &v);
    assert_string_equal(v.s[0].invoice_id, "INV-2026-000002");
    assert_false(v.s[0].already_finalized);
    assert_int_equal(v.s[0].credits_minor, 950);
    b = balance(&f, &raw);
    assert_string_equal(jstr(b, "grants.0.remaining"), "0.50");
    json_object_put(b);
    tally_buf_release(&raw);
    fx_close(&f);
}

/* Adjustments billed for a period that is later voided and invoiced afresh
 * are taken back on the fresh invoice: nothing is billed twice. */
/* A void restores exactly what the invoice used: a credit use whose grant
 * no longer reads back (a damaged row) stops the void rather than being
 * restored under another kind, and nothing is written. */
static void test_void_refuses_damaged_grant(void **state)
{
    (void)state;
    fx f;
    seen v;
    fx_open(&f, "inv-void-damaged");
    tally_grant_spec g = {.account = "acme",
                          .kind = TALLY_GRANT_TRIAL,
                          .amount_minor = 1000,
                          .priority = 10,
                          .effective_s = 1772323200, /* 2026-03-01 */
                          .expires_s = TALLY_TIME_MAX};
    int64_t gid = 0;
    accel(&f, "acme", "2026-03-10T00:00:00Z", "tpu-v4-64", "on_demand", 1, 3600);
    assert_int_equal(tally_ledger_grant_add(f.l, &g, &gid, NULL, 0), TALLY_OK);
    run_ok(&f, "2026-03", true, &v);
    assert_int_equal(v.s[0].credits_minor, 190);
    assert_int_equal(tally_ledger_exec(f.l, "DROP TRIGGER IF EXISTS grants_no_update; "
                                            "UPDATE grants SET kind = 'bogus'"),
                     TALLY_OK);
    char cn[64] = "";
    assert_int_equal(tally_invoice_void(f.l, "INV-2026-000001", "x", f.key, cn, sizeof cn),
                     TALLY_DB);
    assert_non_null(strstr(tally_ledger_errmsg(f.l), "unknown kind"));
    assert_int_equal(count(&f, "SELECT count(*) FROM invoices WHERE doc_type = 'credit_note'"), 0);
    /* Undo the damage so the fixture's closing verify sees a sound ledger. */
    assert_int_equal(tally_ledger_exec(f.l, "UPDATE grants SET kind = 'trial'; "
                                            "CREATE TRIGGER grants_no_update BEFORE UPDATE ON "
                                            "grants\nBEGIN SELECT RAISE(ABORT, 'grants are "
                                            "immutable'); END;"),
                     TALLY_OK);
    fx_close(&f);
}

static void test_void_after_adjustment(void **state)
{
    (void)state;
    fx f;
    seen v;
    fx_open(&f, "inv-void-adj");
    accel(&f, "acme", "2026-03-10T00:00:00Z", "h100", "on_demand", 1, 3600);
    run_ok(&f, "2026-03", true, &v);
    accel(&f, "acme", "2026-03-11T00:00:00Z", "h100", "on_demand", 1, 3600);
    run_ok(&f, "2026-04", true, &v);
    assert_int_equal(v.s[0].subtotal_minor, 258);
    char cn[64];
    assert_int_equal(tally_invoice_void(f.l, "INV-2026-000001", "redo", f.key, cn, sizeof cn),
                     TALLY_OK);
    run_ok(&f, "2026-03", true, &v);
    assert_string_equal(v.s[0].invoice_id, "INV-2026-000003");
    assert_int_equal(v.s[0].subtotal_minor, 258); /* 5.16 rated, 2.58 taken back */
    /* Billed in total for March: 2.58 (April) + 2.58 (fresh March). */
    assert_int_equal(count(&f, "SELECT sum(amount_due_minor) FROM invoices"), 258 * 2);
    run_ok(&f, "2026-05", false, &v);
    assert_int_equal(v.n, 0);
    fx_close(&f);
}

/* ---- Reports, files, bad input ------------------------------------------------- */

static void test_usage_report(void **state)
{
    (void)state;
    fx f;
    tally_buf out;
    tally_buf_init(&out, 0);
    fx_open(&f, "inv-usage");
    assert_int_equal(tally_ledger_account_set(f.l, "acme", NULL, "Asia/Shanghai", NULL), TALLY_OK);
    accel(&f, "acme", "2026-03-31T15:00:00Z", "h100", "on_demand", 1, 3600);
    accel(&f, "acme", "2026-03-31T17:00:00Z", "a100-40g", "on_demand", 2, 3600);
    int64_t from = 1774915200, to = 1775088000; /* 2026-03-31 .. 2026-04-02 UTC */
    assert_int_equal(tally_usage_report(f.l, "acme", from, to, TALLY_BY_SKU, &out), TALLY_OK);
    assert_string_equal(
        out.data,
        "{\"account\":\"acme\",\"currency\":\"CNY\",\"from\":\"2026-03-31T00:00:00Z\","
        "\"to\":\"2026-04-02T00:00:00Z\",\"by\":\"sku\",\"groups\":[{\"key\":\"a100-40g\","
        "\"meter\":\"accelerator\",\"quantity\":\"7200\",\"unit\":\"card-second\","
        "\"amount\":\"3.80\"},{\"key\":\"h100\",\"meter\":\"accelerator\",\"quantity\":"
        "\"3600\",\"unit\":\"card-second\",\"amount\":\"2.58\"}],\"total\":\"6.38\"}");
    /* By day in Shanghai: 15:00Z is 23:00 on the 31st, 17:00Z is 01:00 on 1 April. */
    tally_buf_reset(&out);
    assert_int_equal(tally_usage_report(f.l, "acme", from, to, TALLY_BY_DAY, &out), TALLY_OK);
    assert_non_null(strstr(out.data, "{\"key\":\"2026-03-31\",\"meter\":\"accelerator\","
                                     "\"quantity\":\"3600\""));
    assert_non_null(strstr(out.data, "{\"key\":\"2026-04-01\",\"meter\":\"accelerator\","
                                     "\"quantity\":\"7200\""));
    tally_buf_reset(&out);
    assert_int_equal(tally_usage_report(f.l, "acme", from, to, TALLY_BY_METER, &out), TALLY_OK);
    assert_non_null(strstr(out.data, "\"groups\":[{\"key\":\"accelerator\",\"meter\":"
                                     "\"accelerator\",\"quantity\":\"10800\""));
    assert_int_equal(tally_usage_report(f.l, "nobody", from, to, TALLY_BY_SKU, &out),
                     TALLY_NOT_FOUND);
    assert_int_equal(tally_usage_report(f.l, "acme", to, from, TALLY_BY_SKU, &out), TALLY_INVAL);
    /* The Shanghai account's 17:00Z usage is on its April invoice. */
    seen v;
    run_ok(&f, "2026-04", false, &v);
    assert_int_equal(v.n, 1);
    assert_int_equal(v.s[0].subtotal_minor, 380);
    run_ok(&f, "2026-03", false, &v);
    assert_int_equal(v.s[0].subtotal_minor, 258);
    tally_buf_release(&out);
    fx_close(&f);
}

static void test_files_and_formats(void **state)
{
    (void)state;
    fx f;
    seen v;
    char out_dir[700], path[800];
    tally_buf shown, file;
    tally_buf_init(&shown, 0);
    tally_buf_init(&file, 0);
    fx_open(&f, "inv-files");
    snprintf(out_dir, sizeof out_dir, "%s/out/nested", f.dir);
    accel(&f, "acme", "2026-03-10T00:00:00Z", "a100-40g", "on_demand", 8, 3600);
    accel(&f, "../evil", "2026-03-10T00:00:00Z", "h100", "on_demand", 1, 20);
    char why[512] = "";
    assert_int_equal(run(&f, "2026-03", true, out_dir, &v, why, sizeof why), TALLY_OK);
    assert_int_equal(v.n, 2);
    snprintf(path, sizeof path, "%s/acme-2026-03.json", out_dir);
    assert_int_equal(tu_read_file(path, &file), 0);
    assert_int_equal(tally_invoice_show(f.l, "INV-2026-000002", TALLY_FORMAT_JSON, &shown),
                     TALLY_OK);
    assert_int_equal(file.len, shown.len);
    assert_memory_equal(file.data, shown.data, file.len);
    /* The unsafe bytes of the account id are percent-encoded in the file name. */
    snprintf(path, sizeof path, "%s/%%2E.%%2Fevil-2026-03.csv", out_dir);
    tally_buf_reset(&file);
    assert_int_equal(tu_read_file(path, &file), 0);
    assert_string_equal(file.data,
                        "line,kind,meter,sku,dim2,pricing,migration,quantity,unit,unit_price,"
                        "price_unit,amount,credited,original_period\r\n"
                        "1,usage,accelerator,h100,,on_demand,false,20,card-second,2.58,card-hour,"
                        "0.01,0.00,\r\n"
                        "2,minimum,accelerator,h100,,on_demand,false,40,card-second,2.58,"
                        "card-hour,0.03,0.00,\r\n");
    snprintf(path, sizeof path, "%s/acme-2026-03.html", out_dir);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_true(sb.st_size > 0);
    tally_buf_reset(&shown);
    assert_int_equal(tally_invoice_show(f.l, "INV-2026-000002", TALLY_FORMAT_CSV, &shown),
                     TALLY_OK);
    assert_non_null(strstr(shown.data, "\r\n1,usage,accelerator,a100-40g,,on_demand,false,28800,"));
    tally_buf_reset(&shown);
    assert_int_equal(tally_invoice_show(f.l, "INV-2026-000002", TALLY_FORMAT_HTML, &shown),
                     TALLY_OK);
    assert_non_null(strstr(shown.data, "INV-2026-000002"));
    /* The page the run's file writers rendered on their own connections is
     * the page this connection renders: same name, grants and usage read. */
    tally_buf_reset(&file);
    assert_int_equal(tu_read_file(path, &file), 0);
    assert_int_equal(file.len, shown.len);
    assert_memory_equal(file.data, shown.data, file.len);
    tally_doc_format fmt;
    assert_int_equal(tally_doc_format_from_name("csv", &fmt), TALLY_OK);
    assert_int_equal(fmt, TALLY_FORMAT_CSV);
    assert_int_equal(tally_doc_format_from_name("pdf", &fmt), TALLY_INVAL);
    assert_int_equal(tally_doc_format_from_name(NULL, &fmt), TALLY_INVAL);
    const char *missing[] = {"INV-2026-000009", "draft:acme:2026-03", "draft:acme", "draft::x", ""};
    for (size_t i = 0; i < sizeof missing / sizeof *missing; i++)
        assert_int_equal(tally_invoice_show(f.l, missing[i], TALLY_FORMAT_JSON, &shown),
                         TALLY_NOT_FOUND);
    tally_buf_release(&shown);
    tally_buf_release(&file);
    fx_close(&f);
}

static void test_bad_runs(void **state)
{
    (void)state;
    fx f;
    seen v;
    char why[512];
    fx_open(&f, "inv-bad");
    accel(&f, "acme", "2026-03-10T00:00:00Z", "h100", "on_demand", 1, 3600);
    why[0] = '\0';
    assert_int_equal(run(&f, "2026-3", true, NULL, &v, why, sizeof why), TALLY_INVAL);
    assert_non_null(strstr(why, "bad period"));
    /* Finalizing without a usable key changes nothing. */
    tally_invoice_run_opts o = {.period = "2026-03", .finalize = true, .key_path = "/nonexistent"};
    assert_int_equal(tally_invoice_run(f.l, &o, why, sizeof why), TALLY_CRYPTO);
    assert_non_null(strstr(why, "signing key"));
    o.key_path = NULL;
    assert_int_equal(tally_invoice_run(f.l, &o, why, sizeof why), TALLY_CRYPTO);
    o = (tally_invoice_run_opts){.period = "2026-03", .account = "nobody"};
    assert_int_equal(tally_invoice_run(f.l, &o, why, sizeof why), TALLY_NOT_FOUND);
    assert_non_null(strstr(why, "nobody"));
    /* An account in a time zone the system does not know is named. */
    assert_int_equal(tally_ledger_exec(f.l, "INSERT INTO accounts(id, currency, timezone, "
                                            "created_at) VALUES ('mars', 'CNY', 'Mars/Base', 0)"),
                     TALLY_OK);
    o = (tally_invoice_run_opts){.period = "2026-03"};
    assert_int_equal(tally_invoice_run(f.l, &o, why, sizeof why), TALLY_INVAL);
    assert_non_null(strstr(why, "account mars"));
    assert_int_equal(count(&f, "SELECT count(*) FROM invoices"), 0);
    assert_int_equal(count(&f, "SELECT count(*) FROM entries"), 0);
    assert_int_equal(tally_invoice_void(f.l, "INV-2026-000001", "x", "/nonexistent", NULL, 0),
                     TALLY_CRYPTO);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_period_bounds),
        cmocka_unit_test(test_period_bad_input),
        cmocka_unit_test(test_day_bounds),
        cmocka_unit_test(test_drafts_recomputed),
        cmocka_unit_test(test_finalize_numbering),
        cmocka_unit_test(test_hash_chain),
        cmocka_unit_test(test_late_event),
        cmocka_unit_test(test_void),
        cmocka_unit_test(test_void_refuses_damaged_grant),
        cmocka_unit_test(test_void_after_adjustment),
        cmocka_unit_test(test_usage_report),
        cmocka_unit_test(test_files_and_formats),
        cmocka_unit_test(test_bad_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
