#include "tally/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

tally_err tally_buf_vprintf(tally_buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return TALLY_INVAL;
    tally_err e = reserve(b, (size_t)n);
    if (e)
        return e;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
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
            e = *p < 0x20 ? tally_buf_append(b, esc, 6) : tally_buf_append(b, p, 1);
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
