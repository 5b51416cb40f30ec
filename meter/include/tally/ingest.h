/* Ingest of one raw message: decode it, then queue it in a ledger batch.
 *
 * A shorthand for the two steps of the ingest pipeline that every input path
 * shares (include/tally/pipeline.h): a message either decodes into an event
 * and is queued as one, or it is queued as a reject for quarantine with its
 * reason. Nothing is dropped. */
#ifndef TALLY_INGEST_H
#define TALLY_INGEST_H

#include <stddef.h>
#include <stdint.h>

#include "tally/err.h"
#include "tally/event.h"
#include "tally/ledger.h"

/* Decodes raw[0..len) with tally_pipeline_decode() (now_s is the clock for
 * the future-time check, normally tally_now_s()) and queues the result in b
 * with tally_pipeline_queue(): the event, or the reject for quarantine. raw and origin are
 * borrowed; origin names the message uniquely ("kafka:<topic>/<partition>@<offset>",
 * "file:<name>:<line>", ...). If rej_out is not NULL it receives the rejection, or an empty reason
 * and detail when the message was queued as an event.
 *
 * A rejected message is not an error: it is queued and TALLY_OK is returned.
 * Errors (nothing queued): TALLY_NOMEM, TALLY_TOO_LARGE, from the batch. */
TALLY_MUST_CHECK tally_err tally_ingest_message(tally_batch *b, const char *raw, size_t len,
                                                const char *origin, int64_t now_s,
                                                tally_reject *rej_out);

#endif
