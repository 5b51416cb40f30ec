/* A strict, allocation-free JSON scanner (see json_scan.h): the out-of-line
 * parts. The common case, compact ASCII strings and member keys, is handled
 * by the inline functions in the header; this file has white space, escapes,
 * UTF-8, numbers, literals, containers and errors. Containers are skipped
 * without recursion, with their kinds kept as bits of one word
 * (JSON_MAX_DEPTH <= 64). */
#include <stdint.h>
#include <string.h>

#include "meter_int.h"
#include "tally/utf8.h"

_Static_assert(JSON_MAX_DEPTH <= 64, "container kinds are kept in one 64-bit word");

typedef const unsigned char *uptr;

bool json_scan_fail(json_scan *s, const char *at, const char *msg)
{
    if (!s->err) {
        s->err = msg;
        s->err_at = (size_t)(at - s->start);
    }
    s->p = s->end; /* sticky: every later read sees the end */
    return false;
}

static inline bool is_ws(unsigned char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static inline void skip_ws(json_scan *s)
{
    /* compact JSON has none: one test when the next byte is not a space */
    while (s->p < s->end && (unsigned char)*s->p <= ' ' && is_ws((unsigned char)*s->p))
        s->p++;
}

void json_scan_init(json_scan *s, const char *buf, size_t len)
{
    s->start = buf;
    s->p = buf;
    s->end = buf + len;
    s->err = NULL;
    s->err_at = 0;
}

char json_scan_peek_slow(json_scan *s)
{
    skip_ws(s);
    return s->p < s->end ? *s->p : 0;
}

static int hex_digit(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The code unit of "\uXXXX" at q (which points at the backslash), or -1. */
static long hex4(uptr q, uptr end)
{
    if (end - q < 6 || q[0] != '\\' || q[1] != 'u')
        return -1;
    long v = 0;
    for (int i = 2; i < 6; i++) {
        int d = hex_digit(q[i]);
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Length of the valid escape at q (a backslash), or 0 with *why set. */
static size_t escape_len(uptr q, uptr end, const char **why)
{
    if (end - q < 2) {
        *why = "unterminated string";
        return 0;
    }
    switch (q[1]) {
    case '"':
    case '\\':
    case '/':
    case 'b':
    case 'f':
    case 'n':
    case 'r':
    case 't':
        return 2;
    case 'u':
        break;
    default:
        *why = "invalid escape in string";
        return 0;
    }
    long u = hex4(q, end);
    if (u < 0) {
        *why = "invalid \\u escape in string";
        return 0;
    }
    if (u < 0xD800 || u > 0xDFFF)
        return 6;
    long lo = u <= 0xDBFF ? hex4(q + 6, end) : -1;
    if (lo < 0xDC00 || lo > 0xDFFF) {
        *why = "lone surrogate in \\u escape";
        return 0;
    }
    return 12;
}

/* Finishes the string that starts at s->p, from q, where the inline scan
 * stopped: at a byte that needs a closer look (an escape, a UTF-8 sequence,
 * a control character) or within eight bytes of the end of the buffer. No
 * escape lies before q. */
bool json_scan_string_slow(json_scan *s, const char *from, json_val *v)
{
    uptr q = (uptr)from, end = (uptr)s->end;
    bool escaped = false;
    const char *why = "unterminated string";
    for (;;) {
        if (q >= end)
            return json_scan_fail(s, (const char *)q, why);
        unsigned char c = *q;
        size_t n = 1;
        if (c == '"')
            break;
        if (c == '\\') {
            escaped = true;
            n = escape_len(q, end, &why);
        } else if (c < 0x20) {
            why = "control character in string";
            n = 0;
        } else if (c >= 0x80) {
            why = "invalid UTF-8 in string";
            n = tally_utf8_len(q, end);
        }
        if (n == 0)
            return json_scan_fail(s, (const char *)q, why);
        q += n;
    }
    v->type = JSON_STRING;
    v->p = s->p + 1;
    v->len = (size_t)((const char *)q - v->p);
    v->escaped = escaped;
    s->p = (const char *)q + 1;
    return true;
}

static uptr skip_digits(uptr q, uptr end)
{
    while (q < end && *q >= '0' && *q <= '9')
        q++;
    return q;
}

/* Reads the number at s->p into *v, exactly as the RFC 8259 grammar has it. */
static bool scan_number(json_scan *s, json_val *v)
{
    uptr q = (uptr)s->p, end = (uptr)s->end, d;
    if (*q == '-')
        q++;
    if (q >= end || *q < '0' || *q > '9')
        return json_scan_fail(s, (const char *)q, "digit expected after '-'");
    d = *q == '0' ? q + 1 : skip_digits(q, end);
    if (d < end && *q == '0' && *d >= '0' && *d <= '9')
        return json_scan_fail(s, (const char *)q, "leading zero in number");
    q = d;
    if (q < end && *q == '.') {
        d = skip_digits(q + 1, end);
        if (d == q + 1)
            return json_scan_fail(s, (const char *)d, "digit expected after '.' in number");
        q = d;
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < end && (*q == '+' || *q == '-'))
            q++;
        d = skip_digits(q, end);
        if (d == q)
            return json_scan_fail(s, (const char *)q, "digit expected in exponent");
        q = d;
    }
    if (v) {
        v->type = JSON_NUMBER;
        v->p = s->p;
        v->len = (size_t)((const char *)q - s->p);
        v->escaped = false;
    }
    s->p = (const char *)q;
    return true;
}

static bool scan_literal(json_scan *s, json_val *v)
{
    static const struct {
        const char *text;
        size_t len;
        json_kind type;
    } literals[] = {{"true", 4, JSON_TRUE}, {"false", 5, JSON_FALSE}, {"null", 4, JSON_NULL}};
    for (size_t i = 0; i < sizeof literals / sizeof literals[0]; i++) {
        size_t n = literals[i].len;
        if ((size_t)(s->end - s->p) >= n && memcmp(s->p, literals[i].text, n) == 0) {
            if (v) {
                v->type = literals[i].type;
                v->p = s->p;
                v->len = n;
                v->escaped = false;
            }
            s->p += n;
            return true;
        }
    }
    return json_scan_fail(s, s->p, "invalid value");
}

/* Reads a scalar (the byte at s->p is not a bracket). */
static bool scan_scalar(json_scan *s, json_val *v)
{
    json_val unused;
    char c = *s->p;
    if (c == '"')
        return json_scan_string(s, v ? v : &unused);
    if (c == '-' || (c >= '0' && c <= '9'))
        return scan_number(s, v);
    return scan_literal(s, v);
}

/* After a value inside a container: consumes ',' (true in *more) or the
 * closer matching the innermost container. */
static bool after_value(json_scan *s, bool in_object, bool *more)
{
    char c = json_scan_peek(s);
    if (c == ',' || c == (in_object ? '}' : ']')) {
        s->p++;
        *more = c == ',';
        return true;
    }
    if (s->p >= s->end)
        return json_scan_fail(s, s->p, in_object ? "unterminated object" : "unterminated array");
    return json_scan_fail(
        s, s->p, in_object ? "expected ',' or '}' in object" : "expected ',' or ']' in array");
}

int json_scan_member_error(json_scan *s, enum json_member_place where)
{
    static const char *const what[] = {
        [JSON_AFTER_MEMBER] = "expected ',' or '}' in object",
        [JSON_BEFORE_KEY] = "expected a string key",
        [JSON_AFTER_KEY] = "expected ':' after key",
    };
    json_scan_fail(s, s->p, s->p < s->end ? what[where] : "unterminated object");
    return -1;
}

/* Reads an object key and its ':' (whitespace before the key skipped). */
static bool scan_key(json_scan *s)
{
    json_val key;
    if (json_scan_peek(s) != '"')
        return json_scan_member_error(s, JSON_BEFORE_KEY) == 0;
    if (!json_scan_string(s, &key))
        return false;
    if (json_scan_peek(s) != ':')
        return json_scan_member_error(s, JSON_AFTER_KEY) == 0;
    s->p++;
    return true;
}

/* Validates and skips the container at s->p (a bracket) at nesting level
 * `level`, iteratively. Bit i of `objects` says whether the container i levels
 * below the outermost one is an object. */
static bool skip_container(json_scan *s, int level)
{
    uint64_t objects = 0;
    int depth = 0; /* containers open */
    bool more;
    for (;;) {
        /* s->p is at an opening bracket at level + depth */
        if (level + depth > JSON_MAX_DEPTH)
            return json_scan_fail(s, s->p, "nesting too deep");
        bool obj = *s->p == '{';
        objects = obj ? objects | (1ull << depth) : objects & ~(1ull << depth);
        depth++;
        s->p++;
        char c = json_scan_peek(s);
        more = c != (obj ? '}' : ']');
        if (!more)
            s->p++;
        for (;;) {
            while (!more) { /* the innermost container closed */
                if (--depth == 0)
                    return true;
                if (!after_value(s, (objects >> (depth - 1)) & 1, &more))
                    return false;
            }
            if (((objects >> (depth - 1)) & 1) && !scan_key(s))
                return false;
            c = json_scan_peek(s);
            if (c == '{' || c == '[')
                break; /* descend */
            if (c == 0)
                return json_scan_fail(s, s->p, "value expected");
            if (level + depth > JSON_MAX_DEPTH)
                return json_scan_fail(s, s->p, "nesting too deep");
            if (!scan_scalar(s, NULL) || !after_value(s, (objects >> (depth - 1)) & 1, &more))
                return false;
        }
    }
}

bool json_scan_value_slow(json_scan *s, int level, json_val *v)
{
    char c = json_scan_peek(s);
    if (c == 0)
        return json_scan_fail(s, s->p, "value expected");
    if (level > JSON_MAX_DEPTH)
        return json_scan_fail(s, s->p, "nesting too deep");
    if (c != '{' && c != '[')
        return scan_scalar(s, v);
    const char *start = s->p;
    if (!skip_container(s, level))
        return false;
    if (v) {
        v->type = c == '{' ? JSON_OBJECT : JSON_ARRAY;
        v->p = start;
        v->len = (size_t)(s->p - start);
        v->escaped = false;
    }
    return true;
}

bool json_scan_object_begin(json_scan *s, int level)
{
    if (json_scan_peek(s) != '{')
        return json_scan_fail(s, s->p, "expected an object");
    if (level > JSON_MAX_DEPTH)
        return json_scan_fail(s, s->p, "nesting too deep");
    s->p++;
    return true;
}

bool json_scan_finish(json_scan *s)
{
    if (s->err)
        return false;
    skip_ws(s);
    return s->p == s->end || json_scan_fail(s, s->p, "unexpected data after the document");
}

bool json_scan_document(json_scan *s, const char *buf, size_t len)
{
    json_scan_init(s, buf, len);
    return json_scan_value(s, 1, NULL) && json_scan_finish(s);
}

/* Decodes the next character of a valid string's raw bytes at *q into out
 * (1..4 bytes of UTF-8), advancing *q. */
static size_t next_char(uptr *q, unsigned char out[4])
{
    uptr p = *q;
    if (*p != '\\') {
        out[0] = *p;
        *q = p + 1;
        return 1;
    }
    static const char short_from[] = "\"\\/bfnrt", short_to[] = "\"\\/\b\f\n\r\t";
    const char *hit = p[1] != 'u' ? memchr(short_from, p[1], 8) : NULL;
    if (hit) {
        out[0] = (unsigned char)short_to[hit - short_from];
        *q = p + 2;
        return 1;
    }
    unsigned long cp = (unsigned long)hex4(p, p + 6);
    *q = p + 6;
    if (cp >= 0xD800 && cp <= 0xDBFF) { /* validated: a low surrogate follows */
        cp = 0x10000 + ((cp - 0xD800) << 10) + ((unsigned long)hex4(p + 6, p + 12) - 0xDC00);
        *q = p + 12;
    }
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | cp >> 6);
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | cp >> 12);
        out[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | cp >> 18);
    out[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t json_str_decode(const json_val *v, char *dst, size_t cap)
{
    if (!v->escaped) {
        memcpy(dst, v->p, v->len < cap ? v->len : cap);
        return v->len;
    }
    uptr q = (uptr)v->p, end = q + v->len;
    size_t n = 0;
    unsigned char ch[4];
    while (q < end) {
        size_t k = next_char(&q, ch);
        for (size_t i = 0; i < k; i++, n++)
            if (n < cap)
                dst[n] = (char)ch[i];
    }
    return n;
}

/* The decoded bytes of a string value, one at a time. */
typedef struct str_reader {
    uptr p, end;
    unsigned char buf[4];
    size_t at, n; /* buf[at..n) not yet handed out */
} str_reader;

static bool str_next(str_reader *r, unsigned char *c)
{
    if (r->at == r->n) {
        if (r->p >= r->end)
            return false;
        r->n = next_char(&r->p, r->buf);
        r->at = 0;
    }
    *c = r->buf[r->at++];
    return true;
}

bool json_str_equal(const json_val *a, const json_val *b)
{
    if (!a->escaped && !b->escaped)
        return a->len == b->len && memcmp(a->p, b->p, a->len) == 0;
    str_reader ra = {(uptr)a->p, (uptr)a->p + a->len, {0}, 0, 0};
    str_reader rb = {(uptr)b->p, (uptr)b->p + b->len, {0}, 0, 0};
    unsigned char ca = 0, cb = 0;
    for (;;) {
        bool more_a = str_next(&ra, &ca), more_b = str_next(&rb, &cb);
        if (more_a != more_b || (more_a && ca != cb))
            return false;
        if (!more_a)
            return true;
    }
}
