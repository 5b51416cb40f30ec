/* A growable byte buffer with a size cap (curl's dynbuf, git's strbuf).
 *
 * Always NUL-terminated after any successful call, so ->data can be used as
 * a C string when no NUL bytes were appended. Appends past the cap fail with
 * TALLY_TOO_LARGE and leave the buffer as it was. */
#ifndef TALLY_BUF_H
#define TALLY_BUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "tally/err.h"

typedef struct tally_buf {
    char *data; /* NULL until the first append */
    size_t len;
    size_t alloc;
    size_t cap; /* the most bytes it may hold, not counting the NUL */
} tally_buf;

#define TALLY_BUF_DEFAULT_CAP ((size_t)64 << 20)

/* Prepares caller memory; cap 0 means TALLY_BUF_DEFAULT_CAP. */
void tally_buf_init(tally_buf *b, size_t cap);
/* Frees the contents; b can be initialised again. */
void tally_buf_release(tally_buf *b);
/* Empties the buffer, keeping its memory. */
void tally_buf_reset(tally_buf *b);
TALLY_MUST_CHECK tally_err tally_buf_append(tally_buf *b, const void *data, size_t len);
TALLY_MUST_CHECK tally_err tally_buf_puts(tally_buf *b, const char *s);
TALLY_MUST_CHECK tally_err tally_buf_printf(tally_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
TALLY_MUST_CHECK tally_err tally_buf_vprintf(tally_buf *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
/* Appends s as a JSON string literal, quotes included, escaping as RFC 8259
 * requires (control characters as \u00XX). A byte that does not begin a
 * valid UTF-8 character becomes U+FFFD, so the result is always valid
 * JSON (what Tally stores was checked on the way in; this is for what a
 * message quotes). */
TALLY_MUST_CHECK tally_err tally_buf_json_str(tally_buf *b, const char *s);
/* Appends s as one CSV field (RFC 4180: quoted when it holds , " CR or LF). */
TALLY_MUST_CHECK tally_err tally_buf_csv_field(tally_buf *b, const char *s);
/* Appends s with the five HTML special characters escaped. */
TALLY_MUST_CHECK tally_err tally_buf_html(tally_buf *b, const char *s);

/* Digits for the hot paths that cannot afford printf. Each writes at out
 * (no NUL) and returns the number of bytes written: tally_dec_u64 at most
 * 20, tally_dec_i64 at most 20 and a '-', tally_hex64 exactly 16
 * (lower-case, zero-padded, as "%016llx"). */
size_t tally_dec_u64(char *out, uint64_t v);
size_t tally_dec_i64(char *out, int64_t v);
size_t tally_hex64(char *out, uint64_t v);

/* snprintf into a fixed buffer that refuses to cut, as git's xsnprintf
 * refuses (but returns instead of dying): for names, keys, paths and SQL,
 * where a shortened value would mean something else. On success buf holds
 * the whole text. Errors: TALLY_TOO_LARGE (it does not fit in cap - 1
 * bytes), TALLY_INVAL (cap is 0 or the format fails); buf is then "" (when
 * cap > 0), never a truncated value. Diagnostic messages may keep plain
 * snprintf. */
TALLY_MUST_CHECK tally_err tally_fmt(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
