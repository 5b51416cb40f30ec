/* The outbox (include/tally/outbox.h, schemas/003_outbox.sql): events are
 * written inside the transaction of the change they announce, as complete
 * CloudEvents, and later stamped sent by the publisher.
 *
 * The CloudEvent's bytes are built here once and stored; the publisher sends
 * the stored bytes, so a retry can never announce different content under an
 * id. The document goes into "data" verbatim (after a strict parse that
 * proves it is one JSON object), so "data" is byte-identical to the stored
 * canonical document. */
#include <assert.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"
#include "tally/ledger_sql.h"
#include "tally/outbox.h"

#define SOURCE_DEFAULT "tally"
#define SOURCE_MAX     255
#define EVENT_ID_MAX   512
#define DEPTH_MAX      64 /* nesting of a document */

/* "source": $TALLY_EVENT_SOURCE when it is 1..255 printable ASCII bytes. */
static const char *event_source(void)
{
    const char *s = getenv("TALLY_EVENT_SOURCE");
    size_t n = s ? strnlen(s, SOURCE_MAX + 1) : 0;
    if (n == 0 || n > SOURCE_MAX)
        return SOURCE_DEFAULT;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x21 || s[i] > 0x7e)
            return SOURCE_DEFAULT;
    return s;
}

/* ---- A strict RFC 8259 check ------------------------------------------------
 * The document goes into "data" verbatim, so it must be JSON by the RFC's
 * grammar, which json-c alone does not enforce (it takes single quotes, NaN,
 * "1." and raw control characters). Nesting is capped, so the recursion is
 * bounded. */

typedef struct jcheck {
    const unsigned char *p, *end;
    int depth;
} jcheck;

static void jc_ws(jcheck *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static bool jc_eat(jcheck *j, char c)
{
    if (j->p < j->end && *j->p == (unsigned char)c) {
        j->p++;
        return true;
    }
    return false;
}

static bool jc_cont(jcheck *j, size_t n, unsigned lo, unsigned hi)
{
    if ((size_t)(j->end - j->p) < n + 1 || j->p[1] < lo || j->p[1] > hi)
        return false;
    for (size_t i = 2; i <= n; i++)
        if ((j->p[i] & 0xc0) != 0x80)
            return false;
    j->p += n + 1;
    return true;
}

/* One UTF-8 sequence of two or more bytes: no overlong forms, no surrogates,
 * nothing past U+10FFFF. */
static bool jc_utf8(jcheck *j)
{
    static const struct {
        unsigned char first_lo, first_hi;
        unsigned char n, lo, hi; /* continuation bytes; range of the first */
    } seq[] = {
        {0xc2, 0xdf, 1, 0x80, 0xbf}, {0xe0, 0xe0, 2, 0xa0, 0xbf}, {0xe1, 0xec, 2, 0x80, 0xbf},
        {0xed, 0xed, 2, 0x80, 0x9f}, {0xee, 0xef, 2, 0x80, 0xbf}, {0xf0, 0xf0, 3, 0x90, 0xbf},
        {0xf1, 0xf3, 3, 0x80, 0xbf}, {0xf4, 0xf4, 3, 0x80, 0x8f},
    };
    for (size_t i = 0; i < sizeof seq / sizeof *seq; i++)
        if (*j->p >= seq[i].first_lo && *j->p <= seq[i].first_hi)
            return jc_cont(j, seq[i].n, seq[i].lo, seq[i].hi);
    return false;
}

static bool jc_hex(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool jc_string(jcheck *j)
{
    if (!jc_eat(j, '"'))
        return false;
    while (j->p < j->end) {
        unsigned char c = *j->p;
        if (c == '"') {
            j->p++;
            return true;
        }
        if (c < 0x20)
            return false;
        if (c >= 0x80) {
            if (!jc_utf8(j))
                return false;
            continue;
        }
        j->p++;
        if (c != '\\')
            continue;
        if (j->p == j->end)
            return false;
        c = *j->p++;
        if (c == 'u') {
            for (int i = 0; i < 4; i++)
                if (j->p == j->end || !jc_hex(*j->p++))
                    return false;
        } else if (!strchr("\"\\/bfnrt", c) || c == '\0') {
            return false;
        }
    }
    return false;
}

static bool jc_digits(jcheck *j)
{
    const unsigned char *start = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
        j->p++;
    return j->p > start;
}

static bool jc_number(jcheck *j)
{
    jc_eat(j, '-');
    if (!jc_eat(j, '0') && (j->p == j->end || *j->p < '1' || *j->p > '9' || !jc_digits(j)))
        return false;
    if (jc_eat(j, '.') && !jc_digits(j))
        return false;
    if (jc_eat(j, 'e') || jc_eat(j, 'E')) {
        if (!jc_eat(j, '+'))
            jc_eat(j, '-');
        return jc_digits(j);
    }
    return true;
}

static bool jc_word(jcheck *j, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, w, n) != 0)
        return false;
    j->p += n;
    return true;
}

static bool jc_value(jcheck *j);

/* An object ('{' ... '}') or an array ('[' ... ']'), after its opener. */
static bool jc_members(jcheck *j, bool object)
{
    char close = object ? '}' : ']';
    if (++j->depth > DEPTH_MAX)
        return false;
    jc_ws(j);
    bool ok = true;
    if (!jc_eat(j, close)) {
        do {
            jc_ws(j);
            if (object) {
                ok = jc_string(j);
                jc_ws(j);
                ok = ok && jc_eat(j, ':');
            }
            ok = ok && jc_value(j);
            jc_ws(j);
        } while (ok && jc_eat(j, ','));
        ok = ok && jc_eat(j, close);
    }
    j->depth--;
    return ok;
}

static bool jc_value(jcheck *j)
{
    jc_ws(j);
    if (j->p == j->end)
        return false;
    switch (*j->p) {
    case '{':
    case '[':
        return jc_members(j, *j->p++ == '{');
    case '"':
        return jc_string(j);
    case 't':
        return jc_word(j, "true");
    case 'f':
        return jc_word(j, "false");
    case 'n':
        return jc_word(j, "null");
    default:
        return jc_number(j);
    }
}

/* Whether doc is exactly one JSON object, with optional whitespace around. */
static bool strict_object(const char *doc, size_t len)
{
    jcheck j = {(const unsigned char *)doc, (const unsigned char *)doc + len, 0};
    jc_ws(&j);
    if (j.p == j.end || *j.p != '{' || !jc_value(&j))
        return false;
    jc_ws(&j);
    return j.p == j.end;
}

/* Parses doc, which must be one JSON object by RFC 8259's grammar.
 * *root is the caller's to put. Errors: TALLY_PARSE, TALLY_NOMEM. */
static tally_err parse_doc(const char *doc, size_t len, json_object **root)
{
    *root = NULL;
    if (!doc || len == 0 || len > INT32_MAX || !strict_object(doc, len))
        return TALLY_PARSE;
    json_tokener *tok = json_tokener_new_ex(DEPTH_MAX + 1);
    if (!tok)
        return TALLY_NOMEM;
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    json_object *o = json_tokener_parse_ex(tok, doc, (int)len);
    bool ok = o && json_tokener_get_error(tok) == json_tokener_success &&
              json_object_is_type(o, json_type_object);
    json_tokener_free(tok);
    if (!ok) {
        json_object_put(o);
        return TALLY_PARSE;
    }
    *root = o;
    return TALLY_OK;
}

/* A string member of an object, or NULL. */
static const char *member(json_object *o, const char *key)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

/* The document's issued_at, else the clock. */
static int64_t issued_at(json_object *root)
{
    const char *s = member(root, "issued_at");
    int64_t t;
    if (s && tally_time_parse(s, strlen(s), &t) == TALLY_OK)
        return t;
    return tally_now_s();
}

static bool name_ok(const char *s)
{
    return s && *s && strnlen(s, EVENT_ID_MAX) < EVENT_ID_MAX;
}

/* Appends the CloudEvent envelope around doc. */
static tally_err build_event(tally_buf *b, const char *type, const char *subject,
                             const char *event_id, int64_t time_s, const char *doc, size_t len)
{
    tally_err e = tally_buf_puts(b, "{\"specversion\":\"1.0\",\"id\":");
    if (!e)
        e = tally_buf_json_str(b, event_id);
    if (!e)
        e = tally_buf_puts(b, ",\"source\":");
    if (!e)
        e = tally_buf_json_str(b, event_source());
    if (!e)
        e = tally_buf_puts(b, ",\"type\":");
    if (!e)
        e = tally_buf_json_str(b, type);
    if (!e)
        e = tally_buf_puts(b, ",\"subject\":");
    if (!e)
        e = tally_buf_json_str(b, subject);
    if (!e)
        e = tally_buf_puts(b, ",\"time\":");
    if (!e)
        e = inv_json_time(b, time_s);
    if (!e)
        e = tally_buf_puts(b, ",\"datacontenttype\":\"application/json\",\"data\":");
    if (!e)
        e = tally_buf_append(b, doc, len);
    if (!e)
        e = tally_buf_puts(b, "}");
    return e;
}

/* TALLY_OK when event_id is new; TALLY_EXISTS / TALLY_EXISTS_DIFFERENT when
 * it is recorded with the same / another payload. */
static tally_err check_new(tally_ledger *l, const char *event_id, const tally_buf *payload)
{
    sqlite3_stmt *st;
    tally_err e = ledger_cached(l, "SELECT payload FROM outbox WHERE event_id = ?1", &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, event_id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const void *p = sqlite3_column_blob(st, 0);
        size_t n = (size_t)sqlite3_column_bytes(st, 0);
        e = n == payload->len && (n == 0 || memcmp(p, payload->data, n) == 0)
                ? TALLY_EXISTS
                : TALLY_EXISTS_DIFFERENT;
        rc = SQLITE_DONE;
    }
    tally_err done = ledger_cached_done(l, st, rc);
    return e ? e : done;
}

static tally_err insert_event(tally_ledger *l, const char *type, const char *subject,
                              const char *event_id, const tally_buf *payload)
{
    sqlite3_stmt *st;
    tally_err e = ledger_cached(l,
                                "INSERT INTO outbox(event_id, type, subject, payload, created_at) "
                                "VALUES (?1, ?2, ?3, ?4, ?5)",
                                &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, event_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, type, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, subject, -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 4, payload->data, (int)payload->len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, tally_now_s());
    return ledger_cached_done(l, st, sqlite3_step(st));
}

/* Builds and stores one event whose data (doc) was already checked. */
static tally_err add_at(tally_ledger *l, const char *type, const char *subject,
                        const char *event_id, int64_t time_s, const char *doc, size_t len)
{
    if (sqlite3_get_autocommit(l->db)) {
        snprintf(l->errmsg, sizeof l->errmsg, "outbox events are written inside a transaction");
        return TALLY_INVAL;
    }
    tally_buf payload;
    tally_buf_init(&payload, 0);
    tally_err e = build_event(&payload, type, subject, event_id, time_s, doc, len);
    if (!e && payload.len > INT32_MAX)
        e = TALLY_TOO_LARGE;
    if (!e)
        e = check_new(l, event_id, &payload);
    if (!e)
        e = insert_event(l, type, subject, event_id, &payload);
    tally_buf_release(&payload);
    return e;
}

tally_err ledger_outbox_add(tally_ledger *l, const char *type, const char *subject,
                            const char *event_id, const char *doc, size_t len)
{
    assert(l);
    if (!name_ok(type) || !name_ok(subject) || !name_ok(event_id))
        return TALLY_INVAL;
    json_object *root;
    tally_err e = parse_doc(doc, len, &root);
    if (e)
        return e;
    int64_t t = issued_at(root);
    json_object_put(root);
    return add_at(l, type, subject, event_id, t, doc, len);
}

/* ---- The invoice engine's helpers ------------------------------------------ */

/* ---- Top-level members without a tree ----------------------------------------
 * Every finalized document is checked before its event is written
 * (check_doc). Building a json-c tree of it cost as much as storing its
 * rows, so the members the check reads are found by scanning the document
 * (which strict_object has already proved to be one JSON object); when a
 * key or one of those values holds an escape, json-c decodes them instead. */

typedef enum top_result { TOP_ABSENT, TOP_FOUND } top_result;

/* Looks up nk top-level members in one pass. For each key[i], the last
 * member of that name (json-c keeps the last of duplicate keys):
 * r[i] TOP_FOUND with the bytes of its string value in s[i], n[i];
 * TOP_ABSENT when there is none or its value is not a string. Returns false
 * (nothing decided) when any key, or a value looked up, holds a backslash.
 * doc must have passed strict_object. */
static bool top_strings(const char *doc, size_t len, const char *const *key, size_t nk,
                        const char **s, size_t *n, top_result *r)
{
    jcheck j = {(const unsigned char *)doc, (const unsigned char *)doc + len, 1};
    for (size_t i = 0; i < nk; i++)
        r[i] = TOP_ABSENT;
    jc_ws(&j);
    if (!jc_eat(&j, '{'))
        return false;
    jc_ws(&j);
    if (jc_eat(&j, '}'))
        return true;
    do {
        jc_ws(&j);
        const unsigned char *k = j.p + 1, *v;
        if (!jc_string(&j))
            return false;
        size_t kn = (size_t)(j.p - 1 - k);
        jc_ws(&j);
        (void)jc_eat(&j, ':');
        jc_ws(&j);
        v = j.p;
        if (memchr(k, '\\', kn) || !jc_value(&j))
            return false;
        for (size_t i = 0; i < nk; i++) {
            if (strlen(key[i]) != kn || memcmp(k, key[i], kn) != 0)
                continue;
            r[i] = *v == '"' ? TOP_FOUND : TOP_ABSENT;
            s[i] = (const char *)v + 1;
            n[i] = r[i] == TOP_FOUND ? (size_t)(j.p - 1 - (v + 1)) : 0;
            if (r[i] == TOP_FOUND && memchr(s[i], '\\', n[i]))
                return false;
        }
        jc_ws(&j);
    } while (jc_eat(&j, ','));
    return true;
}

/* check_doc's test on the scan; *known false when a member it reads is
 * escaped (then json-c must answer). */
static bool doc_is(const char *doc, size_t len, const char *doc_type, const char *id,
                   const char *account, int64_t *time_s, bool *known)
{
    static const char *const keys[] = {"invoice_id", "type", "account", "status", "issued_at"};
    const char *const want[] = {id, doc_type, account, "finalized"};
    const char *s[5];
    size_t n[5];
    top_result r[5];
    *known = top_strings(doc, len, keys, 5, s, n, r);
    if (!*known)
        return false;
    int64_t t;
    *time_s = r[4] == TOP_FOUND && tally_time_parse(s[4], n[4], &t) == TALLY_OK ? t : tally_now_s();
    for (size_t i = 0; i < 4; i++)
        if (r[i] != TOP_FOUND || n[i] != strlen(want[i]) || memcmp(s[i], want[i], n[i]) != 0)
            return false;
    return true;
}

/* The same test with json-c, for documents with escapes. */
static tally_err doc_is_parsed(const char *doc, size_t len, const char *doc_type, const char *id,
                               const char *account, int64_t *time_s, bool *ok)
{
    json_object *root;
    tally_err e = parse_doc(doc, len, &root);
    if (e)
        return e;
    const char *got_id = member(root, "invoice_id"), *got_type = member(root, "type");
    const char *got_account = member(root, "account"), *status = member(root, "status");
    *ok = got_id && strcmp(got_id, id) == 0 && got_type && strcmp(got_type, doc_type) == 0 &&
          got_account && strcmp(got_account, account) == 0 && status &&
          strcmp(status, "finalized") == 0;
    *time_s = issued_at(root);
    json_object_put(root);
    return TALLY_OK;
}

/* Checks that doc is the finalized document id of type doc_type for
 * account; fills *time_s with its issued_at. */
static tally_err check_doc(tally_ledger *l, const char *doc, size_t len, const char *doc_type,
                           const char *id, const char *account, int64_t *time_s)
{
    if (!name_ok(id) || !name_ok(account))
        return TALLY_INVAL;
    if (!doc || len == 0 || len > INT32_MAX || !strict_object(doc, len))
        return TALLY_PARSE;
    bool known, ok = doc_is(doc, len, doc_type, id, account, time_s, &known);
    tally_err e = known ? TALLY_OK : doc_is_parsed(doc, len, doc_type, id, account, time_s, &ok);
    if (!e && !ok) {
        snprintf(l->errmsg, sizeof l->errmsg,
                 "outbox: the document is not the finalized %s %s of account %s", doc_type, id,
                 account);
        e = TALLY_INVAL;
    }
    return e;
}

static tally_err event_id_for(char *out, size_t cap, const char *type, const char *doc_id)
{
    int n = snprintf(out, cap, "%s:%s", type, doc_id);
    return n > 0 && (size_t)n < cap ? TALLY_OK : TALLY_INVAL;
}

tally_err ledger_outbox_invoice_finalized(tally_ledger *l, const char *invoice_id,
                                          const char *account, const char *doc, size_t len)
{
    char event_id[EVENT_ID_MAX];
    int64_t t;
    tally_err e = check_doc(l, doc, len, "invoice", invoice_id, account, &t);
    if (!e)
        e = event_id_for(event_id, sizeof event_id, TALLY_EVENT_INVOICE_FINALIZED, invoice_id);
    if (!e)
        e = add_at(l, TALLY_EVENT_INVOICE_FINALIZED, account, event_id, t, doc, len);
    return e;
}

/* {"invoice_id","credit_note_id","account","voided_at","credit_note":<doc>} */
static tally_err voided_data(tally_buf *b, const char *invoice_id, const char *cn_id,
                             const char *account, int64_t t, const char *cn_doc, size_t len)
{
    tally_err e = tally_buf_puts(b, "{\"invoice_id\":");
    if (!e)
        e = tally_buf_json_str(b, invoice_id);
    if (!e)
        e = tally_buf_puts(b, ",\"credit_note_id\":");
    if (!e)
        e = tally_buf_json_str(b, cn_id);
    if (!e)
        e = tally_buf_puts(b, ",\"account\":");
    if (!e)
        e = tally_buf_json_str(b, account);
    if (!e)
        e = tally_buf_puts(b, ",\"voided_at\":");
    if (!e)
        e = inv_json_time(b, t);
    if (!e)
        e = tally_buf_puts(b, ",\"credit_note\":");
    if (!e)
        e = tally_buf_append(b, cn_doc, len);
    if (!e)
        e = tally_buf_puts(b, "}");
    return e;
}

/* The credit note must refer to the invoice being voided. */
static tally_err check_refers(tally_ledger *l, const char *cn_doc, size_t len,
                              const char *invoice_id)
{
    json_object *root;
    tally_err e = parse_doc(cn_doc, len, &root);
    if (e)
        return e;
    const char *refers = member(root, "refers_to");
    if (!refers || strcmp(refers, invoice_id) != 0) {
        snprintf(l->errmsg, sizeof l->errmsg, "outbox: the credit note does not refer to %s",
                 invoice_id);
        e = TALLY_INVAL;
    }
    json_object_put(root);
    return e;
}

tally_err ledger_outbox_invoice_voided(tally_ledger *l, const char *invoice_id, const char *cn_id,
                                       const char *account, const char *cn_doc, size_t len)
{
    char cn_event[EVENT_ID_MAX], void_event[EVENT_ID_MAX];
    int64_t t;
    if (!name_ok(invoice_id))
        return TALLY_INVAL;
    tally_err e = check_doc(l, cn_doc, len, "credit_note", cn_id, account, &t);
    if (!e)
        e = check_refers(l, cn_doc, len, invoice_id);
    if (!e)
        e = event_id_for(cn_event, sizeof cn_event, TALLY_EVENT_CREDITNOTE_ISSUED, cn_id);
    if (!e)
        e = event_id_for(void_event, sizeof void_event, TALLY_EVENT_INVOICE_VOIDED, invoice_id);
    if (e)
        return e;
    tally_buf data;
    tally_buf_init(&data, 0);
    e = voided_data(&data, invoice_id, cn_id, account, t, cn_doc, len);
    if (!e)
        e = add_at(l, TALLY_EVENT_CREDITNOTE_ISSUED, account, cn_event, t, cn_doc, len);
    if (!e)
        e = add_at(l, TALLY_EVENT_INVOICE_VOIDED, account, void_event, t, data.data, data.len);
    tally_buf_release(&data);
    return e;
}

/* ---- Reading and stamping ------------------------------------------------------ */

static tally_err each_row(tally_ledger *l, sqlite3_stmt *st, tally_outbox_fn fn, void *ctx)
{
    tally_err e = TALLY_OK;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        tally_outbox_event ev = {
            .id = sqlite3_column_int64(st, 0),
            .event_id = (const char *)sqlite3_column_text(st, 1),
            .type = (const char *)sqlite3_column_text(st, 2),
            .subject = (const char *)sqlite3_column_text(st, 3),
            .payload = sqlite3_column_blob(st, 4),
            .len = (size_t)sqlite3_column_bytes(st, 4),
            .created_at_s = sqlite3_column_int64(st, 5),
            .sent_at_s = sqlite3_column_int64(st, 6),
        };
        if (!ev.event_id || !ev.type || !ev.subject)
            return TALLY_NOMEM;
        if ((e = fn(ctx, &ev)) != TALLY_OK)
            return e;
    }
    return rc == SQLITE_DONE ? TALLY_OK : ledger_sqlite_err(l, rc);
}

#define ROW_COLS "id, event_id, type, subject, payload, created_at, coalesce(sent_at, 0)"

tally_err tally_outbox_pending(tally_ledger *l, int64_t after_id, size_t max, tally_outbox_fn fn,
                               void *ctx)
{
    if (!l || !fn)
        return TALLY_INVAL;
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(l,
                                 "SELECT " ROW_COLS " FROM outbox INDEXED BY outbox_pending "
                                 "WHERE sent_at IS NULL AND id > ?1 ORDER BY id LIMIT ?2",
                                 &st);
    if (e)
        return e;
    sqlite3_bind_int64(st, 1, after_id);
    sqlite3_bind_int64(st, 2, max == 0 || max > INT64_MAX ? -1 : (int64_t)max);
    e = each_row(l, st, fn, ctx);
    sqlite3_finalize(st);
    return e;
}

tally_err tally_outbox_list(tally_ledger *l, tally_outbox_fn fn, void *ctx)
{
    if (!l || !fn)
        return TALLY_INVAL;
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(l, "SELECT " ROW_COLS " FROM outbox ORDER BY id", &st);
    if (e)
        return e;
    e = each_row(l, st, fn, ctx);
    sqlite3_finalize(st);
    return e;
}

/* Stamps one event inside the open transaction. */
static tally_err stamp(tally_ledger *l, sqlite3_stmt *st, sqlite3_stmt *exists, int64_t id)
{
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 2, id);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE)
        return ledger_sqlite_err(l, rc);
    if (sqlite3_changes(l->db) == 1)
        return TALLY_OK;
    sqlite3_reset(exists);
    sqlite3_bind_int64(exists, 1, id);
    rc = sqlite3_step(exists);
    if (rc == SQLITE_ROW)
        return TALLY_OK; /* already sent: the first stamp stays */
    return rc == SQLITE_DONE ? TALLY_NOT_FOUND : ledger_sqlite_err(l, rc);
}

tally_err tally_outbox_mark_sent_batch(tally_ledger *l, const int64_t *ids, size_t n,
                                       int64_t sent_at_s)
{
    if (!l || (n > 0 && !ids) || sent_at_s <= 0)
        return TALLY_INVAL;
    if (n == 0)
        return TALLY_OK;
    sqlite3_stmt *st = NULL, *exists = NULL;
    tally_err e =
        ledger_prepare(l, "UPDATE outbox SET sent_at = ?1 WHERE id = ?2 AND sent_at IS NULL", &st);
    if (!e)
        e = ledger_prepare(l, "SELECT 1 FROM outbox WHERE id = ?1", &exists);
    if (e)
        goto out_stmts;
    sqlite3_bind_int64(st, 1, sent_at_s);
    if ((e = ledger_begin(l)) != TALLY_OK)
        goto out_stmts;
    for (size_t i = 0; i < n && !e; i++)
        e = stamp(l, st, exists, ids[i]);
    sqlite3_reset(st);
    sqlite3_reset(exists);
    if (!e)
        e = ledger_commit(l);
    else
        ledger_rollback(l);
out_stmts:
    sqlite3_finalize(st);
    sqlite3_finalize(exists);
    return e;
}

tally_err tally_outbox_mark_sent(tally_ledger *l, int64_t id, int64_t sent_at_s)
{
    return tally_outbox_mark_sent_batch(l, &id, 1, sent_at_s);
}

static tally_err count_row(void *ctx, int ncols, const char *const *cols)
{
    int64_t *out = ctx;
    for (int i = 0; i < ncols && i < 2; i++)
        out[i] = cols[i] ? strtoll(cols[i], NULL, 10) : 0;
    return TALLY_OK;
}

tally_err tally_outbox_counts(tally_ledger *l, int64_t *pending, int64_t *sent)
{
    if (!l)
        return TALLY_INVAL;
    int64_t v[2] = {0, 0};
    tally_err e = tally_ledger_query(l,
                                     "SELECT (SELECT count(*) FROM outbox INDEXED BY "
                                     "outbox_pending WHERE sent_at IS NULL), "
                                     "(SELECT count(*) FROM outbox WHERE sent_at IS NOT NULL)",
                                     NULL, 0, count_row, v);
    if (!e && pending)
        *pending = v[0];
    if (!e && sent)
        *sent = v[1];
    return e;
}
