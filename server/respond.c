/* Building answers: JSON error bodies and the mapping of ledger errors to
 * HTTP statuses. */
#include <stdarg.h>
#include <stdio.h>

#include "server_int.h"

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

/* HTTP status and code per ledger error; anything else is 500. */
static const struct {
    tally_err err;
    int status;
    const char *code;
} err_map[] = {
    {TALLY_NOT_FOUND, 404, "not_found"},
    {TALLY_INVAL, 400, "bad_request"},
    {TALLY_PARSE, 400, "bad_request"},
    {TALLY_RANGE, 400, "bad_request"},
    {TALLY_OVERFLOW, 400, "overflow"},
    {TALLY_TOO_LARGE, 413, "too_large"},
    {TALLY_UNKNOWN_CURRENCY, 400, "unknown_currency"},
    {TALLY_CURRENCY_MISMATCH, 409, "currency_mismatch"},
    {TALLY_NO_PRICE, 409, "no_price"},
    {TALLY_FINALIZED, 409, "finalized"},
    {TALLY_EXISTS, 409, "exists"},
    {TALLY_EXISTS_DIFFERENT, 409, "conflict"},
    {TALLY_BUSY, 503, "busy"},
    {TALLY_STALE, 503, "busy"},
    {TALLY_NOMEM, 503, "unavailable"},
    {TALLY_IO, 503, "unavailable"},
};

srv_outcome srv_fail_err(srv_call *c, tally_err e, const char *what)
{
    for (size_t i = 0; i < sizeof err_map / sizeof *err_map; i++)
        if (err_map[i].err == e)
            return srv_fail(c, err_map[i].status, err_map[i].code, "%s: %s", what,
                            tally_err_str(e));
    /* The ledger's own message stays in the server's log, not in answers. */
    fprintf(stderr, "tally serve: request %s: %s: %s (%s)\n", c->resp.request_id, what,
            tally_err_str(e), tally_ledger_errmsg(c->srv->ledger));
    return srv_fail(c, 500, "internal", "%s failed (request %s)", what, c->resp.request_id);
}

srv_outcome srv_ok(srv_call *c, int status, const char *content_type)
{
    c->resp.status = status;
    c->resp.content_type = content_type;
    return SRV_ANSWERED;
}
