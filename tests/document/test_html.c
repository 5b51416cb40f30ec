/* Tests for document/html.c and document/html_chart.c: the invoice page from a
 * hand-made ledger and document. Checks content, escaping, well-formedness,
 * the usage chart's exact bar heights, that the printed verification
 * commands really verify, and (when chromium is installed; under CI=true it
 * must be) that the page renders in a headless browser with its totals in
 * the page text and prints on at most two A4 pages. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "../../document/document_int.h"
#include "../../ledger/ledger_int.h"
#include "tally/sign.h"
#include "tally/ledger_sql.h"

static char dir[512], key[600];
static tally_ledger *ledger;

#define ZERO_HASH "0000000000000000000000000000000000000000000000000000000000000000"

static const char doc_head[] =
    "{\"invoice_id\":\"%s\",\"type\":\"%s\",\"number\":%d,\"account\":\"acme\","
    "\"currency\":\"CNY\",\"status\":\"%s\",\"period\":{\"label\":\"2026-03\",\"start\":"
    "\"2026-02-28T16:00:00Z\",\"end\":\"2026-03-31T16:00:00Z\",\"timezone\":\"Asia/Shanghai\"},"
    "\"issued_at\":\"2026-04-01T02:00:00Z\",\"lines\":[%s],\"subtotal\":\"%s\","
    "\"credits_applied\":[%s],\"total_credits\":\"%s\",\"amount_due\":\"%s\"";

static const char lines_invoice[] =
    "{\"line\":1,\"kind\":\"usage\",\"meter\":\"accelerator\",\"sku\":\"h100\",\"dim2\":\"\","
    "\"pricing\":\"on_demand\",\"migration\":false,\"quantity\":\"75456\",\"unit\":"
    "\"card-second\",\"unit_price\":\"1.90\",\"price_unit\":\"card-hour\",\"amount\":\"39.82\","
    "\"credits\":[{\"grant_id\":1,\"amount\":\"20.00\"}]},"
    "{\"line\":2,\"kind\":\"minimum\",\"meter\":\"accelerator\",\"sku\":\"h100\",\"dim2\":\"\","
    "\"pricing\":\"spot\",\"migration\":false,\"quantity\":\"1234567\",\"unit\":\"card-second\","
    "\"unit_price\":\"0.0297\",\"price_unit\":\"card-hour\",\"amount\":\"10.18\",\"credits\":[]},"
    "{\"line\":3,\"kind\":\"adjustment\",\"meter\":\"tokens\",\"sku\":\"<llama>\",\"dim2\":"
    "\"output\",\"pricing\":\"\",\"migration\":false,\"quantity\":\"2500000\",\"unit\":\"token\","
    "\"unit_price\":\"4.00\",\"price_unit\":\"million tokens\",\"amount\":\"10000.00\","
    "\"credits\":[],\"original_period\":\"2026-02\",\"adjusts\":\"usage\"}";

/* A signed (finalized) or unsigned (draft) document. */
static void make_doc(tally_buf *out, const char *id, const char *type, const char *status,
                     const char *lines, const char *subtotal, const char *applied,
                     const char *credits, const char *due, const char *extra)
{
    tally_buf_reset(out);
    bool final = strcmp(status, "finalized") == 0;
    assert_int_equal(tally_buf_printf(out, doc_head, id, type, final ? 1 : 0, status, lines,
                                      subtotal, applied, credits, due),
                     TALLY_OK);
    assert_int_equal(
        tally_buf_printf(out, "%s,\"prev_hash\":\"%s\"}", extra, final ? ZERO_HASH : ""), TALLY_OK);
    char hash[65] = "", sig[129] = "";
    if (final) {
        tally_sha256_hex(out->data, out->len, hash);
        assert_int_equal(tally_sign_hash(key, hash, sig), TALLY_OK);
    }
    out->len--;
    assert_int_equal(tally_buf_printf(out, ",\"hash\":\"%s\",\"signature\":\"%s\"}", hash, sig),
                     TALLY_OK);
}

static void invoice_doc(tally_buf *out)
{
    make_doc(out, "INV-2026-000001", "invoice", "finalized", lines_invoice, "10050.00",
             "{\"grant_id\":1,\"kind\":\"trial\",\"amount\":\"20.00\"}", "20.00", "10030.00", "");
}

static int64_t t_of(const char *s)
{
    int64_t t = 0;
    if (tally_time_parse(s, strlen(s), &t) != TALLY_OK)
        fail_msg("bad time %s", s);
    return t;
}

/* Usage in Asia/Shanghai local days of March 2026 (UTC+8):
 *   day 1: 1 card-hour (the part of a run from Feb 28 inside the period)
 *   day 2: 2 card-hours; day 9 and day 10: 1 card-hour each (a run across
 *   local midnight); day 5: 1.5 million output tokens. */
static void add_usage(tally_ledger *l)
{
    static const struct {
        const char *start;
        int64_t seconds;
    } runs[] = {
        {"2026-02-28T15:00:00Z", 7200},
        {"2026-03-01T16:00:00Z", 7200},
        {"2026-03-09T15:00:00Z", 7200},
        {"2026-04-01T00:00:00Z", 3600}, /* after the period: not charted */
    };
    char sql[512];
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        int64_t s = t_of(runs[i].start);
        snprintf(sql, sizeof sql,
                 "INSERT INTO usage_intervals(account, meter, pricing, migration, resource, dim, "
                 "weight, start_s, end_s, seq) VALUES ('acme', 0, 1, 0, 'vm-%zu', 'h100', 1, "
                 "%lld, %lld, 1)",
                 i, (long long)s, (long long)(s + runs[i].seconds));
        assert_int_equal(tally_ledger_exec(l, sql), TALLY_OK);
    }
    snprintf(sql, sizeof sql,
             "INSERT INTO usage_points(account, meter, dim, dim2, t_s, qty, seq) VALUES "
             "('acme', 3, 'llama', 'output', %lld, 1500000, 1)",
             (long long)t_of("2026-03-05T04:00:00Z"));
    assert_int_equal(tally_ledger_exec(l, sql), TALLY_OK);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "%s", tu_tmpdir("html"));
    snprintf(key, sizeof key, "%s/sign.key", dir);
    if (tally_keygen(key, 0) != TALLY_OK)
        return -1;
    char path[700], why[256];
    snprintf(path, sizeof path, "%s/ledger.db", dir);
    if (tally_ledger_open(path, &ledger, why, sizeof why) != TALLY_OK)
        return -1;
    if (tally_ledger_exec(ledger, "INSERT INTO accounts(id, currency, timezone, name, created_at) "
                                  "VALUES ('acme', 'CNY', 'Asia/Shanghai', "
                                  "'Acme <Labs> & \"Co\"', 0)") != TALLY_OK)
        return -1;
    add_usage(ledger);
    char sql[512];
    snprintf(sql, sizeof sql,
             "INSERT INTO grants(id, account, kind, amount_minor, currency, priority, effective_s, "
             "expires_s, scope, created_at) VALUES (1, 'acme', 'trial', 2000, 'CNY', 10, %lld, "
             "%lld, 'sku=h100', 0)",
             (long long)t_of("2026-03-01T00:00:00Z"), (long long)t_of("2026-03-31T00:00:00Z"));
    if (tally_ledger_exec(ledger, sql) != TALLY_OK)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tally_ledger_close(ledger);
    return 0;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* Every element closed in order (void elements and "/>" excepted). */
static void assert_well_formed(const char *h)
{
    static const char *const voids[] = {"meta", "br", "line", "!DOCTYPE"};
    char stack[64][16];
    int depth = 0;
    for (const char *p = strchr(h, '<'); p; p = strchr(p + 1, '<')) {
        const char *end = strchr(p, '>');
        assert_non_null(end);
        bool closing = p[1] == '/';
        size_t n = strcspn(p + 1 + closing, " >/\n");
        char name[16] = "";
        assert_true(n > 0 && n < sizeof name);
        memcpy(name, p + 1 + closing, n);
        bool is_void = end[-1] == '/';
        for (size_t i = 0; i < sizeof voids / sizeof *voids; i++)
            is_void |= strcmp(name, voids[i]) == 0;
        if (closing) {
            assert_true(depth > 0);
            if (strcmp(stack[depth - 1], name) != 0)
                fail_msg("</%s> closes <%s>", name, stack[depth - 1]);
            depth--;
        } else if (!is_void) {
            assert_true(depth < 64);
            memcpy(stack[depth++], name, sizeof name);
        }
        /* text inside <style> and <title> has no tags */
        if (!closing && (strcmp(name, "style") == 0 || strcmp(name, "title") == 0))
            p = strstr(p, "</") - 1;
    }
    assert_int_equal(depth, 0);
}

static void test_decimal(void **state)
{
    (void)state;
    static const struct {
        long long q, div;
        int frac;
        const char *want;
    } cases[] = {
        {75456, 3600, 6, "20.96"},
        {1, 3, 6, "0.333333"},
        {2, 3, 6, "0.666667"},
        {1234567LL * 3600, 3600, 6, "1,234,567"},
        {-5, 2, 1, "-2.5"},
        {9999999999995LL, 10000000, 6, "1,000,000"},
        {0, 7, 6, "0"},
        {-1, 10000000, 6, "0"},
        {864000000000000LL, 86400000000000LL, 6, "10"},
        {123, 1, 0, "123"},
        {1000, 1, 0, "1,000"},
        {-1234567, 1000, 2, "-1,234.57"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char buf[80];
        html_decimal(buf, sizeof buf, cases[i].q, cases[i].div, cases[i].frac);
        assert_string_equal(buf, cases[i].want);
    }
    char big[80];
    html_decimal(big, sizeof big, (__int128)1 << 100, 1, 0);
    assert_string_equal(big, "1,267,650,600,228,229,401,496,703,205,376");
}

static void test_invoice_page(void **state)
{
    (void)state;
    tally_buf doc, h;
    tally_buf_init(&doc, 0);
    tally_buf_init(&h, 0);
    invoice_doc(&doc);
    assert_int_equal(ledger_invoice_html(ledger, doc.data, doc.len, &h), TALLY_OK);
    const char *p = h.data;
    assert_true(strncmp(p, "<!DOCTYPE html>", 15) == 0);
    assert_well_formed(p);
    assert_null(strstr(p, "http"));
    assert_null(strstr(p, "<script"));
    assert_null(strstr(p, "src="));
    assert_non_null(strstr(p, "GPU Cloud"));
    assert_non_null(strstr(p, "INV-2026-000001"));
    assert_non_null(strstr(p, "March 2026"));
    assert_non_null(strstr(p, "1 \xe2\x80\x93 31 March 2026 (Asia/Shanghai)"));
    assert_non_null(strstr(p, "Acme &lt;Labs&gt; &amp; &quot;Co&quot;"));
    assert_null(strstr(p, "<Labs>"));
    assert_non_null(strstr(p, "&lt;llama&gt;"));
    /* quantities in price units, exact */
    assert_non_null(strstr(p, "20.96 card-hours"));
    assert_non_null(strstr(p, "75,456 <span class=\"nw\">card-seconds"));
    assert_non_null(strstr(p, "342.935278 card-hours")); /* 1234567 / 3600 */
    assert_non_null(strstr(p, "2.5 million tokens"));
    /* money, grouped */
    assert_non_null(strstr(p, "10,050.00"));
    assert_non_null(strstr(p, "CNY 10,030.00"));
    assert_non_null(strstr(p, "39.82"));
    assert_non_null(strstr(p, "20.00"));
    /* adjustments name their original period */
    assert_non_null(strstr(p, "original period 2026-02"));
    /* credits: what each grant paid */
    assert_non_null(strstr(p, "Credits applied"));
    assert_non_null(strstr(p, ">line 1<"));
    assert_non_null(strstr(p, "<b>Trial voucher</b><div class=\"sub\">grant #1 (trial)"));
    assert_non_null(strstr(p, "from 2026-03-01 00:00 UTC<br>expires 2026-03-31 00:00 UTC"));
    assert_non_null(strstr(p, "only for sku=h100"));
    assert_non_null(strstr(p, "<span class=\"sub\">trial #1</span> &minus;20.00"));
    /* grouped by meter */
    assert_int_equal(count(p, "<tr class=\"group\">"), 2);
    /* verification block */
    assert_non_null(strstr(p, "openssl pkeyutl -verify -pubin -inkey pub.pem -rawin"));
    assert_non_null(strstr(p, ZERO_HASH));
    tally_buf_release(&doc);
    tally_buf_release(&h);
}

/* The largest number in a chart's y labels, in 10^-8 units. */
static __int128 label_value(const char *s)
{
    __int128 v = 0;
    int frac = -1;
    for (; *s && *s != '<'; s++) {
        if (*s == '.')
            frac = 0;
        else if (*s >= '0' && *s <= '9') {
            v = v * 10 + (*s - '0');
            frac += frac >= 0;
        }
    }
    for (int i = frac < 0 ? 0 : frac; i < 8; i++)
        v *= 10;
    return v;
}

/* Every chart on the page: its top label is at or above its tallest bar's
 * value and at most a third above it, and its labels are evenly spaced. */
static void assert_chart_axes_fit(const char *page)
{
    int charts = 0;
    for (const char *svg = strstr(page, "<svg"); svg; svg = strstr(svg + 1, "<svg")) {
        const char *end = strstr(svg, "</svg>");
        assert_non_null(end);
        __int128 labels[8], max = 0;
        int n = 0;
        for (const char *y = strstr(svg, "class=\"ylab\">"); y && y < end && n < 8;
             y = strstr(y + 1, "class=\"ylab\">"))
            labels[n++] = label_value(y + strlen("class=\"ylab\">"));
        for (const char *t = strstr(svg, "<title>"); t && t < end; t = strstr(t + 1, "<title>")) {
            __int128 v = label_value(strstr(t, ": ") + 2);
            max = v > max ? v : max;
        }
        assert_in_range(n, 4, 7); /* 3 to 6 steps */
        for (int i = 1; i < n; i++)
            assert_true(labels[i] - labels[i - 1] == labels[1]);
        assert_true(labels[n - 1] >= max);
        assert_true(labels[n - 1] * 3 <= max * 4);
        charts++;
    }
    assert_true(charts > 0);
}

static void test_chart_axis(void **state)
{
    (void)state;
    static const struct {
        long long max, divisor;
        long long top, step; /* price units x 100 */
    } cases[] = {
        {75476, 3600, 2500, 500},     /* 20.97 card-hours: 0-25 by 5, not 0-50 */
        {5190000, 1000000, 600, 100}, /* 5.19 million tokens: 0-6 by 1, not 0-10 */
        {7200, 3600, 200, 50},        /* exactly 2: 2 */
        {7201, 3600, 250, 50},        /* just above 2: 2.5 */
        {21601, 3600, 800, 200},      /* just above 6: 8 */
        {36000, 3600, 1000, 200},     /* 10 */
        {36001, 3600, 1200, 200},     /* just above 10: 12 */
        {60, 3600, 2, 0},             /* 0.0167: 0.02 */
        {1, 1, 100, 20},              /* 1 */
        {4000000000000LL, 1, 400000000000000LL, 100000000000000LL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        html_axis ax = html_chart_axis(cases[i].max, cases[i].divisor);
        assert_true(ax.top == (__int128)cases[i].top * (HTML_AXIS_SCALE / 100));
        if (cases[i].step)
            assert_true(ax.step == (__int128)cases[i].step * (HTML_AXIS_SCALE / 100));
        assert_true(ax.step * ax.steps == ax.top);
        assert_in_range(ax.steps, 3, 6);
    }
    /* every maximum from 1 to 10,000 hundredths: top above it by at most a third */
    for (long long m = 1; m <= 10000; m++) {
        html_axis ax = html_chart_axis(m, 100);
        __int128 want = (__int128)m * (HTML_AXIS_SCALE / 100);
        assert_true(ax.top >= want);
        assert_true(ax.top * 3 <= want * 4);
        assert_true(ax.step * ax.steps == ax.top);
    }
    assert_int_equal(html_human_frac(75476, 3600), 2); /* 20.97 */
    assert_int_equal(html_human_frac(60, 3600), 4);    /* 0.0167 */
    assert_int_equal(html_human_frac(1800, 3600), 3);  /* 0.5 */
    char buf[64];
    html_decimal(buf, sizeof buf, 75476, 3600, html_human_frac(75476, 3600));
    assert_string_equal(buf, "20.97");
}

static void test_chart(void **state)
{
    (void)state;
    tally_buf doc, h;
    tally_buf_init(&doc, 0);
    tally_buf_init(&h, 0);
    invoice_doc(&doc);
    assert_int_equal(ledger_invoice_html(ledger, doc.data, doc.len, &h), TALLY_OK);
    const char *p = h.data;
    assert_int_equal(count(p, "<svg"), 2); /* accelerator and tokens */
    assert_int_equal(count(p, "<rect"), 5);
    /* 31 local days, labelled 1..31 */
    assert_int_equal(count(p, "class=\"xlab\""), 62);
    /* axis 0-2 card-hours in steps of 0.5: 2 h is the full 128 px, 1 h half of it */
    assert_non_null(strstr(p, "class=\"ylab\">0.5<"));
    assert_non_null(strstr(p, "class=\"ylab\">2<"));
    assert_non_null(strstr(p, "height=\"128\" fill=\"#2563eb\"><title>2026-03-02: 2 card-hours<"));
    assert_non_null(strstr(p, "height=\"64\" fill=\"#2563eb\"><title>2026-03-01: 1 card-hour<"));
    assert_non_null(strstr(p, "<title>2026-03-09: 1 card-hour"));
    assert_non_null(strstr(p, "<title>2026-03-10: 1 card-hour"));
    /* 1.5 million tokens on an axis of 0-1.5: the full height */
    assert_non_null(strstr(p, "height=\"128\" fill=\"#d97706\"><title>2026-03-05: 1.5 million"));
    assert_non_null(strstr(p, "class=\"ylab\">1.5<"));
    assert_non_null(strstr(p, ">5 card-hours in the period"));
    assert_chart_axes_fit(p);
    tally_buf_release(&doc);
    tally_buf_release(&h);
}

static void test_draft_and_credit_note(void **state)
{
    (void)state;
    tally_buf doc, h;
    tally_buf_init(&doc, 0);
    tally_buf_init(&h, 0);
    make_doc(&doc, "draft:acme:2026-03", "invoice", "draft", "", "0.00", "", "0.00", "0.00", "");
    assert_int_equal(ledger_invoice_html(ledger, doc.data, doc.len, &h), TALLY_OK);
    assert_well_formed(h.data);
    assert_non_null(strstr(h.data, "This is a draft"));
    assert_non_null(strstr(h.data, "No charges in this period"));
    assert_null(strstr(h.data, "verify-commands"));

    tally_buf_reset(&h);
    make_doc(&doc, "CN-2026-000001", "credit_note", "finalized",
             "{\"line\":1,\"kind\":\"usage\",\"meter\":\"storage\",\"sku\":\"ssd\",\"dim2\":\"\","
             "\"pricing\":\"\",\"migration\":false,\"quantity\":\"-864000000000000\",\"unit\":"
             "\"byte-second\",\"unit_price\":\"0.50\",\"price_unit\":\"GB-day\",\"amount\":"
             "\"-5.00\",\"credits\":[]}",
             "-5.00", "", "0.00", "-5.00",
             ",\"refers_to\":\"INV-2026-000002\",\"reason\":\"billed <twice>\"");
    assert_int_equal(ledger_invoice_html(ledger, doc.data, doc.len, &h), TALLY_OK);
    assert_well_formed(h.data);
    assert_non_null(strstr(h.data, "CREDIT NOTE"));
    assert_non_null(strstr(h.data, "voids invoice <b>INV-2026-000002</b>"));
    assert_non_null(strstr(h.data, "billed &lt;twice&gt;"));
    assert_non_null(strstr(h.data, "-10 GB-days"));
    assert_non_null(strstr(h.data, "&minus;5.00"));
    assert_null(strstr(h.data, "<svg"));
    /* without a ledger: no chart, no account name, still a page */
    tally_buf_reset(&h);
    invoice_doc(&doc);
    assert_int_equal(ledger_invoice_html(NULL, doc.data, doc.len, &h), TALLY_OK);
    assert_null(strstr(h.data, "<svg"));
    assert_well_formed(h.data);
    tally_buf_release(&doc);
    tally_buf_release(&h);
}

static void test_bad_documents(void **state)
{
    (void)state;
    tally_buf h;
    tally_buf_init(&h, 0);
    assert_int_equal(tally_buf_puts(&h, "keep"), TALLY_OK);
    static const char *const bad[] = {
        "",     "{",
        "[]",   "{\"invoice_id\":\"x\"}",
        "null", "{\"invoice_id\":1,\"lines\":[],\"credits_applied\":[]}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(ledger_invoice_html(ledger, bad[i], strlen(bad[i]), &h), TALLY_PARSE);
    assert_string_equal(h.data, "keep");
    /* odd but parseable values are shown escaped, never trusted */
    const char odd[] = "{\"invoice_id\":\"<x>\",\"account\":\"a\",\"currency\":\"CNY\","
                       "\"period\":{\"start\":\"bad\",\"end\":\"bad\"},\"status\":\"<s>\","
                       "\"lines\":[{\"meter\":\"nope\",\"quantity\":\"1e9\",\"amount\":\"<1>\"}],"
                       "\"credits_applied\":[],\"subtotal\":\"1.2.3\",\"amount_due\":\"--1\"}";
    tally_buf_reset(&h);
    assert_int_equal(ledger_invoice_html(ledger, odd, sizeof odd - 1, &h), TALLY_OK);
    assert_well_formed(h.data);
    assert_null(strstr(h.data, "<x>"));
    assert_null(strstr(h.data, "<1>"));
    assert_non_null(strstr(h.data, "1e9"));
    assert_non_null(strstr(h.data, "<td colspan=\"6\">Other</td>"));
    /* a time zone that does not resolve: the page without its chart */
    const char tz[] = "{\"invoice_id\":\"x\",\"account\":\"acme\",\"currency\":\"CNY\","
                      "\"status\":\"draft\",\"period\":{\"label\":\"2026-03\",\"start\":"
                      "\"2026-03-01T00:00:00Z\",\"end\":\"2026-04-01T00:00:00Z\",\"timezone\":"
                      "\"Mars/Olympus\"},\"lines\":[],\"credits_applied\":[]}";
    tally_buf_reset(&h);
    assert_int_equal(ledger_invoice_html(ledger, tz, sizeof tz - 1, &h), TALLY_OK);
    assert_well_formed(h.data);
    assert_non_null(strstr(h.data, "chart is not available"));
    tally_buf_release(&h);
}

/* Runs the commands printed on the page against the document and key. */
static void test_printed_commands_verify(void **state)
{
    (void)state;
    tally_buf doc, h, pem, out;
    tally_buf_init(&doc, 0);
    tally_buf_init(&h, 0);
    tally_buf_init(&pem, 0);
    tally_buf_init(&out, 0);
    invoice_doc(&doc);
    assert_int_equal(ledger_invoice_html(ledger, doc.data, doc.len, &h), TALLY_OK);
    assert_int_equal(tally_pubkey_pem(key, &pem), TALLY_OK);
    char path[700];
    /* the page names the file `invoice run --out` writes */
    assert_non_null(strstr(h.data, "f=acme-2026-03.json\n"));
    snprintf(path, sizeof path, "%s/acme-2026-03.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(doc.data, f); /* the stored bytes, as `invoice run --out` writes them */
    fclose(f);
    snprintf(path, sizeof path, "%s/pub.pem", dir);
    f = fopen(path, "w");
    fputs(pem.data, f);
    fclose(f);
    /* the <pre>'s text, unescaped */
    const char *s = strstr(h.data, "<pre id=\"verify-commands\">");
    assert_non_null(s);
    s = strchr(s, '>') + 1;
    const char *e = strstr(s, "</pre>");
    snprintf(path, sizeof path, "%s/check.sh", dir);
    f = fopen(path, "w");
    for (const char *c = s; c < e; c++) {
        static const char *const ent[][2] = {
            {"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&#39;", "'"}};
        size_t k = 0;
        while (k < 5 && strncmp(c, ent[k][0], strlen(ent[k][0])) != 0)
            k++;
        if (k < 5) {
            fputs(ent[k][1], f);
            c += strlen(ent[k][0]) - 1;
        } else {
            fputc(*c, f);
        }
    }
    fclose(f);
    assert_int_equal(tu_sh(&out, "cd '%s' && sh check.sh 2>&1", dir), 0);
    assert_non_null(strstr(out.data, "hash matches"));
    assert_non_null(strstr(out.data, "Signature Verified Successfully"));
    /* a copy saved with a trailing newline verifies too; a changed one does not */
    tally_buf_reset(&out);
    assert_int_equal(tu_sh(&out, "cd '%s' && echo >> acme-2026-03.json && sh check.sh 2>&1", dir),
                     0);
    assert_non_null(strstr(out.data, "hash matches"));
    assert_non_null(strstr(out.data, "Signature Verified Successfully"));
    tally_buf_reset(&out);
    assert_true(tu_sh(&out,
                      "cd '%s' && sed -i 's/10030.00/10.00/' acme-2026-03.json && sh check.sh",
                      dir) != 0);
    assert_null(strstr(out.data, "hash matches"));
    tally_buf_release(&doc);
    tally_buf_release(&h);
    tally_buf_release(&pem);
    tally_buf_release(&out);
}

static const char *chromium(void)
{
    static const char *const names[] = {"/usr/bin/chromium", "/usr/bin/chromium-browser"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (access(names[i], X_OK) == 0)
            return names[i];
    return NULL;
}

#define CHROMIUM_FLAGS                                                                             \
    "--headless --no-sandbox --disable-gpu --disable-quic --no-first-run "                         \
    "--disable-background-networking --disable-component-update --disable-sync"

/* chromium; without it the test fails in CI and skips elsewhere. */
static const char *chromium_or_skip(void)
{
    const char *chrome = chromium();
    TU_REQUIRE_TOOL(chrome != NULL, "chromium");
    return chrome;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* Pages in a PDF that Chromium wrote: its page objects ("/Type /Page", not
 * the "/Type /Pages" tree). */
static int pdf_pages(const char *path)
{
    tally_buf pdf;
    tally_buf_init(&pdf, 0);
    assert_int_equal(tu_read_file(path, &pdf), 0);
    assert_true(pdf.len > 4 && memcmp(pdf.data, "%PDF", 4) == 0);
    int n = 0;
    const char *needle = "/Type /Page";
    size_t k = strlen(needle);
    for (size_t i = 0; i + k < pdf.len; i++)
        if (memcmp(pdf.data + i, needle, k) == 0 && pdf.data[i + k] != 's')
            n++;
    tally_buf_release(&pdf);
    return n;
}

/* A finalized invoice of n accelerator lines (a100-40g, a100-80g, ...). */
static void long_invoice_doc(tally_buf *out, int n)
{
    static const char *const skus[] = {"a100-40g", "a100-80g", "h100", "rtx4090", "tpu-v4-64"};
    tally_buf lines;
    tally_buf_init(&lines, 0);
    for (int i = 1; i <= n; i++)
        assert_int_equal(
            tally_buf_printf(&lines,
                             "%s{\"line\":%d,\"kind\":\"%s\",\"meter\":\"accelerator\",\"sku\":"
                             "\"%s\",\"dim2\":\"\",\"pricing\":\"on_demand\",\"migration\":false,"
                             "\"quantity\":\"%d\",\"unit\":\"card-second\",\"unit_price\":"
                             "\"1.90\",\"price_unit\":\"card-hour\",\"amount\":\"%d.00\","
                             "\"credits\":[%s]}",
                             i > 1 ? "," : "", i, i % 4 == 0 ? "minimum" : "usage", skus[i % 5],
                             3600 * i + 17, i * 2,
                             i == 1 || i == 2 ? "{\"grant_id\":1,\"amount\":\"1.00\"}" : ""),
            TALLY_OK);
    make_doc(out, "INV-2026-000002", "invoice", "finalized", lines.data, "420.00",
             "{\"grant_id\":1,\"kind\":\"trial\",\"amount\":\"2.00\"}", "2.00", "418.00", "");
    tally_buf_release(&lines);
}

/* The print view on A4: the page count of Chromium's PDF. */
static int printed_pages(const char *chrome, const char *name, const tally_buf *doc)
{
    tally_buf h;
    tally_buf_init(&h, 0);
    assert_int_equal(ledger_invoice_html(ledger, doc->data, doc->len, &h), TALLY_OK);
    char html[700], pdf[700];
    snprintf(html, sizeof html, "%s/%s.html", dir, name);
    snprintf(pdf, sizeof pdf, "%s/%s.pdf", dir, name);
    write_text(html, h.data);
    (void)unlink(pdf);
    assert_int_equal(tu_sh(NULL,
                           "timeout 120 %s " CHROMIUM_FLAGS " --user-data-dir='%s/chrome-%s' "
                           "--no-pdf-header-footer --print-to-pdf='%s' 'file://%s' >/dev/null 2>&1",
                           chrome, dir, name, pdf, html),
                     0);
    tally_buf_release(&h);
    return pdf_pages(pdf);
}

/* Printed, the 3-line invoice with two charts and a 20-line one each fit on
 * at most two A4 pages (a 5-line invoice used to take three). */
static void test_prints_on_two_pages(void **state)
{
    (void)state;
    const char *chrome = chromium_or_skip();
    tally_buf doc;
    tally_buf_init(&doc, 0);
    invoice_doc(&doc);
    int short_pages = printed_pages(chrome, "print-short", &doc);
    long_invoice_doc(&doc, 20);
    int long_pages = printed_pages(chrome, "print-long", &doc);
    print_message("printed: 3 lines on %d A4 page(s), 20 lines on %d\n", short_pages, long_pages);
    assert_in_range(short_pages, 1, 2);
    assert_in_range(long_pages, 1, 2);
    tally_buf_release(&doc);
}

static void test_renders_in_chromium(void **state)
{
    (void)state;
    const char *chrome = chromium_or_skip();
    tally_buf doc, h, dom;
    tally_buf_init(&doc, 0);
    tally_buf_init(&h, 0);
    tally_buf_init(&dom, 0);
    invoice_doc(&doc);
    assert_int_equal(ledger_invoice_html(ledger, doc.data, doc.len, &h), TALLY_OK);
    char html[700], png[700];
    snprintf(html, sizeof html, "%s/invoice.html", dir);
    snprintf(png, sizeof png, "%s/invoice.png", dir);
    FILE *f = fopen(html, "w");
    assert_non_null(f);
    fputs(h.data, f);
    fclose(f);
    assert_int_equal(tu_sh(NULL,
                           "timeout 120 %s " CHROMIUM_FLAGS " --user-data-dir='%s/chrome1' "
                           "--screenshot='%s' --window-size=1000,1400 'file://%s' >/dev/null 2>&1",
                           chrome, dir, png, html),
                     0);
    struct stat st;
    assert_int_equal(stat(png, &st), 0);
    assert_true(st.st_size > 20000); /* a blank page is a few kB */
    assert_int_equal(tu_sh(&dom,
                           "timeout 120 %s " CHROMIUM_FLAGS " --user-data-dir='%s/chrome2' "
                           "--dump-dom 'file://%s' 2>/dev/null",
                           chrome, dir, html),
                     0);
    assert_non_null(strstr(dom.data, "CNY 10,030.00"));
    assert_non_null(strstr(dom.data, "10,050.00"));
    assert_non_null(strstr(dom.data, "INV-2026-000001"));
    tally_buf_release(&doc);
    tally_buf_release(&h);
    tally_buf_release(&dom);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decimal),
        cmocka_unit_test(test_invoice_page),
        cmocka_unit_test(test_chart_axis),
        cmocka_unit_test(test_chart),
        cmocka_unit_test(test_draft_and_credit_note),
        cmocka_unit_test(test_bad_documents),
        cmocka_unit_test(test_printed_commands_verify),
        cmocka_unit_test(test_renders_in_chromium),
        cmocka_unit_test(test_prints_on_two_pages),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
