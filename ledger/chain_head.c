/* Signed heads of the ledger's own chain: `tally head`, `tally verify
 * --head FILE`, and the `ledger.head` events `tally publish` announces, so
 * a copy of the head lives outside the database. A head pins every entry up
 * to it: verify checks the links and rows of the whole chain, so a head
 * that is still on the chain means nothing before it changed; a head past
 * the chain's end means entries were removed or the file rolled back. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "ledger_int.h"
#include "tally/ledger.h"
#include "tally/sign.h"

#define ZERO_HASH "0000000000000000000000000000000000000000000000000000000000000000"

static tally_err chain_end(tally_ledger *l, int64_t *seq, char hash[65])
{
    sqlite3_stmt *st;
    tally_err e =
        ledger_prepare(l, "SELECT seq, hash FROM ledger_chain ORDER BY seq DESC LIMIT 1", &st);
    if (e)
        return e;
    *seq = 0;
    memcpy(hash, ZERO_HASH, 65);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *seq = sqlite3_column_int64(st, 0);
        snprintf(hash, 65, "%s", (const char *)sqlite3_column_text(st, 1));
    } else if (rc != SQLITE_DONE) {
        e = ledger_sqlite_err(l, rc);
    }
    sqlite3_finalize(st);
    return e;
}

/* SHA-256 of "tally ledger head\n<seq>\n<hash>\n<time_s>\n". */
static tally_err head_digest(int64_t seq, const char *hash, int64_t time_s, char hex[65])
{
    char msg[160];
    tally_err e = tally_fmt(msg, sizeof msg, "tally ledger head\n%" PRId64 "\n%s\n%" PRId64 "\n",
                            seq, hash, time_s);
    if (e == TALLY_OK)
        tally_sha256_hex(msg, strlen(msg), hex);
    return e;
}

tally_err tally_ledger_head_sign(tally_ledger *l, const char *key_path, tally_ledger_head *out)
{
    memset(out, 0, sizeof *out);
    char digest[65];
    tally_err e = chain_end(l, &out->seq, out->hash);
    out->time_s = tally_now_s();
    if (e == TALLY_OK)
        e = tally_key_id(key_path, out->key_id);
    if (e == TALLY_OK)
        e = head_digest(out->seq, out->hash, out->time_s, digest);
    if (e == TALLY_OK)
        e = tally_sign_hash(key_path, digest, out->signature);
    return e;
}

tally_err tally_ledger_head_json(const tally_ledger_head *h, tally_buf *out)
{
    tally_err e = tally_buf_printf(
        out, "{\"type\":\"ledger.head\",\"seq\":%" PRId64 ",\"hash\":\"%s\",\"time\":", h->seq,
        h->hash);
    if (e == TALLY_OK)
        e = inv_json_time(out, h->time_s);
    if (e == TALLY_OK)
        e = tally_buf_printf(out, ",\"key_id\":\"%s\",\"signature\":\"%s\"}", h->key_id,
                             h->signature);
    return e;
}

static const char *jstr(json_object *o, const char *key)
{
    json_object *f = NULL;
    if (!json_object_object_get_ex(o, key, &f) || !json_object_is_type(f, json_type_string))
        return NULL;
    return json_object_get_string(f);
}

/* Reads a head object; 0 when every field is there and well-formed. */
static int head_from(json_object *o, tally_ledger_head *h)
{
    json_object *f = NULL;
    const char *type = jstr(o, "type"), *hash = jstr(o, "hash"), *t = jstr(o, "time");
    const char *kid = jstr(o, "key_id"), *sig = jstr(o, "signature");
    if (!type || strcmp(type, "ledger.head") != 0 || !hash || strlen(hash) != 64 || !t || !kid ||
        strlen(kid) != TALLY_KEY_ID_LEN || !sig || strlen(sig) != 128 ||
        !json_object_object_get_ex(o, "seq", &f) || !json_object_is_type(f, json_type_int) ||
        tally_time_parse(t, strlen(t), &h->time_s) != TALLY_OK)
        return -1;
    h->seq = json_object_get_int64(f);
    memcpy(h->hash, hash, 65);
    memcpy(h->key_id, kid, TALLY_KEY_ID_LEN + 1);
    memcpy(h->signature, sig, 129);
    return h->seq < 0 ? -1 : 0;
}

static tally_err head_signature(const char *key_path, const tally_ledger_head *h, char *why,
                                size_t cap)
{
    tally_keyring *kr = NULL;
    char digest[65];
    tally_err e = head_digest(h->seq, h->hash, h->time_s, digest);
    if (e == TALLY_OK)
        e = tally_keyring_load(key_path, &kr);
    if (e == TALLY_OK)
        e = tally_keyring_verify(kr, h->key_id, digest, h->signature);
    tally_keyring_destroy(kr);
    if (e == TALLY_NOT_FOUND)
        snprintf(why, cap, "head %" PRId64 ": signed with key %s, not among the keys of %s", h->seq,
                 h->key_id, key_path);
    else if (e == TALLY_TAMPERED)
        snprintf(why, cap, "head %" PRId64 ": its signature does not verify (key %s)", h->seq,
                 h->key_id);
    else if (e != TALLY_OK)
        snprintf(why, cap, "head %" PRId64 ": cannot check its signature: %s", h->seq,
                 tally_err_str(e));
    return e == TALLY_OK ? e : TALLY_TAMPERED;
}

/* The head's entry against the chain as it is now. */
static tally_err head_on_chain(tally_ledger *l, const tally_ledger_head *h, char *why, size_t cap)
{
    int64_t end;
    char end_hash[65];
    tally_err e = chain_end(l, &end, end_hash);
    if (e)
        return e;
    if (end < h->seq) {
        snprintf(why, cap,
                 "head %" PRId64 ": the ledger chain ends at entry %" PRId64
                 ", before the signed head (entries were removed or the file was rolled back)",
                 h->seq, end);
        return TALLY_TAMPERED;
    }
    if (h->seq == 0)
        return strcmp(h->hash, ZERO_HASH) == 0 ? TALLY_OK : TALLY_TAMPERED;
    sqlite3_stmt *st;
    e = ledger_prepare(l, "SELECT hash FROM ledger_chain WHERE seq = ?1", &st);
    if (e)
        return e;
    sqlite3_bind_int64(st, 1, h->seq);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && strcmp((const char *)sqlite3_column_text(st, 0), h->hash) != 0) {
        snprintf(why, cap,
                 "head %" PRId64 ": ledger chain entry %" PRId64
                 " differs from the signed head (the chain was rewritten)",
                 h->seq, h->seq);
        e = TALLY_TAMPERED;
    } else if (rc != SQLITE_ROW) {
        snprintf(why, cap, "head %" PRId64 ": entry missing from the ledger chain", h->seq);
        e = TALLY_TAMPERED;
    }
    sqlite3_finalize(st);
    return e;
}

tally_err tally_ledger_head_check(tally_ledger *l, const char *key_path, const char *json,
                                  size_t len, char *why, size_t cap)
{
    char scratch[8];
    if (!why || cap == 0)
        why = scratch, cap = sizeof scratch;
    why[0] = '\0';
    json_tokener *tok = json_tokener_new();
    if (!tok)
        return TALLY_NOMEM;
    json_object *o = len <= INT32_MAX ? json_tokener_parse_ex(tok, json, (int)len) : NULL;
    tally_ledger_head h;
    tally_err e = TALLY_OK;
    if (!o || !json_object_is_type(o, json_type_object) || head_from(o, &h) != 0) {
        snprintf(why, cap, "not a ledger head saved from 'tally head'");
        e = TALLY_PARSE;
    }
    json_object_put(o);
    json_tokener_free(tok);
    if (e == TALLY_OK)
        e = head_signature(key_path, &h, why, cap);
    if (e == TALLY_OK)
        e = head_on_chain(l, &h, why, cap);
    return e;
}

/* Whether the chain grew since the last ledger.head event, other than by
 * ledger.head events. */
static tally_err head_moved(tally_ledger *l, bool *moved)
{
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(
        l,
        "SELECT EXISTS (SELECT 1 FROM ledger_chain c WHERE c.seq > coalesce((SELECT "
        "max(CAST(substr(event_id, 13) AS INTEGER)) FROM outbox WHERE type = 'ledger.head'), 0) "
        "AND NOT (c.tbl = 'outbox' AND c.row_key IN (SELECT id FROM outbox WHERE type = "
        "'ledger.head')))",
        &st);
    if (e)
        return e;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *moved = sqlite3_column_int(st, 0) != 0;
    else
        e = ledger_sqlite_err(l, rc);
    sqlite3_finalize(st);
    return e;
}

tally_err tally_ledger_head_announce(tally_ledger *l, const char *key_path, bool *added)
{
    *added = false;
    bool moved = false;
    tally_ledger_head h;
    char id[48];
    tally_buf doc;
    tally_buf_init(&doc, 0);
    tally_err e = ledger_begin(l);
    if (e)
        return e;
    e = head_moved(l, &moved);
    if (e == TALLY_OK && moved)
        e = tally_ledger_head_sign(l, key_path, &h);
    if (e == TALLY_OK && moved)
        e = tally_ledger_head_json(&h, &doc);
    if (e == TALLY_OK && moved)
        e = tally_fmt(id, sizeof id, "ledger.head:%" PRId64, h.seq);
    if (e == TALLY_OK && moved)
        e = ledger_outbox_add(l, "ledger.head", "ledger", id, doc.data, doc.len);
    tally_buf_release(&doc);
    if (e != TALLY_OK) {
        ledger_rollback(l);
        return e;
    }
    *added = moved;
    return ledger_commit(l);
}

/* The ledger.head events the ledger holds: each must still be on the chain
 * with a valid signature (called by verify_chain). */
tally_err verify_heads(vctx *v)
{
    sqlite3_stmt *st;
    tally_err err = ledger_prepare(v->l,
                                   "SELECT event_id, json_extract(CAST(payload AS TEXT), '$.data') "
                                   "FROM outbox WHERE type = 'ledger.head' ORDER BY id",
                                   &st);
    if (err)
        return verify_fail(v, err, "ledger database: %s", tally_ledger_errmsg(v->l));
    char why[400];
    int rc;
    while (err == TALLY_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *data = (const char *)sqlite3_column_text(st, 1);
        err = tally_ledger_head_check(v->l, v->key_path, data ? data : "", data ? strlen(data) : 0,
                                      why, sizeof why);
        if (err != TALLY_OK)
            err = verify_fail(v, TALLY_TAMPERED, "outbox event %s: %s",
                              (const char *)sqlite3_column_text(st, 0), why);
    }
    if (err == TALLY_OK && rc != SQLITE_DONE)
        err = verify_fail(v, ledger_sqlite_err(v->l, rc), "ledger database: %s",
                          tally_ledger_errmsg(v->l));
    sqlite3_finalize(st);
    return err;
}
