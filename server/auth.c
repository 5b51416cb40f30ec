/* API keys: creation, revocation, listing, and checking a presented key.
 *
 * Only SHA-256(key) is stored. The server keeps the active hashes in memory,
 * sorted, and reloads them whenever another connection has committed to the
 * ledger (PRAGMA data_version), so `tally apikey revoke` takes effect on the
 * next request. A presented key is hashed, found by binary search and then
 * confirmed with CRYPTO_memcmp; the search's timing depends only on hashes,
 * which tell an attacker nothing about any stored key. */
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "server_int.h"

#define KEY_PREFIX     "tly_"
#define KEY_RAND_BYTES 32

void srv_key_hash(const char *key, size_t len, unsigned char out[32])
{
    unsigned int n = 0;
    if (EVP_Digest(key, len, out, &n, EVP_sha256(), NULL) != 1 || n != 32)
        memset(out, 0, 32); /* never matches: stored hashes come from EVP_Digest too */
}

static bool parse_i64(const char *s, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || !*s || *end || errno)
        return false;
    *out = v;
    return true;
}

static void hex_encode(const unsigned char *p, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

static bool hex_decode(const char *s, unsigned char *out, size_t n)
{
    if (!s || strlen(s) != 2 * n)
        return false;
    for (size_t i = 0; i < 2 * n; i++) {
        char ch = s[i];
        int v = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (v < 0)
            return false;
        out[i / 2] = (unsigned char)(i % 2 ? (out[i / 2] | v) : v << 4);
    }
    return true;
}

/* ---- The keyring ----------------------------------------------------------- */

void srv_keyring_release(srv_keyring *k)
{
    free(k->keys);
    *k = (srv_keyring){0};
}

static tally_err version_row(void *ctx, int ncols, const char *const *cols)
{
    return ncols >= 1 && parse_i64(cols[0], ctx) ? TALLY_OK : TALLY_DB;
}

typedef struct key_list {
    srv_key *v;
    size_t n, alloc;
} key_list;

static tally_err key_row(void *ctx, int ncols, const char *const *cols)
{
    key_list *kl = ctx;
    if (ncols < 4)
        return TALLY_DB;
    if (kl->n == kl->alloc) {
        size_t alloc = kl->alloc ? 2 * kl->alloc : 16;
        srv_key *v = realloc(kl->v, alloc * sizeof *v);
        if (!v)
            return TALLY_NOMEM;
        kl->v = v;
        kl->alloc = alloc;
    }
    srv_key *k = &kl->v[kl->n];
    int64_t admin;
    if (!parse_i64(cols[0], &k->id) || !hex_decode(cols[1], k->hash, sizeof k->hash) ||
        !parse_i64(cols[3], &admin))
        return TALLY_DB;
    k->admin = admin == 1;
    snprintf(k->account, sizeof k->account, "%s", cols[2] ? cols[2] : "");
    kl->n++;
    return TALLY_OK;
}

static int key_cmp(const void *a, const void *b)
{
    return memcmp(((const srv_key *)a)->hash, ((const srv_key *)b)->hash, 32);
}

/* Reloads the active keys if anything was committed since the last load. */
static tally_err keyring_refresh(tally_ledger *l, srv_keyring *k)
{
    int64_t version = 0;
    tally_err e = tally_ledger_query(l, "PRAGMA data_version", NULL, 0, version_row, &version);
    if (e != TALLY_OK || (k->loaded && version == k->data_version))
        return e;
    key_list kl = {0};
    e = tally_ledger_query(l,
                           "SELECT id, hex(key_hash), coalesce(account, ''), admin FROM api_keys "
                           "WHERE revoked_at IS NULL",
                           NULL, 0, key_row, &kl);
    if (e != TALLY_OK) {
        free(kl.v);
        return e;
    }
    qsort(kl.v, kl.n, sizeof *kl.v, key_cmp);
    free(k->keys);
    k->keys = kl.v;
    k->n = kl.n;
    k->data_version = version;
    k->loaded = true;
    return TALLY_OK;
}

static bool base64url_char(char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '-' || ch == '_';
}

/* The key in "Bearer <key>", or NULL if the header has another shape. */
static const char *bearer_key(const char *header)
{
    if (strncasecmp(header, "Bearer ", 7) != 0)
        return NULL;
    const char *key = header + 7;
    while (*key == ' ')
        key++;
    size_t n = strlen(key);
    while (n > 0 && key[n - 1] == ' ')
        n--;
    if (n != TALLY_APIKEY_LEN || strncmp(key, KEY_PREFIX, strlen(KEY_PREFIX)) != 0)
        return NULL;
    for (size_t i = strlen(KEY_PREFIX); i < n; i++)
        if (!base64url_char(key[i]))
            return NULL;
    return key;
}

srv_auth_result srv_authenticate(tally_ledger *l, srv_keyring *k, const char *header,
                                 srv_principal *who)
{
    if (!header)
        return SRV_AUTH_MISSING;
    const char *key = bearer_key(header);
    if (!key)
        return SRV_AUTH_MALFORMED;
    if (keyring_refresh(l, k) != TALLY_OK)
        return SRV_AUTH_ERROR;
    srv_key probe;
    srv_key_hash(key, TALLY_APIKEY_LEN, probe.hash);
    const srv_key *hit = k->n ? bsearch(&probe, k->keys, k->n, sizeof *k->keys, key_cmp) : NULL;
    if (!hit || CRYPTO_memcmp(hit->hash, probe.hash, sizeof probe.hash) != 0)
        return SRV_AUTH_UNKNOWN;
    who->key_id = hit->id;
    who->admin = hit->admin;
    snprintf(who->account, sizeof who->account, "%s", hit->admin ? "" : hit->account);
    return SRV_AUTH_OK;
}

/* ---- Managing keys --------------------------------------------------------- */

static void base64url(const unsigned char *p, size_t n, char *out)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        acc = (acc << 8) | p[i];
        bits += 8;
        while (bits >= 6) {
            bits -= 6;
            out[o++] = abc[(acc >> bits) & 63];
        }
    }
    if (bits > 0)
        out[o++] = abc[(acc << (6 - bits)) & 63];
    out[o] = '\0';
}

/* Account ids are bounded and free of control characters. */
static bool account_ok(const char *a)
{
    size_t n = a ? strlen(a) : 0;
    if (n == 0 || n >= TALLY_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)a[i] < 0x20 || a[i] == 0x7f)
            return false;
    return true;
}

static tally_err last_id_row(void *ctx, int ncols, const char *const *cols)
{
    return ncols >= 1 && parse_i64(cols[0], ctx) ? TALLY_OK : TALLY_DB;
}

tally_err tally_apikey_create(tally_ledger *l, const char *account, bool admin, char *key,
                              size_t cap, int64_t *id_out)
{
    if (admin == (account != NULL) || (!admin && !account_ok(account)) ||
        cap < TALLY_APIKEY_LEN + 1)
        return TALLY_INVAL;
    unsigned char rnd[KEY_RAND_BYTES], hash[32];
    if (RAND_bytes(rnd, sizeof rnd) != 1)
        return TALLY_CRYPTO;
    memcpy(key, KEY_PREFIX, strlen(KEY_PREFIX));
    base64url(rnd, sizeof rnd, key + strlen(KEY_PREFIX));
    OPENSSL_cleanse(rnd, sizeof rnd);
    srv_key_hash(key, TALLY_APIKEY_LEN, hash);
    /* Values go in as hex literals: nothing from the caller is parsed as SQL. */
    char hash_hex[65], acct_hex[2 * TALLY_NAME_MAX + 1] = "", sql[512];
    hex_encode(hash, sizeof hash, hash_hex);
    if (account)
        hex_encode((const unsigned char *)account, strlen(account), acct_hex);
    tally_err e = tally_fmt(sql, sizeof sql,
                            "INSERT INTO api_keys(key_hash, account, admin, created_at) "
                            "VALUES (X'%s', %s%s%s, %d, %lld)",
                            hash_hex, account ? "CAST(X'" : "NULL", acct_hex,
                            account ? "' AS TEXT)" : "", admin ? 1 : 0, (long long)tally_now_s());
    if (e)
        return e;
    e = tally_ledger_exec(l, sql);
    if (e == TALLY_OK)
        e = tally_ledger_query(l, "SELECT last_insert_rowid()", NULL, 0, last_id_row, id_out);
    if (e != TALLY_OK)
        OPENSSL_cleanse(key, TALLY_APIKEY_LEN);
    return e;
}

typedef struct revoke_state {
    bool found;
    bool revoked;
} revoke_state;

static tally_err revoke_row(void *ctx, int ncols, const char *const *cols)
{
    revoke_state *st = ctx;
    st->found = true;
    st->revoked = ncols >= 1 && cols[0] != NULL;
    return TALLY_OK;
}

tally_err tally_apikey_revoke(tally_ledger *l, int64_t id)
{
    char id_text[24], sql[160];
    snprintf(id_text, sizeof id_text, "%lld", (long long)id);
    const char *params[] = {id_text};
    revoke_state st = {false, false};
    tally_err e = tally_ledger_query(l, "SELECT revoked_at FROM api_keys WHERE id = ?1", params, 1,
                                     revoke_row, &st);
    if (e != TALLY_OK)
        return e;
    if (!st.found)
        return TALLY_NOT_FOUND;
    if (st.revoked)
        return TALLY_EXISTS;
    snprintf(sql, sizeof sql,
             "UPDATE api_keys SET revoked_at = %lld WHERE id = %lld AND revoked_at IS NULL",
             (long long)tally_now_s(), (long long)id);
    return tally_ledger_exec(l, sql);
}

typedef struct list_state {
    tally_apikey_fn fn;
    void *ctx;
} list_state;

static tally_err list_row(void *ctx, int ncols, const char *const *cols)
{
    list_state *st = ctx;
    tally_apikey_info k = {0};
    int64_t admin;
    if (ncols < 5 || !parse_i64(cols[0], &k.id) || !parse_i64(cols[2], &admin) ||
        !parse_i64(cols[3], &k.created_s) || !parse_i64(cols[4], &k.revoked_s))
        return TALLY_DB;
    k.admin = admin == 1;
    snprintf(k.account, sizeof k.account, "%s", cols[1] ? cols[1] : "");
    return st->fn(st->ctx, &k);
}

tally_err tally_apikey_list(tally_ledger *l, tally_apikey_fn fn, void *ctx)
{
    list_state st = {fn, ctx};
    return tally_ledger_query(l,
                              "SELECT id, coalesce(account, ''), admin, created_at, "
                              "coalesce(revoked_at, 0) FROM api_keys ORDER BY id",
                              NULL, 0, list_row, &st);
}
