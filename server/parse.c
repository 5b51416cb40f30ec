/* Parsing of untrusted request parts: percent-escapes, query strings and
 * the top-level split of a JSON array of events. All bounded; none
 * allocates. */
#include <string.h>

#include "server_int.h"

static int hex_value(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

tally_err srv_pct_decode(const char *s, size_t len, bool plus_is_space, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '%') {
            if (len - i < 3 || hex_value(s[i + 1]) < 0 || hex_value(s[i + 2]) < 0)
                return TALLY_PARSE;
            ch = (unsigned char)(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
            i += 2;
        } else if (ch == '+' && plus_is_space) {
            ch = ' ';
        }
        if (ch < 0x20 || ch == 0x7f)
            return TALLY_PARSE;
        if (o + 1 >= cap)
            return TALLY_TOO_LARGE;
        out[o++] = (char)ch;
    }
    if (cap == 0)
        return TALLY_TOO_LARGE;
    out[o] = '\0';
    return TALLY_OK;
}

static srv_qparam *find_param(srv_qparam *p, size_t n, const char *name, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(p[i].name) == len && memcmp(p[i].name, name, len) == 0)
            return &p[i];
    return NULL;
}

/* One "name=value" pair of a query string. */
static tally_err query_pair(const char *s, size_t len, srv_qparam *p, size_t n, const char **why)
{
    const char *eq = memchr(s, '=', len);
    if (!eq) {
        *why = "query parameter without '='";
        return TALLY_PARSE;
    }
    srv_qparam *slot = find_param(p, n, s, (size_t)(eq - s));
    if (!slot) {
        *why = "unknown query parameter";
        return TALLY_PARSE;
    }
    if (slot->seen) {
        *why = "repeated query parameter";
        return TALLY_PARSE;
    }
    slot->seen = true;
    tally_err e = srv_pct_decode(eq + 1, len - (size_t)(eq + 1 - s), true, slot->buf, slot->cap);
    if (e != TALLY_OK)
        *why = e == TALLY_TOO_LARGE ? "query parameter too long" : "bad escape in query";
    return e;
}

tally_err srv_query_parse(const char *q, size_t len, srv_qparam *p, size_t n, const char **why)
{
    *why = "";
    for (size_t i = 0; i < n; i++)
        p[i].seen = false;
    size_t at = 0;
    while (at < len) {
        const char *amp = memchr(q + at, '&', len - at);
        size_t end = amp ? (size_t)(amp - q) : len;
        if (end > at) { /* empty pairs ("a=1&&b=2", a trailing '&') are ignored */
            tally_err e = query_pair(q + at, end - at, p, n, why);
            if (e != TALLY_OK)
                return e;
        }
        at = end + 1;
    }
    return TALLY_OK;
}

/* ---- JSON array split ------------------------------------------------------ */

#define SPLIT_MAX_DEPTH 64

typedef struct scanner {
    const char *s;
    size_t len, at;
    const char *why;
} scanner;

static void skip_ws(scanner *sc)
{
    while (sc->at < sc->len && strchr(" \t\r\n", sc->s[sc->at]) && sc->s[sc->at])
        sc->at++;
}

/* Skips a string starting at its opening quote. */
static tally_err skip_string(scanner *sc)
{
    for (sc->at++; sc->at < sc->len; sc->at++) {
        char ch = sc->s[sc->at];
        if (ch == '\\')
            sc->at++;
        else if (ch == '"') {
            sc->at++;
            return TALLY_OK;
        }
    }
    sc->why = "unterminated string";
    return TALLY_PARSE;
}

/* Skips one element: up to the ',' or ']' that ends it at depth 0. */
static tally_err skip_element(scanner *sc)
{
    char stack[SPLIT_MAX_DEPTH];
    size_t depth = 0;
    while (sc->at < sc->len) {
        char ch = sc->s[sc->at];
        if (ch == '"') {
            if (skip_string(sc) != TALLY_OK)
                return TALLY_PARSE;
            continue;
        }
        if (depth == 0 && (ch == ',' || ch == ']'))
            return TALLY_OK;
        if (ch == '{' || ch == '[') {
            if (depth == SPLIT_MAX_DEPTH) {
                sc->why = "nested too deeply";
                return TALLY_PARSE;
            }
            stack[depth++] = ch == '{' ? '}' : ']';
        } else if (ch == '}' || ch == ']') {
            if (depth == 0 || stack[depth - 1] != ch) {
                sc->why = "unbalanced brackets";
                return TALLY_PARSE;
            }
            depth--;
        }
        sc->at++;
    }
    sc->why = "truncated array";
    return TALLY_PARSE;
}

/* The element's span, trailing whitespace excluded. */
static srv_span element_span(const scanner *sc, size_t start)
{
    size_t end = sc->at;
    while (end > start && strchr(" \t\r\n", sc->s[end - 1]) && sc->s[end - 1])
        end--;
    return (srv_span){start, end - start};
}

tally_err srv_json_array_split(const char *buf, size_t len, srv_span *out, size_t max, size_t *n,
                               const char **why)
{
    scanner sc = {buf, len, 0, ""};
    *n = 0;
    skip_ws(&sc);
    if (sc.at >= len || buf[sc.at] != '[') {
        *why = "body is not a JSON array";
        return TALLY_PARSE;
    }
    sc.at++;
    skip_ws(&sc);
    bool empty = sc.at < len && buf[sc.at] == ']';
    while (!empty) {
        skip_ws(&sc);
        size_t start = sc.at;
        if (skip_element(&sc) != TALLY_OK) {
            *why = sc.why;
            return TALLY_PARSE;
        }
        srv_span sp = element_span(&sc, start);
        if (sp.len == 0) {
            *why = "empty array element";
            return TALLY_PARSE;
        }
        if (*n == max) {
            *why = "too many events";
            return TALLY_TOO_LARGE;
        }
        out[(*n)++] = sp;
        if (buf[sc.at] == ']')
            break;
        sc.at++; /* the ',' */
    }
    sc.at++; /* the ']' */
    skip_ws(&sc);
    if (sc.at != len) {
        *why = "bytes after the array";
        return TALLY_PARSE;
    }
    return TALLY_OK;
}
