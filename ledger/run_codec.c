/* Records of a dedupe window's content (run_codec_int.h has the format). */
#include <stdbool.h>
#include <string.h>

#include "run_codec_int.h"

#define R_NEW      14
#define R_MASK     0x0f
#define TIME_FLAG  0x10
#define RESERVED   0xe0
#define HASH_BYTES 6

void rc_init(rc_state *s)
{
    memset(s, 0, sizeof *s);
}

/* Moves entry j to the front, or (j == s->n) makes room for a new one
 * there, pushing the oldest out when the list is full. */
static void to_front(rc_state *s, uint32_t j)
{
    uint64_t h = 0, t = 0, step = 0;
    if (j < s->n) {
        h = s->hash[j];
        t = s->last_t[j];
        step = s->step[j];
    } else if (s->n < RC_MRU) {
        s->n++;
    }
    if (j >= RC_MRU)
        j = RC_MRU - 1;
    for (; j > 0; j--) { /* a loop, not memmove: j is small and usually 0 to 3 */
        s->hash[j] = s->hash[j - 1];
        s->last_t[j] = s->last_t[j - 1];
        s->step[j] = s->step[j - 1];
    }
    s->hash[0] = h;
    s->last_t[0] = t;
    s->step[0] = step;
}

/* The time predicted for entry j (j == s->n: a new one). */
static uint64_t predict(const rc_state *s, uint32_t j)
{
    return j < s->n ? s->last_t[j] + s->step[j] : s->prev_t;
}

/* After the entry used was moved to the front: it was used at t. */
static void used(rc_state *s, bool fresh, uint64_t hash, uint64_t t)
{
    if (fresh) {
        s->hash[0] = hash;
        s->step[0] = 0;
    } else {
        s->step[0] = t - s->last_t[0];
    }
    s->last_t[0] = t;
    s->prev_t = t;
}

size_t rc_encode(rc_state *s, const rc_rec *r, uint8_t *out)
{
    uint64_t hash = r->hash & RC_HASH_MASK;
    uint32_t j = 0;
    while (j < s->n && s->hash[j] != hash)
        j++;
    uint64_t t = (uint64_t)r->t;
    uint64_t delta = t - predict(s, j);
    size_t n = 1;
    out[0] = (uint8_t)(j < s->n ? j : R_NEW);
    if (j == s->n)
        for (int i = HASH_BYTES - 1; i >= 0; i--)
            out[n++] = (uint8_t)(hash >> (8 * i));
    if (delta) {
        out[0] |= TIME_FLAG;
        uint64_t z = delta << 1 ^ (uint64_t)((int64_t)delta >> 63); /* zigzag */
        for (; z >= 0x80; z >>= 7)
            out[n++] = (uint8_t)(z | 0x80);
        out[n++] = (uint8_t)z;
    }
    bool fresh = j == s->n;
    to_front(s, j);
    used(s, fresh, hash, t);
    return n;
}

size_t rc_decode(rc_state *s, const uint8_t *p, size_t len, rc_rec *r)
{
    if (len < 1 || p[0] & RESERVED)
        return 0;
    uint32_t j = p[0] & R_MASK;
    size_t n = 1;
    bool fresh = j == R_NEW;
    if (fresh) {
        j = s->n;
        if (len < 1 + HASH_BYTES)
            return 0;
        r->hash = 0;
        for (int i = 0; i < HASH_BYTES; i++)
            r->hash = r->hash << 8 | p[n++];
        for (uint32_t i = 0; i < s->n; i++)
            if (s->hash[i] == r->hash)
                return 0; /* a coder refers to an entry it holds */
    } else if (j >= s->n) {
        return 0; /* 15, or an entry the list does not hold */
    } else {
        r->hash = s->hash[j];
    }
    uint64_t z = 0;
    if (p[0] & TIME_FLAG) {
        int shift = 0;
        for (;; shift += 7) {
            if (n == len || shift > 63)
                return 0;
            uint8_t c = p[n++];
            if (shift == 63 && c > 1)
                return 0;
            z |= (uint64_t)(c & 0x7f) << shift;
            if (!(c & 0x80)) {
                if (c == 0 && shift > 0)
                    return 0; /* not the shortest form */
                break;
            }
        }
        if (z == 0)
            return 0; /* a zero step is coded by leaving the flag out */
    }
    uint64_t delta = z >> 1 ^ (0 - (z & 1));
    uint64_t t = predict(s, j) + delta;
    to_front(s, j);
    used(s, fresh, r->hash, t);
    r->t = (int64_t)t;
    return n;
}
