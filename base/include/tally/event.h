/* Usage events: the wire format of SPEC section 1, decoded into plain values.
 *
 * tally_event_decode() turns one CloudEvents 1.0 structured-mode JSON message
 * into a tally_event, or rejects it with a stable, machine-readable reason.
 * Decoding is exact (integers are integers; times are whole UTC seconds) and
 * bounded (a message is at most TALLY_EVENT_MAX_BYTES, every string has a
 * fixed maximum length). It allocates nothing and keeps no state, so it is
 * safe to call from any thread. */
#ifndef TALLY_EVENT_H
#define TALLY_EVENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tally/err.h"

#define TALLY_EVENT_MAX_BYTES 65536
#define TALLY_ID_MAX          128         /* id and source: at most 127 bytes */
#define TALLY_NAME_MAX        64          /* account, instance, sku, ...: at most 63 bytes */
#define TALLY_FUTURE_SKEW_S   300         /* events more than 5 minutes ahead are rejected */
#define TALLY_TIME_MIN_S      946684800LL /* 2000-01-01T00:00:00Z: earlier times are bad_time */
/* The largest quantities of SPEC section 1; larger ones are out_of_range. */
#define TALLY_CARDS_MAX  65536LL
#define TALLY_BYTES_MAX  1000000000000000000LL /* 10^18 */
#define TALLY_TOKENS_MAX 1000000000000LL       /* 10^12 */

typedef enum tally_meter {
    TALLY_METER_ACCELERATOR = 0, /* accelerator.usage: cards held over time */
    TALLY_METER_STORAGE = 1,     /* storage.usage: bytes held over time */
    TALLY_METER_TRAFFIC = 2,     /* traffic.usage: bytes moved at an instant */
    TALLY_METER_TOKENS = 3,      /* tokens.usage: tokens used at an instant */
    TALLY_METER_COUNT = 4
} tally_meter;

typedef enum tally_pricing {
    TALLY_PRICING_NONE = 0, /* storage, traffic, tokens */
    TALLY_PRICING_ON_DEMAND = 1,
    TALLY_PRICING_SPOT = 2,
    TALLY_PRICING_RESERVED = 3
} tally_pricing;

/* One decoded usage event. The strings are NUL-terminated and bounded.
 * Meaning of the generic fields per meter:
 *
 *   meter        resource      dim            dim2         weight  seconds
 *   accelerator  instance      sku            -            cards   1..3600
 *   storage      volume        class          -            bytes   1..86400
 *   traffic      resource      scope          direction    bytes   0
 *   tokens       model         model          kind         tokens  0
 *
 * For traffic and tokens (instants) `weight` is the quantity moved at
 * time_s; for accelerator and storage the quantity is weight * seconds over
 * [time_s, time_s + seconds). */
typedef struct tally_event {
    tally_meter meter;
    tally_pricing pricing; /* accelerator only */
    bool migration;        /* accelerator only: hot-migration window, insured */
    int64_t time_s;        /* UTC seconds since the epoch, truncated */
    int64_t seconds;       /* duration; 0 for instants */
    int64_t weight;        /* cards, bytes or tokens (see table) */
    char id[TALLY_ID_MAX];
    char source[TALLY_ID_MAX];
    char account[TALLY_NAME_MAX];  /* CloudEvents subject */
    char resource[TALLY_NAME_MAX]; /* instance, volume, resource or model */
    char dim[TALLY_NAME_MAX];      /* sku, storage class, traffic scope, token model */
    char dim2[16];                 /* traffic direction or token kind; else "" */
    uint64_t key[2];               /* 128-bit hash of (source, id): the dedupe key */
    uint64_t untimed;              /* tally_event_untimed_hash: what a dedupe window
                                      keeps of the content, beside time_s */
} tally_event;

/* Why an event was rejected. `reason` is stable and machine-readable:
 *   bad_json, too_large, bad_specversion, unknown_type, bad_time,
 *   out_of_range, missing:<attribute or data field>,
 *   bad_field:<attribute or data field>
 * and, from the ledger (which knows the rate cards): unknown_sku, no_price,
 * conflict. `detail` is a short human-readable explanation.
 *
 * Names in missing: and bad_field: are bare: attributes as in CloudEvents
 * (missing:subject, bad_field:id), data fields without a "data." prefix
 * (missing:sku, bad_field:cards); missing:data / bad_field:data concern the
 * data attribute itself. A message with several faults gets the first of, in
 * this order: too_large; bad_json (RFC 8259 syntax, invalid UTF-8, a lone
 * surrogate, nesting deeper than 32 values, a duplicate key in the event or
 * its data, more than 64 unknown members in either, or a top value that is
 * not an object); specversion; type; id, source, subject; time
 * (bad_time); data; the data fields in the order of SPEC
 * section 1's table. Strings must be non-empty, within their length (counted
 * in bytes after unescaping) and free of control characters (U+0000-U+001F);
 * the subject must not begin or end with white space (bad_field:subject).
 * A time that does not parse or is before TALLY_TIME_MIN_S is bad_time; one
 * more than TALLY_FUTURE_SKEW_S ahead of now_s is bad_time too.
 * Integers are JSON integers or strings of decimal digits, without sign,
 * fraction, exponent, leading zero or white space, at most INT64_MAX. A
 * quantity (cards, bytes, tokens) that is such an integer but above
 * TALLY_CARDS_MAX, TALLY_BYTES_MAX or TALLY_TOKENS_MAX is out_of_range; any
 * other bad integer, and seconds outside its range, is bad_field:<field>.
 * Every event this accepts is one the ledger's batches take
 * (tally_batch_add_event never refuses it), so a message either becomes an
 * event or a reject, and never stops the stream. */
typedef struct tally_reject {
    char reason[48];
    char detail[160];
} tally_reject;

/* Decodes one message of len bytes. now_s is the current UTC time in seconds,
 * used for the future-time check. On success fills *ev and returns TALLY_OK.
 * On rejection fills *rej and returns TALLY_PARSE (TALLY_TOO_LARGE for
 * messages over TALLY_EVENT_MAX_BYTES). Never reads past buf + len; buf need
 * not be NUL-terminated. */
TALLY_MUST_CHECK tally_err tally_event_decode(const char *buf, size_t len, int64_t now_s,
                                              tally_event *ev, tally_reject *rej);

/* Parses an RFC 3339 timestamp ("2026-03-01T12:00:00Z",
 * "2026-03-01T20:00:00.250+08:00") into UTC seconds, truncating fractions.
 * Errors: TALLY_PARSE. */
TALLY_MUST_CHECK tally_err tally_time_parse(const char *s, size_t len, int64_t *out_s);

/* Writes UTC seconds as "YYYY-MM-DDTHH:MM:SSZ" (needs cap >= 21).
 * Errors: TALLY_TOO_LARGE, TALLY_RANGE (before year 0 or after 9999). */
TALLY_MUST_CHECK tally_err tally_time_format(int64_t t_s, char *buf, size_t cap);

/* Name of a meter ("accelerator", "storage", "traffic", "tokens") and of a
 * pricing ("on_demand", "spot", "reserved", "" for none). Static strings. */
const char *tally_meter_name(tally_meter m);
const char *tally_pricing_name(tally_pricing p);
/* Inverse lookups. Errors: TALLY_NOT_FOUND. */
TALLY_MUST_CHECK tally_err tally_meter_from_name(const char *s, tally_meter *out);
TALLY_MUST_CHECK tally_err tally_pricing_from_name(const char *s, tally_pricing *out);

/* 128-bit and 64-bit non-cryptographic hashes used for dedupe keys and
 * fingerprints. Stable across versions and machines: stored in the ledger. */
void tally_hash128(const void *data, size_t len, uint64_t seed, uint64_t out[2]);

/* Sets ev->key (the hash of source and id) and ev->untimed. The decoder
 * calls it; code that builds events by hand must set both. */
void tally_event_identify(tally_event *ev);
/* 64-bit hashes of every decoded field except id and source (equal content,
 * equal value): the fingerprint with time_s, which a row of the dedupe
 * table keeps, and the hash without it. Both are stored in ledgers and
 * never change. */
uint64_t tally_event_fingerprint(const tally_event *ev);
uint64_t tally_event_untimed_hash(const tally_event *ev);

#endif
