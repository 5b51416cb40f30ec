/* An event's identity and content hashes (tally/event.h).
 *
 * The key, the fingerprint and the content hash without the time are stored
 * in the ledger, so their input layout and seeds are part of the ledger
 * format and must never change. The fingerprint is what a row of the
 * dedupe table keeps; the hash without the time is what a dedupe window
 * keeps per id (ledger/run_codec.c), beside the time itself. */
#include <string.h>

#include "tally/event.h"

#define KEY_SEED         0x6b65793a736f6964ull /* "key:soid" */
#define FINGERPRINT_SEED 0x667072696e743a31ull /* "fprint:1" */
#define UNTIMED_SEED     0x756e74696d65643aull /* "untimed:" */

/* Appends v little-endian, whatever the machine. */
static size_t put_u64(unsigned char *p, uint64_t v)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(p, &v, 8);
#else
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
#endif
    return 8;
}

/* Appends a string of the field s (cap bytes, NUL-terminated within them)
 * with a one-byte length prefix. */
static size_t put_str(unsigned char *p, const char *s, size_t cap)
{
    size_t n = strnlen(s, cap - 1);
    p[0] = (unsigned char)n;
    memcpy(p + 1, s, n);
    return n + 1;
}

/* Packs every decoded field but id, source and key into buf, the time
 * (with_time) after the first 3 bytes; returns the length. */
static size_t pack_content(const tally_event *ev, bool with_time, unsigned char *buf)
{
    buf[0] = (unsigned char)ev->meter;
    buf[1] = (unsigned char)ev->pricing;
    buf[2] = ev->migration;
    size_t n = 3;
    if (with_time)
        n += put_u64(buf + n, (uint64_t)ev->time_s);
    n += put_u64(buf + n, (uint64_t)ev->seconds);
    n += put_u64(buf + n, (uint64_t)ev->weight);
    n += put_str(buf + n, ev->account, sizeof ev->account);
    n += put_str(buf + n, ev->resource, sizeof ev->resource);
    n += put_str(buf + n, ev->dim, sizeof ev->dim);
    n += put_str(buf + n, ev->dim2, sizeof ev->dim2);
    return n;
}

static uint64_t content_hash(const tally_event *ev, bool with_time)
{
    unsigned char buf[4 * TALLY_NAME_MAX + 64];
    uint64_t h[2];
    tally_hash128(buf, pack_content(ev, with_time, buf),
                  with_time ? FINGERPRINT_SEED : UNTIMED_SEED, h);
    return h[0];
}

uint64_t tally_event_fingerprint(const tally_event *ev)
{
    return content_hash(ev, true);
}

uint64_t tally_event_untimed_hash(const tally_event *ev)
{
    return content_hash(ev, false);
}

void tally_event_identify(tally_event *ev)
{
    unsigned char buf[2 * TALLY_ID_MAX];
    size_t n = put_str(buf, ev->source, sizeof ev->source);
    n += put_str(buf + n, ev->id, sizeof ev->id);
    tally_hash128(buf, n, KEY_SEED, ev->key);
    ev->untimed = tally_event_untimed_hash(ev);
}
