/* Credit scopes: `key=v1|v2` terms joined by ',' (AND), values joined by '|'
 * (OR); keys meter, sku and pricing. An empty expression has no terms and
 * matches every charge.
 *
 * The grammar is strict so that a typo is an error at grant time rather than
 * a coupon that silently pays nothing: no whitespace, no empty keys, values
 * or terms, meter and pricing values must name a real meter or pricing, and
 * keys and values use [A-Za-z0-9._-] only. A key may appear in several terms;
 * like all terms they are ANDed ("sku=a|b,sku=b|c" matches sku b only). */
#include <assert.h>
#include <string.h>

#include "tally/rating.h"

enum scope_key { KEY_METER, KEY_SKU, KEY_PRICING, KEY_COUNT };

static const char *const key_names[KEY_COUNT] = {"meter", "sku", "pricing"};

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

/* Why a token of len bytes cannot be a key or value, or NULL if it can. */
static const char *bad_token(const char *s, size_t len, size_t max, const char *what_empty,
                             const char *what_long)
{
    if (len == 0)
        return what_empty;
    if (len >= max)
        return what_long;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')
            return "whitespace is not allowed";
        if (!name_char(s[i]))
            return "unexpected character (terms are key=v1|v2 joined by ',')";
    }
    return NULL;
}

static int key_index(const char *key)
{
    for (int i = 0; i < KEY_COUNT; i++)
        if (strcmp(key_names[i], key) == 0)
            return i;
    return -1;
}

/* Meter and pricing values must name something real. */
static const char *check_value(int key, const char *v)
{
    tally_meter m;
    tally_pricing p;

    if (key == KEY_METER && tally_meter_from_name(v, &m) != TALLY_OK)
        return "unknown meter (accelerator, storage, traffic, tokens)";
    if (key == KEY_PRICING &&
        (tally_pricing_from_name(v, &p) != TALLY_OK || p == TALLY_PRICING_NONE))
        return "unknown pricing (on_demand, spot, reserved)";
    return NULL;
}

/* Parses the values of one term: s[0..len) is "v1|v2|...". */
static const char *parse_values(const char *s, size_t len, int key, tally_scope *out, size_t t)
{
    size_t i = 0;

    for (;;) {
        const char *bar = memchr(s + i, '|', len - i);
        size_t vlen = bar ? (size_t)(bar - (s + i)) : len - i;
        size_t n = out->terms[t].n_values;
        const char *why =
            bad_token(s + i, vlen, TALLY_NAME_MAX, "empty value", "value is too long");

        if (why != NULL)
            return why;
        if (n == TALLY_SCOPE_MAX_VALUES)
            return "too many values in one term";
        memcpy(out->terms[t].values[n], s + i, vlen);
        out->terms[t].values[n][vlen] = '\0';
        out->terms[t].n_values = n + 1;
        if ((why = check_value(key, out->terms[t].values[n])) != NULL)
            return why;
        if (bar == NULL)
            return NULL;
        i += vlen + 1;
    }
}

/* Parses one term s[0..len) ("key=v1|v2") into out->terms[out->n_terms]. */
static const char *parse_term(const char *s, size_t len, tally_scope *out)
{
    const char *eq = memchr(s, '=', len);
    size_t klen, t = out->n_terms;
    const char *why;
    int key;

    if (len == 0)
        return "empty term (stray ',')";
    if (eq == NULL)
        return "term has no '=' (expected key=value)";
    klen = (size_t)(eq - s);
    if ((why = bad_token(s, klen, sizeof out->terms[0].key, "empty key", "unknown key")) != NULL)
        return why;
    if (t == TALLY_SCOPE_MAX_TERMS)
        return "too many terms";
    memcpy(out->terms[t].key, s, klen);
    out->terms[t].key[klen] = '\0';
    key = key_index(out->terms[t].key);
    if (key < 0)
        return "unknown key (meter, sku, pricing)";
    out->terms[t].n_values = 0;
    out->n_terms = t + 1;
    return parse_values(eq + 1, len - klen - 1, key, out, t);
}

tally_err tally_scope_parse(const char *expr, tally_scope *out, const char **why)
{
    const char *err = NULL;
    size_t len, i = 0;

    assert(out != NULL);
    memset(out, 0, sizeof *out);
    if (expr == NULL || expr[0] == '\0')
        return TALLY_OK;
    len = strlen(expr);
    while (err == NULL) {
        const char *comma = memchr(expr + i, ',', len - i);
        size_t tlen = comma ? (size_t)(comma - (expr + i)) : len - i;

        err = parse_term(expr + i, tlen, out);
        if (comma == NULL)
            break;
        i += tlen + 1;
    }
    if (err == NULL)
        return TALLY_OK;
    memset(out, 0, sizeof *out);
    if (why != NULL)
        *why = err;
    return TALLY_PARSE;
}

static bool term_has(const tally_scope *s, size_t t, const char *v)
{
    for (size_t i = 0; i < s->terms[t].n_values; i++)
        if (strcmp(s->terms[t].values[i], v) == 0)
            return true;
    return false;
}

/* Every term must hold one of its values (AND of ORs). A charge without a
 * pricing (storage, traffic, tokens) matches no pricing term. */
bool tally_scope_matches(const tally_scope *s, tally_meter meter, const char *sku,
                         tally_pricing pricing)
{
    if (s == NULL)
        return true;
    for (size_t t = 0; t < s->n_terms; t++) {
        const char *v;

        switch (key_index(s->terms[t].key)) {
        case KEY_METER:
            v = tally_meter_name(meter);
            break;
        case KEY_SKU:
            v = sku != NULL ? sku : "";
            break;
        case KEY_PRICING:
            v = tally_pricing_name(pricing);
            break;
        default:
            return false; /* not produced by the parser */
        }
        if (v == NULL || !term_has(s, t, v))
            return false;
    }
    return true;
}
