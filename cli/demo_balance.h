/* The prepaid part of `tally demo` (SPEC section 9). lotus-startup is under
 * spend control before the stream (demo_setup, cli/demo_stream.c); while the
 * meter consumes, its balance falls through its low and stop marks, and the
 * meter's commits write balance.low, balance.exhausted and account.suspend to
 * the outbox. After the stream a prepaid top-up, sent with an idempotency key,
 * brings it back (balance.recovered, account.resume). The demo publishes the
 * outbox and reads these events back from Kafka with kcat, as a downstream
 * system would. */
#ifndef TALLY_DEMO_BALANCE_H
#define TALLY_DEMO_BALANCE_H

#include <stdbool.h>
#include <stdint.h>

#include "cli.h"
#include "tally/balance.h"
#include "tally/invoice.h"

#define DEMO_PREPAID_ACCOUNT "lotus-startup"
#define DEMO_TOPUP_AMOUNT    "10.00"
#define DEMO_TOPUP_KEY       "demo-lotus-startup-topup-1"

/* The account's balance at one moment of the demo. */
typedef struct demo_balance_point {
    bool known;
    int64_t balance_minor, running_minor, credits_minor;
    int minor_digits;
    tally_balance_state state;
} demo_balance_point;

/* Reads DEMO_PREPAID_ACCOUNT's balance from the ledger at db. */
int demo_balance_read(cli_ctx *ctx, const char *db, demo_balance_point *out);

/* Prints "<label> <balance> (<state>)[, running charges R, credits C]". */
void demo_balance_print(const char *label, const demo_balance_point *p, bool details);

/* Counts DEMO_PREPAID_ACCOUNT's balance events in the outbox at db. */
int demo_balance_outbox_count(cli_ctx *ctx, const char *db, int *n);

/* The draft of DEMO_PREPAID_ACCOUNT's invoice for DEMO_PERIOD (nothing is
 * finalized or written). */
int demo_balance_draft(cli_ctx *ctx, const char *db, tally_invoice_summary *out);

/* Prints what the top-up did to the draft: nothing, or how much of it the
 * top-up pays. */
void demo_balance_draft_change(const tally_invoice_summary *before,
                               const tally_invoice_summary *after);

/* Reads the invoices topic with kcat and prints DEMO_PREPAID_ACCOUNT's
 * balance events in the order a consumer sees them, with the account's
 * balance before the stream, after it and after the top-up. */
void demo_balance_events(const char *bootstrap, const demo_balance_point *before_stream,
                         const demo_balance_point *after_stream,
                         const demo_balance_point *after_topup);

#endif
