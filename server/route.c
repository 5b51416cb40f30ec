/* The route table and request dispatch: match (404/405), authenticate
 * (401/403), scope {account} to the key's account (404), run the handler. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/rand.h>

#include "server_int.h"
#include "tally/log.h"

/* Handlers for {account} routes may trust that an account key's account is
 * the one in the path: the router answers 404 otherwise. */
const srv_route srv_routes[] = {
    {"GET", "/healthz", srv_h_healthz, SRV_PUBLIC},
    {"GET", "/metrics", srv_h_metrics, SRV_PUBLIC},
    {"POST", "/v1/events", srv_h_events, SRV_USAGE},
    {"GET", "/v1/accounts/{account}/usage", srv_h_usage, SRV_ANY_KEY},
    {"GET", "/v1/accounts/{account}/balance", srv_h_balance, SRV_ANY_KEY},
    {"GET", "/v1/accounts/{account}/admission", srv_h_admission, SRV_ANY_KEY},
    {"GET", "/v1/accounts/{account}/invoices", srv_h_invoice_list, SRV_ANY_KEY},
    {"POST", "/v1/accounts/{account}/credits", srv_h_credit_grant, SRV_ADMIN},
    {"GET", "/v1/invoices/{invoice}", srv_h_invoice_show, SRV_ANY_KEY},
    {"PUT", "/v1/spot-prices/{sku}", srv_h_spot_set, SRV_ADMIN},
};
const size_t srv_n_routes = sizeof srv_routes / sizeof *srv_routes;

/* Next segment of a path at *at (which points at a '/'); false at the end. */
static bool next_segment(const char *path, size_t len, size_t *at, const char **seg, size_t *n)
{
    if (*at >= len)
        return false;
    *seg = path + *at + 1;
    const char *slash = memchr(*seg, '/', len - *at - 1);
    *n = slash ? (size_t)(slash - *seg) : len - *at - 1;
    *at += 1 + *n;
    return true;
}

/* Whether path matches pattern; decodes parameters into params. */
static srv_match match_one(const char *pattern, const char *path, size_t len,
                           char params[SRV_MAX_PARAMS][SRV_PARAM_MAX], size_t *n_params)
{
    size_t pat_at = 0, at = 0, plen = strlen(pattern);
    const char *ps, *s;
    size_t pn, n;
    *n_params = 0;
    for (;;) {
        bool more_pat = next_segment(pattern, plen, &pat_at, &ps, &pn);
        bool more = next_segment(path, len, &at, &s, &n);
        if (!more_pat || !more)
            return more_pat == more ? SRV_MATCH_OK : SRV_MATCH_NO_ROUTE;
        if (pn > 0 && ps[0] == '{') {
            if (n == 0)
                return SRV_MATCH_NO_ROUTE;
            if (*n_params == SRV_MAX_PARAMS ||
                srv_pct_decode(s, n, false, params[*n_params], SRV_PARAM_MAX) != TALLY_OK)
                return SRV_MATCH_BAD_PATH;
            (*n_params)++;
        } else if (pn != n || memcmp(ps, s, n) != 0) {
            return SRV_MATCH_NO_ROUTE;
        }
    }
}

srv_match srv_route_match(const srv_route *table, size_t n, const char *method, const char *path,
                          size_t path_len, const srv_route **route,
                          char params[SRV_MAX_PARAMS][SRV_PARAM_MAX], size_t *n_params, char *allow,
                          size_t allow_cap)
{
    srv_match best = SRV_MATCH_NO_ROUTE;
    size_t used = 0;
    *route = NULL;
    if (allow_cap)
        allow[0] = '\0';
    if (path_len == 0 || path[0] != '/')
        return SRV_MATCH_NO_ROUTE;
    for (size_t i = 0; i < n; i++) {
        srv_match m = match_one(table[i].pattern, path, path_len, params, n_params);
        if (m == SRV_MATCH_BAD_PATH)
            return m;
        if (m != SRV_MATCH_OK)
            continue;
        if (strcmp(table[i].method, method) == 0) {
            *route = &table[i];
            return SRV_MATCH_OK;
        }
        best = SRV_MATCH_NO_METHOD;
        int w = snprintf(allow + used, allow_cap - used, "%s%s", used ? ", " : "", table[i].method);
        if (w > 0 && (size_t)w < allow_cap - used)
            used += (size_t)w;
    }
    return best;
}

/* ---- Dispatch ---------------------------------------------------------------- */

void srv_finish(srv_call *c)
{
    int cls = c->resp.status / 100;
    if (cls >= 1 && cls <= 5)
        c->srv->metrics.responses[cls]++;
    c->reply(c->reply_arg, &c->resp);
    tally_buf_release(&c->resp.body);
    free(c);
}

static void new_request_id(tally_server *s, char *out, size_t cap)
{
    snprintf(out, cap, "%s-%llu", s->id_prefix, (unsigned long long)++s->next_request);
}

/* 403 when the key's role may not use the route (SPEC section 7): an account
 * key never sends usage, an ingest key does nothing else. */
static bool role_allowed(srv_call *c, const srv_route *r)
{
    tally_key_role role = c->who.role;
    if (r->auth == SRV_ADMIN && role != TALLY_KEY_ADMIN)
        srv_fail(c, 403, "forbidden", "this endpoint needs an admin key");
    else if (r->auth == SRV_USAGE && role == TALLY_KEY_ACCOUNT)
        srv_fail(c, 403, "forbidden",
                 "account keys cannot send usage (use an ingest key or an admin key)");
    else if (r->auth == SRV_ANY_KEY && role == TALLY_KEY_INGEST)
        srv_fail(c, 403, "forbidden", "an ingest key can only send events");
    else
        return true;
    return false;
}

/* 401/403 for a route's auth level; true if the call may go on. */
static bool authorize(srv_call *c, const srv_route *r)
{
    static const char *const why[] = {
        [SRV_AUTH_MISSING] = "missing Authorization header (want: Bearer <api key>)",
        [SRV_AUTH_MALFORMED] = "malformed Authorization header (want: Bearer <api key>)",
        [SRV_AUTH_UNKNOWN] = "unknown or revoked api key",
    };
    if (r->auth == SRV_PUBLIC)
        return true;
    srv_auth_result a =
        srv_authenticate(c->srv->ledger, &c->srv->keys, c->req->authorization, &c->who);
    if (a == SRV_AUTH_ERROR) {
        srv_fail(c, 503, "unavailable", "cannot read api keys: %s",
                 tally_ledger_errmsg(c->srv->ledger));
        return false;
    }
    if (a != SRV_AUTH_OK) {
        srv_fail(c, 401, "unauthorized", "%s", why[a]);
        return false;
    }
    return role_allowed(c, r);
}

/* An account key reaching another account through the path: 404, the same
 * answer as for an account that does not exist. */
static bool in_scope(srv_call *c, const srv_route *r)
{
    if (c->who.admin || r->auth == SRV_PUBLIC || !strstr(r->pattern, "/{account}"))
        return true;
    if (strcmp(c->params[0], c->who.account) == 0)
        return true;
    srv_fail(c, 404, "not_found", "account not found");
    return false;
}

/* The path of an absolute-form target ("http://host/v1/..."): what follows
 * the authority; "" for none. Origin-form targets are returned as they are. */
static const char *origin_form(const char *uri)
{
    static const char http[] = "http://", https[] = "https://";
    size_t skip = strncasecmp(uri, http, sizeof http - 1) == 0     ? sizeof http - 1
                  : strncasecmp(uri, https, sizeof https - 1) == 0 ? sizeof https - 1
                                                                   : 0;
    if (!skip)
        return uri;
    const char *path = uri + skip + strcspn(uri + skip, "/?");
    return *path == '?' ? "" : path;
}

static bool snapshot_end(tally_server *s)
{
    if (!s->in_snapshot)
        return false;
    s->in_snapshot = false;
    if (tally_ledger_read_end(s->ledger) != TALLY_OK)
        tally_log(TALLY_LOG_ERR, "serve", "cannot end a read transaction: %s",
                  tally_ledger_errmsg(s->ledger));
    return true;
}

static srv_outcome dispatch(srv_call *c)
{
    const char *uri = c->req->uri ? origin_form(c->req->uri) : "";
    const char *q = strchr(uri, '?');
    size_t path_len = q ? (size_t)(q - uri) : strlen(uri);
    if (q) {
        c->query = q + 1;
        c->query_len = strlen(q + 1);
    }
    if (c->req->body_len > TALLY_HTTP_MAX_BODY)
        return srv_fail(c, 413, "too_large", "request body over %zu bytes", TALLY_HTTP_MAX_BODY);
    const srv_route *r;
    const char *method = c->req->method ? c->req->method : "";
    if (strcmp(method, "HEAD") == 0) /* evhttp sends the headers of the GET, without its body */
        method = "GET";
    srv_match m = srv_route_match(srv_routes, srv_n_routes, method, uri, path_len, &r, c->params,
                                  &c->n_params, c->resp.allow, sizeof c->resp.allow);
    if (m == SRV_MATCH_NO_ROUTE)
        return srv_fail(c, 404, "not_found", "no such endpoint");
    if (m == SRV_MATCH_NO_METHOD)
        return srv_fail(c, 405, "method_not_allowed", "allowed: %s", c->resp.allow);
    if (m == SRV_MATCH_BAD_PATH)
        return srv_fail(c, 400, "bad_path", "malformed path segment");
    /* A GET reads one snapshot: the key check and every query of its report
     * share one read transaction, which also takes the file locks once
     * instead of once per statement. Writers (events, credits, prices) open
     * their own write transactions in the ledger; a GET whose read needs one
     * (a balance refresh fallen due) drops the snapshot first
     * (srv_snapshot_drop). */
    tally_server *s = c->srv; /* c may be freed by the handler (a deferred answer) */
    s->in_snapshot =
        strcmp(r->method, "GET") == 0 && tally_ledger_read_begin(s->ledger) == TALLY_OK;
    srv_outcome out = SRV_ANSWERED;
    if (authorize(c, r) && in_scope(c, r))
        out = r->handler(c);
    snapshot_end(s);
    return out;
}

bool srv_snapshot_drop(srv_call *c)
{
    return snapshot_end(c->srv);
}

void tally_server_handle(tally_server *s, const tally_http_request *req, tally_http_reply_fn reply,
                         void *arg)
{
    srv_call *c = calloc(1, sizeof *c);
    if (!c) {
        tally_http_response oom = {.status = 503, .content_type = srv_type_json};
        tally_buf_init(&oom.body, 0);
        if (tally_buf_puts(&oom.body, "{\"error\":{\"code\":\"unavailable\",\"message\":"
                                      "\"out of memory\"}}") != TALLY_OK)
            oom.status = 503;
        reply(arg, &oom);
        tally_buf_release(&oom.body);
        return;
    }
    c->srv = s;
    c->req = req;
    c->reply = reply;
    c->reply_arg = arg;
    tally_buf_init(&c->resp.body, 0);
    c->resp.content_type = srv_type_json;
    new_request_id(s, c->resp.request_id, sizeof c->resp.request_id);
    if (dispatch(c) == SRV_ANSWERED)
        srv_finish(c);
}

tally_err srv_request_prefix(char out[17])
{
    unsigned char r[8];
    if (RAND_bytes(r, sizeof r) != 1)
        return TALLY_CRYPTO;
    for (size_t i = 0; i < sizeof r; i++)
        snprintf(out + 2 * i, 3, "%02x", r[i]);
    return TALLY_OK;
}
