/* Rate-card parsing: JSON (schemas/ratecard.schema.json) -> tally_card.
 * Storing cards is the ledger's (ledger/ratecard.c).
 *
 * Parsing is strict, like the schema (additionalProperties: false): an
 * unknown field is an error rather than a price that is silently ignored.
 * Prices must be JSON strings, parsed exactly by tally_price_parse; a JSON
 * number has usually been rounded to binary by whatever produced it.
 * Arrays are sorted (SKUs and dimensions by name, spot points by SKU then
 * time) so that two cards with the same content compare equal however their
 * JSON was ordered or spaced. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "tally/document.h"

#define CARD_JSON_DEPTH 16
#define PATH_BASE_MAX   96  /* "accelerators.<sku>" */
#define WHY_PATH_MAX    192 /* a base path and a field or index */

/* Parse state: the error text goes to why (cap bytes). */
typedef struct parse_ctx {
    char *why;
    size_t cap;
} parse_ctx;

static tally_err fail(parse_ctx *c, const char *path, const char *msg)
{
    if (c->why && c->cap > 0)
        snprintf(c->why, c->cap, "%s%s%s", path, *path ? ": " : "", msg);
    return TALLY_PARSE;
}

/* Names that can appear in scopes and events: [A-Za-z0-9._-], and "*" alone
 * as the token model wildcard. */
static bool valid_name(const char *s, size_t max, bool star_ok)
{
    size_t n = strlen(s);
    if (n == 0 || n >= max)
        return false;
    if (star_ok && strcmp(s, "*") == 0)
        return true;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-'))
            return false;
    }
    return true;
}

static tally_err parse_price(parse_ctx *c, const char *path, json_object *v, int64_t *out)
{
    const char *why = NULL;
    if (!json_object_is_type(v, json_type_string))
        return fail(c, path, "a price must be a decimal string such as \"1.90\", not a number");
    tally_err e = tally_price_parse(json_object_get_string(v),
                                    (size_t)json_object_get_string_len(v), false, out, &why);
    if (e != TALLY_OK)
        return fail(c, path, why ? why : "not a decimal price");
    return TALLY_OK;
}

static tally_err parse_time(parse_ctx *c, const char *path, json_object *v, int64_t *out)
{
    if (!json_object_is_type(v, json_type_string) ||
        tally_time_parse(json_object_get_string(v), (size_t)json_object_get_string_len(v), out) !=
            TALLY_OK)
        return fail(c, path, "not an RFC 3339 time such as \"2026-01-01T00:00:00Z\"");
    return TALLY_OK;
}

/* Fails on any key of obj that is not in allowed (NULL-terminated). */
static tally_err only_keys(parse_ctx *c, const char *path, json_object *obj,
                           const char *const *allowed)
{
    char p[WHY_PATH_MAX];
    json_object_object_foreach(obj, key, val)
    {
        (void)val;
        size_t i = 0;
        while (allowed[i] && strcmp(allowed[i], key) != 0)
            i++;
        if (!allowed[i]) {
            snprintf(p, sizeof p, "%s%s%s", path, *path ? "." : "", key);
            return fail(c, p, "unknown field");
        }
    }
    return TALLY_OK;
}

static tally_err need_object(parse_ctx *c, const char *path, json_object *v)
{
    return json_object_is_type(v, json_type_object) ? TALLY_OK
                                                    : fail(c, path, "must be a JSON object");
}

/* ---- Accelerators -------------------------------------------------------- */

static tally_err parse_spot(parse_ctx *c, const char *sku, json_object *arr, tally_card *out)
{
    static const char *const keys[] = {"from", "price", NULL};
    char path[PATH_BASE_MAX], p[WHY_PATH_MAX];
    snprintf(path, sizeof path, "accelerators.%s.spot", sku);
    size_t n = json_object_is_type(arr, json_type_array) ? json_object_array_length(arr) : 0;
    if (n == 0)
        return fail(c, path, "must be a non-empty array of {from, price}");
    for (size_t i = 0; i < n; i++) {
        json_object *pt = json_object_array_get_idx(arr, i), *v;
        tally_spot_point *sp = &out->spot[out->n_spot];
        snprintf(p, sizeof p, "%s[%zu]", path, i);
        tally_err e = need_object(c, p, pt);
        if (e == TALLY_OK)
            e = only_keys(c, p, pt, keys);
        if (e != TALLY_OK)
            return e;
        snprintf(sp->sku, sizeof sp->sku, "%s", sku);
        snprintf(p, sizeof p, "%s[%zu].from", path, i);
        e = json_object_object_get_ex(pt, "from", &v) ? parse_time(c, p, v, &sp->from_s)
                                                      : fail(c, p, "missing");
        snprintf(p, sizeof p, "%s[%zu].price", path, i);
        if (e == TALLY_OK)
            e = json_object_object_get_ex(pt, "price", &v) ? parse_price(c, p, v, &sp->price_nano)
                                                           : fail(c, p, "missing");
        if (e != TALLY_OK)
            return e;
        out->n_spot++;
    }
    return TALLY_OK;
}

static tally_err parse_min_billable(parse_ctx *c, const char *path, json_object *v, int64_t *out)
{
    if (!json_object_is_type(v, json_type_int))
        return fail(c, path, "must be an integer number of seconds");
    int64_t s = json_object_get_int64(v);
    if (s < 0 || s > 86400)
        return fail(c, path, "must be between 0 and 86400");
    *out = s;
    return TALLY_OK;
}

static tally_err parse_sku(parse_ctx *c, const char *sku, json_object *obj, tally_card *out,
                           tally_sku_price *sp)
{
    static const char *const keys[] = {"on_demand", "reserved", "min_billable_seconds", "spot",
                                       NULL};
    char path[PATH_BASE_MAX], p[WHY_PATH_MAX];
    json_object *v;
    snprintf(path, sizeof path, "accelerators.%s", sku);
    if (!valid_name(sku, sizeof sp->sku, false))
        return fail(c, path, "a SKU is 1-63 characters of [A-Za-z0-9._-]");
    tally_err e = need_object(c, path, obj);
    if (e == TALLY_OK)
        e = only_keys(c, path, obj, keys);
    if (e != TALLY_OK)
        return e;
    snprintf(sp->sku, sizeof sp->sku, "%s", sku);
    snprintf(p, sizeof p, "%s.on_demand", path);
    if (!json_object_object_get_ex(obj, "on_demand", &v))
        return fail(c, p, "missing (every SKU has an on-demand price)");
    sp->has_on_demand = true;
    e = parse_price(c, p, v, &sp->on_demand_nano);
    snprintf(p, sizeof p, "%s.reserved", path);
    if (e == TALLY_OK && (sp->has_reserved = json_object_object_get_ex(obj, "reserved", &v)))
        e = parse_price(c, p, v, &sp->reserved_nano);
    snprintf(p, sizeof p, "%s.min_billable_seconds", path);
    if (e == TALLY_OK && json_object_object_get_ex(obj, "min_billable_seconds", &v))
        e = parse_min_billable(c, p, v, &sp->min_billable_s);
    if (e == TALLY_OK && (sp->has_spot = json_object_object_get_ex(obj, "spot", &v)))
        e = parse_spot(c, sku, v, out);
    return e;
}

static tally_err parse_accelerators(parse_ctx *c, json_object *acc, tally_card *out)
{
    size_t n = 0, n_spot = 0;
    tally_err e = need_object(c, "accelerators", acc);
    if (e != TALLY_OK)
        return e;
    json_object_object_foreach(acc, k0, v0)
    {
        json_object *spot;
        (void)k0;
        n++;
        if (json_object_is_type(v0, json_type_object) &&
            json_object_object_get_ex(v0, "spot", &spot) &&
            json_object_is_type(spot, json_type_array))
            n_spot += json_object_array_length(spot);
    }
    if (n == 0)
        return fail(c, "accelerators", "lists no SKU");
    out->skus = calloc(n, sizeof *out->skus);
    out->spot = n_spot ? calloc(n_spot, sizeof *out->spot) : NULL;
    if (!out->skus || (n_spot && !out->spot))
        return fail(c, "", "out of memory");
    json_object_object_foreach(acc, key, val)
    {
        e = parse_sku(c, key, val, out, &out->skus[out->card.n_skus]);
        if (e != TALLY_OK)
            return e;
        out->card.n_skus++;
    }
    return TALLY_OK;
}

/* ---- Dimensioned meters -------------------------------------------------- */

/* Counts the prices of a two-level object {dim: {dim2: price}}. */
static size_t count_nested(json_object *obj)
{
    size_t n = 0;
    json_object_object_foreach(obj, k, v)
    {
        (void)k;
        n += json_object_is_type(v, json_type_object) ? (size_t)json_object_object_length(v) : 1;
    }
    return n;
}

static tally_err add_dim(parse_ctx *c, const char *path, const char *dim, const char *dim2,
                         json_object *price, tally_dim_price *tab, size_t *n)
{
    tally_dim_price *d = &tab[*n];
    snprintf(d->dim, sizeof d->dim, "%s", dim);
    snprintf(d->dim2, sizeof d->dim2, "%s", dim2);
    tally_err e = parse_price(c, path, price, &d->price_nano);
    if (e == TALLY_OK)
        (*n)++;
    return e;
}

/* storage: {class: price}. */
static tally_err parse_storage(parse_ctx *c, json_object *obj, tally_card *out)
{
    char p[WHY_PATH_MAX];
    tally_err e = need_object(c, "storage", obj);
    size_t n = e == TALLY_OK ? (size_t)json_object_object_length(obj) : 0;
    if (e != TALLY_OK || n == 0)
        return e;
    if (!(out->storage = calloc(n, sizeof *out->storage)))
        return fail(c, "", "out of memory");
    json_object_object_foreach(obj, cls, price)
    {
        snprintf(p, sizeof p, "storage.%s", cls);
        if (!valid_name(cls, TALLY_NAME_MAX, false))
            return fail(c, p, "a storage class is 1-63 characters of [A-Za-z0-9._-]");
        e = add_dim(c, p, cls, "", price, out->storage, &out->card.n_storage);
        if (e != TALLY_OK)
            return e;
    }
    return TALLY_OK;
}

/* traffic: {scope: {egress, ingress}}; tokens: {model: {input, output}}. */
static tally_err parse_nested(parse_ctx *c, const char *name, json_object *obj,
                              const char *const *keys, bool star_ok, tally_dim_price **tab,
                              size_t *n)
{
    char p[WHY_PATH_MAX];
    tally_err e = need_object(c, name, obj);
    size_t total = e == TALLY_OK ? count_nested(obj) : 0;
    if (e != TALLY_OK || total == 0)
        return e;
    if (!(*tab = calloc(total, sizeof **tab)))
        return fail(c, "", "out of memory");
    json_object_object_foreach(obj, dim, inner)
    {
        snprintf(p, sizeof p, "%s.%s", name, dim);
        if (!valid_name(dim, TALLY_NAME_MAX, star_ok))
            return fail(c, p, "a name is 1-63 characters of [A-Za-z0-9._-]");
        if ((e = need_object(c, p, inner)) != TALLY_OK || (e = only_keys(c, p, inner, keys)))
            return e;
        json_object_object_foreach(inner, dim2, price)
        {
            snprintf(p, sizeof p, "%s.%s.%s", name, dim, dim2);
            if ((e = add_dim(c, p, dim, dim2, price, *tab, n)) != TALLY_OK)
                return e;
        }
    }
    return TALLY_OK;
}

/* ---- The card ------------------------------------------------------------- */

static int cmp_sku(const void *a, const void *b)
{
    return strcmp(((const tally_sku_price *)a)->sku, ((const tally_sku_price *)b)->sku);
}

static int cmp_dim(const void *a, const void *b)
{
    const tally_dim_price *x = a, *y = b;
    int r = strcmp(x->dim, y->dim);
    return r ? r : strcmp(x->dim2, y->dim2);
}

static int cmp_spot(const void *a, const void *b)
{
    const tally_spot_point *x = a, *y = b;
    int r = strcmp(x->sku, y->sku);
    return r ? r : (x->from_s > y->from_s) - (x->from_s < y->from_s);
}

/* qsort, which must not be given NULL even for zero elements. */
static void sort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *))
{
    if (n > 1)
        qsort(base, n, size, cmp);
}

/* Fails unless price_nano is at most the meter's tally_price_max_nano. */
static tally_err price_cap(parse_ctx *c, tally_meter m, int digits, const char *what,
                           const char *name, int64_t price_nano)
{
    int64_t max = tally_price_max_nano(m, digits);
    if (price_nano <= max)
        return TALLY_OK;
    char p[WHY_PATH_MAX], msg[96], text[48] = "?";
    if (tally_price_format(max, 2, text, sizeof text) != TALLY_OK)
        text[0] = '\0';
    snprintf(p, sizeof p, "%s.%s", what, name);
    snprintf(msg, sizeof msg, "price above the largest allowed, %s per %s", text,
             tally_meter_price_unit(m));
    return fail(c, p, msg);
}

/* SPEC section 3: overflow is an error, never a wrap; prices are bounded so
 * that a month of maximal in-range usage fits (tally_price_max_nano). */
static tally_err check_price_caps(parse_ctx *c, const tally_card *out)
{
    const tally_ratecard *card = &out->card;
    const tally_currency *cur = tally_currency_find(card->currency);
    int d = cur ? cur->minor_digits : 0;
    const tally_meter acc = TALLY_METER_ACCELERATOR;
    tally_err e = TALLY_OK;
    for (size_t i = 0; i < card->n_skus && !e; i++) {
        e = price_cap(c, acc, d, "accelerators", out->skus[i].sku, out->skus[i].on_demand_nano);
        if (!e)
            e = price_cap(c, acc, d, "accelerators", out->skus[i].sku, out->skus[i].reserved_nano);
    }
    for (size_t i = 0; i < out->n_spot && !e; i++)
        e = price_cap(c, acc, d, "accelerators", out->spot[i].sku, out->spot[i].price_nano);
    for (size_t i = 0; i < card->n_storage && !e; i++)
        e = price_cap(c, TALLY_METER_STORAGE, d, "storage", out->storage[i].dim,
                      out->storage[i].price_nano);
    for (size_t i = 0; i < card->n_traffic && !e; i++)
        e = price_cap(c, TALLY_METER_TRAFFIC, d, "traffic", out->traffic[i].dim,
                      out->traffic[i].price_nano);
    for (size_t i = 0; i < card->n_tokens && !e; i++)
        e = price_cap(c, TALLY_METER_TOKENS, d, "tokens", out->tokens[i].dim2,
                      out->tokens[i].price_nano);
    return e;
}

static tally_err finish_card(parse_ctx *c, tally_card *out)
{
    tally_ratecard *card = &out->card;
    card->skus = out->skus;
    card->storage = out->storage;
    card->traffic = out->traffic;
    card->tokens = out->tokens;
    sort(out->skus, card->n_skus, sizeof *out->skus, cmp_sku);
    sort(out->storage, card->n_storage, sizeof *out->storage, cmp_dim);
    sort(out->traffic, card->n_traffic, sizeof *out->traffic, cmp_dim);
    sort(out->tokens, card->n_tokens, sizeof *out->tokens, cmp_dim);
    sort(out->spot, out->n_spot, sizeof *out->spot, cmp_spot);
    for (size_t i = 1; i < out->n_spot; i++)
        if (cmp_spot(&out->spot[i - 1], &out->spot[i]) == 0) {
            char p[WHY_PATH_MAX];
            snprintf(p, sizeof p, "accelerators.%s.spot", out->spot[i].sku);
            return fail(c, p, "two points with the same from");
        }
    return check_price_caps(c, out);
}

static tally_err parse_header(parse_ctx *c, json_object *root, tally_card *out)
{
    static const char *const keys[] = {"id",      "currency", "effective_from", "accelerators",
                                       "storage", "traffic",  "tokens",         NULL};
    tally_ratecard *card = &out->card;
    json_object *v;
    tally_err e = only_keys(c, "", root, keys);
    if (e != TALLY_OK)
        return e;
    if (!json_object_object_get_ex(root, "id", &v) || !json_object_is_type(v, json_type_string))
        return fail(c, "id", "missing or not a string");
    if (!valid_name(json_object_get_string(v), sizeof card->id, false))
        return fail(c, "id", "a card id is 1-63 characters of [A-Za-z0-9._-]");
    snprintf(card->id, sizeof card->id, "%s", json_object_get_string(v));
    if (!json_object_object_get_ex(root, "currency", &v) ||
        !json_object_is_type(v, json_type_string) ||
        !tally_currency_find(json_object_get_string(v)))
        return fail(c, "currency", "missing or not a known ISO 4217 code");
    snprintf(card->currency, sizeof card->currency, "%s", json_object_get_string(v));
    if (!json_object_object_get_ex(root, "effective_from", &v))
        return fail(c, "effective_from", "missing");
    return parse_time(c, "effective_from", v, &card->effective_from_s);
}

static tally_err parse_root(parse_ctx *c, json_object *root, tally_card *out)
{
    static const char *const traffic_keys[] = {"egress", "ingress", NULL};
    static const char *const token_keys[] = {"input", "output", NULL};
    json_object *v;
    tally_err e = need_object(c, "", root);
    if (e == TALLY_OK)
        e = parse_header(c, root, out);
    if (e == TALLY_OK)
        e = json_object_object_get_ex(root, "accelerators", &v)
                ? parse_accelerators(c, v, out)
                : fail(c, "accelerators", "missing");
    if (e == TALLY_OK && json_object_object_get_ex(root, "storage", &v))
        e = parse_storage(c, v, out);
    if (e == TALLY_OK && json_object_object_get_ex(root, "traffic", &v))
        e = parse_nested(c, "traffic", v, traffic_keys, false, &out->traffic, &out->card.n_traffic);
    if (e == TALLY_OK && json_object_object_get_ex(root, "tokens", &v))
        e = parse_nested(c, "tokens", v, token_keys, true, &out->tokens, &out->card.n_tokens);
    if (e == TALLY_OK)
        e = finish_card(c, out);
    return e;
}

static tally_err fail_json(parse_ctx *c, const char *desc, size_t at)
{
    if (c->why && c->cap > 0)
        snprintf(c->why, c->cap, "malformed JSON at byte %zu: %s", at, desc);
    return TALLY_PARSE;
}

static bool only_space(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return false;
    return true;
}

tally_err tally_card_parse(const char *json, size_t len, tally_card *out, char *why, size_t cap)
{
    parse_ctx c = {why, cap};
    memset(out, 0, sizeof *out);
    if (len > INT32_MAX)
        return fail(&c, "", "rate card too large");
    json_tokener *tok = json_tokener_new_ex(CARD_JSON_DEPTH);
    if (!tok)
        return fail(&c, "", "out of memory");
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    json_object *root = json_tokener_parse_ex(tok, json, (int)len);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    tally_err e;
    if (!root || jerr != json_tokener_success)
        e = fail_json(
            &c, jerr == json_tokener_continue ? "truncated" : json_tokener_error_desc(jerr), end);
    else if (!only_space(json + end, len - end))
        e = fail(&c, "", "malformed JSON: trailing data after the card");
    else
        e = parse_root(&c, root, out);
    json_object_put(root);
    json_tokener_free(tok);
    if (e != TALLY_OK)
        tally_card_release(out);
    return e;
}

void tally_card_release(tally_card *c)
{
    free(c->skus);
    free(c->storage);
    free(c->traffic);
    free(c->tokens);
    free(c->spot);
    memset(c, 0, sizeof *c);
}

/* ---- Equality ------------------------------------------------------------- */

static bool sku_equal(const tally_sku_price *a, const tally_sku_price *b)
{
    return strcmp(a->sku, b->sku) == 0 && a->has_on_demand == b->has_on_demand &&
           a->has_reserved == b->has_reserved && a->has_spot == b->has_spot &&
           a->on_demand_nano == b->on_demand_nano &&
           (!a->has_reserved || a->reserved_nano == b->reserved_nano) &&
           a->min_billable_s == b->min_billable_s;
}

static bool dims_equal(const tally_dim_price *a, size_t na, const tally_dim_price *b, size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (cmp_dim(&a[i], &b[i]) != 0 || a[i].price_nano != b[i].price_nano)
            return false;
    return true;
}

/* Same prices, whatever the JSON's key order or spacing (arrays are sorted). */
bool tally_card_equal(const tally_card *a, const tally_card *b)
{
    const tally_ratecard *x = &a->card, *y = &b->card;
    if (strcmp(x->id, y->id) != 0 || strcmp(x->currency, y->currency) != 0 ||
        x->effective_from_s != y->effective_from_s || x->n_skus != y->n_skus ||
        a->n_spot != b->n_spot)
        return false;
    for (size_t i = 0; i < x->n_skus; i++)
        if (!sku_equal(&x->skus[i], &y->skus[i]))
            return false;
    for (size_t i = 0; i < a->n_spot; i++)
        if (cmp_spot(&a->spot[i], &b->spot[i]) != 0 ||
            a->spot[i].price_nano != b->spot[i].price_nano)
            return false;
    return dims_equal(x->storage, x->n_storage, y->storage, y->n_storage) &&
           dims_equal(x->traffic, x->n_traffic, y->traffic, y->n_traffic) &&
           dims_equal(x->tokens, x->n_tokens, y->tokens, y->n_tokens);
}
