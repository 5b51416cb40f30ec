/* libFuzzer target for the rate card loader (tally_card_parse in
 * ledger/ratecard.c).
 *
 * Any bytes must either parse into a card that holds together, or be
 * refused with TALLY_PARSE, a reason, and nothing left allocated. A card
 * holds together when: its id is a valid name and its currency is known;
 * it lists at least one SKU, every SKU has an on-demand price, names are
 * bounded and unique, prices are non-negative, minimum durations are in
 * 0..86400 s; every array is sorted strictly (so lookups are unambiguous);
 * spot points belong to SKUs that declare spot pricing and every such SKU
 * has at least one; the card's pointers are its own arrays. Parsing the same
 * bytes twice gives the same card, and the rating lookups on it stay inside
 * it. Build: see bench/RESULTS.md (Reliability). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tally/document.h"
#include "tally/money.h"

#define FUZZ_MAX 65536

static void check(bool ok)
{
    if (!ok)
        abort();
}

static bool name_ok(const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    return n > 0 && n < cap;
}

static void check_skus(const tally_card *c)
{
    const tally_ratecard *card = &c->card;
    check(card->n_skus > 0 && card->skus == c->skus);
    for (size_t i = 0; i < card->n_skus; i++) {
        const tally_sku_price *s = &c->skus[i];
        check(name_ok(s->sku, sizeof s->sku) && s->has_on_demand && s->on_demand_nano >= 0);
        check(!s->has_reserved || s->reserved_nano >= 0);
        check(s->min_billable_s >= 0 && s->min_billable_s <= 86400);
        check(i == 0 || strcmp(c->skus[i - 1].sku, s->sku) < 0);
        check(tally_ratecard_sku(card, s->sku) == s);
        bool has_points = false;
        for (size_t k = 0; k < c->n_spot; k++)
            has_points |= strcmp(c->spot[k].sku, s->sku) == 0;
        check(has_points == s->has_spot);
    }
}

static void check_spot(const tally_card *c)
{
    for (size_t k = 0; k < c->n_spot; k++) {
        const tally_spot_point *p = &c->spot[k];
        const tally_sku_price *s = tally_ratecard_sku(&c->card, p->sku);
        check(s != NULL && s->has_spot && p->price_nano >= 0);
        if (k > 0) {
            int r = strcmp(c->spot[k - 1].sku, p->sku);
            check(r < 0 || (r == 0 && c->spot[k - 1].from_s < p->from_s));
        }
    }
}

static void check_dims(const tally_dim_price *d, size_t n, tally_meter m,
                       const tally_ratecard *card)
{
    for (size_t i = 0; i < n; i++) {
        check(name_ok(d[i].dim, sizeof d[i].dim) && d[i].price_nano >= 0);
        check(strnlen(d[i].dim2, sizeof d[i].dim2) < sizeof d[i].dim2);
        if (i > 0) {
            int r = strcmp(d[i - 1].dim, d[i].dim);
            check(r < 0 || (r == 0 && strcmp(d[i - 1].dim2, d[i].dim2) < 0));
        }
        int64_t price = -1;
        if (tally_ratecard_dim_price(card, m, d[i].dim, d[i].dim2, &price) == TALLY_OK)
            check(price >= 0);
    }
}

static void check_card(const tally_card *c)
{
    const tally_ratecard *card = &c->card;
    check(name_ok(card->id, sizeof card->id));
    check(strnlen(card->currency, sizeof card->currency) == 3);
    check(tally_currency_find(card->currency) != NULL);
    check(card->storage == c->storage && card->traffic == c->traffic && card->tokens == c->tokens);
    check_skus(c);
    check_spot(c);
    check_dims(c->storage, card->n_storage, TALLY_METER_STORAGE, card);
    check_dims(c->traffic, card->n_traffic, TALLY_METER_TRAFFIC, card);
    check_dims(c->tokens, card->n_tokens, TALLY_METER_TOKENS, card);
    const tally_ratecard *cards[] = {card};
    check(tally_ratecard_at(cards, 1, card->effective_from_s) == card);
}

static bool same_array(const void *a, const void *b, size_t n, size_t size)
{
    return n == 0 || memcmp(a, b, n * size) == 0;
}

/* Parsing is a function of the bytes: a second parse gives an equal card. */
static void check_again(const uint8_t *data, size_t size, const tally_card *first)
{
    tally_card again;
    char why[256] = "";
    check(tally_card_parse((const char *)data, size, &again, why, sizeof why) == TALLY_OK);
    const tally_ratecard *x = &first->card, *y = &again.card;
    check(strcmp(x->id, y->id) == 0 && strcmp(x->currency, y->currency) == 0);
    check(x->effective_from_s == y->effective_from_s && x->n_skus == y->n_skus);
    check(x->n_storage == y->n_storage && x->n_traffic == y->n_traffic);
    check(x->n_tokens == y->n_tokens && first->n_spot == again.n_spot);
    check(same_array(first->skus, again.skus, x->n_skus, sizeof *first->skus));
    check(same_array(first->storage, again.storage, x->n_storage, sizeof *first->storage));
    check(same_array(first->traffic, again.traffic, x->n_traffic, sizeof *first->traffic));
    check(same_array(first->tokens, again.tokens, x->n_tokens, sizeof *first->tokens));
    check(same_array(first->spot, again.spot, first->n_spot, sizeof *first->spot));
    tally_card_release(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tally_card c;
    char why[256] = "";
    if (size > FUZZ_MAX)
        return 0;
    tally_err e = tally_card_parse((const char *)data, size, &c, why, sizeof why);
    if (e != TALLY_OK) {
        check(e == TALLY_PARSE && why[0] != '\0' && strnlen(why, sizeof why) < sizeof why);
        check(c.skus == NULL && c.spot == NULL && c.storage == NULL && c.card.n_skus == 0);
        return 0;
    }
    check_card(&c);
    check_again(data, size, &c);
    tally_card_release(&c);
    return 0;
}
