/* Internal to the invoice engine (ledger/period.c, invoice_*.c): time zone
 * arithmetic, gathering one account's rating input from the ledger, the
 * canonical document model and its JSON/CSV forms. */
#ifndef TALLY_INVOICE_INT_H
#define TALLY_INVOICE_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "ledger_int.h"
#include "tally/invoice.h"
#include "tally/rating.h"

#define INV_ZERO_HASH "0000000000000000000000000000000000000000000000000000000000000000"

/* ---- invoice_gather.c: one account's rating input --------------------------- */

/* What a run reads once (rate cards, spot points) and the statements it
 * prepares once, reused for every account. */
typedef struct inv_gatherer inv_gatherer;

/* Errors: TALLY_DB, TALLY_PARSE (a stored card), TALLY_NOMEM. */
tally_err inv_gatherer_create(tally_ledger *l, inv_gatherer **out);
void inv_gatherer_destroy(inv_gatherer *g);

/* The prepared queries a gatherer holds (texts in invoice_gather.c). */
typedef enum inv_query {
    INV_Q_INTERVALS,
    INV_Q_POINTS,
    INV_Q_COMMITMENTS,
    INV_Q_GRANTS,
    INV_Q_LIVE,    /* ?1 account, ?2 period: the live finalized invoice */
    INV_Q_HISTORY, /* ?1 account, ?2 period: earlier live invoices, billed-up-to seq */
    INV_Q_LATE,    /* ?1 account, ?2 start, ?3 end, ?4 seq: later usage exists */
    INV_Q_BILLED,  /* ?1 invoice seq, ?2 account, ?3 period: lines billed for it */
    INV_Q_COUNT
} inv_query;

/* A prepared statement, reset and with its bindings cleared. */
sqlite3_stmt *inv_stmt(inv_gatherer *g, inv_query q);
/* The SQL text of a query (for running it on the shards of a ledger
 * directory, shard_int.h). */
const char *inv_query_sql(inv_query q);
tally_ledger *inv_gatherer_ledger(inv_gatherer *g);

/* One account's input for one window. Owns the arrays `in` borrows. */
typedef struct inv_input {
    tally_rating_input in;
    tally_account account;
    int64_t start_s, end_s; /* the window being rated */
    tally_interval *intervals;
    size_t n_intervals, cap_intervals;
    tally_point *points;
    size_t n_points, cap_points;
    tally_commitment *commitments;
    size_t n_commitments, cap_commitments;
    tally_grant *grants;
    size_t n_grants, cap_grants;
    size_t n_in_window; /* intervals overlapping [start, end), plus points */
} inv_input;

void inv_input_release(inv_input *x);

/* Fills x for acct over [start_s, end_s): cards, spot, usage (intervals a day
 * either side), commitments overlapping the window and, if with_grants,
 * grants of the account's currency touching it that have money left, with
 * their remaining balance. x must be zeroed or previously filled (its memory
 * is reused). Errors: TALLY_UNKNOWN_CURRENCY, TALLY_DB, TALLY_NOMEM. */
tally_err inv_gather(inv_gatherer *g, const tally_account *acct, int64_t start_s, int64_t end_s,
                     bool with_grants, inv_input *x);

/* ---- invoice_adjust.c: late usage in finalized periods --------------------- */

/* Appends to *lines (realloc'd; *n and *cap updated) the adjustment lines for
 * usage that arrived after earlier live finalized periods of acct (before
 * `period`) were billed: each such period is re-rated now and compared with
 * what was billed for it. scratch is working memory.
 * Errors: those of inv_gather, tally_rate_period and tally_lines_diff. */
tally_err inv_adjustments(inv_gatherer *g, const tally_account *acct, const char *period,
                          inv_input *scratch, tally_line **lines, size_t *n, size_t *cap, char *why,
                          size_t why_cap);

/* ---- invoice_json.c: the document model and its formats --------------------- */

typedef struct inv_doc {
    const char *invoice_id; /* INV-..., CN-..., draft:<account>:<period> */
    bool credit_note;
    int64_t number; /* 0 for drafts */
    const char *account;
    const char *currency;
    int minor_digits;
    bool finalized;
    const char *period; /* YYYY-MM */
    int64_t period_start_s, period_end_s;
    const char *timezone;
    int64_t issued_at_s;
    const tally_line *lines;
    size_t n_lines;
    const tally_credit_use *credits; /* line_index refers to lines */
    size_t n_credits;
    int64_t subtotal_minor, total_credits_minor, amount_due_minor;
    const char *refers_to; /* credit notes */
    const char *reason;    /* credit notes */
    const char *prev_hash; /* "" for drafts */
} inv_doc;

/* Appends the canonical JSON of d. For finalized documents it computes the
 * hash over the bytes up to the prev_hash value plus '}' and signs it with
 * key_path; hash_hex and sig_hex receive them (may be NULL).
 * Errors: TALLY_NOMEM, TALLY_TOO_LARGE, TALLY_OVERFLOW, TALLY_CRYPTO,
 * TALLY_NOT_FOUND (key). */
tally_err inv_doc_json(const inv_doc *d, const char *key_path, tally_buf *out, char hash_hex[65],
                       char sig_hex[129]);

/* Appends the CSV form of a canonical JSON document (header + one row per
 * line). Errors: TALLY_PARSE, TALLY_NOMEM, TALLY_TOO_LARGE. */
tally_err inv_doc_csv(const char *doc, size_t len, tally_buf *out);

/* Decimal parse of a quantity as stored ("-12345"), into __int128.
 * Errors: TALLY_PARSE, TALLY_OVERFLOW. */
tally_err inv_i128_parse(const char *s, __int128 *out);

/* Copies a text column into dst (cap bytes, truncated), "" for NULL. */
void inv_col_text(sqlite3_stmt *st, int col, char *dst, size_t cap);

/* The columns to SELECT from invoice_lines for inv_line_from_row, in order. */
#define INV_LINE_COLS                                                                              \
    "kind, meter, pricing, migration, sku, dim2, quantity, unit_price_nano, amount_minor, "        \
    "adjusts, original_period"

/* Decodes one stored invoice line from columns 0..10 of st, selected as
 * INV_LINE_COLS, exactly as stored (an adjustment keeps kind ADJUSTMENT and
 * the kind it adjusts in `adjusts`). Errors: TALLY_DB (a field does not
 * parse: the stored line is damaged). */
tally_err inv_line_from_row(sqlite3_stmt *st, tally_line *ln);

/* Appends money (minor units) as a JSON string in major units. */
tally_err inv_json_money(tally_buf *b, int64_t minor, int digits);
/* Appends a UTC time as a JSON string "YYYY-MM-DDTHH:MM:SSZ". */
tally_err inv_json_time(tally_buf *b, int64_t t_s);

/* ---- invoice_store.c: finalized documents ---------------------------------- */

/* A sealed document: its bytes, hash and signature, and the usage_seq it
 * bills up to. */
typedef struct inv_sealed {
    const char *doc;
    size_t len;
    char hash[65];
    char signature[129];
    int64_t usage_seq;
} inv_sealed;

/* Inside the caller's transaction. Errors: TALLY_DB. inv_usage_seq gives
 * meta.usage_seq, or in a ledger directory the id of a new usage snapshot
 * (shard_int.h). */
tally_err inv_next_number(tally_ledger *l, const char *doc_type, int year, int64_t *number);
tally_err inv_usage_seq(tally_ledger *l, int64_t *seq);
/* The hash of the newest finalized document, or 64 zeros. */
tally_err inv_last_hash(tally_ledger *l, char hash[65]);
/* Inserts the invoices row, its lines and credits. Errors: TALLY_DB. */
tally_err inv_store(tally_ledger *l, const inv_doc *d, const inv_sealed *s);
/* Posts an invoice's entry (see invoice_store.c). Errors: TALLY_DB,
 * TALLY_INVAL, TALLY_OVERFLOW, TALLY_NOMEM. */
tally_err inv_post_invoice(tally_ledger *l, const inv_doc *d);

/* ---- invoice_files.c -------------------------------------------------------- */

/* Writes <account>-<period>.{json,csv,html} of a document into dir (the
 * account id percent-encoded where it is not a safe file name).
 * Errors: TALLY_IO (why names the file), and those of the formats. */
tally_err inv_write_files(tally_ledger *l, const char *dir, const char *account, const char *period,
                          const char *doc, size_t len, char *why, size_t cap);

#endif
