/* UTF-8 (RFC 3629): the one definition of a valid sequence, for the
 * event decoder's scanner (meter/json_scan.c), the JSON writer
 * (tally_buf_json_str) and messages that quote a cut of what a client sent. */
#ifndef TALLY_UTF8_H
#define TALLY_UTF8_H

#include <stddef.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at q (lead byte >= 0x80) within
 * [q, end), or 0: no overlong forms, no surrogates, nothing past U+10FFFF.
 * Bytes are read in order and the first bad one stops it (a NUL is never
 * a continuation byte). */
static inline size_t tally_utf8_len(const unsigned char *q, const unsigned char *end)
{
    unsigned char c = q[0];
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
        n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else
        return 0;
    if ((size_t)(end - q) < n || q[1] < lo || q[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if ((q[i] & 0xC0) != 0x80)
            return 0;
    return n;
}

/* The length of s cut to at most max bytes without splitting a character
 * (for "%.*s" in a message that quotes a client's string). */
static inline int tally_utf8_cut(const char *s, size_t max)
{
    size_t n = strnlen(s, max);
    if (n == max) /* cut: back to the start of the character s[n] is in */
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    return (int)n;
}

#endif
