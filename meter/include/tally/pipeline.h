/* The ingest pipeline: one message (bytes + origin) into a stored event or a
 * quarantined one, the same way on every input path.
 *
 *   decode, validate   tally_pipeline_decode()  SPEC section 1; stateless
 *   queue              tally_pipeline_queue()   into a tally_batch
 *   dedupe, aggregate, tally_batch_commit()     the ledger, one transaction
 *   quarantine
 *
 * `tally ingest` (cli/cmd_ingest.c) and POST /v1/events (server/events.c)
 * use a tally_pipeline, which owns one batch and says when it is full. The
 * Kafka meter (meter/consumer*.c) calls tally_pipeline_decode() on its poll
 * thread and tally_pipeline_queue() on its commit thread, because its
 * batches also carry partition offsets. The paths differ only in transport:
 * origins, offsets and dead-letter copies for Kafka, answers per event for
 * HTTP.
 *
 * The guarantee: what a message holds never makes these functions fail. A
 * message that does not decode is queued as a reject and quarantined with
 * its reason (include/tally/event.h); an event that the rate card cannot
 * price, or a conflict, is quarantined at commit. The reason is the same on
 * every path. Errors are about resources only (memory, a full batch, the
 * ledger), so a bad event never aborts its batch, file or partition. */
#ifndef TALLY_PIPELINE_H
#define TALLY_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tally/err.h"
#include "tally/event.h"
#include "tally/ledger.h"

/* One decoded message: an event, or why it is not one. */
typedef struct tally_decoded {
    bool is_event;
    union {
        tally_event ev;   /* is_event */
        tally_reject rej; /* !is_event */
    } u;
} tally_decoded;

/* Decodes and validates raw[0..len) (tally_event_decode; now_s is the clock
 * for the future-time check, normally tally_now_s()) into *out. Returns
 * out->is_event. Allocates nothing; safe on any thread. */
bool tally_pipeline_decode(const char *raw, size_t len, int64_t now_s, tally_decoded *out);

/* Queues a decoded message in b: the event, or the reject for quarantine.
 * (An event the batch refused as invalid would be quarantined as
 * "bad_event"; the decoder never returns one, so that reason is not part of
 * the contract but a last resort against losing a message.)
 * raw, len and origin are borrowed (copied into the batch); origin names the
 * message uniquely ("kafka:<topic>/<partition>@<offset>",
 * "file:<name>:<line>:<hash>", "http:<request-id>:<index>").
 * Errors (nothing queued): TALLY_NOMEM, TALLY_TOO_LARGE (the batch is full). */
TALLY_MUST_CHECK tally_err tally_pipeline_queue(tally_batch *b, const tally_decoded *d,
                                                const char *raw, size_t len, const char *origin);
/* The same, but an event's d, raw and origin are borrowed until the next
 * tally_batch_commit() has returned (tally_batch_add_event_ref): the meter,
 * whose chunks keep their messages until then, copies nothing. A reject is
 * copied as by tally_pipeline_queue. */
TALLY_MUST_CHECK tally_err tally_pipeline_queue_ref(tally_batch *b, const tally_decoded *d,
                                                    const char *raw, size_t len,
                                                    const char *origin);

/* A batch of messages on its way into one ledger, with running totals. */
typedef struct tally_pipeline tally_pipeline;

/* batch_max: how many queued messages make the batch full (0: no limit but
 * the batch's own). l is borrowed and must outlive the pipeline.
 * Errors: TALLY_NOMEM, from tally_batch_create. */
TALLY_MUST_CHECK tally_err tally_pipeline_create(tally_ledger *l, size_t batch_max,
                                                 tally_pipeline **out);
/* The API key that sends what is queued from now on (HTTP ingest); stored
 * with the rows it quarantines (tally_batch_set_key_id). Optional: file
 * and Kafka paths leave it 0, none. */
void tally_pipeline_set_key_id(tally_pipeline *p, int64_t key_id);
/* Discards what is not committed; accepts NULL. */
void tally_pipeline_destroy(tally_pipeline *p);

/* Decodes one message and queues it (tally_pipeline_decode, then
 * tally_pipeline_queue). If d is not NULL it receives the decoding.
 * Errors: as tally_pipeline_queue. */
TALLY_MUST_CHECK tally_err tally_pipeline_add(tally_pipeline *p, const char *raw, size_t len,
                                              const char *origin, int64_t now_s, tally_decoded *d);
/* tally_pipeline_add for a line of a file: its origin is origin_prefix
 * followed by 16 hex digits of tally_hash128(raw, len, 0)[0], computed only
 * if the line is quarantined (tally_batch_set_origin_hash). origin_prefix
 * is at most 512 bytes (else TALLY_TOO_LARGE). Errors: as
 * tally_pipeline_queue. */
TALLY_MUST_CHECK tally_err tally_pipeline_add_line(tally_pipeline *p, const char *raw, size_t len,
                                                   const char *origin_prefix, int64_t now_s);
/* tally_pipeline_add_line for a line that stays in the caller's memory,
 * valid and unchanged, until the next tally_pipeline_commit() has returned
 * or the pipeline is destroyed: a good event's raw bytes are not copied
 * (tally_batch_add_event_raw_ref); a reject's are, as ever. Errors: as
 * tally_pipeline_add_line. */
TALLY_MUST_CHECK tally_err tally_pipeline_add_line_ref(tally_pipeline *p, const char *raw,
                                                       size_t len, const char *origin_prefix,
                                                       int64_t now_s);
/* Queues a message decoded already (for a path that looks at the event
 * between decoding and queueing). Errors: as tally_pipeline_queue. */
TALLY_MUST_CHECK tally_err tally_pipeline_add_decoded(tally_pipeline *p, const tally_decoded *d,
                                                      const char *raw, size_t len,
                                                      const char *origin);

/* Queues a message of which only raw[0..len) was kept because it is over
 * the event size limit (a file line cut when read): quarantined as
 * too_large, with whole_size and whole_sha256 (hex) describing the whole
 * message. Errors: as tally_pipeline_queue. */
TALLY_MUST_CHECK tally_err tally_pipeline_add_cut(tally_pipeline *p, const char *raw, size_t len,
                                                  size_t whole_size, const char whole_sha256[65],
                                                  const char *origin);

/* Raw bytes that make a batch full whatever batch_max says, so a stream of
 * large messages commits before the batch's own bound (512 MiB) refuses
 * one. */
#define TALLY_PIPELINE_FULL_BYTES ((size_t)64 << 20)

/* Messages queued and not yet committed; whether that is batch_max
 * messages or TALLY_PIPELINE_FULL_BYTES. */
size_t tally_pipeline_pending(const tally_pipeline *p);
bool tally_pipeline_full(const tally_pipeline *p);

/* Commits what is queued (tally_batch_commit) and adds its counts to the
 * totals. results, if not NULL, gets one result per queued message in the
 * order queued (room for tally_pipeline_pending()). Nothing is queued
 * afterwards, whether or not it committed. Errors: as tally_batch_commit;
 * tally_ledger_errmsg() of the ledger says more. */
TALLY_MUST_CHECK tally_err tally_pipeline_commit(tally_pipeline *p, tally_event_result *results);

/* What every commit so far stored. */
void tally_pipeline_totals(const tally_pipeline *p, tally_batch_stats *out);

#endif
