/* Read endpoints: usage, balance, invoice list and one invoice.
 *
 * The router has already answered 404 to an account key asking for another
 * account in the path. Invoices are addressed by id, so GET /v1/invoices/{id}
 * looks the owner up first and answers an account key's request for another
 * account's invoice exactly as for an invoice that does not exist. */
#include <stdio.h>
#include <string.h>

#include "server_int.h"
#include "tally/invoice.h"

static const char type_csv[] = "text/csv; charset=utf-8";
static const char type_html[] = "text/html; charset=utf-8";

/* 404 unless the account exists (reports of unknown accounts are empty,
 * which would tell nothing apart from a typo). */
static bool account_exists(srv_call *c, const char *account)
{
    tally_account a;
    tally_err e = tally_ledger_account_get(c->srv->ledger, account, &a);
    if (e == TALLY_OK)
        return true;
    if (e == TALLY_NOT_FOUND)
        srv_fail(c, 404, "not_found", "account not found");
    else
        srv_fail_err(c, e, "reading the account");
    return false;
}

/* Rejects any query string on endpoints that take no parameters. */
static bool no_query(srv_call *c)
{
    const char *why;
    if (!c->query || srv_query_parse(c->query, c->query_len, NULL, 0, &why) == TALLY_OK)
        return true;
    srv_fail(c, 400, "bad_query", "%s", why);
    return false;
}

static const struct {
    const char *name;
    tally_usage_by by;
} usage_by[] = {{"sku", TALLY_BY_SKU}, {"day", TALLY_BY_DAY}, {"meter", TALLY_BY_METER}};

/* Parses from, to and by; answers 400 and returns false on bad input. */
static bool usage_query(srv_call *c, int64_t *from_s, int64_t *to_s, tally_usage_by *by)
{
    char from[64] = "", to[64] = "", by_name[16] = "sku";
    srv_qparam p[] = {{"from", from, sizeof from, false},
                      {"to", to, sizeof to, false},
                      {"by", by_name, sizeof by_name, false}};
    const char *why = "missing query parameters from and to";
    if (!c->query || srv_query_parse(c->query, c->query_len, p, 3, &why) != TALLY_OK ||
        !p[0].seen || !p[1].seen) {
        srv_fail(c, 400, "bad_query", "%s (want from=TIME&to=TIME[&by=sku|day|meter])", why);
        return false;
    }
    if (tally_time_parse(from, strlen(from), from_s) != TALLY_OK ||
        tally_time_parse(to, strlen(to), to_s) != TALLY_OK) {
        srv_fail(c, 400, "bad_query", "from and to must be RFC 3339 times (encode '+' as %%2B)");
        return false;
    }
    if (*to_s <= *from_s) {
        srv_fail(c, 400, "bad_query", "to must be after from");
        return false;
    }
    for (size_t i = 0; i < sizeof usage_by / sizeof *usage_by; i++)
        if (strcmp(by_name, usage_by[i].name) == 0) {
            *by = usage_by[i].by;
            return true;
        }
    srv_fail(c, 400, "bad_query", "by must be sku, day or meter");
    return false;
}

srv_outcome srv_h_usage(srv_call *c)
{
    int64_t from_s, to_s;
    tally_usage_by by;
    if (!usage_query(c, &from_s, &to_s, &by) || !account_exists(c, c->params[0]))
        return SRV_ANSWERED;
    tally_err e = tally_usage_report(c->srv->ledger, c->params[0], from_s, to_s, by, &c->resp.body);
    if (e == TALLY_INVAL && by == TALLY_BY_DAY) /* from < to was checked: the day limit */
        return srv_fail(c, 400, "range_too_long",
                        "by=day covers at most %d days; ask for a shorter from-to range",
                        TALLY_USAGE_MAX_DAYS);
    if (e != TALLY_OK)
        return srv_fail_err(c, e, "usage report");
    return srv_ok(c, 200, srv_type_json);
}

/* The report reads the account first: an unknown one is TALLY_NOT_FOUND,
 * so no separate lookup. */
srv_outcome srv_h_balance(srv_call *c)
{
    if (!no_query(c))
        return SRV_ANSWERED;
    tally_ledger *l = c->srv->ledger;
    tally_err e = tally_balance_report(l, c->params[0], &c->resp.body);
    if (e == TALLY_BUSY && srv_snapshot_drop(c)) { /* a refresh fell due: see srv_snapshot_drop */
        tally_buf_reset(&c->resp.body);
        e = tally_balance_report(l, c->params[0], &c->resp.body);
    }
    if (e == TALLY_NOT_FOUND)
        return srv_fail(c, 404, "not_found", "account not found");
    if (e != TALLY_OK)
        return srv_fail_err(c, e, "balance report");
    return srv_ok(c, 200, srv_type_json);
}

srv_outcome srv_h_invoice_list(srv_call *c)
{
    if (!no_query(c) || !account_exists(c, c->params[0]))
        return SRV_ANSWERED;
    tally_buf *b = &c->resp.body;
    tally_err e = tally_buf_puts(b, "{\"account\":");
    if (!e)
        e = tally_buf_json_str(b, c->params[0]);
    if (!e)
        e = tally_buf_puts(b, ",\"invoices\":");
    if (!e)
        e = tally_invoice_list(c->srv->ledger, c->params[0], b);
    if (!e)
        e = tally_buf_puts(b, "}\n");
    if (e != TALLY_OK)
        return srv_fail_err(c, e, "invoice list");
    return srv_ok(c, 200, srv_type_json);
}

/* The account an invoice id belongs to ("" if unknown): a finalized invoice
 * or credit note by lookup, a draft ("draft:<account>:<YYYY-MM>") by name. */
static tally_err invoice_owner(tally_ledger *l, const char *id, char owner[TALLY_NAME_MAX])
{
    static const char draft[] = "draft:";
    size_t n = strlen(id);
    owner[0] = '\0';
    if (strncmp(id, draft, sizeof draft - 1) == 0) {
        size_t acct_len = n >= sizeof draft - 1 + 9 ? n - (sizeof draft - 1) - 8 : 0;
        if (acct_len > 0 && acct_len < TALLY_NAME_MAX && id[n - 8] == ':')
            snprintf(owner, TALLY_NAME_MAX, "%.*s", (int)acct_len, id + sizeof draft - 1);
        return TALLY_OK;
    }
    return tally_ledger_invoice_owner(l, id, owner);
}

static const struct {
    const char *name;
    tally_doc_format format;
    const char *type;
} formats[] = {{"json", TALLY_FORMAT_JSON, srv_type_json},
               {"csv", TALLY_FORMAT_CSV, type_csv},
               {"html", TALLY_FORMAT_HTML, type_html}};

srv_outcome srv_h_invoice_show(srv_call *c)
{
    char fmt[16] = "json";
    srv_qparam p[] = {{"format", fmt, sizeof fmt, false}};
    const char *why;
    if (c->query && srv_query_parse(c->query, c->query_len, p, 1, &why) != TALLY_OK)
        return srv_fail(c, 400, "bad_query", "%s (want format=json|csv|html)", why);
    size_t f = 0;
    while (f < sizeof formats / sizeof *formats && strcmp(fmt, formats[f].name) != 0)
        f++;
    if (f == sizeof formats / sizeof *formats)
        return srv_fail(c, 400, "bad_query", "format must be json, csv or html");
    char owner[TALLY_NAME_MAX];
    tally_err e = invoice_owner(c->srv->ledger, c->params[0], owner);
    if (e != TALLY_OK)
        return srv_fail_err(c, e, "invoice lookup");
    if (!c->who.admin && strcmp(owner, c->who.account) != 0)
        return srv_fail(c, 404, "not_found", "invoice not found");
    e = tally_invoice_show(c->srv->ledger, c->params[0], formats[f].format, &c->resp.body);
    if (e == TALLY_NOT_FOUND)
        return srv_fail(c, 404, "not_found", "invoice not found");
    if (e != TALLY_OK)
        return srv_fail_err(c, e, "invoice");
    return srv_ok(c, 200, formats[f].type);
}
