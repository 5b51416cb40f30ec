/* Invoices: rating a period from the ledger, drafts, finalization, output
 * formats, voids through credit notes, late-event adjustments, and queries
 * for usage and balances. Implemented in ledger/ on top of rating/. */
#ifndef TALLY_INVOICE_H
#define TALLY_INVOICE_H

#include <stdbool.h>
#include <stdint.h>

#include "tally/buf.h"
#include "tally/err.h"
#include "tally/ledger.h"
#include "tally/period.h"

typedef struct tally_invoice_summary {
    char invoice_id[80]; /* INV-2026-000001, or "draft:<account>:<period>" (fits a 63-byte id) */
    char account[TALLY_NAME_MAX];
    char period[8];
    char currency[4];
    int minor_digits;
    int64_t subtotal_minor, credits_minor, amount_due_minor;
    int64_t credit_issued_minor; /* an adjustment credit issued (SPEC section 4); else 0 */
    bool finalized;
    bool already_finalized; /* the period had a live finalized invoice: left as it was */
} tally_invoice_summary;

typedef void (*tally_invoice_fn)(void *ctx, const tally_invoice_summary *s);
typedef void (*tally_progress_fn)(void *ctx, size_t done, size_t total);

typedef struct tally_invoice_run_opts {
    const char *period;   /* "YYYY-MM", in each account's time zone */
    bool finalize;        /* make immutable, number, hash, sign, post */
    const char *out_dir;  /* NULL: write no files; else <account>-<period>.{json,csv,html} */
    const char *account;  /* NULL: every account with usage, commitments or grants */
    const char *key_path; /* signing key (needed to finalize) */
    tally_invoice_fn on_invoice;
    tally_progress_fn on_progress;
    void *ctx;
} tally_invoice_run_opts;

/* Rates the period for each account. Drafts are recomputed every time.
 * With finalize, accounts are finalized in groups of up to 256 per
 * transaction, each account under a savepoint of its own: a failing
 * account is rolled back alone, the accounts before it are committed (they
 * stay finalized, and a re-run skips them) and the run stops; a crash keeps
 * each group whole or not at all. on_invoice and the output files follow
 * the commit of the account's group, so they only ever show committed
 * invoices; on_progress follows each account. An account whose period is
 * already finalized (and not voided) keeps its invoice, and late usage for
 * it shows on the next run's invoice as adjustment lines.
 * Errors: TALLY_INVAL (bad period, or an account's time zone is unknown),
 * TALLY_NOT_FOUND (opts->account does not exist), TALLY_NO_PRICE,
 * TALLY_OVERFLOW, TALLY_CRYPTO (key), TALLY_IO, TALLY_DB; why says which
 * account and what (a failed group commit: which accounts). */
TALLY_MUST_CHECK tally_err tally_invoice_run(tally_ledger *l, const tally_invoice_run_opts *o,
                                             char *why, size_t cap);

typedef enum tally_doc_format {
    TALLY_FORMAT_JSON = 0,
    TALLY_FORMAT_CSV,
    TALLY_FORMAT_HTML
} tally_doc_format;
TALLY_MUST_CHECK tally_err tally_doc_format_from_name(const char *s, tally_doc_format *out);

/* Appends one invoice or credit note (finalized id, or "draft:<account>:<period>")
 * in a format. A finalized document's JSON is the stored canonical bytes,
 * exactly as hashed and signed. Errors: TALLY_NOT_FOUND, TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_invoice_show(tally_ledger *l, const char *id, tally_doc_format f,
                                              tally_buf *out);

/* Voids a finalized invoice through a numbered credit note that references
 * it, reverses its postings and restores the credits it consumed. Writes the
 * credit note id to cn_id. Errors: TALLY_NOT_FOUND, TALLY_FINALIZED (already
 * void, or a credit note), TALLY_CRYPTO, TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_invoice_void(tally_ledger *l, const char *id, const char *reason,
                                              const char *key_path, char *cn_id, size_t cap);

/* Appends a JSON array of the account's finalized invoices and credit notes:
 * [{"invoice_id","type","period","status","currency","subtotal","total_credits",
 *   "amount_due"}], oldest first. Errors: TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_invoice_list(tally_ledger *l, const char *account, tally_buf *out);

typedef enum tally_usage_by { TALLY_BY_SKU = 0, TALLY_BY_DAY, TALLY_BY_METER } tally_usage_by;

#define TALLY_USAGE_MAX_DAYS 400 /* the most days a report by day covers */

/* Appends a JSON object of the account's usage in [from_s, to_s) grouped
 * by sku, day (account's time zone) or meter, each group with its quantity
 * and running charges (rated as a draft would rate them, before credits):
 * {"account","currency","from","to","by","groups":[{"key","meter","quantity",
 *  "unit","amount"}],"total"}. Errors: TALLY_NOT_FOUND (account), TALLY_INVAL
 * (from_s >= to_s, or more than TALLY_USAGE_MAX_DAYS days by day), TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_usage_report(tally_ledger *l, const char *account, int64_t from_s,
                                              int64_t to_s, tally_usage_by by, tally_buf *out);

/* Appends the account's balance as JSON: the fields of tally_balance_json
 * (include/tally/balance.h), then credits left per grant and the
 * month-to-date charges: {...,"grants":[{"grant_id","kind",
 * "amount","remaining","priority","effective_at","expires_at","scope"}],
 * "credits_remaining","month_to_date":{"period","subtotal","credits",
 * "amount_due"}}. Lookups only, unless the balance is due a refresh
 * (tally_balance_get). Errors: TALLY_NOT_FOUND, TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_balance_report(tally_ledger *l, const char *account,
                                                tally_buf *out);

#endif
