/* The document layer: formats Tally reads and writes, with no storage.
 * Rate-card JSON (schemas/ratecard.schema.json) is parsed here; invoice
 * rendering (HTML, charts) lives here too. Pure apart from json-c. */
#ifndef TALLY_DOCUMENT_H
#define TALLY_DOCUMENT_H

#include <stdbool.h>
#include <stddef.h>

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

#endif
