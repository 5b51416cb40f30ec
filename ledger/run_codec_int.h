/* The content a dedupe window keeps of each of its ids
 * (schemas/016_dedupe_windows.sql): pure, no SQL.
 *
 * A window's content is a version byte (RC_VERSION) and then the records of
 * the ids present, in the order of n. A record is what a replay must match
 * to be a duplicate: the 48 low bits of the event's content hash without
 * its time (tally_event_untimed_hash) and its time, exactly.
 *
 * Records are coded against the ones before them. Each is either *short*
 * (an entry of the list below, at the time predicted for it) or not; a
 * host that reports the same instances every few seconds is almost all
 * short records, and up to three of them share a byte. A header byte is
 *
 *   0 t g r       one record (g = 0), bits 0-3 r: 0..13, the content of the
 *   (bits 7 6-5   r-th most recently used entry of the window; 14, a new
 *    4 3-0)       entry, whose 6 bytes (big-endian) follow; 15 is never
 *                 written. t (bit 4): the time differs from the one
 *                 predicted, and the zigzag LEB128 of (time - predicted)
 *                 follows. g (bits 5-6, only with r = 14 and t = 0): g more
 *                 new entries at their predicted times follow, 6 bytes each
 *   1 0 b a       two short records, entries a and b (bits 0-2, 3-5), each
 *                 below 8
 *   1 1 c b a     three short records, entries a, b and c (bits 0-1, 2-3,
 *                 4-5), each below 4
 *
 * The predicted time of an entry used before is its last time plus the step
 * between its last two times (after its first use, the step of the entry
 * used before it, or 0); that of a new entry is the time of the record
 * before it (0 for the first). The entry used moves
 * to the front of the list of the RC_MRU most recently used; a new entry
 * pushes the oldest out. rc_encode groups greedily (three, else two, else
 * one), so the same records always give the same bytes: a window's content
 * follows from its ids and their contents, whatever order they arrived in.
 * rc_decode takes any grouping of valid records. */
#ifndef TALLY_RUN_CODEC_INT_H
#define TALLY_RUN_CODEC_INT_H

#include <stddef.h>
#include <stdint.h>

#define RC_VERSION   1
#define RC_MRU       14
#define RC_HASH_MASK ((UINT64_C(1) << 48) - 1)
#define RC_REC_MAX   17 /* a record at its largest: header, 6 bytes of hash, 10 of time */
#define RC_GROUP_MAX 4  /* records one header can give */

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
/* Codes n records into out (room for n * RC_REC_MAX bytes), from a fresh
 * state; returns the bytes written. */
size_t rc_encode(const rc_rec *recs, size_t n, uint8_t *out);
/* The same from state s, which it advances. */
size_t rc_encode_from(rc_state *s, const rc_rec *recs, size_t n, uint8_t *out);
/* Codes the one header that starts at recs[0] (n records from there, n > 0)
 * against s, into out (room for RC_GROUP_MAX * RC_REC_MAX bytes); *used
 * gets the records it took, and it returns the bytes written. rc_encode is
 * these headers one after another. A header looks at no record past the
 * first it does not take, so one that took fewer than n is the same
 * whatever records follow: a window that grows at its end is coded once,
 * as it grows (dedupe_runs.c), and still gives rc_encode's bytes. */
size_t rc_encode_head(rc_state *s, const rc_rec *recs, size_t n, uint8_t *out, size_t *used);
/* Decodes the header at p (len bytes left) and its records into out
 * (*n_out of them, at most RC_GROUP_MAX); returns the bytes it took, or 0 if
 * they are not records (cut short, a reserved bit or code, an entry the list
 * does not hold, a new entry it does). */
size_t rc_decode(rc_state *s, const uint8_t *p, size_t len, rc_rec out[RC_GROUP_MAX],
                 size_t *n_out);

#endif
