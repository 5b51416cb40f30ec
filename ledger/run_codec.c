/* Records of a dedupe window's content (run_codec_int.h has the format). */
#include <stdbool.h>
#include <string.h>

#include "run_codec_int.h"

#define R_NEW      14
#define R_MASK     0x0f
#define TIME_FLAG  0x10
#define GROUP2     0x80 /* two short records; with 0x40 as well, three */
#define GROUP3     0xc0
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
    if (fresh) { /* its step until it has one: the last entry's (a host's
                  * instances report at one cadence) */
        s->hash[0] = hash;
        s->step[0] = s->n > 1 ? s->step[1] : 0;
    } else {
        s->step[0] = t - s->last_t[0];
    }
    s->last_t[0] = t;
    s->prev_t = t;
}

/* What coding r against s would be: the entry (j == s->n: a new one) and
 * the time against the predicted one. */
typedef struct look {
    uint32_t j;
    bool fresh;
    uint64_t hash, t, delta;
} look;

static look look_at(const rc_state *s, const rc_rec *r)
{
    look k = {.hash = r->hash & RC_HASH_MASK, .t = (uint64_t)r->t};
    while (k.j < s->n && s->hash[k.j] != k.hash)
        k.j++;
    k.fresh = k.j == s->n;
    k.delta = k.t - predict(s, k.j);
    return k;
}

static void apply(rc_state *s, const look *k)
{
    to_front(s, k->j);
    used(s, k->fresh, k->hash, k->t);
}

/* A record that can share a header: an entry below `below`, on time. */
static bool is_short(const look *k, uint32_t below)
{
    return !k->fresh && k->delta == 0 && k->j < below;
}

static size_t put_hash(uint8_t *out, uint64_t hash)
{
    for (int i = HASH_BYTES - 1; i >= 0; i--)
        *out++ = (uint8_t)(hash >> (8 * i));
    return HASH_BYTES;
}

/* Short records from recs[0]: one, two or three, coded into *out. */
static size_t encode_short(rc_state *s, const rc_rec *recs, size_t n, look a, uint8_t *out)
{
    apply(s, &a);
    look b = n > 1 ? look_at(s, &recs[1]) : (look){.fresh = true};
    if (!is_short(&b, 8)) {
        *out = (uint8_t)a.j;
        return 1;
    }
    apply(s, &b);
    look c = n > 2 && a.j < 4 && b.j < 4 ? look_at(s, &recs[2]) : (look){.fresh = true};
    if (!is_short(&c, 4)) {
        *out = (uint8_t)(GROUP2 | a.j | b.j << 3);
        return 2;
    }
    apply(s, &c);
    *out = (uint8_t)(GROUP3 | a.j | b.j << 2 | c.j << 4);
    return 3;
}

size_t rc_encode_head(rc_state *s, const rc_rec *recs, size_t n, uint8_t *out, size_t *used)
{
    look a = look_at(s, &recs[0]);
    if (is_short(&a, 8)) {
        *used = encode_short(s, recs, n, a, out);
        return 1;
    }
    size_t len = 1, i = 1;
    out[0] = (uint8_t)(a.fresh ? R_NEW : a.j);
    if (a.fresh)
        len += put_hash(out + len, a.hash);
    apply(s, &a);
    if (a.fresh && !a.delta) { /* new entries at their predicted times share it */
        uint8_t g = 0;
        for (look b; g < 3 && i < n && (b = look_at(s, &recs[i])).fresh && !b.delta; g++, i++) {
            len += put_hash(out + len, b.hash);
            apply(s, &b);
        }
        out[0] |= (uint8_t)(g << 5);
    } else if (a.delta) {
        out[0] |= TIME_FLAG;
        uint64_t z = a.delta << 1 ^ (uint64_t)((int64_t)a.delta >> 63); /* zigzag */
        for (; z >= 0x80; z >>= 7)
            out[len++] = (uint8_t)(z | 0x80);
        out[len++] = (uint8_t)z;
    }
    *used = i;
    return len;
}

size_t rc_encode_from(rc_state *s, const rc_rec *recs, size_t n, uint8_t *out)
{
    size_t len = 0;
    for (size_t i = 0, used; i < n; i += used)
        len += rc_encode_head(s, recs + i, n - i, out + len, &used);
    return len;
}

size_t rc_encode(const rc_rec *recs, size_t n, uint8_t *out)
{
    rc_state s;
    rc_init(&s);
    return rc_encode_from(&s, recs, n, out);
}

/* A record of entry j at delta from its predicted time (false if the list
 * does not hold it). */
static bool decode_old(rc_state *s, uint32_t j, uint64_t delta, rc_rec *r)
{
    if (j >= s->n)
        return false;
    look k = {.j = j, .hash = s->hash[j], .t = predict(s, j) + delta};
    apply(s, &k);
    *r = (rc_rec){k.hash, (int64_t)k.t};
    return true;
}

/* A new entry whose 6 bytes are at p: false if the list holds it (a coder
 * refers to it instead). */
static bool decode_new(rc_state *s, const uint8_t *p, uint64_t delta, rc_rec *r)
{
    look k = {.j = s->n, .fresh = true};
    for (int i = 0; i < HASH_BYTES; i++)
        k.hash = k.hash << 8 | p[i];
    for (uint32_t i = 0; i < s->n; i++)
        if (s->hash[i] == k.hash)
            return false;
    k.t = predict(s, s->n) + delta;
    apply(s, &k);
    *r = (rc_rec){k.hash, (int64_t)k.t};
    return true;
}

/* The zigzag LEB128 time at p (at most len bytes) into *delta; returns the
 * bytes it took, 0 if cut short, past 64 bits, not the shortest form, or 0
 * (a zero step is coded by leaving the flag out). */
static size_t decode_time(const uint8_t *p, size_t len, uint64_t *delta)
{
    uint64_t z = 0;
    size_t n = 0;
    for (int shift = 0;; shift += 7) {
        if (n == len || shift > 63)
            return 0;
        uint8_t c = p[n++];
        if (shift == 63 && c > 1)
            return 0;
        z |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            if (c == 0 && shift > 0)
                return 0;
            break;
        }
    }
    if (z == 0)
        return 0;
    *delta = z >> 1 ^ (0 - (z & 1));
    return n;
}

size_t rc_decode(rc_state *s, const uint8_t *p, size_t len, rc_rec out[RC_GROUP_MAX], size_t *n_out)
{
    *n_out = 0;
    if (len < 1)
        return 0;
    uint8_t h = p[0];
    if (h & GROUP2) { /* two or three short records */
        bool three = (h & GROUP3) == GROUP3;
        uint32_t js[3] = {three ? h & 3u : h & 7u, three ? h >> 2 & 3u : h >> 3 & 7u, h >> 4 & 3u};
        for (size_t i = 0; i < (three ? 3u : 2u); i++)
            if (!decode_old(s, js[i], 0, &out[(*n_out)++]))
                return 0;
        return 1;
    }
    uint32_t r = h & R_MASK, g = h >> 5 & 3;
    bool timed = h & TIME_FLAG;
    if (r == 15 || (g && (r != R_NEW || timed)))
        return 0;
    size_t n = 1;
    uint64_t delta = 0;
    size_t hash_at = n;
    if (r == R_NEW) {
        if (len - n < HASH_BYTES * (1 + g))
            return 0;
        n += HASH_BYTES * (1 + g);
    }
    if (timed) {
        size_t k = decode_time(p + n, len - n, &delta);
        if (k == 0)
            return 0;
        n += k;
    }
    if (r != R_NEW) {
        *n_out = 1;
        return decode_old(s, r, delta, &out[0]) ? n : 0;
    }
    for (uint32_t i = 0; i <= g; i++)
        if (!decode_new(s, p + hash_at + HASH_BYTES * i, i ? 0 : delta, &out[(*n_out)++]))
            return 0;
    return n;
}
