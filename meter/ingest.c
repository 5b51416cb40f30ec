/* One raw message into a ledger batch (include/tally/ingest.h): the two
 * steps of the ingest pipeline (include/tally/pipeline.h). Kept apart from
 * event.c so the decoder links without the ledger. */
#include "tally/ingest.h"
#include "tally/pipeline.h"

tally_err tally_ingest_message(tally_batch *b, const char *raw, size_t len, const char *origin,
                               int64_t now_s, tally_reject *rej_out)
{
    tally_decoded d;
    (void)tally_pipeline_decode(raw, len, now_s, &d);
    tally_err err = tally_pipeline_queue(b, &d, raw, len, origin);
    if (rej_out) {
        if (d.is_event)
            *rej_out = (tally_reject){.reason = "", .detail = ""};
        else
            *rej_out = d.u.rej;
    }
    return err;
}
