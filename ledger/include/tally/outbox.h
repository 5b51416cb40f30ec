/* The outbox: announcements of finalized invoices and credit notes.
 *
 * Downstream systems (payments, e-mail, the console, accounting) learn about
 * invoices from a Kafka topic. The ledger writes each announcement into the
 * outbox table (schemas/003_outbox.sql) in the SAME transaction as the change
 * it announces, so there is an announcement exactly when the change
 * committed: none is lost and none announces a change that rolled back.
 * `tally publish` (include/tally/publish.h) sends pending events in id order
 * and stamps each one sent once the broker has acknowledged it.
 *
 * Each event is a CloudEvent 1.0 in structured-mode JSON, built once when
 * the row is written and stored as bytes, so every retry publishes exactly
 * the same bytes under the same id:
 *
 *   {"specversion":"1.0","id":"<type>:<document id>","source":"tally",
 *    "type":"<type>","subject":"<account>","time":"<issued_at, RFC 3339 UTC>",
 *    "datacontenttype":"application/json","data":<see below>}
 *
 * The Kafka message key is the subject (the account), so one account's
 * events share a partition and keep their order there. "source" is "tally",
 * or $TALLY_EVENT_SOURCE (1..255 printable bytes) when set at the time the
 * event is written.
 *
 * Types and what their data carries:
 *
 *   invoice.finalized   id "invoice.finalized:INV-YYYY-NNNNNN"; data is the
 *                       invoice's canonical JSON inserted verbatim: the same
 *                       bytes as `tally invoice show ID --format json`, as
 *                       hashed and signed. time = the invoice's issued_at.
 *   creditnote.issued   id "creditnote.issued:CN-YYYY-NNNNNN"; data is the
 *                       credit note's canonical JSON, verbatim (it names the
 *                       invoice in refers_to and says why in reason).
 *                       time = the credit note's issued_at.
 *   invoice.voided      id "invoice.voided:INV-YYYY-NNNNNN"; data is
 *                       {"invoice_id":"INV-...","credit_note_id":"CN-...",
 *                        "account":"...","voided_at":"<the credit note's
 *                        issued_at>","credit_note":<the credit note's
 *                        canonical JSON, verbatim>}. time = voided_at.
 *
 *   balance.low, balance.exhausted, balance.recovered, account.suspend,
 *   account.resume, volume.release
 *                       id "<type>:<account>:<n>" (n counts the account's
 *                       balance events from 1); data is {"account",
 *                       "currency","state","previous_state","balance",
 *                       "running_charges","credits_available",
 *                       "low_balance","stop_at","cause"}, plus
 *                       "instances" [{"instance","sku"}] for
 *                       account.suspend and "volumes" [{"volume","class"}]
 *                       and "exhausted_since" for volume.release
 *                       (include/tally/balance.h). time = when written.
 *
 * A void writes creditnote.issued first, then invoice.voided, in the void's
 * transaction. An id names one event forever: a voided invoice's period is
 * billed again on a new, newly numbered invoice, so no id is ever reused.
 *
 * Delivery is at least once with stable ids: an event whose acknowledgement
 * arrived but whose sent_at was not yet stamped (a crash in between) is sent
 * again, byte for byte. Consumers that dedupe by id (CloudEvents' id with
 * source) see every event exactly once. */
#ifndef TALLY_OUTBOX_H
#define TALLY_OUTBOX_H

#include <stddef.h>
#include <stdint.h>

#include "tally/err.h"
#include "tally/ledger.h"

/* Event type names. */
#define TALLY_EVENT_INVOICE_FINALIZED "invoice.finalized"
#define TALLY_EVENT_INVOICE_VOIDED    "invoice.voided"
#define TALLY_EVENT_CREDITNOTE_ISSUED "creditnote.issued"
/* The signed heads of the ledger's own chain (tally head, tally publish). */
#define TALLY_EVENT_LEDGER_HEAD "ledger.head"
/* Prepaid balances (include/tally/balance.h, SPEC section 9). */
#define TALLY_EVENT_BALANCE_LOW       "balance.low"
#define TALLY_EVENT_BALANCE_EXHAUSTED "balance.exhausted"
#define TALLY_EVENT_BALANCE_RECOVERED "balance.recovered"
#define TALLY_EVENT_ACCOUNT_SUSPEND   "account.suspend"
#define TALLY_EVENT_ACCOUNT_RESUME    "account.resume"
#define TALLY_EVENT_VOLUME_RELEASE    "volume.release"

/* One outbox row. Every pointer is borrowed and valid only during the
 * callback that receives it. */
typedef struct tally_outbox_event {
    int64_t id;           /* publish order: increases with commit order */
    const char *event_id; /* the CloudEvent id */
    const char *type;
    const char *subject; /* the account: the Kafka message key */
    const char *payload; /* the CloudEvent JSON (not NUL-terminated) */
    size_t len;
    int64_t created_at_s;
    int64_t sent_at_s; /* 0: pending */
} tally_outbox_event;

/* Called once per row; a non-OK return stops the listing and is returned. */
typedef tally_err (*tally_outbox_fn)(void *ctx, const tally_outbox_event *ev);

/* Calls fn for the pending events (sent_at NULL) with id > after_id, in id
 * order, at most max of them (0: no limit). Errors: TALLY_DB, TALLY_BUSY, or
 * what fn returns. */
TALLY_MUST_CHECK tally_err tally_outbox_pending(tally_ledger *l, int64_t after_id, size_t max,
                                                tally_outbox_fn fn, void *ctx);

/* Calls fn for every event, sent or not, in id order (for tools and tests).
 * Errors: TALLY_DB, TALLY_BUSY, or what fn returns. */
TALLY_MUST_CHECK tally_err tally_outbox_list(tally_ledger *l, tally_outbox_fn fn, void *ctx);

/* Stamps event id as sent at sent_at_s (> 0). Stamping an event that is
 * already sent is TALLY_OK and keeps its first stamp (stamps only ever go
 * from NULL to a time). Errors: TALLY_INVAL (sent_at_s <= 0),
 * TALLY_NOT_FOUND, TALLY_BUSY, TALLY_IO, TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_outbox_mark_sent(tally_ledger *l, int64_t id, int64_t sent_at_s);

/* The same for n events in one transaction (all stamped, or none).
 * Errors: those of tally_outbox_mark_sent. */
TALLY_MUST_CHECK tally_err tally_outbox_mark_sent_batch(tally_ledger *l, const int64_t *ids,
                                                        size_t n, int64_t sent_at_s);

/* Numbers of pending and sent events (either pointer may be NULL).
 * Errors: TALLY_DB, TALLY_BUSY. */
TALLY_MUST_CHECK tally_err tally_outbox_counts(tally_ledger *l, int64_t *pending, int64_t *sent);

/* ---- Counts per type, for /metrics (outbox_stats.c) -------------------------- */

/* Called once per event type: added counts its events with id > after_id,
 * pending all of its events not yet sent (whatever their id). type is
 * borrowed for the call. A non-OK return stops the listing and is returned. */
typedef tally_err (*tally_outbox_type_fn)(void *ctx, const char *type, int64_t added,
                                          int64_t pending);

/* Calls fn, in type order, for each type that has events with id > after_id
 * or pending events, all read in one statement (one snapshot), and on
 * success sets *through_id (if not NULL) to the greatest id counted in added
 * (after_id when none). Rows are never deleted, so a caller that adds up
 * added from after_id 0 on, passing back *through_id each time, holds each
 * type's total, and sent = total - pending. Reads only the rows above
 * after_id and the pending ones (index outbox_pending), never the whole
 * table. Type names are not checked: a caller that makes labels of them
 * bounds them itself. Errors: TALLY_INVAL (NULL l or fn, after_id < 0),
 * TALLY_DB, TALLY_BUSY, or what fn returns (then *through_id is unchanged). */
TALLY_MUST_CHECK tally_err tally_outbox_type_counts(tally_ledger *l, int64_t after_id,
                                                    tally_outbox_type_fn fn, void *ctx,
                                                    int64_t *through_id);

#endif
