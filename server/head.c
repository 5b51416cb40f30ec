/* The request-head check run on the raw connection before evhttp parses it
 * (conn.c). libevent 2.1 answers what it refuses itself (unknown methods,
 * bad versions, bad Content-Length, oversized heads) with its own HTML page
 * before any Tally callback runs, and it lets Transfer-Encoding override
 * Content-Length. So every head is checked here first, and what would be
 * refused is answered with a JSON error instead; what passes is then known
 * to be something evhttp parses the way this check does. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "server_int.h"

static const char *const known_methods[] = {"GET",    "HEAD",    "POST", "PUT",
                                            "DELETE", "OPTIONS", "PATCH"};

static int refuse(srv_head *h, int status, const char *code, const char *msg)
{
    h->status = status;
    h->code = code;
    snprintf(h->msg, sizeof h->msg, "%s", msg);
    return status;
}

/* The next line of p[*at..n) without its CRLF or LF; false at the end. */
static bool next_line(const char *p, size_t n, size_t *at, const char **line, size_t *len)
{
    if (*at >= n)
        return false;
    const char *nl = memchr(p + *at, '\n', n - *at);
    if (!nl)
        return false;
    *line = p + *at;
    *len = (size_t)(nl - *line);
    *at += *len + 1;
    if (*len && (*line)[*len - 1] == '\r')
        (*len)--;
    return true;
}

static int check_method(srv_head *h, const char *m, size_t n)
{
    char name[16];
    snprintf(name, sizeof name, "%.*s", (int)(n < 15 ? n : 15), m);
    for (size_t i = 0; i < sizeof known_methods / sizeof *known_methods; i++)
        if (strlen(known_methods[i]) == n && memcmp(known_methods[i], m, n) == 0)
            return 0;
    char msg[sizeof h->msg];
    snprintf(msg, sizeof msg,
             "method '%s' is not supported (methods are case-sensitive: GET, HEAD, POST, PUT, "
             "DELETE, OPTIONS, PATCH)",
             name);
    return refuse(h, 501, "not_implemented", msg);
}

static int check_request_line(srv_head *h, const char *l, size_t n)
{
    const char *sp1 = memchr(l, ' ', n);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', n - (size_t)(sp1 + 1 - l)) : NULL;
    if (!sp1 || !sp2 || sp1 == l || sp2 == sp1 + 1 ||
        memchr(sp2 + 1, ' ', n - (size_t)(sp2 + 1 - l)))
        return refuse(h, 400, "bad_request", "malformed request line");
    if (check_method(h, l, (size_t)(sp1 - l)))
        return h->status;
    size_t tlen = (size_t)(sp2 - sp1 - 1);
    if (tlen > SRV_MAX_TARGET)
        return refuse(h, 414, "uri_too_long", "request target over 8192 bytes");
    for (const char *t = sp1 + 1; t < sp2; t++)
        if ((unsigned char)*t <= 0x20 || (unsigned char)*t >= 0x7f)
            return refuse(h, 400, "bad_request", "control or non-ASCII byte in the target");
    const char *v = sp2 + 1;
    size_t vlen = n - (size_t)(v - l);
    if (vlen == 8 && (memcmp(v, "HTTP/1.1", 8) == 0 || memcmp(v, "HTTP/1.0", 8) == 0)) {
        h->http10 = v[7] == '0';
        return 0;
    }
    if (vlen >= 5 && memcmp(v, "HTTP/", 5) == 0)
        return refuse(h, 505, "http_version", "only HTTP/1.0 and HTTP/1.1 are supported");
    return refuse(h, 400, "bad_request", "malformed HTTP version");
}

static bool name_is(const char *l, size_t nlen, const char *name)
{
    return strlen(name) == nlen && strncasecmp(l, name, nlen) == 0;
}

/* Content-Length: digits only, within the transport limit. */
static int check_length(srv_head *h, const char *v, size_t n)
{
    if (h->has_length)
        return refuse(h, 400, "bad_request", "more than one Content-Length header");
    h->has_length = true;
    if (n == 0 || n > 19)
        return refuse(h, 400, "bad_request", "malformed Content-Length");
    uint64_t len = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return refuse(h, 400, "bad_request", "malformed Content-Length");
        len = len * 10 + (uint64_t)(v[i] - '0');
    }
    if (len > SRV_TRANSPORT_MAX_BODY)
        return refuse(h, 413, "too_large", "request body over the transport limit");
    h->content_length = len;
    return 0;
}

static int check_header(srv_head *h, const char *l, size_t n)
{
    const char *colon = memchr(l, ':', n);
    if (!colon || colon == l || l[0] == ' ' || l[0] == '\t')
        return refuse(h, 400, "bad_request", "malformed header line");
    size_t nlen = (size_t)(colon - l);
    for (size_t i = 0; i < nlen; i++)
        if (l[i] <= 0x20 || l[i] >= 0x7f)
            return refuse(h, 400, "bad_request", "malformed header name");
    const char *v = colon + 1;
    size_t vlen = n - nlen - 1;
    while (vlen && (*v == ' ' || *v == '\t'))
        v++, vlen--;
    while (vlen && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
        vlen--;
    if (name_is(l, nlen, "Content-Length"))
        return check_length(h, v, vlen);
    if (name_is(l, nlen, "Connection")) {
        char val[64];
        snprintf(val, sizeof val, "%.*s", (int)(vlen < 63 ? vlen : 63), v);
        for (char *t = val; *t; t++)
            *t = (char)(*t >= 'A' && *t <= 'Z' ? *t - 'A' + 'a' : *t);
        h->conn_close |= strstr(val, "close") != NULL;
        h->conn_keep_alive |= strstr(val, "keep-alive") != NULL;
    }
    if (name_is(l, nlen, "Authorization") && h->n_authorization++)
        return refuse(h, 400, "bad_request", "more than one Authorization header");
    if (name_is(l, nlen, "Idempotency-Key") && h->n_idempotency_key++)
        return refuse(h, 400, "bad_request", "more than one Idempotency-Key header");
    if (name_is(l, nlen, "Transfer-Encoding")) {
        if (h->chunked || vlen != 7 || strncasecmp(v, "chunked", 7) != 0)
            return refuse(h, 501, "not_implemented",
                          "only 'Transfer-Encoding: chunked' is supported");
        h->chunked = true;
    }
    return 0;
}

int srv_head_check(const char *p, size_t n, srv_head *h)
{
    memset(h, 0, sizeof *h);
    size_t at = 0, len;
    const char *line;
    if (!next_line(p, n, &at, &line, &len) || check_request_line(h, line, len))
        return h->status ? h->status : refuse(h, 400, "bad_request", "no request line");
    while (next_line(p, n, &at, &line, &len) && len)
        if (check_header(h, line, len))
            return h->status;
    if (h->chunked && h->has_length)
        return refuse(h, 400, "bad_request",
                      "Content-Length and Transfer-Encoding together are refused");
    h->close = h->conn_close || (h->http10 && !h->conn_keep_alive);
    return 0;
}

size_t srv_head_end(const char *p, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++) {
        if (p[i] != '\n')
            continue;
        if (p[i + 1] == '\n')
            return i + 2;
        if (i + 2 < n && p[i + 1] == '\r' && p[i + 2] == '\n')
            return i + 3;
    }
    return 0;
}

bool srv_head_is_connection(const char *line, size_t len)
{
    return len >= 11 && strncasecmp(line, "Connection:", 11) == 0;
}
