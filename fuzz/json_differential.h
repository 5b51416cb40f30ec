/* Differential check of Tally's JSON scanner (meter/json_scan.c) against
 * json-c in strict mode, shared by the fuzz target and tests/meter.
 *
 * Both must agree on whether a buffer is one valid JSON document, except
 * where json-c is knowingly more lenient than RFC 8259 and Tally is not:
 * raw control characters and invalid UTF-8 inside strings, lone surrogates in
 * \u escapes, numbers like "1.", "-.5", "-01", "00" and "01.5". Those are the only disagreements
 * allowed, and only in the direction "Tally rejects, json-c accepts". */
#ifndef TALLY_FUZZ_JSON_DIFFERENTIAL_H
#define TALLY_FUZZ_JSON_DIFFERENTIAL_H

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "../meter/meter_int.h"

/* Whether json-c (strict, UTF-8 checked, depth JSON_MAX_DEPTH) accepts
 * buf[0..len) as one document. A space is appended so that json-c, which
 * waits for a delimiter after a top-level number or literal, can finish. */
static inline bool jd_jsonc_accepts(const char *buf, size_t len)
{
    char *copy = malloc(len + 1);
    if (!copy)
        abort();
    memcpy(copy, buf, len);
    copy[len] = ' ';
    struct json_tokener *tok = json_tokener_new_ex(JSON_MAX_DEPTH);
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    struct json_object *obj = json_tokener_parse_ex(tok, copy, (int)len + 1);
    bool ok = json_tokener_get_error(tok) == json_tokener_success &&
              json_tokener_get_parse_end(tok) == len + 1;
    json_object_put(obj);
    json_tokener_free(tok);
    free(copy);
    return ok;
}

/* Whether Tally's rejection is one of json-c's known leniencies. */
static inline bool jd_jsonc_lenient(const json_scan *s)
{
    const char *e = s->err;
    if (strcmp(e, "control character in string") == 0 ||
        strcmp(e, "invalid UTF-8 in string") == 0 ||
        strcmp(e, "lone surrogate in \\u escape") == 0 ||
        strcmp(e, "digit expected after '.' in number") == 0)
        return true;
    /* json-c takes NaN, Infinity and -Infinity even in strict mode; RFC 8259
     * has no such values, so Tally refuses them (bad_json). */
    size_t left =
        s->err_at < (size_t)(s->end - s->start) ? (size_t)(s->end - s->start) - s->err_at : 0;
    const char *at = s->start + s->err_at;
    bool non_finite = (left > 0 && (*at == 'N' || *at == 'n' || *at == 'I' || *at == 'i'));
    if (strcmp(e, "invalid value") == 0 && non_finite)
        return true;
    /* json-c also takes single-quoted strings and keys ('id'). */
    if (left > 0 && *at == '\'')
        return true;
    if (strcmp(e, "digit expected after '-'") == 0) /* json-c takes "-.5" and "-Infinity" */
        return left > 0 && (*at == '.' || non_finite);
    if (strcmp(e, "leading zero in number") != 0)
        return false;
    /* json-c refuses a leading zero only in a non-negative integer with a
     * non-zero digit after it: "012", but not "-01", "00", "01.5" or "01e1" */
    if (s->err_at > 0 && s->start[s->err_at - 1] == '-')
        return true;
    const char *p = s->start + s->err_at;
    bool nonzero = false;
    for (; p < s->end && *p >= '0' && *p <= '9'; p++)
        nonzero |= *p != '0';
    return !nonzero || (p < s->end && (*p == '.' || *p == 'e' || *p == 'E'));
}

/* NULL if the two agree on buf, else what went wrong. */
static inline const char *jd_compare(const char *buf, size_t len)
{
    json_scan s;
    bool ours = json_scan_document(&s, buf, len);
    bool theirs = jd_jsonc_accepts(buf, len);
    if (ours == theirs)
        return NULL;
    if (ours)
        return "Tally accepts a document json-c rejects";
    return jd_jsonc_lenient(&s) ? NULL : "Tally rejects a document json-c accepts";
}

#endif
