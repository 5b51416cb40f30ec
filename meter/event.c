/* Decoding usage events (SPEC section 1; contract in include/tally/event.h).
 *
 * Two passes over one message. The first is the JSON scan: it walks the top
 * object and the data object once, validating everything, and only notes
 * where the values of known attributes and data fields lie (keys may come in
 * any order, so "type" can follow "data"). The second interprets those values
 * by the rules of the event's type, in a fixed order, so every message gets
 * one stable reason: bad_json first, then specversion, type, id, source,
 * subject, time, data, then the data fields in the order of the SPEC table.
 * Nothing is allocated. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "meter_int.h"
#include "tally/event.h"
#include "tally/utf8.h"

/* Unknown members tracked per object for the duplicate check. */
#define MAX_UNKNOWN 64
/* Longest snippet of an offending value quoted in a reject's detail. */
#define SNIPPET_MAX 40

typedef struct key_name {
    char s[16]; /* zero-padded, so that it can be compared a word at a time */
    size_t len;
} key_name;
#define NAME(text)                                                                                 \
    {                                                                                              \
        text, sizeof(text) - 1                                                                     \
    }

enum attr { A_SPECVERSION, A_ID, A_SOURCE, A_TYPE, A_SUBJECT, A_TIME, A_DATA, A_COUNT };
static const key_name attr_names[A_COUNT] = {
    NAME("specversion"), NAME("id"),   NAME("source"), NAME("type"),
    NAME("subject"),     NAME("time"), NAME("data"),
};

enum field {
    F_INSTANCE,
    F_SKU,
    F_PRICING,
    F_CARDS,
    F_SECONDS,
    F_MIGRATION,
    F_VOLUME,
    F_CLASS,
    F_BYTES,
    F_RESOURCE,
    F_DIRECTION,
    F_SCOPE,
    F_MODEL,
    F_KIND,
    F_TOKENS,
    F_COUNT
};
static const key_name field_names[F_COUNT] = {
    NAME("instance"),  NAME("sku"),    NAME("pricing"), NAME("cards"), NAME("seconds"),
    NAME("migration"), NAME("volume"), NAME("class"),   NAME("bytes"), NAME("resource"),
    NAME("direction"), NAME("scope"),  NAME("model"),   NAME("kind"),  NAME("tokens"),
};

/* ---- Rules per event type ------------------------------------------------ */

enum kind { K_STRING, K_ENUM, K_INT, K_BOOL };
enum dst { /* where a data field lands in tally_event (a bit set) */
           D_RESOURCE = 1,
           D_DIM = 2,
           D_DIM2 = 4,
           D_WEIGHT = 8,
           D_SECONDS = 16,
           D_PRICING = 32,
           D_MIGRATION = 64,
};

typedef struct field_rule {
    enum field field;
    enum kind kind;
    unsigned dst;
    bool required;
    bool over_is_range;         /* K_INT: above max is out_of_range, not bad_field */
    int64_t min, max, dflt;     /* K_INT; K_BOOL uses dflt */
    const char *const *choices; /* K_ENUM: the allowed values, NULL-terminated */
    const char *choices_text;   /* K_ENUM: the same, for people */
} field_rule;

typedef struct type_rule {
    const char *type;
    tally_meter meter;
    field_rule fields[6];
    size_t n_fields;
} type_rule;

/* In tally_pricing order from TALLY_PRICING_ON_DEMAND. */
static const char *const pricing_choices[] = {"on_demand", "spot", "reserved", NULL};
static const char *const direction_choices[] = {"egress", "ingress", NULL};
static const char *const scope_choices[] = {"internet", "internal", NULL};
static const char *const kind_choices[] = {"input", "output", NULL};

#define STRING(f, d)                                                                               \
    {                                                                                              \
        f, K_STRING, d, true, false, 0, 0, 0, NULL, NULL                                           \
    }
#define ENUM(f, d, c, text)                                                                        \
    {                                                                                              \
        f, K_ENUM, d, true, false, 0, 0, 0, c, text                                                \
    }
#define INT(f, d, req, lo, hi, def)                                                                \
    {                                                                                              \
        f, K_INT, d, req, false, lo, hi, def, NULL, NULL                                           \
    }
/* A quantity: an integer above hi is out_of_range (SPEC section 1). */
#define QTY(f, d, req, lo, hi, def)                                                                \
    {                                                                                              \
        f, K_INT, d, req, true, lo, hi, def, NULL, NULL                                            \
    }
#define BOOL(f, d, def)                                                                            \
    {                                                                                              \
        f, K_BOOL, d, false, false, 0, 0, def, NULL, NULL                                          \
    }

static const type_rule type_rules[] = {
    {"accelerator.usage",
     TALLY_METER_ACCELERATOR,
     {STRING(F_INSTANCE, D_RESOURCE), STRING(F_SKU, D_DIM),
      ENUM(F_PRICING, D_PRICING, pricing_choices, "on_demand, spot or reserved"),
      QTY(F_CARDS, D_WEIGHT, false, 1, TALLY_CARDS_MAX, 1),
      INT(F_SECONDS, D_SECONDS, false, 1, 3600, 1), BOOL(F_MIGRATION, D_MIGRATION, false)},
     6},
    {"storage.usage",
     TALLY_METER_STORAGE,
     {STRING(F_VOLUME, D_RESOURCE), STRING(F_CLASS, D_DIM),
      QTY(F_BYTES, D_WEIGHT, true, 0, TALLY_BYTES_MAX, 0),
      INT(F_SECONDS, D_SECONDS, false, 1, 86400, 1)},
     4},
    {"traffic.usage",
     TALLY_METER_TRAFFIC,
     {STRING(F_RESOURCE, D_RESOURCE),
      ENUM(F_DIRECTION, D_DIM2, direction_choices, "egress or ingress"),
      ENUM(F_SCOPE, D_DIM, scope_choices, "internet or internal"),
      QTY(F_BYTES, D_WEIGHT, true, 0, TALLY_BYTES_MAX, 0)},
     4},
    {"tokens.usage",
     TALLY_METER_TOKENS,
     {STRING(F_MODEL, D_RESOURCE | D_DIM), ENUM(F_KIND, D_DIM2, kind_choices, "input or output"),
      QTY(F_TOKENS, D_WEIGHT, true, 0, TALLY_TOKENS_MAX, 0)},
     3},
};
#define N_TYPES (sizeof type_rules / sizeof type_rules[0])

/* ---- Pass one: the scan --------------------------------------------------- */

/* Where the values of the known members lie; type JSON_ABSENT if absent. */
typedef struct scanned {
    json_val attr[A_COUNT];
    json_val field[F_COUNT];
} scanned;

typedef struct unknown_keys {
    json_val key[MAX_UNKNOWN];
    size_t n;
} unknown_keys;

/* Known keys are found through a small open-addressed hash table per name
 * table, built once: a probe or two instead of a scan of every name. */
#define INDEX_SLOTS 64
typedef struct key_index {
    signed char slot[INDEX_SLOTS]; /* index into the name table, -1 if empty */
} key_index;

static key_index attr_index, field_index;
static pthread_once_t index_once = PTHREAD_ONCE_INIT;

static unsigned key_hash(const char *k, size_t len) /* len > 0 */
{
    return (unsigned)(len * 13 + (unsigned char)k[0] * 7 + (unsigned char)k[len - 1] * 3 +
                      (unsigned char)k[len / 2]) %
           INDEX_SLOTS;
}

static void index_build(key_index *ix, const key_name *names, int n)
{
    memset(ix->slot, -1, sizeof ix->slot);
    for (int i = 0; i < n; i++) {
        unsigned h = key_hash(names[i].s, names[i].len);
        while (ix->slot[h] >= 0)
            h = (h + 1) % INDEX_SLOTS;
        ix->slot[h] = (signed char)i;
    }
}

static void indexes_build(void)
{
    index_build(&attr_index, attr_names, A_COUNT);
    index_build(&field_index, field_names, F_COUNT);
}

/* Whether the key k[0..len), with at least 16 readable bytes from k when
 * room says so, is the name n. */
static inline bool name_is(const key_name *n, const char *k, size_t len, bool room)
{
    if (n->len != len)
        return false;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (room) { /* two word compares, the bytes past len masked off */
        uint64_t k0, k1, n0, n1;
        memcpy(&k0, k, 8);
        memcpy(&k1, k + 8, 8);
        memcpy(&n0, n->s, 8);
        memcpy(&n1, n->s + 8, 8);
        uint64_t m0 = len >= 8 ? ~0ull : (1ull << (8 * len)) - 1;
        uint64_t m1 = len <= 8 ? 0 : len >= 16 ? ~0ull : (1ull << (8 * (len - 8))) - 1;
        return (((k0 ^ n0) & m0) | ((k1 ^ n1) & m1)) == 0;
    }
#endif
    return memcmp(n->s, k, len) == 0;
}

/* Index of the name k[0..len) in names (indexed by ix), or -1. end is the
 * end of the buffer k lies in. */
static inline int lookup_text(const key_index *ix, const key_name *names, const char *k, size_t len,
                              const char *end)
{
    if (len == 0 || len >= sizeof names[0].s)
        return -1;
    bool room = end - k >= 16;
    for (unsigned h = key_hash(k, len); ix->slot[h] >= 0; h = (h + 1) % INDEX_SLOTS)
        if (name_is(&names[ix->slot[h]], k, len, room))
            return ix->slot[h];
    return -1;
}

/* The same for a key spelt with escapes: compared decoded. */
static __attribute__((noinline)) int lookup_escaped(const key_index *ix, const key_name *names,
                                                    const json_val *key)
{
    char buf[16];
    size_t len = json_str_decode(key, buf, sizeof buf);
    return len > sizeof buf ? -1 : lookup_text(ix, names, buf, len, buf + sizeof buf);
}

static inline int lookup(const key_index *ix, const key_name *names, const json_val *key,
                         const char *end)
{
    if (key->escaped)
        return lookup_escaped(ix, names, key);
    return lookup_text(ix, names, key->p, key->len, end);
}

/* Checks that an unknown key is not a repeat of an earlier unknown key of
 * the same object. Out of line: events rarely carry unknown members. */
static __attribute__((noinline)) bool claim_unknown(json_scan *s, unknown_keys *u,
                                                    const json_val *key)
{
    for (size_t j = 0; j < u->n; j++)
        if (json_str_equal(&u->key[j], key))
            return json_scan_fail(s, key->p, "duplicate key");
    if (u->n == MAX_UNKNOWN)
        return json_scan_fail(s, key->p, "too many unknown members in one object");
    u->key[u->n++] = *key;
    return true;
}

/* Finds the slot of a member key (NULL for an unknown key), failing the scan
 * if the object already had that key. */
static inline bool claim(json_scan *s, json_val *slots, const key_index *ix, const key_name *names,
                         unknown_keys *u, const json_val *key, json_val **slot)
{
    int i = lookup(ix, names, key, s->end);
    *slot = NULL;
    if (i < 0)
        return claim_unknown(s, u, key);
    if (slots[i].type != JSON_ABSENT)
        return json_scan_fail(s, key->p, "duplicate key");
    *slot = &slots[i];
    return true;
}

static bool scan_data(json_scan *s, scanned *sc)
{
    unknown_keys u;
    bool first = true;
    json_val key, *slot;
    int r;
    u.n = 0;
    if (!json_scan_object_begin(s, 2))
        return false;
    while ((r = json_scan_member(s, &first, &key)) == 1)
        if (!claim(s, sc->field, &field_index, field_names, &u, &key, &slot) ||
            !json_scan_value(s, 3, slot))
            return false;
    return r == 0;
}

static bool scan_event(json_scan *s, scanned *sc)
{
    unknown_keys u;
    bool first = true;
    json_val key, *slot;
    int r;
    u.n = 0;
    if (!json_scan_object_begin(s, 1))
        return false;
    while ((r = json_scan_member(s, &first, &key)) == 1) {
        if (!claim(s, sc->attr, &attr_index, attr_names, &u, &key, &slot))
            return false;
        if (slot == &sc->attr[A_DATA] && json_scan_peek(s) == '{') {
            const char *start = s->p;
            if (!scan_data(s, sc))
                return false;
            *slot = (json_val){start, (size_t)(s->p - start), JSON_OBJECT, false};
        } else if (!json_scan_value(s, 2, slot)) {
            return false;
        }
    }
    return r == 0 && json_scan_finish(s);
}

/* ---- Pass two: the values ------------------------------------------------- */

static tally_err reject(tally_reject *rej, const char *reason, const char *suffix, const char *fmt,
                        ...) __attribute__((format(printf, 4, 5)));

static tally_err reject(tally_reject *rej, const char *reason, const char *suffix, const char *fmt,
                        ...)
{
    va_list ap;
    snprintf(rej->reason, sizeof rej->reason, "%s%s", reason, suffix);
    va_start(ap, fmt);
    vsnprintf(rej->detail, sizeof rej->detail, fmt, ap);
    va_end(ap);
    return TALLY_PARSE;
}

/* How many bytes of a value to quote in a detail: at most SNIPPET_MAX, cut
 * at a UTF-8 character boundary. */
static int snippet(const json_val *v)
{
    size_t n = v->len;
    if (n > SNIPPET_MAX) {
        n = SNIPPET_MAX;
        while (n > 0 && ((unsigned char)v->p[n] & 0xC0) == 0x80)
            n--;
    }
    return (int)n;
}

enum str_status { STR_OK, STR_NOT_STRING, STR_EMPTY, STR_TOO_LONG, STR_CONTROL };

/* Copies a string value into dst (cap bytes, NUL included). */
static enum str_status copy_string(const json_val *v, char *dst, size_t cap, size_t *len_out)
{
    if (v->type != JSON_STRING)
        return STR_NOT_STRING;
    size_t n = json_str_decode(v, dst, cap - 1);
    if (n == 0)
        return STR_EMPTY;
    if (n >= cap)
        return STR_TOO_LONG;
    dst[n] = '\0';
    if (len_out)
        *len_out = n;
    for (size_t i = 0; v->escaped && i < n; i++) /* raw control bytes are bad JSON */
        if ((unsigned char)dst[i] < 0x20)
            return STR_CONTROL;
    return STR_OK;
}

/* A string attribute or data field into dst; bad_field:<name> otherwise. */
static tally_err take_string(const json_val *v, const char *what, char *dst, size_t cap,
                             tally_reject *rej)
{
    static const char *const why[] = {
        [STR_NOT_STRING] = "must be a string",
        [STR_EMPTY] = "must not be empty",
        [STR_CONTROL] = "must not contain control characters",
    };
    enum str_status st = copy_string(v, dst, cap, NULL);
    if (st == STR_OK)
        return TALLY_OK;
    if (st == STR_TOO_LONG)
        return reject(rej, "bad_field:", what, "%s is longer than %zu bytes", what, cap - 1);
    return reject(rej, "bad_field:", what, "%s %s, got %.*s", what, why[st], snippet(v), v->p);
}

/* A non-negative integer: a JSON integer or a string of decimal digits, with
 * no sign, fraction, exponent or leading zero, at most INT64_MAX. */
static bool parse_int(const json_val *v, int64_t *out)
{
    const char *p = v->p;
    size_t len = v->len;
    char buf[24];
    if (v->type == JSON_STRING && v->escaped) {
        len = json_str_decode(v, buf, sizeof buf);
        if (len > sizeof buf)
            return false;
        p = buf;
    } else if (v->type != JSON_NUMBER && v->type != JSON_STRING) {
        return false;
    }
    if (len == 0 || len > 19 || (p[0] == '0' && len > 1))
        return false;
    uint64_t x = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        x = x * 10 + (uint64_t)(p[i] - '0');
    }
    if (x > INT64_MAX)
        return false;
    *out = (int64_t)x;
    return true;
}

static tally_err take_int(const field_rule *r, const json_val *v, int64_t *out, tally_reject *rej)
{
    const char *what = field_names[r->field].s;
    bool is_int = parse_int(v, out);
    if (is_int && *out >= r->min && *out <= r->max)
        return TALLY_OK;
    if (r->over_is_range && is_int && *out > r->max)
        return reject(rej, "out_of_range", "", "%s %lld is above the largest allowed, %lld", what,
                      (long long)*out, (long long)r->max);
    if (r->over_is_range)
        return reject(rej, "bad_field:", what, "%s must be an integer >= %lld, got %.*s", what,
                      (long long)r->min, snippet(v), v->p);
    return reject(rej, "bad_field:", what, "%s must be an integer from %lld to %lld, got %.*s",
                  what, (long long)r->min, (long long)r->max, snippet(v), v->p);
}

/* An enumerated string into text (16 bytes); *choice is its index in the
 * rule's choices. */
static tally_err take_enum(const field_rule *r, const json_val *v, char text[16], size_t *choice,
                           tally_reject *rej)
{
    const char *what = field_names[r->field].s;
    if (copy_string(v, text, 16, NULL) == STR_OK)
        for (*choice = 0; r->choices[*choice]; (*choice)++)
            if (strcmp(text, r->choices[*choice]) == 0)
                return TALLY_OK;
    return reject(rej, "bad_field:", what, "%s must be %s, got %.*s", what, r->choices_text,
                  snippet(v), v->p);
}

/* Interprets one data field by its rule, storing it where the rule says. */
static tally_err take_field(const field_rule *r, const json_val *v, tally_event *ev,
                            tally_reject *rej)
{
    const char *what = field_names[r->field].s;
    char text[16];
    size_t choice = 0;
    int64_t n = r->dflt;
    tally_err err = TALLY_OK;
    if (v->type == JSON_ABSENT && r->required)
        return reject(rej, "missing:", what, "data.%s is required", what);
    switch (r->kind) {
    case K_STRING:
        err = take_string(v, what, (r->dst & D_RESOURCE) ? ev->resource : ev->dim, TALLY_NAME_MAX,
                          rej);
        if (err == TALLY_OK && (r->dst & D_RESOURCE) && (r->dst & D_DIM))
            memcpy(ev->dim, ev->resource, TALLY_NAME_MAX);
        return err;
    case K_ENUM:
        if ((err = take_enum(r, v, text, &choice, rej)) != TALLY_OK)
            return err;
        if (r->dst & D_PRICING) /* pricing_choices are in tally_pricing order */
            ev->pricing = (tally_pricing)(TALLY_PRICING_ON_DEMAND + (int)choice);
        else
            memcpy((r->dst & D_DIM2) ? ev->dim2 : ev->dim, text, sizeof text);
        return TALLY_OK;
    case K_INT:
        if (v->type != JSON_ABSENT && (err = take_int(r, v, &n, rej)) != TALLY_OK)
            return err;
        *((r->dst & D_WEIGHT) ? &ev->weight : &ev->seconds) = n;
        return TALLY_OK;
    case K_BOOL:
        if (v->type == JSON_TRUE || v->type == JSON_FALSE || v->type == JSON_ABSENT) {
            ev->migration = v->type == JSON_ABSENT ? r->dflt != 0 : v->type == JSON_TRUE;
            return TALLY_OK;
        }
        return reject(rej, "bad_field:", what, "%s must be true or false, got %.*s", what,
                      snippet(v), v->p);
    }
    return TALLY_INTERNAL;
}

static tally_err take_type(const json_val *v, const type_rule **out, tally_reject *rej)
{
    char buf[32];
    if (v->type == JSON_ABSENT)
        return reject(rej, "missing:", "type", "the type attribute is required");
    enum str_status st = copy_string(v, buf, sizeof buf, NULL);
    if (st == STR_NOT_STRING)
        return reject(rej, "bad_field:", "type", "type must be a string, got %.*s", snippet(v),
                      v->p);
    for (size_t i = 0; st == STR_OK && i < N_TYPES; i++)
        if (strcmp(buf, type_rules[i].type) == 0) {
            *out = &type_rules[i];
            return TALLY_OK;
        }
    return reject(rej, "unknown_type", "",
                  "type %.*s is not accelerator.usage, storage.usage, traffic.usage or "
                  "tokens.usage",
                  snippet(v), v->p);
}

static tally_err take_time(const json_val *v, int64_t now_s, int64_t *out, tally_reject *rej)
{
    char buf[TALLY_NAME_MAX];
    size_t len = 0;
    if (v->type == JSON_ABSENT)
        return reject(rej, "missing:", "time", "the time attribute is required");
    if (copy_string(v, buf, sizeof buf, &len) != STR_OK ||
        tally_time_parse(buf, len, out) != TALLY_OK)
        return reject(rej, "bad_time", "",
                      "time must be RFC 3339 like 2026-03-01T12:00:00Z, got %.*s", snippet(v),
                      v->p);
    if (*out < TALLY_TIME_MIN_S)
        return reject(rej, "bad_time", "", "time %s is before 2000-01-01T00:00:00Z", buf);
    if (*out - TALLY_FUTURE_SKEW_S > now_s)
        return reject(rej, "bad_time", "",
                      "time %s is %lld s ahead of the clock; at most %d s are allowed", buf,
                      (long long)(*out - now_s), TALLY_FUTURE_SKEW_S);
    return TALLY_OK;
}

/* Whether s (non-empty) begins or ends with white space: " acme" would be
 * another account than "acme" that no one can tell apart. */
static bool padded(const char *s)
{
    static const char ws[] = " \t\n\r\v\f";
    size_t n = strlen(s);
    return n > 0 && (strchr(ws, s[0]) || strchr(ws, s[n - 1]));
}

/* specversion, type, id, source, subject, time: in that order. */
static tally_err take_attributes(const scanned *sc, int64_t now_s, tally_event *ev,
                                 const type_rule **type, tally_reject *rej)
{
    static const struct {
        enum attr attr;
        size_t offset, cap;
    } strings[] = {
        {A_ID, offsetof(tally_event, id), TALLY_ID_MAX},
        {A_SOURCE, offsetof(tally_event, source), TALLY_ID_MAX},
        {A_SUBJECT, offsetof(tally_event, account), TALLY_NAME_MAX},
    };
    const json_val *sv = &sc->attr[A_SPECVERSION];
    char buf[8];
    tally_err err;
    if (sv->type == JSON_ABSENT)
        return reject(rej, "missing:", "specversion", "the specversion attribute is required");
    if (copy_string(sv, buf, sizeof buf, NULL) != STR_OK || strcmp(buf, "1.0") != 0)
        return reject(rej, "bad_specversion", "", "specversion must be \"1.0\", got %.*s",
                      snippet(sv), sv->p);
    if ((err = take_type(&sc->attr[A_TYPE], type, rej)) != TALLY_OK)
        return err;
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
        const json_val *v = &sc->attr[strings[i].attr];
        const char *what = attr_names[strings[i].attr].s;
        if (v->type == JSON_ABSENT)
            return reject(rej, "missing:", what, "the %s attribute is required", what);
        err = take_string(v, what, (char *)ev + strings[i].offset, strings[i].cap, rej);
        if (err != TALLY_OK)
            return err;
    }
    if (padded(ev->account))
        return reject(rej, "bad_field:", "subject",
                      "subject must not begin or end with white space, got \"%.*s\"",
                      tally_utf8_cut(ev->account, 40), ev->account);
    return take_time(&sc->attr[A_TIME], now_s, &ev->time_s, rej);
}

/* ---- The decoder ----------------------------------------------------------- */

tally_err tally_event_decode(const char *buf, size_t len, int64_t now_s, tally_event *ev,
                             tally_reject *rej)
{
    scanned sc;
    json_scan s;
    tally_reject scratch;
    const type_rule *type = NULL;
    tally_err err;

    if (!rej)
        rej = &scratch;
    if (len > TALLY_EVENT_MAX_BYTES) {
        (void)reject(rej, "too_large", "", "the message has %zu bytes; at most %d are allowed", len,
                     TALLY_EVENT_MAX_BYTES);
        return TALLY_TOO_LARGE;
    }
    pthread_once(&index_once, indexes_build);
    memset(&sc, 0, sizeof sc);
    json_scan_init(&s, buf ? buf : "", buf ? len : 0);
    if (!scan_event(&s, &sc))
        return reject(rej, "bad_json", "", "%s at byte %zu", s.err, s.err_at);

    memset(ev, 0, sizeof *ev);
    if ((err = take_attributes(&sc, now_s, ev, &type, rej)) != TALLY_OK)
        return err;
    const json_val *data = &sc.attr[A_DATA];
    if (data->type == JSON_ABSENT)
        return reject(rej, "missing:", "data", "the data attribute is required");
    if (data->type != JSON_OBJECT)
        return reject(rej, "bad_field:", "data", "data must be an object, got %.*s", snippet(data),
                      data->p);
    ev->meter = type->meter;
    for (size_t i = 0; i < type->n_fields; i++) {
        const field_rule *r = &type->fields[i];
        if ((err = take_field(r, &sc.field[r->field], ev, rej)) != TALLY_OK)
            return err;
    }
    tally_event_identify(ev);
    return TALLY_OK;
}
