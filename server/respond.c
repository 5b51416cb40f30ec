/* Building answers: JSON error bodies and the one mapping of errors to HTTP
 * statuses (srv_http_status). */
#include <stdarg.h>
#include <stdio.h>

#include "server_int.h"
#include "tally/log.h"

const char srv_type_json[] = "application/json";

srv_outcome srv_fail(srv_call *c, int status, const char *code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tally_buf *b = &c->resp.body;
    tally_buf_reset(b);
    c->resp.status = status;
    c->resp.content_type = srv_type_json;
    tally_err e = tally_buf_puts(b, "{\"error\":{\"code\":");
    if (!e)
        e = tally_buf_json_str(b, code);
    if (!e)
        e = tally_buf_puts(b, ",\"message\":");
    if (!e)
        e = tally_buf_json_str(b, msg);
    if (!e)
        e = tally_buf_puts(b, "}}\n");
    if (e) { /* out of memory: an empty body still carries the status */
        tally_buf_reset(b);
        c->resp.status = 503;
    }
    return SRV_ANSWERED;
}

srv_outcome srv_fail_nomem(srv_call *c)
{
    return srv_fail(c, 503, "unavailable", "out of memory");
}

/* Bad input's status and code where it is not 400 "bad_request". */
static const struct {
    tally_err err;
    int status;
    const char *code;
} input_map[] = {
    {TALLY_NOT_FOUND, 404, "not_found"},
    {TALLY_OVERFLOW, 400, "overflow"},
    {TALLY_TOO_LARGE, 413, "too_large"},
    {TALLY_UNKNOWN_CURRENCY, 400, "unknown_currency"},
    {TALLY_CURRENCY_MISMATCH, 409, "currency_mismatch"},
    {TALLY_NO_PRICE, 409, "no_price"},
    {TALLY_FINALIZED, 409, "finalized"},
    {TALLY_EXISTS, 409, "exists"},
    {TALLY_EXISTS_DIFFERENT, 409, "conflict"},
    {TALLY_AUTH, 403, "forbidden"},
};

int srv_http_status(tally_err e, const char **code)
{
    switch (tally_err_class_of(e)) {
    case TALLY_ERR_CLASS_INPUT:
        for (size_t i = 0; i < sizeof input_map / sizeof *input_map; i++)
            if (input_map[i].err == e) {
                *code = input_map[i].code;
                return input_map[i].status;
            }
        *code = "bad_request";
        return 400;
    case TALLY_ERR_CLASS_RETRIABLE:
        *code = e == TALLY_BUSY || e == TALLY_STALE ? "busy" : "unavailable";
        return 503;
    case TALLY_ERR_CLASS_NONE: /* not a failure: a caller's bug */
    case TALLY_ERR_CLASS_FATAL:
        break;
    }
    *code = "internal";
    return 500;
}

srv_outcome srv_fail_err(srv_call *c, tally_err e, const char *what)
{
    const char *code;
    int status = srv_http_status(e, &code);
    if (status != 500)
        return srv_fail(c, status, code, "%s: %s", what, tally_err_str(e));
    /* The ledger's own message stays in the server's log, not in answers. */
    tally_log(TALLY_LOG_ERR, "serve", "request %s: %s: %s (%s)", c->resp.request_id, what,
              tally_err_str(e), tally_ledger_errmsg(c->srv->ledger));
    return srv_fail(c, 500, "internal", "%s failed (request %s)", what, c->resp.request_id);
}

srv_outcome srv_fail_why(srv_call *c, tally_err e, const char *why)
{
    if (!tally_err_is_input(e))
        return srv_fail_err(c, e, why);
    const char *code;
    int status = srv_http_status(e, &code);
    return srv_fail(c, status, code, "%s", why[0] ? why : tally_err_str(e));
}

srv_outcome srv_ok(srv_call *c, int status, const char *content_type)
{
    c->resp.status = status;
    c->resp.content_type = content_type;
    return SRV_ANSWERED;
}
