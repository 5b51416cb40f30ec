/* The content a dedupe window keeps of each of its ids
 * (schemas/016_dedupe_windows.sql): pure, no SQL.
 *
 * A window's content is a version byte (RC_VERSION) and then one record per
 * id present, in the order of n. A record is what a replay must match to be
 * a duplicate: the 48 low bits of the event's content hash without its time
 * (tally_event_content_hash(ev, false)) and its time, exactly.
 *
 * Records are coded against the ones before them, so a host that reports
 * the same instances every few seconds costs about one byte a report:
 *
 *   header byte   bits 0-3  r: 0..13, the content of the r-th most recently
 *                           used entry of the window; 14, a new entry, whose
 *                           6 bytes (big-endian) follow; 15 is never written
 *                 bit 4     the time differs from the one predicted: the
 *                           zigzag LEB128 of (time - predicted) follows
 *                 bits 5-7  zero
 *
 * The predicted time of an entry used before is its last time plus the step
 * between its last two times (0 after its first use); that of a new entry is
 * the time of the record before it (0 for the first). The entry used moves
 * to the front of the list of the RC_MRU most recently used; a new entry
 * pushes the oldest out. Coding is deterministic, so the same ids with the
 * same contents give the same bytes whatever order they arrived in, and
 * appending a record gives what coding the whole window again would. */
#ifndef TALLY_RUN_CODEC_INT_H
#define TALLY_RUN_CODEC_INT_H

#include <stddef.h>
#include <stdint.h>

#define RC_VERSION   1
#define RC_MRU       14
#define RC_HASH_MASK ((UINT64_C(1) << 48) - 1)
#define RC_REC_MAX   17 /* header, 6 bytes of hash, 10 of time */

/* The coder's state after some records: the same for coding and decoding.
 * The list of entries, most recent first, is kept as arrays, so that a
 * search reads the hashes alone (two cache lines). Times are kept as
 * uint64_t: coding wraps, never overflows. */
typedef struct rc_state {
    uint64_t hash[RC_MRU]; /* 48 bits each */
    uint64_t last_t[RC_MRU];
    uint64_t step[RC_MRU];
    uint32_t n;
    uint64_t prev_t;
} rc_state;

typedef struct rc_rec {
    uint64_t hash; /* 48 bits */
    int64_t t;
} rc_rec;

void rc_init(rc_state *s);
/* Codes r into out (room for RC_REC_MAX bytes); returns the bytes written. */
size_t rc_encode(rc_state *s, const rc_rec *r, uint8_t *out);
/* Decodes the record at p (len bytes left) into *r; returns the bytes it
 * took, or 0 if they are not a record (cut short, a reserved bit or code). */
size_t rc_decode(rc_state *s, const uint8_t *p, size_t len, rc_rec *r);

#endif
