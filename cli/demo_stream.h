/* The demo's fixture usage stream: several accounts of a GPU/TPU rental cloud
 * in March 2026, covering on-demand, spot across a price change, a reserved
 * commitment with overage (paid partly by the coupon), a trial voucher,
 * storage, traffic, tokens, an insured migration window, a short run topped
 * up to the minimum, plus redelivered duplicates and a few poison messages.
 * Deterministic: the same bytes every time. */
#ifndef TALLY_DEMO_STREAM_H
#define TALLY_DEMO_STREAM_H

#include <stddef.h>

#include "tally/err.h"

#define DEMO_PERIOD "2026-03"

/* Called once per message: key is the account (the Kafka message key). */
typedef tally_err (*demo_emit_fn)(void *ctx, const char *key, const char *msg, size_t len);

/* Emits the whole stream in order. Errors: whatever emit returns. */
TALLY_MUST_CHECK tally_err demo_stream(demo_emit_fn emit, void *ctx);

/* One configuration step of the demo, as tally CLI arguments (after
 * "tally --db DB"), e.g. {"commit", "add", "orbit-research", ...}. */
typedef struct demo_step {
    const char *argv[16];
} demo_step;

/* The steps that set up accounts, spot prices, commitments and credits, in
 * order; terminated by an entry whose argv[0] is NULL. */
extern const demo_step demo_setup[];

#endif
