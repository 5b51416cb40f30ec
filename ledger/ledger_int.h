/* Internal to the ledger module: the connection's body and helpers shared by
 * its files (ledger.c, batch.c, ratecard.c, invoice*.c, verify.c, ...). */
#ifndef TALLY_LEDGER_INT_H
#define TALLY_LEDGER_INT_H

#include <sqlite3.h>

#include "tally/document.h"
#include "tally/ledger.h"
#include "tally/rating.h"

struct tally_ledger {
    sqlite3 *db;
    char *path;
    /* Rate cards, parsed once and reloaded when the ratecards table changes
     * (ledger_cards() checks a cheap counter). Sorted by effective_from. */
    tally_card *cards;
    const tally_ratecard **card_ptrs;
    size_t n_cards;
    int64_t cards_version;
    sqlite3_stmt *st_cards_version; /* prepared on first use */
    char errmsg[256];
    /* Opened from a ledger directory: its shards (shard_int.h); else NULL. */
    struct ledger_shards *shards;
};

/* The rate cards, sorted by effective_from_s; valid until the next call that
 * loads a card. Errors: TALLY_DB, TALLY_PARSE (a stored card no longer parses). */
tally_err ledger_cards(tally_ledger *l, const tally_ratecard *const **cards, size_t *n);

/* Drops the cached cards (the next ledger_cards() reloads them). */
void ledger_cards_clear(tally_ledger *l);

/* All spot points (rate cards' and runtime), any order; *out allocated.
 * Errors: TALLY_DB, TALLY_NOMEM. */
tally_err ledger_spot_points(tally_ledger *l, tally_spot_point **out, size_t *n);

/* Prepares sql; on failure records the message in l->errmsg. */
tally_err ledger_prepare(tally_ledger *l, const char *sql, sqlite3_stmt **st);
/* Records sqlite's current error as l->errmsg and maps rc to a tally_err
 * (SQLITE_FULL / SQLITE_IOERR -> TALLY_IO, SQLITE_BUSY -> TALLY_BUSY, else
 * TALLY_DB). */
tally_err ledger_sqlite_err(tally_ledger *l, int rc);

/* BEGIN IMMEDIATE / COMMIT / ROLLBACK. A failed COMMIT rolls back. Errors as
 * ledger_sqlite_err(). */
tally_err ledger_begin(tally_ledger *l);
tally_err ledger_commit(tally_ledger *l);
void ledger_rollback(tally_ledger *l);

/* Ensures the account exists (created with the newest card's currency and
 * UTC). Errors: TALLY_UNKNOWN_CURRENCY (new account, no rate card loaded),
 * TALLY_DB. */
tally_err ledger_account_ensure(tally_ledger *l, const char *account);

/* Appends one balanced entry of postings. Each posting is (ledger account,
 * signed amount: positive = debit, negative = credit). Atomic on its own (a
 * savepoint), so it may be called inside or outside a transaction.
 * Errors: TALLY_INVAL (does not balance, or an amount is INT64_MIN), TALLY_DB. */
typedef struct ledger_posting {
    char acct[96];
    int64_t amount_minor; /* > 0 debit, < 0 credit, 0 skipped */
} ledger_posting;
tally_err ledger_post(tally_ledger *l, const char *kind, const char *ref, const char *currency,
                      const ledger_posting *p, size_t n);

/* Appends a self-contained, printable HTML page for a canonical invoice or
 * credit note document with the ledger as its page source (ledger/page_source.c,
 * document/html.c). l may be NULL. Errors: TALLY_PARSE, TALLY_NOMEM,
 * TALLY_TOO_LARGE, TALLY_DB. */
tally_err ledger_invoice_html(tally_ledger *l, const char *doc, size_t len, tally_buf *out);

/* ---- outbox.c: announcements written with the change they announce ------- */

/* Appends one outbox event (schemas/003_outbox.sql): the CloudEvent
 * {"specversion":"1.0","id":event_id,"source":"tally","type":type,
 * "subject":subject,"time":<the document's issued_at, else now>,
 * "datacontenttype":"application/json","data":<doc, verbatim>} is built
 * here, once. doc must be one JSON object (strict RFC 8259). Must be called
 * INSIDE the caller's open transaction, so that the event commits or rolls
 * back with the change it announces; event types and what each carries are
 * in include/tally/outbox.h.
 * Errors: TALLY_INVAL (no open transaction, empty names), TALLY_PARSE (doc),
 * TALLY_EXISTS (event_id recorded with the same payload),
 * TALLY_EXISTS_DIFFERENT (recorded with another), TALLY_NOMEM,
 * TALLY_TOO_LARGE, TALLY_DB. */
tally_err ledger_outbox_add(tally_ledger *l, const char *type, const char *subject,
                            const char *event_id, const char *doc, size_t len);

/* One-line helpers for the invoice engine, inside its transaction.
 *
 * ledger_outbox_invoice_finalized: "invoice.finalized", id
 * "invoice.finalized:<invoice_id>", data = the invoice's canonical JSON.
 * ledger_outbox_invoice_voided: two events, in this order:
 * "creditnote.issued" (id "creditnote.issued:<cn_id>", data = the credit
 * note's canonical JSON) and "invoice.voided" (id
 * "invoice.voided:<invoice_id>", data = {"invoice_id","credit_note_id",
 * "account","voided_at","credit_note":<the credit note's JSON>}).
 * The document must name the same id and account (a wiring check).
 * Errors: those of ledger_outbox_add; TALLY_INVAL when the document names
 * another id or account, or is not a finalized document. */
tally_err ledger_outbox_invoice_finalized(tally_ledger *l, const char *invoice_id,
                                          const char *account, const char *doc, size_t len);
tally_err ledger_outbox_invoice_voided(tally_ledger *l, const char *invoice_id, const char *cn_id,
                                       const char *account, const char *cn_doc, size_t len);

#endif
