/* A small, strict, allocation-free JSON scanner (RFC 8259), internal to the
 * meter module. It is what tally_event_decode() reads events with.
 *
 * The scanner walks a buffer in place: the caller pulls an object's members
 * one at a time and either descends into a value or reads it whole. Reading
 * a value validates it completely (nested containers included) and hands back
 * where its text lies in the buffer; nothing is copied or allocated. String
 * contents are returned raw, escapes intact, and json_str_decode() unescapes
 * them on demand. Numbers are returned as their exact text.
 *
 * Strictness: whitespace is space, tab, CR and LF only; strings must be valid
 * UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF), with no raw
 * control characters, only the eight short escapes and \uXXXX, and no lone
 * surrogate in a \u escape; numbers follow the RFC grammar exactly (no leading
 * zeros, no "1.", no "+1"); literals are lower case; a value may be nested at
 * most JSON_MAX_DEPTH deep, the document's top value being at level 1 and
 * every value, scalars included, counting as a level. A document is one value
 * with only whitespace around it; the scanner does not look for duplicate
 * keys (its caller does, for the objects it reads).
 *
 * Errors are sticky: the first one is kept (a static message and the byte
 * offset where it was found) and every later call fails. */
#ifndef TALLY_METER_JSON_SCAN_H
#define TALLY_METER_JSON_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define JSON_MAX_DEPTH 32

typedef enum json_kind {
    JSON_ABSENT = 0, /* not read: used by callers for "no such member" */
    JSON_STRING,
    JSON_NUMBER,
    JSON_TRUE,
    JSON_FALSE,
    JSON_NULL,
    JSON_OBJECT,
    JSON_ARRAY,
} json_kind;

/* A value's place in the buffer. For a string, p/len are the bytes between
 * the quotes (escapes intact); for anything else the value's whole text. */
typedef struct json_val {
    const char *p;
    size_t len;
    json_kind type;
    bool escaped; /* string only: holds at least one backslash escape */
} json_val;

typedef struct json_scan {
    const char *start, *p, *end;
    const char *err; /* first error, a static string; NULL while there is none */
    size_t err_at;   /* its byte offset from start */
} json_scan;

/* Prepares to scan buf[0..len). buf is borrowed and need not be
 * NUL-terminated; nothing past buf + len is read. */
void json_scan_init(json_scan *s, const char *buf, size_t len);

/* Records an error found by the caller (say, a duplicate key) at `at`, a
 * place in the buffer, as if the scanner had found it; returns false. */
bool json_scan_fail(json_scan *s, const char *at, const char *msg);

/* Consumes the '{' of an object at nesting level `level`; its members are
 * then read with json_scan_member(), their values at level + 1. */
bool json_scan_object_begin(json_scan *s, int level);

/* Succeeds if only whitespace is left. */
bool json_scan_finish(json_scan *s);

/* Validates a whole document: one value, only whitespace around it. */
bool json_scan_document(json_scan *s, const char *buf, size_t len);

/* Unescapes the contents of a string value read by the scanner (so already
 * valid) into dst, writing at most cap bytes and no NUL. Returns the full
 * decoded length, which may exceed cap. */
size_t json_str_decode(const json_val *v, char *dst, size_t cap);

/* Whether two string values read by the scanner decode to the same bytes. */
bool json_str_equal(const json_val *a, const json_val *b);

/* ---- Inline fast paths ------------------------------------------------------
 * The functions below are the scanner's inner loop: inline so that a caller
 * walking an event pays no call per member. They handle compact ASCII JSON
 * themselves and hand anything else (white space, escapes, non-ASCII bytes,
 * numbers, containers, errors) to the out-of-line functions that follow. */

char json_scan_peek_slow(json_scan *s);
bool json_scan_string_slow(json_scan *s, const char *q, json_val *v);
bool json_scan_value_slow(json_scan *s, int level, json_val *v);
enum json_member_place { JSON_AFTER_MEMBER, JSON_BEFORE_KEY, JSON_AFTER_KEY };
int json_scan_member_error(json_scan *s, enum json_member_place where);

/* Skips whitespace and returns the next byte without consuming it, or 0 at
 * the end of the buffer or after an error. */
static inline char json_scan_peek(json_scan *s)
{
    if (s->p < s->end && (unsigned char)*s->p > ' ')
        return *s->p;
    return json_scan_peek_slow(s);
}

/* The high bit of each byte of w that a string scan must stop at: a quote, a
 * backslash, a control character or a non-ASCII byte. The lowest flagged
 * byte is always a true one (borrows only carry upwards); that is all a scan
 * uses. */
static inline uint64_t json_string_stops(uint64_t w)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t quote = w ^ (ones * '"'), bslash = w ^ (ones * '\\');
    uint64_t stops =
        ((quote - ones) & ~quote) | ((bslash - ones) & ~bslash) | ((w - ones * 0x20) & ~w) | w;
    return stops & highs;
}

/* Reads the string at s->p (a quote) into *v, eight bytes at a time. */
static inline bool json_scan_string(json_scan *s, json_val *v)
{
    const char *q = s->p + 1;
    while (s->end - q >= 8) {
        uint64_t w;
        memcpy(&w, q, 8);
        uint64_t stops = json_string_stops(w);
        if (stops) {
            q += (unsigned)__builtin_ctzll(stops) / 8;
            if (*q != '"')
                break;
            v->type = JSON_STRING;
            v->p = s->p + 1;
            v->len = (size_t)(q - v->p);
            v->escaped = false;
            s->p = q + 1;
            return true;
        }
        q += 8;
    }
    return json_scan_string_slow(s, q, v);
}

/* Reads one whole value at nesting level `level` into *v (v may be NULL). */
static inline bool json_scan_value(json_scan *s, int level, json_val *v)
{
    json_val unused;
    if (json_scan_peek(s) == '"' && level <= JSON_MAX_DEPTH)
        return json_scan_string(s, v ? v : &unused);
    return json_scan_value_slow(s, level, v);
}

/* Reads the next member key of the object being read, and the ':' after it.
 * *first must be true on the first call after json_scan_object_begin() (it
 * is cleared). Returns 1 with *key set (the value is next), 0 after the
 * closing '}', -1 on error. */
static inline int json_scan_member(json_scan *s, bool *first, json_val *key)
{
    char c = json_scan_peek(s);
    if (*first) {
        *first = false;
        if (c == '}') {
            s->p++;
            return 0;
        }
    } else if (c == ',') {
        s->p++;
        c = json_scan_peek(s);
    } else if (c == '}') {
        s->p++;
        return 0;
    } else {
        return json_scan_member_error(s, JSON_AFTER_MEMBER);
    }
    if (c != '"')
        return json_scan_member_error(s, JSON_BEFORE_KEY);
    if (!json_scan_string(s, key))
        return -1;
    if (json_scan_peek(s) != ':')
        return json_scan_member_error(s, JSON_AFTER_KEY);
    s->p++;
    return 1;
}

#endif
