/* tally verify, what a stored document says (verify.c checks it against its
 * row and its own arithmetic): its ids, totals, the sums of its lines and
 * credits, and the credit it issued.
 *
 * json-c is the reference reading: a document is what json_tokener makes of
 * it. Building its tree (an object and a hash table per line) cost more than
 * every other check of a document together, so the documents Tally writes
 * are read first by a scanner that keeps nothing: plain JSON (RFC 8259
 * syntax; strings without escapes, control characters or bytes above 127;
 * numbers without exponents, at most 18 digits before the point; at most
 * 16 levels deep; nothing after the object) in which none of the members
 * read here appears twice in its object. On such a text json-c's tree holds
 * exactly the values the scanner sees. Anything else, a syntax error
 * included, is left to json-c, whose answer stands. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <json-c/json.h>

#include "ledger_int.h"
#include "tally/money.h"

/* ---- json-c ----------------------------------------------------------------- */

static vdoc_text jtext(json_object *o, const char *key)
{
    json_object *f = NULL;
    if (!json_object_object_get_ex(o, key, &f) || !json_object_is_type(f, json_type_string))
        return (vdoc_text){0};
    const char *s = json_object_get_string(f);
    return (vdoc_text){s, strlen(s)};
}

static vdoc_sum money_of(vdoc_text t, int digits)
{
    const char *why = NULL;
    vdoc_sum m = {0};
    m.ok = t.s && tally_amount_parse(t.s, t.n, digits, true, &m.v, &why) == TALLY_OK;
    return m;
}

/* The sum of key over the elements of the array arr; not ok when arr is not
 * an array, an element has no such money field, or the sum overflows. */
static vdoc_sum jsum(json_object *o, const char *arr, const char *key, int digits)
{
    json_object *a = NULL;
    vdoc_sum s = {.ok = true};
    if (!json_object_object_get_ex(o, arr, &a) || !json_object_is_type(a, json_type_array))
        return (vdoc_sum){0};
    for (size_t i = 0; s.ok && i < json_object_array_length(a); i++) {
        vdoc_sum x = money_of(jtext(json_object_array_get_idx(a, i), key), digits);
        s.ok = x.ok && !__builtin_add_overflow(s.v, x.v, &s.v);
    }
    return s;
}

static void jissued(json_object *o, int digits, vdoc_fields *f)
{
    json_object *ci = NULL, *gid = NULL;
    f->issued_present = json_object_object_get_ex(o, "credit_issued", &ci);
    if (!f->issued_present)
        return;
    vdoc_text kind = json_object_is_type(ci, json_type_object) ? jtext(ci, "kind") : (vdoc_text){0};
    vdoc_sum amount = kind.s ? money_of(jtext(ci, "amount"), digits) : (vdoc_sum){0};
    f->issued_ok = kind.s && !strcmp(kind.s, "adjustment") && amount.ok &&
                   json_object_object_get_ex(ci, "grant_id", &gid) &&
                   json_object_is_type(gid, json_type_int);
    if (f->issued_ok) {
        f->issued = amount.v;
        f->grant_id = json_object_get_int64(gid);
    }
}

tally_err vdoc_read_json_c(const char *doc, size_t len, int digits, vdoc_fields *f, bool *object)
{
    *f = (vdoc_fields){0};
    *object = false;
    json_tokener *tok = json_tokener_new();
    if (!tok)
        return TALLY_NOMEM;
    json_object *o = json_tokener_parse_ex(tok, doc, (int)len);
    if (o && json_tokener_get_error(tok) == json_tokener_success &&
        json_object_is_type(o, json_type_object)) {
        *object = true;
        f->invoice_id = jtext(o, "invoice_id");
        f->type = jtext(o, "type");
        f->account = jtext(o, "account");
        f->currency = jtext(o, "currency");
        f->refers_to = jtext(o, "refers_to");
        f->subtotal = money_of(jtext(o, "subtotal"), digits);
        f->total_credits = money_of(jtext(o, "total_credits"), digits);
        f->amount_due = money_of(jtext(o, "amount_due"), digits);
        f->lines = jsum(o, "lines", "amount", digits);
        f->applied = jsum(o, "credits_applied", "amount", digits);
        jissued(o, digits, f);
        f->tree = o;
    } else {
        json_object_put(o);
    }
    json_tokener_free(tok);
    return TALLY_OK;
}

void vdoc_release(vdoc_fields *f)
{
    json_object_put(f->tree);
    f->tree = NULL;
}

/* ---- the scanner ------------------------------------------------------------- */

#define SCAN_DEPTH_MAX 16

typedef struct scan {
    const char *p, *end;
    int digits;
    bool unsure; /* outside the subset: json-c decides */
} scan;

/* A value, as the scanner saw it. */
typedef enum { V_OTHER, V_STRING, V_INT } vkind;

typedef struct sval {
    vkind kind;
    vdoc_text text; /* V_STRING */
    int64_t i;      /* V_INT */
} sval;

static void ws(scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\t' || *s->p == '\r'))
        s->p++;
}

static bool give_up(scan *s)
{
    s->unsure = true;
    return false;
}

/* After a member or element: 1 at a ',' (another follows), 0 at the close
 * (consumed), and otherwise give_up's false as -1. */
static int after_item(scan *s, char close)
{
    ws(s);
    if (s->p < s->end && (*s->p == ',' || *s->p == close))
        return *s->p++ == ',';
    give_up(s);
    return -1;
}

/* A string at s->p ('"'), without escapes. */
static bool str(scan *s, vdoc_text *out)
{
    const char *b = ++s->p;
    while (s->p < s->end && *s->p != '"') {
        unsigned char c = (unsigned char)*s->p;
        if (c < 0x20 || c == '\\' || c > 0x7e)
            return give_up(s);
        s->p++;
    }
    if (s->p == s->end)
        return give_up(s);
    *out = (vdoc_text){b, (size_t)(s->p - b)};
    s->p++;
    return true;
}

static bool digits1(scan *s, size_t *n)
{
    const char *b = s->p;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
        s->p++;
    *n = (size_t)(s->p - b);
    return *n > 0;
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)? with at most 18 digits before the point. */
static bool number(scan *s, sval *v)
{
    bool neg = *s->p == '-';
    s->p += neg;
    const char *b = s->p;
    size_t n;
    if (!digits1(s, &n) || n > 18 || (n > 1 && *b == '0'))
        return give_up(s);
    int64_t x = 0;
    for (size_t i = 0; i < n; i++)
        x = x * 10 + (b[i] - '0');
    v->kind = V_INT;
    v->i = neg ? -x : x;
    if (s->p < s->end && *s->p == '.') {
        s->p++;
        if (!digits1(s, &n))
            return give_up(s);
        v->kind = V_OTHER; /* a fraction: no integer member verify reads */
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E'))
        return give_up(s);
    return true;
}

static bool word(scan *s, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, w, n) != 0)
        return give_up(s);
    s->p += n;
    return true;
}

static bool value(scan *s, int depth, sval *v);

/* The members of an object at s->p ('{'); the value of each key named in
 * keys (NULL-terminated, at most 4) goes to vals[i] (kind V_OTHER and
 * *seen[i] false when absent); a key read twice is outside the subset. */
static bool object(scan *s, int depth, const char *const *keys, sval *vals, bool *seen)
{
    if (depth > SCAN_DEPTH_MAX)
        return give_up(s);
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return true;
    }
    for (;;) {
        vdoc_text k;
        sval tmp, *dst = &tmp;
        ws(s);
        if (s->p == s->end || *s->p != '"' || !str(s, &k))
            return give_up(s);
        for (size_t i = 0; keys && keys[i]; i++)
            if (strlen(keys[i]) == k.n && !memcmp(keys[i], k.s, k.n)) {
                if (seen[i])
                    return give_up(s);
                seen[i] = true;
                dst = &vals[i];
            }
        ws(s);
        if (s->p == s->end || *s->p != ':')
            return give_up(s);
        s->p++;
        ws(s);
        if (!value(s, depth + 1, dst))
            return false;
        int next = after_item(s, '}');
        if (next > 0)
            continue;
        return next == 0;
    }
}

static bool value(scan *s, int depth, sval *v)
{
    *v = (sval){.kind = V_OTHER};
    if (s->p == s->end)
        return give_up(s);
    switch (*s->p) {
    case '"':
        v->kind = V_STRING;
        return str(s, &v->text);
    case '{':
        return object(s, depth, NULL, NULL, NULL);
    case '[':
        if (depth > SCAN_DEPTH_MAX)
            return give_up(s);
        s->p++;
        ws(s);
        if (s->p < s->end && *s->p == ']') {
            s->p++;
            return true;
        }
        for (;;) {
            sval e;
            ws(s);
            if (!value(s, depth + 1, &e))
                return false;
            int next = after_item(s, ']');
            if (next > 0)
                continue;
            return next == 0;
        }
    case 't':
        return word(s, "true");
    case 'f':
        return word(s, "false");
    case 'n':
        return word(s, "null");
    default:
        if (*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))
            return number(s, v);
        return give_up(s);
    }
}

static vdoc_text text_of(const sval *v)
{
    return v->kind == V_STRING ? v->text : (vdoc_text){0};
}

/* An array at s->p whose elements' money field "amount" is summed; an
 * element that is not an object with such a field makes the sum not ok. */
static bool amounts(scan *s, int depth, vdoc_sum *sum)
{
    static const char *const key[] = {"amount", NULL};
    *sum = (vdoc_sum){.ok = true};
    if (depth > SCAN_DEPTH_MAX)
        return give_up(s);
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return true;
    }
    for (;;) {
        ws(s);
        if (s->p == s->end)
            return give_up(s);
        if (*s->p == '{') {
            sval amt = {.kind = V_OTHER};
            bool seen = false;
            if (!object(s, depth + 1, key, &amt, &seen))
                return false;
            vdoc_sum x = money_of(text_of(&amt), s->digits);
            sum->ok = sum->ok && x.ok && !__builtin_add_overflow(sum->v, x.v, &sum->v);
        } else {
            sval e;
            if (!value(s, depth + 1, &e))
                return false;
            sum->ok = false;
        }
        int next = after_item(s, ']');
        if (next > 0)
            continue;
        return next == 0;
    }
}

static bool issued(scan *s, int depth, vdoc_fields *f)
{
    static const char *const keys[] = {"kind", "amount", "grant_id", NULL};
    sval v[3] = {{.kind = V_OTHER}, {.kind = V_OTHER}, {.kind = V_OTHER}};
    bool seen[3] = {false, false, false};
    f->issued_present = true;
    if (*s->p != '{') {
        sval other;
        return value(s, depth, &other); /* not an object: malformed */
    }
    if (!object(s, depth, keys, v, seen))
        return false;
    vdoc_text kind = text_of(&v[0]);
    vdoc_sum amount = money_of(text_of(&v[1]), s->digits);
    f->issued_ok = kind.s && kind.n == 10 && !memcmp(kind.s, "adjustment", 10) && amount.ok &&
                   v[2].kind == V_INT;
    if (f->issued_ok) {
        f->issued = amount.v;
        f->grant_id = v[2].i;
    }
    return true;
}

enum {
    K_ID,
    K_TYPE,
    K_ACCOUNT,
    K_CURRENCY,
    K_REFERS,
    K_SUB,
    K_CREDITS,
    K_DUE,
    K_LINES,
    K_APPLIED,
    K_ISSUED,
    N_KEYS
};

static const char *const top_keys[N_KEYS] = {
    "invoice_id",    "type",       "account", "currency",        "refers_to",     "subtotal",
    "total_credits", "amount_due", "lines",   "credits_applied", "credit_issued",
};

/* One member of the document's object, from its key. */
static bool top_member(scan *s, vdoc_fields *f, bool *seen, sval *vals)
{
    vdoc_text k;
    if (s->p == s->end || *s->p != '"' || !str(s, &k))
        return give_up(s);
    int which = -1;
    for (int i = 0; i < N_KEYS && which < 0; i++)
        if (strlen(top_keys[i]) == k.n && !memcmp(top_keys[i], k.s, k.n))
            which = i;
    if (which >= 0 && seen[which])
        return give_up(s);
    if (which >= 0)
        seen[which] = true;
    ws(s);
    if (s->p == s->end || *s->p != ':')
        return give_up(s);
    s->p++;
    ws(s);
    if (s->p == s->end)
        return give_up(s);
    if ((which == K_LINES || which == K_APPLIED) && *s->p == '[')
        return amounts(s, 2, which == K_LINES ? &f->lines : &f->applied);
    if (which == K_ISSUED)
        return issued(s, 2, f);
    sval tmp;
    return value(s, 2, which >= 0 ? &vals[which] : &tmp);
}

int vdoc_read_fast(const char *doc, size_t len, int digits, vdoc_fields *f)
{
    *f = (vdoc_fields){0};
    scan s = {.p = doc, .end = doc + len, .digits = digits};
    bool seen[N_KEYS] = {false};
    sval vals[N_KEYS];
    for (int i = 0; i < N_KEYS; i++)
        vals[i] = (sval){.kind = V_OTHER};
    ws(&s);
    if (s.p == s.end || *s.p != '{')
        return -1;
    s.p++;
    ws(&s);
    bool ok = true;
    if (s.p < s.end && *s.p == '}')
        s.p++;
    else
        for (;;) {
            ws(&s);
            if (!(ok = top_member(&s, f, seen, vals)))
                break;
            int next = after_item(&s, '}');
            if (next > 0)
                continue;
            ok = next == 0;
            break;
        }
    ws(&s);
    if (!ok || s.unsure || s.p != s.end)
        return -1;
    f->invoice_id = text_of(&vals[K_ID]);
    f->type = text_of(&vals[K_TYPE]);
    f->account = text_of(&vals[K_ACCOUNT]);
    f->currency = text_of(&vals[K_CURRENCY]);
    f->refers_to = text_of(&vals[K_REFERS]);
    f->subtotal = money_of(text_of(&vals[K_SUB]), digits);
    f->total_credits = money_of(text_of(&vals[K_CREDITS]), digits);
    f->amount_due = money_of(text_of(&vals[K_DUE]), digits);
    /* lines or credits_applied absent, or not an array: not ok */
    if (!seen[K_LINES])
        f->lines = (vdoc_sum){0};
    if (!seen[K_APPLIED])
        f->applied = (vdoc_sum){0};
    return 1;
}

tally_err vdoc_read(const char *doc, size_t len, int digits, vdoc_fields *f, bool *object)
{
    *object = true;
    if (vdoc_read_fast(doc, len, digits, f) == 1)
        return TALLY_OK;
    return vdoc_read_json_c(doc, len, digits, f, object);
}
