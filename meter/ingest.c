/* One raw message into a ledger batch (include/tally/ingest.h). Kept apart
 * from event.c so the decoder links without the ledger. */
#include "tally/ingest.h"

tally_err tally_ingest_message(tally_batch *b, const char *raw, size_t len, const char *origin,
                               int64_t now_s, tally_reject *rej_out)
{
    tally_event ev;
    tally_reject rej;
    tally_err err = tally_event_decode(raw, len, now_s, &ev, &rej);
    if (err == TALLY_OK) {
        rej.reason[0] = '\0';
        rej.detail[0] = '\0';
        err = tally_batch_add_event(b, &ev, raw, len, origin);
    } else {
        err = tally_batch_add_reject(b, &rej, raw, len, origin);
    }
    if (rej_out)
        *rej_out = rej;
    return err;
}
