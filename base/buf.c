#include "tally/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tally/utf8.h"

void tally_buf_init(tally_buf *b, size_t cap)
{
    b->data = NULL;
    b->len = 0;
    b->alloc = 0;
    b->cap = cap ? cap : TALLY_BUF_DEFAULT_CAP;
}

void tally_buf_release(tally_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->alloc = 0;
}

void tally_buf_reset(tally_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

static tally_err reserve(tally_buf *b, size_t extra)
{
    /* len + extra + 1 (the NUL) must not wrap, whatever the cap */
    if (extra > b->cap || b->len > b->cap - extra || b->len + extra == SIZE_MAX)
        return TALLY_TOO_LARGE;
    size_t need = b->len + extra + 1;
    if (need <= b->alloc)
        return TALLY_OK;
    size_t n = b->alloc ? b->alloc : 256;
    while (n < need)
        n = n > SIZE_MAX / 2 ? need : n * 2; /* doubling must not wrap to 0 */
    char *p = realloc(b->data, n);
    if (!p)
        return TALLY_NOMEM;
    b->data = p;
    b->alloc = n;
    return TALLY_OK;
}

tally_err tally_buf_append(tally_buf *b, const void *data, size_t len)
{
    tally_err e = reserve(b, len);
    if (e)
        return e;
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return TALLY_OK;
}

tally_err tally_buf_puts(tally_buf *b, const char *s)
{
    return tally_buf_append(b, s, strlen(s));
}

/* Marks fmt as a printf format passed on with a va_list, so that clang's
 * -Wformat-nonliteral accepts the vsnprintf calls below. */
__attribute__((format(printf, 2, 0))) tally_err tally_buf_vprintf(tally_buf *b, const char *fmt,
                                                                  va_list ap);

/* The escapers append piece by piece; on failure they drop what they had
 * appended, so that the buffer is left as it was. */
static tally_err undo_on_error(tally_buf *b, size_t len, tally_err e)
{
    if (e && b->data) {
        b->len = len;
        b->data[len] = '\0';
    }
    return e;
}

/* The conversions the plain formatter below handles, with no flags, width
 * or precision; any other format goes to vsnprintf. */
typedef enum { PC_S, PC_D, PC_LD, PC_LLD, PC_U, PC_LU, PC_LLU, PC_ZU, PC_PCT } plain_kind;
static const struct {
    char text[4];
    plain_kind kind;
} plain_convs[] = {{"s", PC_S},   {"d", PC_D},     {"ld", PC_LD}, {"lld", PC_LLD}, {"u", PC_U},
                   {"lu", PC_LU}, {"llu", PC_LLU}, {"zu", PC_ZU}, {"%", PC_PCT}};

/* The conversion that follows a '%' at p; its length in *len. */
static bool plain_conv(const char *p, plain_kind *kind, size_t *len)
{
    for (size_t i = 0; i < sizeof plain_convs / sizeof *plain_convs; i++) {
        size_t n = strlen(plain_convs[i].text);
        if (strncmp(p, plain_convs[i].text, n) == 0) {
            *kind = plain_convs[i].kind;
            *len = n;
            return true;
        }
    }
    return false;
}

size_t tally_dec_u64(char *out, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do
        tmp[n++] = (char)('0' + v % 10);
    while (v /= 10);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

size_t tally_dec_i64(char *out, int64_t v)
{
    if (v >= 0)
        return tally_dec_u64(out, (uint64_t)v);
    out[0] = '-'; /* the magnitude of INT64_MIN fits uint64_t */
    return 1 + tally_dec_u64(out + 1, 0 - (uint64_t)v);
}

size_t tally_hex64(char *out, uint64_t v)
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--, v >>= 4)
        out[i] = digits[v & 15];
    return 16;
}

static tally_err append_digits(tally_buf *b, unsigned long long v)
{
    char out[24];
    return tally_buf_append(b, out, tally_dec_u64(out, v));
}

static tally_err append_signed(tally_buf *b, long long v)
{
    char out[24];
    return tally_buf_append(b, out, tally_dec_i64(out, v));
}

static tally_err plain_arg(tally_buf *b, plain_kind k, va_list *ap)
{
    switch (k) {
    case PC_S: {
        const char *s = va_arg(*ap, const char *);
        return tally_buf_puts(b, s ? s : "(null)");
    }
    case PC_D:
        return append_signed(b, va_arg(*ap, int));
    case PC_LD:
        return append_signed(b, va_arg(*ap, long));
    case PC_LLD:
        return append_signed(b, va_arg(*ap, long long));
    case PC_U:
        return append_digits(b, va_arg(*ap, unsigned));
    case PC_LU:
        return append_digits(b, va_arg(*ap, unsigned long));
    case PC_LLU:
        return append_digits(b, va_arg(*ap, unsigned long long));
    case PC_ZU:
        return append_digits(b, va_arg(*ap, size_t));
    case PC_PCT:
        break;
    }
    return tally_buf_append(b, "%", 1);
}

/* printf for the plain conversions, without stdio: the text's pieces are
 * appended in turn. At the first conversion that is not plain, *plain is
 * false and the buffer is as it was (ap unused: vsnprintf takes over).
 * On error the buffer is left as it was. */
static tally_err plain_vprintf(tally_buf *b, const char *fmt, va_list ap, bool *plain)
{
    size_t len0 = b->len;
    va_list aq;
    va_copy(aq, ap);
    tally_err e = TALLY_OK;
    *plain = true;
    for (const char *p = fmt; !e && *p;) {
        const char *pct = strchr(p, '%');
        size_t lit = pct ? (size_t)(pct - p) : strlen(p);
        if (lit)
            e = tally_buf_append(b, p, lit);
        if (e || !pct)
            break;
        plain_kind k;
        size_t n;
        if (!plain_conv(pct + 1, &k, &n)) {
            *plain = false;
            break;
        }
        e = plain_arg(b, k, &aq);
        p = pct + 1 + n;
    }
    va_end(aq);
    if (!*plain && b->data) { /* what it appended goes */
        b->len = len0;
        b->data[len0] = '\0';
    }
    return undo_on_error(b, len0, e);
}

/* Formats into the room the buffer already has; only when the text does not
 * fit is it formatted again into a larger allocation (so most calls format
 * once). On error the buffer is left as it was. */
tally_err tally_buf_vprintf(tally_buf *b, const char *fmt, va_list ap)
{
    bool plain;
    tally_err e = plain_vprintf(b, fmt, ap, &plain);
    if (plain || e)
        return e;
    size_t room = b->data ? b->alloc - b->len : 0; /* includes the NUL's byte */
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(room ? b->data + b->len : NULL, room, fmt, ap2);
    va_end(ap2);
    e = n < 0 ? TALLY_INVAL : TALLY_OK;
    if (!e && (size_t)n < room)
        e = reserve(b, (size_t)n); /* fits; this only checks the cap */
    else if (!e) {
        e = reserve(b, (size_t)n);
        if (!e)
            vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    }
    if (e) {
        if (b->data)
            b->data[b->len] = '\0';
        return e;
    }
    b->len += (size_t)n;
    return TALLY_OK;
}

tally_err tally_buf_printf(tally_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tally_err e = tally_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return e;
}

tally_err tally_buf_json_str(tally_buf *b, const char *s)
{
    size_t len0 = b->len;
    static const char hex[] = "0123456789abcdef";
    tally_err e = tally_buf_append(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; !e && *p; p++) {
        char esc[6] = {'\\', 'u', '0', '0', hex[*p >> 4], hex[*p & 15]};
        switch (*p) {
        case '"':
            e = tally_buf_append(b, "\\\"", 2);
            break;
        case '\\':
            e = tally_buf_append(b, "\\\\", 2);
            break;
        case '\n':
            e = tally_buf_append(b, "\\n", 2);
            break;
        case '\r':
            e = tally_buf_append(b, "\\r", 2);
            break;
        case '\t':
            e = tally_buf_append(b, "\\t", 2);
            break;
        default:
            if (*p < 0x20) {
                e = tally_buf_append(b, esc, 6);
            } else if (*p < 0x80) {
                e = tally_buf_append(b, p, 1);
            } else { /* a whole character, or U+FFFD for a byte that is not one */
                size_t n = tally_utf8_len(p, p + strnlen((const char *)p, 4));
                e = n ? tally_buf_append(b, p, n) : tally_buf_append(b, "\xEF\xBF\xBD", 3);
                p += n ? n - 1 : 0;
            }
        }
    }
    return undo_on_error(b, len0, e ? e : tally_buf_append(b, "\"", 1));
}

tally_err tally_buf_csv_field(tally_buf *b, const char *s)
{
    size_t len0 = b->len;
    if (!strpbrk(s, ",\"\r\n"))
        return tally_buf_puts(b, s);
    tally_err e = tally_buf_append(b, "\"", 1);
    for (const char *p = s; !e && *p; p++)
        e = *p == '"' ? tally_buf_append(b, "\"\"", 2) : tally_buf_append(b, p, 1);
    return undo_on_error(b, len0, e ? e : tally_buf_append(b, "\"", 1));
}

tally_err tally_buf_html(tally_buf *b, const char *s)
{
    size_t len0 = b->len;
    tally_err e = tally_buf_append(b, "", 0); /* NUL-terminated even when s is "" */
    for (const char *p = s; !e && *p; p++) {
        switch (*p) {
        case '&':
            e = tally_buf_puts(b, "&amp;");
            break;
        case '<':
            e = tally_buf_puts(b, "&lt;");
            break;
        case '>':
            e = tally_buf_puts(b, "&gt;");
            break;
        case '"':
            e = tally_buf_puts(b, "&quot;");
            break;
        case '\'':
            e = tally_buf_puts(b, "&#39;");
            break;
        default:
            e = tally_buf_append(b, p, 1);
        }
    }
    return undo_on_error(b, len0, e);
}

tally_err tally_fmt(char *buf, size_t cap, const char *fmt, ...)
{
    if (cap == 0)
        return TALLY_INVAL;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < cap)
        return TALLY_OK;
    buf[0] = '\0';
    return n < 0 ? TALLY_INVAL : TALLY_TOO_LARGE;
}
