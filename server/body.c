/* JSON request bodies: one strict JSON object with known keys, and typed
 * field getters that answer 400 themselves. Money is never read here as a
 * JSON number: handlers take amounts and prices as strings and parse them
 * exactly with tally_amount_parse / tally_price_parse. */
#include <errno.h>
#include <string.h>

#include <json-c/json.h>

#include "server_int.h"
#include "tally/utf8.h"

#define BODY_MAX_DEPTH 8

static bool allowed_key(const char *const *allowed, const char *key)
{
    for (size_t i = 0; allowed[i]; i++)
        if (strcmp(allowed[i], key) == 0)
            return true;
    return false;
}

/* Parses exactly len bytes as one JSON value (strict, valid UTF-8). */
static json_object *parse_strict(const char *buf, size_t len, const char **why)
{
    *why = "body is not valid JSON";
    if (len == 0 || len > TALLY_HTTP_MAX_BODY || memchr(buf, '\0', len)) {
        *why = len == 0 ? "empty body" : "body is not valid JSON";
        return NULL;
    }
    json_tokener *tok = json_tokener_new_ex(BODY_MAX_DEPTH);
    if (!tok)
        return NULL;
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    json_object *o = json_tokener_parse_ex(tok, buf, (int)len);
    if (o && json_tokener_get_parse_end(tok) != len) {
        json_object_put(o);
        o = NULL;
    }
    if (!o && json_tokener_get_error(tok) == json_tokener_continue)
        *why = "truncated JSON";
    json_tokener_free(tok);
    return o;
}

bool srv_body_object(srv_call *c, const char *const *allowed, json_object **out)
{
    const char *why;
    *out = NULL;
    json_object *o = parse_strict(c->req->body, c->req->body_len, &why);
    if (!o) {
        srv_fail(c, 400, "bad_json", "%s", why);
        return false;
    }
    if (!json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        srv_fail(c, 400, "bad_json", "body must be a JSON object");
        return false;
    }
    json_object_object_foreach(o, key, val)
    {
        (void)val;
        if (!allowed_key(allowed, key)) {
            srv_fail(c, 400, "unknown_field", "unknown field \"%.*s\"", tally_utf8_cut(key, 64),
                     key);
            json_object_put(o);
            return false;
        }
    }
    *out = o;
    return true;
}

/* The field, or NULL (answering 400 if required). JSON null counts as absent. */
static json_object *field(srv_call *c, json_object *o, const char *name, bool required)
{
    json_object *v = NULL;
    if (json_object_object_get_ex(o, name, &v) && v)
        return v;
    if (required)
        srv_fail(c, 400, "missing_field", "missing field \"%s\"", name);
    return NULL;
}

bool srv_field_string(srv_call *c, json_object *o, const char *name, bool required,
                      const char **out)
{
    json_object *v = field(c, o, name, required);
    if (!v)
        return !required;
    if (!json_object_is_type(v, json_type_string)) {
        srv_fail(c, 400, "bad_field", "field \"%s\" must be a string", name);
        return false;
    }
    const char *s = json_object_get_string(v);
    if (strlen(s) != (size_t)json_object_get_string_len(v)) {
        srv_fail(c, 400, "bad_field", "field \"%s\" holds a NUL character", name);
        return false;
    }
    *out = s;
    return true;
}

bool srv_field_time(srv_call *c, json_object *o, const char *name, bool required, int64_t *out)
{
    const char *s = NULL;
    if (!srv_field_string(c, o, name, required, &s))
        return false;
    if (!s)
        return true;
    if (tally_time_parse(s, strlen(s), out) != TALLY_OK) {
        srv_fail(c, 400, "bad_field", "field \"%s\" must be an RFC 3339 time", name);
        return false;
    }
    return true;
}

bool srv_field_int(srv_call *c, json_object *o, const char *name, int64_t min, int64_t max,
                   int64_t *out)
{
    json_object *v = field(c, o, name, false);
    if (!v)
        return true;
    errno = 0;
    int64_t n = json_object_get_int64(v);
    if (!json_object_is_type(v, json_type_int) || errno || n < min || n > max) {
        srv_fail(c, 400, "bad_field", "field \"%s\" must be an integer in [%lld, %lld]", name,
                 (long long)min, (long long)max);
        return false;
    }
    *out = n;
    return true;
}
