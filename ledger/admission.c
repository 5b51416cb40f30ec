/* Admission: may an account start an instance it cannot pay for?
 * (include/tally/balance.h, SPEC section 9). A platform asks before it
 * starts an 8-card H100 for an hour; the answer uses the balance the ledger
 * keeps and today's price, and writes nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"
#include "tally/balance.h"
#include "tally/money.h"

static tally_err refuse(char *why, size_t cap, const char *what, const char *sku)
{
    if (why && cap)
        snprintf(why, cap, "%s%.63s%s", what, sku,
                 what[0] == 'u' ? "\" (not on the rate card in force)"
                                : " has no such pricing today");
    return TALLY_INVAL;
}

static tally_err bad_range(char *why, size_t cap, const char *msg)
{
    if (why && cap)
        snprintf(why, cap, "%s", msg);
    return TALLY_INVAL;
}

/* The spot price in force now: the point with the greatest from <= now. */
static tally_err spot_now(tally_ledger *l, const char *sku, int64_t now, int64_t *price,
                          bool *found)
{
    tally_spot_point *pts = NULL;
    int64_t *entered = NULL;
    size_t n = 0;
    int64_t best = INT64_MIN;
    tally_err e = ledger_spot_points(l, &pts, &entered, &n);
    for (size_t i = 0; !e && i < n; i++)
        if (strcmp(pts[i].sku, sku) == 0 && pts[i].from_s <= now && pts[i].from_s >= best) {
            best = pts[i].from_s;
            *price = pts[i].price_nano;
            *found = true;
        }
    free(pts);
    free(entered);
    return e;
}

/* Today's price per card-hour of sku at pricing. Reserved usage is billed
 * at on-demand where it goes beyond the committed cards (and costs nothing
 * more within them): its price here is the on-demand one. */
static tally_err price_now(tally_ledger *l, const tally_admission_req *r, int64_t now,
                           int64_t *price, int64_t *min_s, char *why, size_t cap)
{
    const tally_ratecard *const *cards;
    size_t n;
    tally_err e = ledger_cards(l, &cards, &n);
    if (e)
        return e;
    const tally_ratecard *card = tally_ratecard_at(cards, n, now);
    const tally_sku_price *sp = card ? tally_ratecard_sku(card, r->sku) : NULL;
    if (!sp)
        return refuse(why, cap, "unknown SKU \"", r->sku);
    *min_s = sp->min_billable_s;
    bool found = false;
    if (r->pricing == TALLY_PRICING_SPOT && sp->has_spot)
        e = spot_now(l, r->sku, now, price, &found);
    else if (r->pricing == TALLY_PRICING_RESERVED && sp->has_reserved && sp->has_on_demand)
        found = true, *price = sp->on_demand_nano;
    else if (r->pricing == TALLY_PRICING_ON_DEMAND && sp->has_on_demand)
        found = true, *price = sp->on_demand_nano;
    if (!e && !found)
        return refuse(why, cap, "SKU ", r->sku); /* the caller names the pricing */
    return e;
}

/* The cards of a reserved request that would be billed (SPEC section 2):
 * those beyond what the account's commitments of the SKU in force now leave
 * free once the reserved cards its instances reported in the last
 * TALLY_BALANCE_WINDOW_S seconds are counted (each instance at its most
 * cards). Usage not reported yet is not counted. */
static tally_err reserved_billed(tally_ledger *l, const tally_admission_req *r, int64_t now,
                                 int64_t *billed)
{
    tally_account a;
    inv_gatherer *g = NULL;
    inv_input x = {0};
    tally_err e = tally_ledger_account_get(l, r->account, &a);
    if (!e)
        e = inv_gatherer_create(l, &g);
    if (!e)
        e = inv_gather(g, &a, now - TALLY_BALANCE_WINDOW_S, now, false, &x);
    int64_t committed = 0, in_use = 0;
    for (size_t i = 0; !e && i < x.n_commitments; i++) {
        const tally_commitment *c = &x.commitments[i];
        if (strcmp(c->sku, r->sku) == 0 && c->from_s <= now && c->to_s > now)
            committed += c->cards;
    }
    const tally_interval **use = NULL; /* the reserved rows of the SKU in the window */
    size_t n = 0;
    if (!e && x.n_intervals && !(use = malloc(x.n_intervals * sizeof *use)))
        e = TALLY_NOMEM;
    for (size_t i = 0; !e && i < x.n_intervals; i++) {
        const tally_interval *iv = &x.intervals[i];
        if (iv->meter == TALLY_METER_ACCELERATOR && iv->pricing == TALLY_PRICING_RESERVED &&
            strcmp(iv->dim, r->sku) == 0 && iv->end_s > now - TALLY_BALANCE_WINDOW_S &&
            iv->start_s < now)
            use[n++] = iv;
    }
    for (size_t i = 0; i < n; i++) { /* each instance once, at its most cards */
        bool counted = false;
        for (size_t j = 0; j < n && !counted; j++)
            counted =
                j != i && strcmp(use[j]->resource, use[i]->resource) == 0 &&
                (use[j]->weight > use[i]->weight || (use[j]->weight == use[i]->weight && j < i));
        if (!counted)
            in_use += use[i]->weight;
    }
    free(use);
    int64_t free_cards = committed > in_use ? committed - in_use : 0;
    *billed = r->cards > free_cards ? r->cards - free_cards : 0;
    inv_input_release(&x);
    inv_gatherer_destroy(g);
    return e;
}

tally_err tally_admission_check(tally_ledger *l, const tally_admission_req *r, tally_admission *out,
                                char *why, size_t cap)
{
    memset(out, 0, sizeof *out);
    out->pricing = r->pricing == TALLY_PRICING_NONE ? TALLY_PRICING_ON_DEMAND : r->pricing;
    tally_admission_req q = *r;
    q.pricing = out->pricing;
    if (r->cards < 1 || r->cards > TALLY_CARDS_MAX)
        return bad_range(why, cap, "cards must be 1 to 65536");
    if (r->hours_nano <= 0 || r->hours_nano > TALLY_ADMISSION_HOURS_MAX * 1000000000LL)
        return bad_range(why, cap, "hours must be more than 0 and at most 8784");
    tally_balance b;
    tally_err e = tally_balance_get(l, r->account, &b);
    if (e)
        return e;
    int64_t now = tally_now_s(), min_s = 0;
    e = price_now(l, &q, now, &out->unit_price_nano, &min_s, why, cap);
    if (e)
        return e;
    snprintf(out->currency, sizeof out->currency, "%s", b.currency);
    out->minor_digits = b.minor_digits;
    out->balance_minor = b.balance_minor;
    out->stop_at_minor = b.limits.stop_at_minor;
    out->billed_cards = r->cards;
    if (q.pricing == TALLY_PRICING_RESERVED)
        e = reserved_billed(l, r, now, &out->billed_cards);
    if (e)
        return e;
    /* cards x hours_nano/10^9 card-hours x price_nano/10^9 x 10^digits; a run
     * shorter than the SKU's minimum is billed as the minimum: cards x min_s
     * card-seconds x price_nano/(3600 x 10^9) x 10^digits */
    bool minimum = min_s > 0 && (__int128)r->hours_nano * 3600 < (__int128)min_s * 1000000000;
    __int128 num = (__int128)out->billed_cards * out->unit_price_nano *
                   (minimum ? (__int128)min_s * 1000000000 : r->hours_nano);
    __int128 den = (__int128)1000000000 * 1000000000 * (minimum ? 3600 : 1);
    for (int i = 0; i < b.minor_digits; i++)
        num *= 10;
    e = tally_money_div_round(num, den, &out->cost_minor);
    if (e)
        return e;
    __int128 room = (__int128)b.balance_minor - b.limits.stop_at_minor;
    out->allowed = !b.controlled || room >= out->cost_minor;
    __int128 short_by = (__int128)out->cost_minor - room;
    out->shortfall_minor = out->allowed ? 0 : short_by > INT64_MAX ? INT64_MAX : (int64_t)short_by;
    return TALLY_OK;
}

static tally_err money(tally_buf *o, const char *key, int64_t v, int digits)
{
    tally_err e = tally_buf_printf(o, ",\"%s\":", key);
    return e ? e : inv_json_money(o, v, digits);
}

tally_err tally_admission_json(const tally_admission_req *r, const tally_admission *a, tally_buf *o)
{
    char hours[48], price[48];
    int d = a->minor_digits;
    tally_err e = tally_price_format(r->hours_nano, 0, hours, sizeof hours);
    if (!e)
        e = tally_price_format(a->unit_price_nano, 2, price, sizeof price);
    if (!e)
        e = tally_buf_printf(o, "{\"allowed\":%s,\"account\":", a->allowed ? "true" : "false");
    if (!e)
        e = tally_buf_json_str(o, r->account);
    if (!e)
        e = tally_buf_printf(o, ",\"currency\":\"%s\",\"sku\":", a->currency);
    if (!e)
        e = tally_buf_json_str(o, r->sku);
    if (!e)
        e = tally_buf_printf(o,
                             ",\"pricing\":\"%s\",\"cards\":%lld,\"billed_cards\":%lld,"
                             "\"hours\":\"%s\",\"unit_price\":\"%s\"",
                             tally_pricing_name(a->pricing), (long long)r->cards,
                             (long long)a->billed_cards, hours, price);
    if (!e)
        e = money(o, "cost", a->cost_minor, d);
    if (!e)
        e = money(o, "balance", a->balance_minor, d);
    if (!e)
        e = money(o, "stop_at", a->stop_at_minor, d);
    int64_t after = 0;
    if (!e)
        e = tally_money_sub(a->balance_minor, a->cost_minor, &after);
    if (!e)
        e = money(o, "balance_after", after, d);
    if (!e && !a->allowed)
        e = money(o, "shortfall", a->shortfall_minor, d);
    return e ? e : tally_buf_puts(o, "}");
}
