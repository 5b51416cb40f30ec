/* Rate card lookups: which card is in force, what a SKU or a dimensioned
 * meter costs under it, and whether an event can be priced at all (the
 * ingest-time unknown_sku / no_price check).
 *
 * Lookups are linear scans: a card holds a handful of SKUs and dimensions, so
 * a scan is both the simplest and, at this size, the fastest choice. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "tally/rating.h"

/* Cards are sorted by effective_from_s; the card in force at t is the one
 * with the greatest effective_from_s <= t. Binary search: rating asks this
 * for every piece of usage. */
const tally_ratecard *tally_ratecard_at(const tally_ratecard *const *cards, size_t n, int64_t t_s)
{
    size_t lo = 0, hi = n; /* first index with effective_from_s > t_s */

    if (cards == NULL || n == 0)
        return NULL;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        assert(mid == 0 || cards[mid - 1]->effective_from_s <= cards[mid]->effective_from_s);
        if (cards[mid]->effective_from_s <= t_s)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo == 0 ? NULL : cards[lo - 1];
}

const tally_sku_price *tally_ratecard_sku(const tally_ratecard *card, const char *sku)
{
    if (card == NULL || sku == NULL)
        return NULL;
    for (size_t i = 0; i < card->n_skus; i++)
        if (strcmp(card->skus[i].sku, sku) == 0)
            return &card->skus[i];
    return NULL;
}

static const tally_dim_price *find_dim(const tally_dim_price *tab, size_t n, const char *dim,
                                       const char *dim2)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(tab[i].dim, dim) == 0 && strcmp(tab[i].dim2, dim2) == 0)
            return &tab[i];
    return NULL;
}

/* Storage: dim = class (dim2 is ignored: classes have one price).
 * Traffic: dim = scope, dim2 = direction, both must match.
 * Tokens: dim = model, dim2 = kind; an entry naming the model wins over the
 * "*" entry for that kind. */
tally_err tally_ratecard_dim_price(const tally_ratecard *card, tally_meter m, const char *dim,
                                   const char *dim2, int64_t *price_nano)
{
    const tally_dim_price *p = NULL;

    if (card == NULL || dim == NULL || price_nano == NULL)
        return TALLY_NO_PRICE;
    if (dim2 == NULL)
        dim2 = "";
    switch (m) {
    case TALLY_METER_STORAGE:
        p = find_dim(card->storage, card->n_storage, dim, "");
        break;
    case TALLY_METER_TRAFFIC:
        p = find_dim(card->traffic, card->n_traffic, dim, dim2);
        break;
    case TALLY_METER_TOKENS:
        p = find_dim(card->tokens, card->n_tokens, dim, dim2);
        if (p == NULL)
            p = find_dim(card->tokens, card->n_tokens, "*", dim2);
        break;
    default:
        break;
    }
    if (p == NULL)
        return TALLY_NO_PRICE;
    *price_nano = p->price_nano;
    return TALLY_OK;
}

static void set_reason(char *reason, size_t cap, const char *why)
{
    if (reason != NULL && cap > 0)
        snprintf(reason, cap, "%s", why);
}

/* Whether one card can price an event's SKU with its pricing. */
static tally_err check_sku(const tally_ratecard *card, const tally_event *ev)
{
    const tally_sku_price *sp = tally_ratecard_sku(card, ev->dim);

    if (sp == NULL)
        return TALLY_NOT_FOUND;
    switch (ev->pricing) {
    case TALLY_PRICING_ON_DEMAND:
        return sp->has_on_demand ? TALLY_OK : TALLY_NO_PRICE;
    case TALLY_PRICING_RESERVED:
        return sp->has_reserved ? TALLY_OK : TALLY_NO_PRICE;
    case TALLY_PRICING_SPOT:
        /* The spot series itself lives in the rating input's spot points;
         * a card says only whether the SKU may be rented on spot. */
        return sp->has_spot ? TALLY_OK : TALLY_NO_PRICE;
    default:
        return TALLY_NO_PRICE;
    }
}

static tally_err check_one(const tally_ratecard *card, const tally_event *ev)
{
    int64_t price;

    if (card == NULL)
        return TALLY_NO_PRICE;
    if (ev->meter == TALLY_METER_ACCELERATOR)
        return check_sku(card, ev);
    return tally_ratecard_dim_price(card, ev->meter, ev->dim, ev->dim2, &price);
}

/* Checks the card in force at the event's time and, for an event that lasts
 * several seconds, every card that takes over before it ends: each of its
 * seconds is priced by its own card. */
tally_err tally_ratecard_check_event(const tally_ratecard *const *cards, size_t n,
                                     const tally_event *ev, char *reason, size_t cap)
{
    tally_err err;
    int64_t end_s;

    if (ev == NULL || (int)ev->meter < 0 || ev->meter >= TALLY_METER_COUNT)
        return TALLY_INVAL;
    err = check_one(tally_ratecard_at(cards, n, ev->time_s), ev);
    if (err == TALLY_OK && ev->seconds > 1 &&
        !__builtin_add_overflow(ev->time_s, ev->seconds, &end_s)) {
        for (size_t i = 0; i < n && err == TALLY_OK; i++)
            if (cards[i]->effective_from_s > ev->time_s && cards[i]->effective_from_s < end_s)
                err = check_one(cards[i], ev);
    }
    if (err == TALLY_NOT_FOUND)
        set_reason(reason, cap, "unknown_sku");
    else if (err != TALLY_OK)
        set_reason(reason, cap, "no_price");
    return err;
}
