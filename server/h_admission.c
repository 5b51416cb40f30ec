/* GET /v1/accounts/{id}/admission?sku=S&cards=N&hours=H[&pricing=P]
 * (SPEC section 9): may the account start cards x hours of sku at today's
 * price? 200 {"allowed":true,...} when its balance pays for it above the
 * stop mark, 402 {"allowed":false,...,"shortfall"} when it does not; the
 * body is tally_admission_json's either way.
 *
 * The query is checked here (400 "bad_query" naming the parameter); what
 * needs the ledger (an unknown SKU, a pricing the SKU does not offer today)
 * is checked by tally_admission_check, whose explanation the 400 carries.
 * Reading the balance may refresh it first (a grant expired since), which
 * needs a write transaction: then the read snapshot is dropped and the
 * check asked again (srv_snapshot_drop). */
#include <string.h>

#include "server_int.h"
#include "tally/balance.h"
#include "tally/money.h"

/* A decimal integer in [min, max]: digits only, no sign, no leading zero. */
static bool parse_count(const char *s, int64_t min, int64_t max, int64_t *out)
{
    int64_t v = 0;
    size_t n = strlen(s);
    if (n == 0 || n > 18 || (n > 1 && s[0] == '0'))
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    if (v < min || v > max)
        return false;
    *out = v;
    return true;
}

typedef struct admission_query {
    char sku[TALLY_NAME_MAX], cards[24], hours[32], pricing[16];
} admission_query;

/* Parses and checks the query into r; answers 400 and returns false on bad
 * input. r->sku points into q. */
static bool admission_parse(srv_call *c, admission_query *q, tally_admission_req *r)
{
    srv_qparam p[] = {{"sku", q->sku, sizeof q->sku, false},
                      {"cards", q->cards, sizeof q->cards, false},
                      {"hours", q->hours, sizeof q->hours, false},
                      {"pricing", q->pricing, sizeof q->pricing, false}};
    const char *why = "";
    if (c->query && srv_query_parse(c->query, c->query_len, p, 4, &why) == TALLY_OK &&
        (!p[0].seen || !p[1].seen || !p[2].seen))
        why = "missing query parameters: sku, cards and hours are required";
    else if (!c->query)
        why = "missing query parameters: sku, cards and hours are required";
    if (why[0]) {
        srv_fail(c, 400, "bad_query",
                 "%s (want sku=SKU&cards=N&hours=H[&pricing=on_demand|spot|reserved])", why);
        return false;
    }
    *r = (tally_admission_req){.account = c->params[0], .sku = q->sku};
    if (!q->sku[0]) {
        srv_fail(c, 400, "bad_query", "sku must not be empty");
        return false;
    }
    if (!parse_count(q->cards, 1, TALLY_CARDS_MAX, &r->cards)) {
        srv_fail(c, 400, "bad_query", "cards must be a whole number from 1 to %lld",
                 (long long)TALLY_CARDS_MAX);
        return false;
    }
    why = NULL;
    if (tally_price_parse(q->hours, strlen(q->hours), false, &r->hours_nano, &why) != TALLY_OK ||
        r->hours_nano <= 0 || r->hours_nano > TALLY_ADMISSION_HOURS_MAX * 1000000000LL) {
        srv_fail(c, 400, "bad_query",
                 "hours must be a decimal number of hours above 0 and at most %d%s%s",
                 TALLY_ADMISSION_HOURS_MAX, why ? ": " : "", why ? why : "");
        return false;
    }
    if (p[3].seen && (tally_pricing_from_name(q->pricing, &r->pricing) != TALLY_OK ||
                      r->pricing == TALLY_PRICING_NONE)) {
        srv_fail(c, 400, "bad_query", "pricing must be on_demand, spot or reserved");
        return false;
    }
    return true;
}

srv_outcome srv_h_admission(srv_call *c)
{
    admission_query q;
    memset(&q, 0, sizeof q);
    tally_admission_req r;
    if (!admission_parse(c, &q, &r))
        return SRV_ANSWERED;
    tally_admission a;
    char why[256] = "";
    tally_err e = tally_admission_check(c->srv->ledger, &r, &a, why, sizeof why);
    if (e == TALLY_BUSY && srv_snapshot_drop(c)) /* a refresh fell due: see srv_snapshot_drop */
        e = tally_admission_check(c->srv->ledger, &r, &a, why, sizeof why);
    if (e == TALLY_NOT_FOUND)
        return srv_fail(c, 404, "not_found", "account not found");
    if (e == TALLY_INVAL) /* the SKU or its pricing, named in why */
        return srv_fail(c, 400, "bad_query", "%s%s%s%s", why[0] ? why : "bad admission query",
                        q.pricing[0] ? " (pricing " : "", q.pricing, q.pricing[0] ? ")" : "");
    if (e != TALLY_OK)
        return srv_fail_err(c, e, "admission");
    e = tally_admission_json(&r, &a, &c->resp.body);
    if (!e)
        e = tally_buf_puts(&c->resp.body, "\n");
    if (e != TALLY_OK)
        return srv_fail_nomem(c);
    return srv_ok(c, a.allowed ? 200 : 402, srv_type_json);
}
