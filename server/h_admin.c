/* Admin endpoints: credit grants and spot prices. The router lets only admin
 * keys reach these handlers. Amounts and prices are decimal strings parsed
 * exactly; a JSON number is refused so that no client ever rounds money
 * through an inexact binary number on its way here. */
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "server_int.h"
#include "tally/money.h"
#include "tally/rating.h"

/* A money field: present, and a JSON string (never a number). */
static bool money_field(srv_call *c, json_object *o, const char *name, const char **out)
{
    json_object *v = NULL;
    if (json_object_object_get_ex(o, name, &v) && v && !json_object_is_type(v, json_type_string)) {
        srv_fail(c, 400, "bad_field",
                 "field \"%s\" must be a decimal string such as \"10.00\", not a JSON number",
                 name);
        return false;
    }
    return srv_field_string(c, o, name, true, out);
}

/* The currency a grant's amount is in: the one asked for, else the
 * account's, else (a new account) the newest rate card's. */
static bool grant_currency(srv_call *c, const char *account, const char *wanted,
                           const tally_currency **out)
{
    char code[4] = "";
    tally_err e = tally_ledger_currency_for(c->srv->ledger, account, wanted, code);
    if (e == TALLY_UNKNOWN_CURRENCY)
        e = TALLY_OK; /* answered below, naming the code */
    if (e != TALLY_OK) {
        srv_fail_err(c, e, "reading the account");
        return false;
    }
    *out = (wanted && strlen(wanted) != 3) ? NULL : tally_currency_find(code);
    if (!*out) {
        srv_fail(c, 400, "unknown_currency", "unknown currency \"%.16s\"",
                 code[0]  ? code
                 : wanted ? wanted
                          : "(no rate card loaded)");
        return false;
    }
    return true;
}

static const char *const grant_fields[] = {"amount",       "kind",       "currency", "priority",
                                           "effective_at", "expires_at", "scope",    NULL};

/* Reads and checks everything but the amount. */
static bool grant_fields_read(srv_call *c, json_object *o, tally_grant_spec *g, const char **kind)
{
    int64_t prio = 50;
    const char *why = NULL;
    json_object *effective = NULL;
    tally_scope scope;
    /* "now" is not part of the request: a retry later is the same grant. */
    g->effective_defaulted =
        !json_object_object_get_ex(o, "effective_at", &effective) || !effective;
    g->effective_s = tally_now_s();
    g->expires_s = TALLY_TIME_MAX;
    g->scope = "";
    if (!srv_field_string(c, o, "kind", true, kind) ||
        !srv_field_string(c, o, "currency", false, &g->currency) ||
        !srv_field_int(c, o, "priority", 0, 1000000, &prio) ||
        !srv_field_time(c, o, "effective_at", false, &g->effective_s) ||
        !srv_field_time(c, o, "expires_at", false, &g->expires_s) ||
        !srv_field_string(c, o, "scope", false, &g->scope))
        return false;
    g->priority = (int)prio;
    if (tally_grant_kind_from_name(*kind, &g->kind) != TALLY_OK) {
        srv_fail(c, 400, "bad_field",
                 "kind must be trial, coupon, prepaid, insurance, goodwill or adjustment");
        return false;
    }
    if (g->expires_s <= g->effective_s) {
        srv_fail(c, 400, "bad_field", "expires_at must be after effective_at");
        return false;
    }
    if (tally_scope_parse(g->scope, &scope, &why) != TALLY_OK) {
        srv_fail(c, 400, "bad_field", "scope: %s", why ? why : "malformed");
        return false;
    }
    return true;
}

static srv_outcome grant_answer(srv_call *c, const tally_grant_spec *g, int64_t id,
                                const tally_currency *cur)
{
    char amount[48];
    if (tally_amount_format(g->amount_minor, cur->minor_digits, amount, sizeof amount))
        return srv_fail_nomem(c);
    tally_buf *b = &c->resp.body;
    tally_err e = tally_buf_printf(b, "{\"grant_id\":%lld,\"account\":", (long long)id);
    if (!e)
        e = tally_buf_json_str(b, g->account);
    if (!e)
        e = tally_buf_printf(b, ",\"kind\":\"%s\",\"amount\":\"%s\",\"currency\":\"%s\"}\n",
                             tally_grant_kind_name(g->kind), amount, cur->code);
    return e ? srv_fail_nomem(c) : srv_ok(c, 201, srv_type_json);
}

/* The Idempotency-Key header, if any, checked: false once answered 400. */
static bool grant_key(srv_call *c, tally_grant_spec *g)
{
    const char *key = c->req->idempotency_key;
    if (key && !tally_idempotency_key_ok(key)) {
        srv_fail(c, 400, "bad_idempotency_key",
                 "Idempotency-Key must be 1 to %d printable ASCII characters without spaces",
                 TALLY_IDEMPOTENCY_KEY_MAX);
        return false;
    }
    g->idempotency_key = key;
    return true;
}

srv_outcome srv_h_credit_grant(srv_call *c)
{
    json_object *o = NULL;
    tally_grant_spec g = {.account = c->params[0]};
    const char *kind = NULL, *amount = NULL, *why = NULL;
    const tally_currency *cur = NULL;
    if (!grant_key(c, &g) || !srv_body_object(c, grant_fields, &o))
        return SRV_ANSWERED;
    if (!money_field(c, o, "amount", &amount) || !grant_fields_read(c, o, &g, &kind) ||
        !grant_currency(c, g.account, g.currency, &cur))
        goto out;
    if (tally_amount_parse(amount, strlen(amount), cur->minor_digits, false, &g.amount_minor,
                           &why) != TALLY_OK ||
        g.amount_minor <= 0) {
        srv_fail(c, 400, "bad_field", "amount: %s", why ? why : "must be greater than zero");
        goto out;
    }
    char msg[256] = "";
    int64_t id = 0;
    tally_err e = tally_ledger_grant_add(c->srv->ledger, &g, &id, msg, sizeof msg);
    if (e == TALLY_EXISTS && g.idempotency_key) {
        /* A replay: the fingerprint covers every field of the answer, so
         * this is the first answer, byte for byte. */
        grant_answer(c, &g, id, cur);
        c->resp.replayed = c->resp.status == 201;
    } else if (e != TALLY_OK && tally_err_is_input(e))
        srv_fail_why(c, e, msg);
    else if (e != TALLY_OK)
        srv_fail_err(c, e, "granting the credit");
    else
        grant_answer(c, &g, id, cur);
out:
    json_object_put(o);
    return SRV_ANSWERED;
}

static const char *const spot_fields[] = {"price", "from", NULL};

srv_outcome srv_h_spot_set(srv_call *c)
{
    json_object *o = NULL;
    const char *price = NULL, *why = NULL;
    int64_t price_nano = 0, from_s = 0;
    if (!srv_body_object(c, spot_fields, &o))
        return SRV_ANSWERED;
    if (!money_field(c, o, "price", &price) || !srv_field_time(c, o, "from", true, &from_s))
        goto out;
    if (tally_price_parse(price, strlen(price), false, &price_nano, &why) != TALLY_OK) {
        srv_fail(c, 400, "bad_field", "price: %s", why ? why : "malformed");
        goto out;
    }
    tally_err e = tally_ledger_spot_set(c->srv->ledger, c->params[0], price_nano, from_s);
    if (e == TALLY_NOT_FOUND)
        srv_fail(c, 404, "not_found", "unknown sku");
    else if (e == TALLY_NO_PRICE)
        srv_fail(c, 409, "no_spot_pricing", "this sku has no spot pricing");
    else if (e != TALLY_OK)
        srv_fail_err(c, e, "setting the spot price");
    else {
        char text[48], from[32];
        tally_buf *b = &c->resp.body;
        e = tally_price_format(price_nano, 2, text, sizeof text);
        if (!e)
            e = tally_time_format(from_s, from, sizeof from);
        if (!e)
            e = tally_buf_puts(b, "{\"sku\":");
        if (!e)
            e = tally_buf_json_str(b, c->params[0]);
        if (!e)
            e = tally_buf_printf(b, ",\"price\":\"%s\",\"from\":\"%s\"}\n", text, from);
        if (e)
            srv_fail_nomem(c);
        else
            srv_ok(c, 200, srv_type_json);
    }
out:
    json_object_put(o);
    return SRV_ANSWERED;
}
