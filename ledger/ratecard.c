/* Rate cards: loading into the ratecards table and the per-connection cache
 * of parsed cards (parsing is document/ratecard_parse.c). */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"

/* ---- The cache ------------------------------------------------------------ */

void ledger_cards_clear(tally_ledger *l)
{
    for (size_t i = 0; i < l->n_cards; i++)
        tally_card_release(&l->cards[i]);
    free(l->cards);
    free(l->card_ptrs);
    free(l->card_entered_s);
    l->cards = NULL;
    l->card_ptrs = NULL;
    l->card_entered_s = NULL;
    l->n_cards = 0;
    l->cards_version = -1;
}

/* Rate cards are never updated or deleted (triggers), so the row count and
 * the highest rowid change exactly when a card is loaded, by any process. */
static tally_err cards_version(tally_ledger *l, int64_t *v)
{
    sqlite3_stmt **st = &l->st_cards_version;
    *v = 0;
    tally_err e = TALLY_OK;
    if (!*st)
        e = ledger_prepare(l, "SELECT count(*), coalesce(max(rowid), 0) FROM ratecards", st);
    if (e != TALLY_OK)
        return e;
    int rc = sqlite3_step(*st);
    if (rc == SQLITE_ROW)
        *v = (sqlite3_column_int64(*st, 0) << 32) ^ sqlite3_column_int64(*st, 1);
    else
        e = ledger_sqlite_err(l, rc);
    sqlite3_reset(*st);
    return e;
}

static tally_err cards_append(tally_ledger *l, const char *body, size_t len, int64_t entered_s,
                              size_t *alloc)
{
    char why[200];
    if (l->n_cards == *alloc) {
        size_t n = *alloc ? *alloc * 2 : 4;
        tally_card *grown = realloc(l->cards, n * sizeof *grown);
        if (grown)
            l->cards = grown;
        int64_t *at = grown ? realloc(l->card_entered_s, n * sizeof *at) : NULL;
        if (!at)
            return TALLY_NOMEM;
        l->card_entered_s = at;
        *alloc = n;
    }
    l->card_entered_s[l->n_cards] = entered_s;
    if (tally_card_parse(body, len, &l->cards[l->n_cards], why, sizeof why) != TALLY_OK) {
        snprintf(l->errmsg, sizeof l->errmsg, "a stored rate card no longer parses: %s", why);
        return TALLY_PARSE;
    }
    l->n_cards++;
    return TALLY_OK;
}

static tally_err cards_reload(tally_ledger *l)
{
    sqlite3_stmt *st;
    size_t alloc = 0;
    int rc;
    ledger_cards_clear(l);
    tally_err e = ledger_prepare(
        l, "SELECT body, coalesce(entered_at, loaded_at) FROM ratecards ORDER BY effective_from",
        &st);
    while (e == TALLY_OK && (rc = sqlite3_step(st)) == SQLITE_ROW)
        e = cards_append(l, (const char *)sqlite3_column_text(st, 0),
                         (size_t)sqlite3_column_bytes(st, 0), sqlite3_column_int64(st, 1), &alloc);
    if (e == TALLY_OK && rc != SQLITE_DONE)
        e = ledger_sqlite_err(l, rc);
    sqlite3_finalize(st);
    if (e == TALLY_OK && l->n_cards && !(l->card_ptrs = malloc(l->n_cards * sizeof *l->card_ptrs)))
        e = TALLY_NOMEM;
    for (size_t i = 0; e == TALLY_OK && i < l->n_cards; i++)
        l->card_ptrs[i] = &l->cards[i].card;
    if (e != TALLY_OK)
        ledger_cards_clear(l);
    return e;
}

tally_err ledger_cards(tally_ledger *l, const tally_ratecard *const **cards, size_t *n)
{
    int64_t v;
    tally_err e = cards_version(l, &v);
    if (e == TALLY_OK && v != l->cards_version) {
        e = cards_reload(l);
        if (e == TALLY_OK)
            l->cards_version = v;
    }
    *cards = e == TALLY_OK ? l->card_ptrs : NULL;
    *n = e == TALLY_OK ? l->n_cards : 0;
    return e;
}

/* ---- Loading -------------------------------------------------------------- */

static tally_err check_loaded(tally_ledger *l, const tally_card *card, char *why, size_t cap)
{
    const tally_ratecard *const *cards;
    size_t n;
    tally_err e = ledger_cards(l, &cards, &n);
    for (size_t i = 0; e == TALLY_OK && i < n; i++) {
        const tally_card *old = &l->cards[i];
        if (strcmp(old->card.id, card->card.id) == 0) {
            e = tally_card_equal(old, card) ? TALLY_EXISTS : TALLY_EXISTS_DIFFERENT;
            snprintf(why, cap, "rate card %s is already loaded%s", card->card.id,
                     e == TALLY_EXISTS ? "" : " with different content");
        } else if (old->card.effective_from_s == card->card.effective_from_s) {
            e = TALLY_EXISTS_DIFFERENT;
            snprintf(why, cap, "rate card %s already takes effect at that time", old->card.id);
        } else if (strcmp(old->card.currency, card->card.currency) != 0) {
            e = TALLY_PARSE;
            snprintf(why, cap, "currency %s differs from the loaded cards' %s", card->card.currency,
                     old->card.currency);
        }
    }
    if (e == TALLY_DB || e == TALLY_IO || e == TALLY_BUSY)
        snprintf(why, cap, "%s", l->errmsg);
    return e;
}

static tally_err insert_card(tally_ledger *l, const tally_card *card, const char *json, size_t len)
{
    sqlite3_stmt *st;
    int64_t now = tally_now_s();
    tally_err e = ledger_prepare(l,
                                 "INSERT INTO ratecards(id, currency, effective_from, body, "
                                 "loaded_at, entered_at) VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
                                 &st);
    if (e != TALLY_OK)
        return e;
    sqlite3_bind_text(st, 1, card->card.id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, card->card.currency, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, card->card.effective_from_s);
    sqlite3_bind_text(st, 4, json, (int)len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, now);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return ledger_sqlite_err(l, rc);
    e = ledger_prepare(l,
                       "INSERT INTO spot_prices(sku, from_s, price_nano, origin, created_at, "
                       "entered_at) VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
                       &st);
    for (size_t i = 0; e == TALLY_OK && i < card->n_spot; i++) {
        sqlite3_bind_text(st, 1, card->spot[i].sku, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, card->spot[i].from_s);
        sqlite3_bind_int64(st, 3, card->spot[i].price_nano);
        sqlite3_bind_text(st, 4, card->card.id, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, now);
        if ((rc = sqlite3_step(st)) != SQLITE_DONE)
            e = ledger_sqlite_err(l, rc);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    return e;
}

tally_err tally_ledger_ratecard_load(tally_ledger *l, const char *json, size_t len, char *why,
                                     size_t cap)
{
    char local[256];
    tally_card card;
    if (!why || cap == 0) {
        why = local;
        cap = sizeof local;
    }
    tally_err e = tally_card_parse(json, len, &card, why, cap);
    if (e != TALLY_OK)
        return e;
    e = ledger_begin(l);
    if (e == TALLY_OK)
        e = check_loaded(l, &card, why, cap);
    if (e == TALLY_OK) {
        e = insert_card(l, &card, json, len);
        if (e == TALLY_OK) /* the new card prices running charges from its time on */
            e = ledger_balance_refresh_all(l, "price");
        if (e == TALLY_OK)
            e = ledger_commit(l);
        else
            ledger_rollback(l);
        if (e != TALLY_OK)
            snprintf(why, cap, "%s", l->errmsg);
    } else {
        ledger_rollback(l);
    }
    tally_card_release(&card);
    return e;
}

/* Room for one more spot point and its entry time. */
static tally_err spot_grow(tally_spot_point **out, int64_t **entered_s, size_t n, size_t *alloc)
{
    if (n < *alloc)
        return TALLY_OK;
    size_t grow = *alloc ? *alloc * 2 : 16;
    tally_spot_point *p = realloc(*out, grow * sizeof *p);
    if (p)
        *out = p;
    int64_t *at = p ? realloc(*entered_s, grow * sizeof *at) : NULL;
    if (!at)
        return TALLY_NOMEM;
    *entered_s = at;
    *alloc = grow;
    return TALLY_OK;
}

tally_err ledger_spot_points(tally_ledger *l, tally_spot_point **out, int64_t **entered_s,
                             size_t *n)
{
    sqlite3_stmt *st;
    size_t alloc = 0;
    int rc;
    *out = NULL;
    *entered_s = NULL;
    *n = 0;
    /* By id: at equal from_s the later row wins, so callers that sort stably
     * by (sku, from_s) keep the winner last. */
    tally_err e = ledger_cached(l,
                                "SELECT sku, from_s, price_nano, coalesce(entered_at, created_at) "
                                "FROM spot_prices ORDER BY id",
                                &st);
    while (e == TALLY_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if ((e = spot_grow(out, entered_s, *n, &alloc)) != TALLY_OK)
            break;
        tally_spot_point *sp = &(*out)[*n];
        snprintf(sp->sku, sizeof sp->sku, "%s", (const char *)sqlite3_column_text(st, 0));
        sp->from_s = sqlite3_column_int64(st, 1);
        sp->price_nano = sqlite3_column_int64(st, 2);
        (*entered_s)[(*n)++] = sqlite3_column_int64(st, 3);
    }
    if (e == TALLY_OK)
        e = ledger_cached_done(l, st, rc);
    else if (st)
        (void)ledger_cached_done(l, st, SQLITE_DONE);
    if (e != TALLY_OK) {
        free(*out);
        free(*entered_s);
        *out = NULL;
        *entered_s = NULL;
        *n = 0;
    }
    return e;
}
