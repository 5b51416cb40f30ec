/* The document layer: formats Tally reads and writes, with no storage:
 * rate-card JSON (schemas/ratecard.schema.json), the invoice page (HTML with
 * its usage charts) and invoice file names. Pure apart from json-c. */
#ifndef TALLY_DOCUMENT_H
#define TALLY_DOCUMENT_H

#include <stdbool.h>
#include <stddef.h>

#include "tally/buf.h"
#include "tally/err.h"
#include "tally/rating.h"

/* A parsed rate card with the arrays it owns. */
typedef struct tally_card {
    tally_ratecard card; /* points into the arrays below */
    tally_sku_price *skus;
    tally_dim_price *storage, *traffic, *tokens;
    tally_spot_point *spot; /* the card's own spot points */
    size_t n_spot;
} tally_card;

/* Parses a rate card's JSON into *out (arrays allocated; free with
 * tally_card_release). Errors: TALLY_PARSE with why filled. */
TALLY_MUST_CHECK tally_err tally_card_parse(const char *json, size_t len, tally_card *out,
                                            char *why, size_t cap);
void tally_card_release(tally_card *c);

/* Whether two parsed cards say the same (their JSON may differ in order and
 * spacing). */
bool tally_card_equal(const tally_card *a, const tally_card *b);

/* ---- The invoice page (document/html.c, document/html_chart.c) ----------- */

/* A credit grant's window and scope, for the page's credits table. */
typedef struct tally_grant_window {
    int64_t effective_s;
    bool expires;
    int64_t expires_s;
    tally_buf *scope; /* the caller's buffer; the scope as stored, "" for none */
} tally_grant_window;

/* One stored usage row: an interval of weight over [start_s, end_s), or
 * (end_s 0) a point of qty at start_s. meter is a tally_meter. */
typedef tally_err (*tally_usage_row_fn)(void *ctx, int meter, int64_t qty, int64_t start_s,
                                        int64_t end_s);

/* What the page shows beyond the signed document, from wherever it is
 * stored (the ledger supplies one: ledger/page_source.c). Each function
 * returns TALLY_OK or its store's error, which fails the page. */
typedef struct tally_page_source {
    void *ctx;
    /* The account's display name into out ("" if it has none). */
    tally_err (*account_name)(void *ctx, const char *account, char *out, size_t cap);
    /* The grant's window; TALLY_NOT_FOUND if the store has no such grant. */
    tally_err (*grant_window)(void *ctx, int64_t grant, tally_grant_window *out);
    /* Calls fn for the account's intervals (points false) or points (true)
     * that overlap [start_s, end_s). */
    tally_err (*usage)(void *ctx, const char *account, int64_t start_s, int64_t end_s, bool points,
                       tally_usage_row_fn fn, void *fn_ctx);
} tally_page_source;

/* Appends a self-contained, printable HTML page for a canonical invoice or
 * credit note (doc[0..len)). src may be NULL: the page then has no account
 * name, grant windows or usage chart. On error nothing is appended.
 * Errors: TALLY_PARSE (not a Tally document), TALLY_NOMEM, src's errors. */
TALLY_MUST_CHECK tally_err tally_invoice_html(const char *doc, size_t len,
                                              const tally_page_source *src, tally_buf *out);

/* A canonical document parsed once, for a caller that renders it more than
 * one way (`invoice run --out`: CSV and HTML): *out is a json-c object the
 * caller releases with json_object_put. Errors: TALLY_PARSE (not a JSON
 * object), TALLY_TOO_LARGE, TALLY_NOMEM. */
struct json_object;
TALLY_MUST_CHECK tally_err tally_invoice_parse(const char *doc, size_t len,
                                               struct json_object **out);
/* tally_invoice_html of a document tally_invoice_parse gave (root stays
 * the caller's). */
TALLY_MUST_CHECK tally_err tally_invoice_html_parsed(struct json_object *root,
                                                     const tally_page_source *src, tally_buf *out);

/* Appends "[dir/]<account>-<period>.<ext>", the name `invoice run --out`
 * writes, with bytes unsafe in a file name %-escaped. dir may be NULL. */
TALLY_MUST_CHECK tally_err tally_invoice_file_name(tally_buf *b, const char *dir,
                                                   const char *account, const char *period,
                                                   const char *ext);

#endif
