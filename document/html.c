/* The invoice page: a canonical invoice or credit note rendered as one
 * self-contained, printable HTML file (inline CSS and SVG, no scripts, no
 * external resources).
 *
 * The page shows the seller (from $TALLY_SELLER_NAME, default "GPU Cloud"),
 * the account, the document's number, status and period, the lines grouped
 * by meter with quantities in price units (exact decimal conversion from the
 * stored base units), the credits and what each paid, the totals, the usage
 * per day as a chart (html_chart.c), and how to check the hash chain and the
 * signature with standard tools. Every text that comes from the document or
 * the ledger is HTML-escaped. Amounts are the document's exact decimal
 * strings, only grouped in thousands for reading. */
#include <json-c/json.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "document_int.h"
#include "tally/event.h"
#include "tally/rating.h"

/* ---- writer and number formatting ------------------------------------------ */

void hw_raw(html_w *w, const char *s)
{
    if (!w->e)
        w->e = tally_buf_puts(w->b, s);
}

void hw_fmt(html_w *w, const char *fmt, ...)
{
    if (w->e)
        return;
    va_list ap;
    va_start(ap, fmt);
    w->e = tally_buf_vprintf(w->b, fmt, ap);
    va_end(ap);
}

void hw_esc(html_w *w, const char *s)
{
    if (!w->e)
        w->e = tally_buf_html(w->b, s ? s : "");
}

/* Copies the digits of an unsigned integer string, grouped by thousands. */
static void group_digits(char *out, size_t cap, const char *digits, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 2 < cap; i++) {
        if (i > 0 && (n - i) % 3 == 0)
            out[o++] = ',';
        out[o++] = digits[i];
    }
    out[o] = '\0';
}

/* Appends s to buf (cap bytes with its NUL) at *o, cutting what does not
 * fit. */
static void put(char *buf, size_t cap, size_t *o, const char *s)
{
    if (cap == 0)
        return;
    size_t n = strlen(s);
    if (n > cap - 1 - *o)
        n = cap - 1 - *o;
    memcpy(buf + *o, s, n);
    *o += n;
    buf[*o] = '\0';
}

/* The digits of v, most significant first, ending at end (39 of them at
 * most); returns the first. 64-bit division once the value allows it. */
static char *udigits(char *end, unsigned __int128 v)
{
    char *p = end;
    while (v > UINT64_MAX) {
        *--p = (char)('0' + (int)(v % 10));
        v /= 10;
    }
    uint64_t w = (uint64_t)v;
    do
        *--p = (char)('0' + (int)(w % 10));
    while (w /= 10);
    return p;
}

void html_decimal(char *buf, size_t cap, __int128 q, __int128 divisor, int max_frac)
{
    bool neg = q < 0;
    unsigned __int128 a = neg ? -(unsigned __int128)q : (unsigned __int128)q;
    unsigned __int128 d = (unsigned __int128)divisor, scale = 1;
    for (int i = 0; i < max_frac; i++)
        scale *= 10;
    unsigned __int128 ip = a / d, frac = ((a % d) * scale * 2 + d) / (2 * d);
    if (frac >= scale) { /* rounded up into the next unit */
        ip++;
        frac -= scale;
    }
    char digits[48], grouped[64], fr[48];
    char *first = udigits(digits + sizeof digits, ip);
    size_t n = (size_t)(digits + sizeof digits - first);
    group_digits(grouped, sizeof grouped, first, n);
    int f = max_frac;
    for (int i = f - 1; i >= 0; i--, frac /= 10)
        fr[i] = (char)('0' + (int)((uint64_t)(frac % 10)));
    while (f > 0 && fr[f - 1] == '0')
        f--;
    fr[f] = '\0';
    bool minus = neg && (n > 1 || grouped[0] != '0' || f > 0);
    size_t o = 0; /* cut at cap, as snprintf would */
    put(buf, cap, &o, minus ? "-" : "");
    put(buf, cap, &o, grouped);
    put(buf, cap, &o, f > 0 ? "." : "");
    put(buf, cap, &o, fr);
}

const char *html_unit_plural(const char *unit, char *buf, size_t cap)
{
    size_t n = strlen(unit);
    bool plural = (n >= 4 && strcmp(unit + n - 4, "hour") == 0) ||
                  (n >= 3 && strcmp(unit + n - 3, "day") == 0);
    snprintf(buf, cap, "%s%s", unit, plural ? "s" : "");
    return buf;
}

/* A money string from the document ("-12345.67") grouped: "-12,345.67". */
static void hw_money(html_w *w, const char *s)
{
    const char *p = s && *s == '-' ? s + 1 : s;
    size_t n = p ? strspn(p, "0123456789") : 0;
    if (!p || n == 0 || n > 30 ||
        (p[n] && (p[n] != '.' || strspn(p + n + 1, "0123456789") != strlen(p + n + 1)))) {
        hw_esc(w, s); /* not a plain decimal: show it as it is */
        return;
    }
    char g[64];
    group_digits(g, sizeof g, p, n);
    hw_fmt(w, "%s%s", p != s ? "&minus;" : "", g);
    hw_esc(w, p + n);
}

/* The negation of a money string: what a credit takes off the total. */
static void hw_money_neg(html_w *w, const char *s)
{
    if (!s || !*s) {
        hw_money(w, s);
        return;
    }
    if (s[0] == '-') {
        hw_money(w, s + 1);
        return;
    }
    bool zero = strspn(s, "0.") == strlen(s);
    if (!zero)
        hw_raw(w, "&minus;");
    hw_money(w, s);
}

/* ---- the document ---------------------------------------------------------- */

typedef struct view {
    json_object *root, *lines, *applied;
    const char *id, *account, *currency, *status, *label, *start, *end, *tz, *issued;
    const char *subtotal, *total_credits, *credit_issued, *amount_due, *refers_to, *reason;
    const char *prev_hash, *hash, *signature;
    bool credit_note, finalized;
    char account_name[128];
} view;

static const char *jget(json_object *o, const char *key)
{
    json_object *f = NULL;
    if (!o || !json_object_object_get_ex(o, key, &f) || !json_object_is_type(f, json_type_string))
        return "";
    return json_object_get_string(f);
}

static json_object *jarr(json_object *o, const char *key)
{
    json_object *f = NULL;
    if (!json_object_object_get_ex(o, key, &f) || !json_object_is_type(f, json_type_array))
        return NULL;
    return f;
}

static int64_t jint(json_object *o, const char *key)
{
    json_object *f = NULL;
    if (!o || !json_object_object_get_ex(o, key, &f) || !json_object_is_type(f, json_type_int))
        return 0;
    return json_object_get_int64(f);
}

tally_err tally_invoice_parse(const char *doc, size_t len, struct json_object **out)
{
    *out = NULL;
    if (len > INT32_MAX)
        return TALLY_TOO_LARGE;
    json_tokener *tok = json_tokener_new();
    if (!tok)
        return TALLY_NOMEM;
    json_object *root = json_tokener_parse_ex(tok, doc, (int)len);
    bool ok = root && json_tokener_get_error(tok) == json_tokener_success &&
              json_object_is_type(root, json_type_object);
    json_tokener_free(tok);
    if (!ok) {
        json_object_put(root);
        return TALLY_PARSE;
    }
    *out = root;
    return TALLY_OK;
}

/* The view of a parsed document (root stays the caller's). */
static tally_err view_of(view *v, json_object *root)
{
    memset(v, 0, sizeof *v);
    v->root = root;
    if (!root || !json_object_is_type(root, json_type_object) ||
        !(v->lines = jarr(v->root, "lines")) || !(v->applied = jarr(v->root, "credits_applied")))
        return TALLY_PARSE;
    json_object *r = v->root, *period = NULL;
    json_object_object_get_ex(r, "period", &period);
    v->id = jget(r, "invoice_id");
    v->account = jget(r, "account");
    v->currency = jget(r, "currency");
    v->status = jget(r, "status");
    v->label = jget(period, "label");
    v->start = jget(period, "start");
    v->end = jget(period, "end");
    v->tz = jget(period, "timezone");
    v->issued = jget(r, "issued_at");
    v->subtotal = jget(r, "subtotal");
    v->total_credits = jget(r, "total_credits");
    v->amount_due = jget(r, "amount_due");
    json_object *issued = NULL; /* an adjustment credit issued (SPEC section 4) */
    json_object_object_get_ex(r, "credit_issued", &issued);
    v->credit_issued = jget(issued, "amount");
    v->refers_to = jget(r, "refers_to");
    v->reason = jget(r, "reason");
    v->prev_hash = jget(r, "prev_hash");
    v->hash = jget(r, "hash");
    v->signature = jget(r, "signature");
    v->credit_note = strcmp(jget(r, "type"), "credit_note") == 0;
    v->finalized = strcmp(v->status, "finalized") == 0;
    if (!v->id[0] || !v->account[0] || !v->currency[0])
        return TALLY_PARSE;
    return TALLY_OK;
}

/* The account's display name, if its store has one. */
static tally_err load_account_name(const tally_page_source *src, view *v)
{
    return src->account_name(src->ctx, v->account, v->account_name, sizeof v->account_name);
}

/* ---- page parts -------------------------------------------------------------- */

static const char css[] =
    "*{box-sizing:border-box}"
    "html{background:#eef1f5}"
    "body{margin:0;padding:32px 0;color:#1f2937;font:14px/1.45 system-ui,-apple-system,"
    "'Segoe UI',Roboto,'Helvetica Neue',Arial,'Liberation Sans',sans-serif;"
    "font-variant-numeric:tabular-nums}"
    ".page{max-width:900px;margin:0 auto;background:#fff;padding:44px 52px;"
    "border-radius:6px;box-shadow:0 1px 3px rgba(15,23,42,.12)}"
    "header{display:flex;justify-content:space-between;align-items:flex-start;"
    "border-bottom:3px solid #1e3a8a;padding-bottom:18px}"
    ".seller{font-size:22px;font-weight:700;color:#1e3a8a;letter-spacing:.2px}"
    ".doctype{text-align:right}"
    ".doctype h1{margin:0;font-size:26px;letter-spacing:3px;color:#111827;font-weight:700}"
    ".doctype .num{font-size:15px;font-weight:600;margin-top:2px}"
    ".badge{display:inline-block;margin-top:6px;padding:2px 10px;border-radius:999px;"
    "font-size:11px;font-weight:700;letter-spacing:.8px;text-transform:uppercase}"
    ".b-finalized{background:#dcfce7;color:#166534}.b-draft{background:#fef3c7;color:#92400e}"
    ".b-credit{background:#fee2e2;color:#991b1b}"
    ".muted{color:#6b7280}.small{font-size:12px}"
    ".meta{display:grid;grid-template-columns:1.2fr 1.2fr 1fr;gap:16px;margin:22px 0}"
    ".meta h3,.section h2{margin:0 0 4px;font-size:11px;letter-spacing:1.2px;"
    "text-transform:uppercase;color:#6b7280;font-weight:600}"
    ".meta .v{font-size:15px;font-weight:600}"
    ".due{background:#1e3a8a;color:#fff;border-radius:6px;padding:12px 16px;text-align:right}"
    ".due h3{color:#c7d2fe}.due .amt{font-size:24px;font-weight:700}"
    ".section{margin-top:26px}.section h2{font-size:12px;color:#1e3a8a;margin-bottom:8px}"
    "table{width:100%;border-collapse:collapse}"
    "th{text-align:left;font-size:11px;letter-spacing:.6px;text-transform:uppercase;"
    "color:#6b7280;font-weight:600;border-bottom:1px solid #d1d5db;padding:6px 8px}"
    "td{padding:7px 8px;border-bottom:1px solid #eef0f3;vertical-align:top}"
    ".r{text-align:right;white-space:nowrap}"
    "tr.group td{background:#f3f5f9;font-weight:700;color:#1e3a8a;border-bottom:none;"
    "padding-top:9px}"
    ".desc{width:38%}.desc b{font-weight:600;white-space:nowrap}"
    ".sub{font-size:12px;color:#6b7280}"
    ".r .wrap{white-space:normal}.nw{white-space:nowrap}"
    ".kind{display:inline-block;font-size:10px;font-weight:700;letter-spacing:.6px;"
    "text-transform:uppercase;border-radius:3px;padding:0 5px;margin-right:6px;"
    "background:#e0e7ff;color:#3730a3}"
    ".k-insurance,.k-adjustment{background:#fef3c7;color:#92400e}"
    ".k-commitment,.k-overage{background:#dbeafe;color:#1e40af}"
    ".k-minimum{background:#f3e8ff;color:#6b21a8}"
    ".totals{margin-left:auto;width:340px;margin-top:10px}"
    ".totals td{border:none;padding:4px 8px}"
    ".totals tr.grand td{border-top:2px solid #1f2937;font-size:17px;font-weight:700;"
    "padding-top:8px}"
    ".chart{margin:8px 0 16px}.chart figcaption{display:flex;justify-content:space-between;"
    "font-weight:600;font-size:13px;margin-bottom:2px}"
    "svg .grid{stroke:#e5e7eb;stroke-width:1}svg .axis{stroke:#9ca3af;stroke-width:1}"
    "svg text{font:10px system-ui,sans-serif;fill:#6b7280}"
    "svg .ylab{text-anchor:end}svg .xlab{text-anchor:middle}"
    ".verify{background:#f8fafc;border:1px solid #e2e8f0;border-radius:6px;padding:14px 16px}"
    ".verify dt{font-size:11px;color:#6b7280;text-transform:uppercase;letter-spacing:.6px;"
    "margin-top:6px}"
    ".verify dd{margin:0;font:12px/1.4 ui-monospace,'DejaVu Sans Mono',Menlo,Consolas,monospace;"
    "word-break:break-all}"
    "pre{background:#0f172a;color:#e2e8f0;border-radius:4px;padding:10px 12px;margin:8px 0 0;"
    "font:11.5px/1.5 ui-monospace,'DejaVu Sans Mono',Menlo,Consolas,monospace;"
    "white-space:pre-wrap;word-break:break-all}"
    "footer{margin-top:28px;padding-top:10px;border-top:1px solid #e5e7eb;font-size:11px;"
    "color:#9ca3af;display:flex;justify-content:space-between}"
    /* Print (A4): smaller type and spacing so an invoice of about 20 lines fits
     * on one or two pages; headings stay with what follows them, and rows,
     * charts and the command block are never split. */
    "@page{size:A4;margin:11mm 12mm 12mm}"
    "@media print{html{background:#fff}body{padding:0;font-size:10.5px;line-height:1.3}"
    ".page{box-shadow:none;padding:0;max-width:none;border-radius:0}"
    "header{padding-bottom:10px}.seller{font-size:18px}.doctype h1{font-size:20px}"
    ".meta{margin:12px 0}.due{padding:8px 12px}.due .amt{font-size:19px}"
    ".section{margin-top:14px}.section h2{margin-bottom:4px}"
    "th{padding:3px 6px}td{padding:3px 6px}.sub{font-size:9.5px}"
    ".totals td{padding:2px 6px}.totals tr.grand td{font-size:14px;padding-top:5px}"
    ".chart{margin:4px 0 8px}.verify{padding:8px 12px}.verify dd{font-size:10px}"
    "pre{font-size:8.5px;line-height:1.35;padding:6px 8px}footer{margin-top:6px;padding-top:4px}"
    ".chart svg{display:block;width:92%;margin:0 auto}.verify p{margin:0 0 2px}"
    "h2,h3,figcaption,.section>p{break-after:avoid;page-break-after:avoid}"
    "tr,figure,pre,dl,.totals{break-inside:avoid;page-break-inside:avoid}"
    "thead{display:table-header-group}"
    ".due,.badge,.kind,tr.group td,pre{-webkit-print-color-adjust:exact;"
    "print-color-adjust:exact}}";

static const char *seller_name(void)
{
    const char *s = getenv("TALLY_SELLER_NAME");
    return s && *s ? s : "GPU Cloud";
}

static const char *const month_names[12] = {
    "January", "February", "March",     "April",   "May",      "June",
    "July",    "August",   "September", "October", "November", "December",
};

/* Year and month of a "YYYY-MM" label; 0 if it is not one. */
static int label_month(const char *label, int *y, int *m)
{
    char tail;
    return strlen(label) == 7 && sscanf(label, "%4d-%2d%c", y, m, &tail) == 2 && *m >= 1 &&
           *m <= 12;
}

/* "2026-03" -> "March 2026"; anything else as it is. */
static void hw_period(html_w *w, const char *label)
{
    int y = 0, m = 0;
    if (label_month(label, &y, &m)) {
        hw_fmt(w, "%s %04d", month_names[m - 1], y);
        return;
    }
    hw_esc(w, label);
}

/* "2026-03" -> "1 – 31 March 2026": the period's local calendar days. */
static void hw_period_days(html_w *w, const char *label)
{
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int y = 0, m = 0;
    if (!label_month(label, &y, &m))
        return;
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    hw_fmt(w, "1 \xe2\x80\x93 %d %s %04d", days[m - 1] + (m == 2 && leap), month_names[m - 1], y);
}

/* "2026-04-01T00:05:00Z" -> "2026-04-01 00:05 UTC". */
static void hw_time(html_w *w, const char *t)
{
    int64_t s;
    char d[32];
    if (tally_time_parse(t, strlen(t), &s) == TALLY_OK &&
        tally_time_format(s, d, sizeof d) == TALLY_OK) {
        d[10] = ' ';
        d[16] = '\0';
        hw_fmt(w, "%s UTC", d);
        return;
    }
    hw_esc(w, t);
}

static void page_head(html_w *w, const view *v)
{
    hw_raw(w, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
              "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
              "<title>");
    hw_esc(w, v->credit_note ? "Credit note " : "Invoice ");
    hw_esc(w, v->id);
    hw_raw(w, " \xe2\x80\x94 ");
    hw_esc(w, v->account);
    hw_raw(w, "</title><style>");
    hw_raw(w, css);
    hw_raw(w, "</style></head><body><main class=\"page\">");
}

static void page_header(html_w *w, const view *v)
{
    hw_raw(w, "<header><div><div class=\"seller\">");
    hw_esc(w, seller_name());
    hw_raw(w, "</div><div class=\"muted small\">Accelerator cloud billing statement</div></div>"
              "<div class=\"doctype\"><h1>");
    hw_raw(w, v->credit_note ? "CREDIT NOTE" : "INVOICE");
    hw_raw(w, "</h1><div class=\"num\">");
    hw_esc(w, v->finalized ? v->id : "Draft (not yet numbered)");
    hw_raw(w, "</div>");
    if (v->credit_note)
        hw_raw(w, "<span class=\"badge b-credit\">Credit note</span> ");
    hw_fmt(w, "<span class=\"badge %s\">", v->finalized ? "b-finalized" : "b-draft");
    hw_esc(w, v->status);
    hw_raw(w, "</span></div></header>");
}

static void page_meta(html_w *w, const view *v)
{
    hw_raw(w, "<section class=\"meta\"><div><h3>Bill to</h3><div class=\"v\">");
    hw_esc(w, v->account_name[0] ? v->account_name : v->account);
    hw_raw(w, "</div><div class=\"muted small\">Account ");
    hw_esc(w, v->account);
    hw_raw(w, "</div></div><div><h3>Billing period</h3><div class=\"v\">");
    hw_period(w, v->label);
    hw_raw(w, "</div><div class=\"muted small\">");
    hw_period_days(w, v->label);
    hw_raw(w, " (");
    hw_esc(w, v->tz);
    hw_raw(w, ")<br>Issued ");
    hw_time(w, v->issued);
    hw_raw(w, "</div></div><div class=\"due\"><h3>");
    hw_raw(w, v->credit_note ? "Amount credited" : "Amount due");
    hw_raw(w, "</h3><div class=\"amt\">");
    hw_esc(w, v->currency);
    hw_raw(w, " ");
    hw_money(w, v->amount_due);
    hw_raw(w, "</div></div></section>");
    if (v->credit_note) {
        hw_raw(w, "<p>This credit note voids invoice <b>");
        hw_esc(w, v->refers_to);
        hw_raw(w, "</b> in full. Reason: ");
        hw_esc(w, v->reason);
        hw_raw(w, "</p>");
    }
}

/* ---- lines ------------------------------------------------------------------- */

typedef struct named {
    const char *name, *text;
} named;

static const named meter_labels[] = {
    {"accelerator", "Accelerators"},
    {"storage", "Storage"},
    {"traffic", "Network traffic"},
    {"tokens", "Inference tokens"},
};

static const named kind_texts[] = {
    {"usage", "Metered usage in the period"},
    {"commitment", "Long-term commitment fee (billed whether used or not)"},
    {"overage", "Reserved usage above the committed cards, at the on-demand price"},
    {"minimum", "Top-up to the minimum billable duration of a short run"},
    {"insurance", "Training insurance: migration-window usage waived"},
    {"adjustment", "Late usage"},
};

/* The text for name in a table, or name itself. */
static const char *lookup(const named *t, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0)
            return t[i].text;
    return name;
}

#define LOOKUP(tbl, name) lookup(tbl, sizeof tbl / sizeof tbl[0], name)

static const char *pricing_text(const char *p)
{
    return strcmp(p, "on_demand") == 0  ? "on-demand"
           : strcmp(p, "spot") == 0     ? "spot"
           : strcmp(p, "reserved") == 0 ? "reserved"
                                        : "";
}

static void line_description(html_w *w, json_object *ln)
{
    const char *kind = jget(ln, "kind"), *pricing = pricing_text(jget(ln, "pricing"));
    hw_raw(w, "<td class=\"desc\"><span class=\"kind k-");
    hw_esc(w, kind);
    hw_raw(w, "\">");
    hw_esc(w, kind);
    hw_raw(w, "</span><b>");
    hw_esc(w, jget(ln, "sku"));
    if (jget(ln, "dim2")[0]) {
        hw_raw(w, " \xc2\xb7 ");
        hw_esc(w, jget(ln, "dim2"));
    }
    hw_raw(w, "</b>");
    if (pricing[0]) {
        hw_raw(w, " <span class=\"muted\">");
        hw_esc(w, pricing);
        hw_raw(w, "</span>");
    }
    hw_raw(w, "<div class=\"sub\">");
    if (strcmp(kind, "adjustment") == 0) {
        hw_raw(w, "Adjustment for usage in ");
        hw_period(w, jget(ln, "original_period"));
        hw_raw(w, " (original period ");
        hw_esc(w, jget(ln, "original_period"));
        hw_raw(w, ", corrects ");
        hw_esc(w, jget(ln, "adjusts"));
        hw_raw(w, ") recorded after that invoice was finalized");
    } else {
        hw_esc(w, LOOKUP(kind_texts, kind));
    }
    json_object *mig = NULL;
    if (json_object_object_get_ex(ln, "migration", &mig) && json_object_get_boolean(mig))
        hw_raw(w, " \xc2\xb7 hot-migration window");
    hw_raw(w, "</div></td>");
}

/* "20.96 card-hours" over "75,456 card-seconds". */
static void line_quantity(html_w *w, json_object *ln)
{
    const char *meter = jget(ln, "meter"), *qs = jget(ln, "quantity");
    tally_meter m;
    __int128 q = 0;
    bool neg = qs[0] == '-';
    bool ok = tally_meter_from_name(meter, &m) == TALLY_OK && qs[neg] != '\0' &&
              strspn(qs + neg, "0123456789") == strlen(qs + neg) && strlen(qs) < 39;
    for (const char *p = qs + neg; ok && *p; p++)
        q = q * 10 + (*p - '0');
    hw_raw(w, "<td class=\"r\">");
    if (!ok) {
        hw_esc(w, qs);
        hw_raw(w, "</td>");
        return;
    }
    char a[80], b[80];
    html_decimal(a, sizeof a, neg ? -q : q, tally_meter_unit_divisor(m), 6);
    html_decimal(b, sizeof b, neg ? -q : q, 1, 0);
    char pu[96];
    hw_fmt(w, "%s ", a);
    const char *unit = jget(ln, "price_unit"); /* "1 card-hour", "2 card-hours" */
    hw_esc(w, strcmp(a, "1") == 0 ? unit : html_unit_plural(unit, pu, sizeof pu));
    hw_fmt(w, "<div class=\"sub wrap\">%s <span class=\"nw\">", b);
    hw_esc(w, jget(ln, "unit"));
    hw_raw(w, "s</span></div></td>");
}

/* The kind of grant id in the document's credits ("" if it is not there). */
static const char *applied_kind(const view *v, int64_t grant)
{
    for (size_t i = 0; i < json_object_array_length(v->applied); i++) {
        json_object *c = json_object_array_get_idx(v->applied, i);
        if (jint(c, "grant_id") == grant)
            return jget(c, "kind");
    }
    return "";
}

static void line_row(html_w *w, const view *v, json_object *ln)
{
    hw_fmt(w, "<tr><td class=\"muted\">%lld</td>", (long long)jint(ln, "line"));
    line_description(w, ln);
    line_quantity(w, ln);
    hw_raw(w, "<td class=\"r\">");
    hw_esc(w, jget(ln, "unit_price"));
    hw_raw(w, "<div class=\"sub\">per ");
    hw_esc(w, jget(ln, "price_unit"));
    hw_raw(w, "</div></td><td class=\"r\">");
    json_object *cr = jarr(ln, "credits");
    for (size_t i = 0; cr && i < json_object_array_length(cr); i++) {
        json_object *c = json_object_array_get_idx(cr, i);
        int64_t g = jint(c, "grant_id");
        hw_fmt(w, "%s<span class=\"sub\">", i ? "<br>" : "");
        hw_esc(w, applied_kind(v, g));
        hw_fmt(w, " #%lld</span> ", (long long)g);
        hw_money_neg(w, jget(c, "amount"));
    }
    hw_raw(w, "</td><td class=\"r\"><b>");
    hw_money(w, jget(ln, "amount"));
    hw_raw(w, "</b></td></tr>");
}

static bool known_meter(const char *m)
{
    for (size_t i = 0; i < sizeof meter_labels / sizeof meter_labels[0]; i++)
        if (strcmp(meter_labels[i].name, m) == 0)
            return true;
    return false;
}

/* The lines of one meter (NULL: of meters this page does not know) under a
 * group heading, if there are any. */
static void meter_group(html_w *w, const view *v, const char *meter)
{
    bool heading = false;
    for (size_t j = 0; j < json_object_array_length(v->lines); j++) {
        json_object *ln = json_object_array_get_idx(v->lines, j);
        const char *m = jget(ln, "meter");
        if (meter ? strcmp(m, meter) != 0 : known_meter(m))
            continue;
        if (!heading) {
            hw_raw(w, "<tr class=\"group\"><td colspan=\"6\">");
            hw_esc(w, meter ? LOOKUP(meter_labels, meter) : "Other");
            hw_raw(w, "</td></tr>");
            heading = true;
        }
        line_row(w, v, ln);
    }
}

/* The lines, grouped by meter (accelerators, storage, traffic, tokens). */
static void page_lines(html_w *w, const view *v)
{
    hw_raw(w, "<section class=\"section\"><h2>Charges</h2><table><thead><tr><th>#</th>"
              "<th>Description</th><th class=\"r\">Quantity</th><th class=\"r\">Unit price</th>"
              "<th class=\"r\">Paid by credit</th><th class=\"r\">Amount (");
    hw_esc(w, v->currency);
    hw_raw(w, ")</th></tr></thead><tbody>");
    if (json_object_array_length(v->lines) == 0)
        hw_raw(w, "<tr><td></td><td colspan=\"5\" class=\"muted\">No charges in this period."
                  "</td></tr>");
    for (size_t g = 0; g < sizeof meter_labels / sizeof meter_labels[0]; g++)
        meter_group(w, v, meter_labels[g].name);
    meter_group(w, v, NULL);
    hw_raw(w, "</tbody></table>");
}

/* ---- credits and totals -------------------------------------------------------- */

/* Which lines a grant paid, from the lines' own credit lists: "line 1",
 * "lines 1, 3". */
static void grant_lines(html_w *w, const view *v, int64_t grant)
{
    int64_t paid[64];
    size_t n = 0;
    for (size_t i = 0; i < json_object_array_length(v->lines) && n < 64; i++) {
        json_object *ln = json_object_array_get_idx(v->lines, i);
        json_object *cr = jarr(ln, "credits");
        for (size_t j = 0; cr && j < json_object_array_length(cr); j++)
            if (jint(json_object_array_get_idx(cr, j), "grant_id") == grant) {
                paid[n++] = jint(ln, "line");
                break;
            }
    }
    for (size_t i = 0; i < n; i++)
        hw_fmt(w, "%s%lld", i ? ", " : n > 1 ? "lines " : "line ", (long long)paid[i]);
}

static const named grant_kinds[] = {
    {"trial", "Trial voucher"},      {"coupon", "Coupon"},
    {"prepaid", "Prepaid credit"},   {"insurance", "Training insurance"},
    {"goodwill", "Goodwill credit"}, {"adjustment", "Adjustment credit"},
};

/* "2026-03-31 00:00 UTC" */
static void hw_time_s(html_w *w, int64_t t)
{
    char d[32];
    if (tally_time_format(t, d, sizeof d) != TALLY_OK) {
        hw_fmt(w, "%lld", (long long)t);
        return;
    }
    d[10] = ' ';
    d[16] = '\0';
    hw_fmt(w, "%s UTC", d);
}

/* The grant's window and scope from its store: "from ..., expires ...". */
static void grant_window(html_w *w, const tally_page_source *src, int64_t grant)
{
    if (w->e || !src)
        return;
    tally_buf scope;
    tally_buf_init(&scope, 4096);
    tally_grant_window g = {.scope = &scope};
    tally_err e = src->grant_window(src->ctx, grant, &g);
    if (e == TALLY_OK) {
        hw_raw(w, "from ");
        hw_time_s(w, g.effective_s);
        hw_raw(w, "<br>");
        if (!g.expires) {
            hw_raw(w, "no expiry");
        } else {
            hw_raw(w, "expires ");
            hw_time_s(w, g.expires_s);
        }
        if (scope.len > 0) {
            hw_raw(w, "<div class=\"sub\">only for ");
            hw_esc(w, scope.data);
            hw_raw(w, "</div>");
        }
    } else if (e != TALLY_NOT_FOUND) {
        w->e = e;
    }
    tally_buf_release(&scope);
}

static void page_totals(html_w *w, const view *v)
{
    hw_raw(w, "<table class=\"totals\"><tr><td>Subtotal</td><td class=\"r\">");
    hw_money(w, v->subtotal);
    hw_raw(w, "</td></tr><tr><td>Credits</td><td class=\"r\">");
    hw_money_neg(w, v->total_credits);
    if (v->credit_issued[0]) {
        hw_raw(w, "</td></tr><tr><td>");
        hw_raw(w, v->credit_note ? "Adjustment credit taken back" : "Adjustment credit issued");
        hw_raw(w, "</td><td class=\"r\">");
        hw_money(w, v->credit_issued);
    }
    hw_raw(w, "</td></tr><tr class=\"grand\"><td>");
    hw_raw(w, v->credit_note ? "Total credited" : "Amount due");
    hw_raw(w, "</td><td class=\"r\">");
    hw_esc(w, v->currency);
    hw_raw(w, " ");
    hw_money(w, v->amount_due);
    hw_raw(w, "</td></tr></table></section>");
}

static void page_credits(html_w *w, const tally_page_source *src, const view *v)
{
    size_t n = json_object_array_length(v->applied);
    if (n == 0)
        return;
    hw_raw(w, "<section class=\"section\"><h2>Credits applied</h2><table><thead><tr>"
              "<th>Credit</th><th>Valid</th><th>Paid for</th><th class=\"r\">Amount</th>"
              "</tr></thead><tbody>");
    for (size_t i = 0; i < n; i++) {
        json_object *c = json_object_array_get_idx(v->applied, i);
        int64_t g = jint(c, "grant_id");
        hw_raw(w, "<tr><td><b>");
        hw_esc(w, LOOKUP(grant_kinds, jget(c, "kind")));
        hw_fmt(w, "</b><div class=\"sub\">grant #%lld (", (long long)g);
        hw_esc(w, jget(c, "kind"));
        hw_raw(w, ")</div></td><td class=\"small\">");
        grant_window(w, src, g);
        hw_raw(w, "</td><td class=\"muted\">");
        grant_lines(w, v, g);
        hw_raw(w, "</td><td class=\"r\">");
        hw_money(w, jget(c, "amount"));
        hw_raw(w, "</td></tr>");
    }
    hw_raw(w, "</tbody></table></section>");
}

static void page_chart(html_w *w, const tally_page_source *src, const view *v)
{
    int64_t s, e;
    if (!src || v->credit_note || tally_time_parse(v->start, strlen(v->start), &s) != TALLY_OK ||
        tally_time_parse(v->end, strlen(v->end), &e) != TALLY_OK || e <= s)
        return;
    hw_raw(w, "<section class=\"section\"><h2>Usage per day</h2><p class=\"muted small\" "
              "style=\"margin:0 0 6px\">Quantity used on each day of the period (local days in ");
    hw_esc(w, v->tz);
    hw_raw(w, "), in price units, as recorded in the ledger.</p>");
    html_usage_chart(w, src, v->account, v->tz, s, e);
    hw_raw(w, "</section>");
}

/* ---- verification ---------------------------------------------------------------- */

/* The file the customer checks: what `invoice run --out` writes for an
 * invoice, "<account>-<period>.json"; a credit note by its number. */
static void json_file_name(const view *v, char *buf, size_t cap)
{
    tally_buf b;
    tally_buf_init(&b, cap);
    if (v->credit_note || !v->label[0] ||
        tally_invoice_file_name(&b, NULL, v->account, v->label, "json") != TALLY_OK || b.len >= cap)
        snprintf(buf, cap, "%s.json", v->id);
    else
        snprintf(buf, cap, "%s", b.data);
    tally_buf_release(&b);
}

/* The same commands as README's, with this document's file name: they hash
 * the file's one line, so a trailing newline in a saved copy does not count. */
static void verify_commands(html_w *w, const view *v)
{
    char file[300];
    json_file_name(v, file, sizeof file);
    hw_raw(w, "<pre id=\"verify-commands\"># Files: ");
    hw_esc(w, file);
    hw_raw(w, " (this document as issued: written by `tally invoice run --out`, or\n#        "
              "`tally invoice show ");
    hw_esc(w, v->id);
    hw_raw(w, " --format json &gt; ");
    hw_esc(w, file);
    hw_raw(w, "`)\n#        pub.pem (the seller's public key: `tally pubkey &gt; pub.pem`)\nf=");
    hw_esc(w, file);
    hw_raw(w,
           "\n# 1. SHA-256 of the document without its trailing hash and signature:\n"
           "h=$(sed -E 's/,\"hash\":\"[0-9a-f]{64}\",\"signature\":\"[0-9a-f]{128}\"}$/}/' "
           "\"$f\" | tr -d '\\n' | sha256sum | cut -d' ' -f1)\n"
           "grep -q \"\\\"hash\\\":\\\"$h\\\"\" \"$f\" &amp;&amp; echo \"hash matches\"\n"
           "# 2. The Ed25519 signature over those 32 bytes:\n"
           "printf '%s' \"$h\" | xxd -r -p &gt; hash.bin\n"
           "sed -E 's/.*\"signature\":\"([0-9a-f]{128})\".*/\\1/' \"$f\" | xxd -r -p &gt; sig.bin\n"
           "openssl pkeyutl -verify -pubin -inkey pub.pem -rawin -in hash.bin "
           "-sigfile sig.bin\n</pre>");
}

static void page_verification(html_w *w, const view *v)
{
    hw_raw(w, "<section class=\"section\"><h2>Verification</h2><div class=\"verify\">");
    if (!v->finalized) {
        hw_raw(w, "<p style=\"margin:0\">This is a draft: it is recomputed on every run and is "
                  "not numbered, hashed or signed until it is finalized.</p></div></section>");
        return;
    }
    hw_raw(w, "<p class=\"small\" style=\"margin:0 0 4px\">This document is stored exactly as "
              "issued. Its SHA-256 hash is chained to the previous document's hash and signed "
              "with the seller's Ed25519 key, so any later change to it, or to the order of "
              "documents, is detectable. The operator's <code>tally verify</code> checks the "
              "whole chain.</p><dl><dt>Document hash (SHA-256)</dt><dd>");
    hw_esc(w, v->hash);
    hw_raw(w, "</dd><dt>Previous document hash</dt><dd>");
    hw_esc(w, v->prev_hash);
    hw_raw(w, "</dd><dt>Signature (Ed25519 over the hash)</dt><dd>");
    hw_esc(w, v->signature);
    hw_raw(w, "</dd></dl><p class=\"small\" style=\"margin:10px 0 0\">To check it yourself "
              "(standard tools only; the last command prints "
              "<b>Signature Verified Successfully</b>):</p>");
    verify_commands(w, v);
    hw_raw(w, "</div></section>");
}

static void page_footer(html_w *w, const view *v)
{
    hw_raw(w, "<footer><span>");
    hw_esc(w, seller_name());
    hw_raw(w, " \xc2\xb7 ");
    hw_esc(w, v->credit_note ? "Credit note " : "Invoice ");
    hw_esc(w, v->finalized ? v->id : "draft");
    hw_raw(w, "</span><span>Amounts in ");
    hw_esc(w, v->currency);
    hw_raw(w, "; each line rounded once, half-up, to the minor unit.</span></footer>"
              "</main></body></html>\n");
}

tally_err tally_invoice_html(const char *doc, size_t len, const tally_page_source *src,
                             tally_buf *out)
{
    json_object *root;
    tally_err e = tally_invoice_parse(doc, len, &root);
    if (e == TALLY_OK)
        e = tally_invoice_html_parsed(root, src, out);
    json_object_put(root);
    return e;
}

tally_err tally_invoice_html_parsed(struct json_object *root, const tally_page_source *src,
                                    tally_buf *out)
{
    view v;
    tally_err e = view_of(&v, root);
    if (e == TALLY_OK && src)
        e = load_account_name(src, &v);
    if (e != TALLY_OK)
        return e;
    size_t start = out->len;
    html_w w = {out, TALLY_OK};
    page_head(&w, &v);
    page_header(&w, &v);
    page_meta(&w, &v);
    page_lines(&w, &v);
    page_totals(&w, &v);
    page_credits(&w, src, &v);
    page_chart(&w, src, &v);
    page_verification(&w, &v);
    page_footer(&w, &v);
    e = w.e;
    if (e != TALLY_OK) {
        out->len = start;
        if (out->data)
            out->data[start] = '\0';
    }
    return e;
}

/* ---- file names ------------------------------------------------------------------ */

/* Bytes kept as they are in a file name; the rest is %-escaped. */
static bool safe_byte(unsigned char c, bool first)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return true;
    return c == '_' || c == '-' || c == '@' || c == '+' || (c == '.' && !first);
}

tally_err tally_invoice_file_name(tally_buf *b, const char *dir, const char *account,
                                  const char *period, const char *ext)
{
    tally_err e = dir ? tally_buf_printf(b, "%s/", dir) : TALLY_OK;
    for (const unsigned char *p = (const unsigned char *)account; !e && *p; p++)
        e = safe_byte(*p, p == (const unsigned char *)account) ? tally_buf_append(b, p, 1)
                                                               : tally_buf_printf(b, "%%%02X", *p);
    return e ? e : tally_buf_printf(b, "-%s.%s", period, ext);
}
