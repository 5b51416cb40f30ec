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

/* ---- The keyring ----------------------------------------------------------- */

void srv_keyring_release(srv_keyring *k)
{
    free(k->keys);
    *k = (srv_keyring){0};
}

typedef struct key_list {
    srv_key *v;
    size_t n, alloc;
} key_list;

static tally_err key_row(void *ctx, const tally_key_row *row)
{
    key_list *kl = ctx;
    if (kl->n == kl->alloc) {
        size_t alloc = kl->alloc ? 2 * kl->alloc : 16;
        srv_key *v = realloc(kl->v, alloc * sizeof *v);
        if (!v)
            return TALLY_NOMEM;
        kl->v = v;
        kl->alloc = alloc;
    }
    srv_key *k = &kl->v[kl->n++];
    memcpy(k->hash, row->hash, sizeof k->hash);
    k->id = row->id;
    k->role = row->role;
    snprintf(k->account, sizeof k->account, "%s", row->account);
    memcpy(k->sources, row->sources, sizeof k->sources);
    k->n_sources = row->n_sources;
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
    tally_err e = tally_ledger_data_version(l, &version);
    if (e != TALLY_OK || (k->loaded && version == k->data_version))
        return e;
    key_list kl = {0};
    e = tally_ledger_keys(l, true, key_row, &kl);
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
    who->role = hit->role;
    who->admin = hit->role == TALLY_KEY_ADMIN;
    snprintf(who->account, sizeof who->account, "%s",
             hit->role == TALLY_KEY_ACCOUNT ? hit->account : "");
    memcpy(who->sources, hit->sources, sizeof who->sources);
    who->n_sources = hit->role == TALLY_KEY_INGEST ? hit->n_sources : 0;
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

/* Makes a random key, stores its hash with the role and clears the key on
 * failure. */
static tally_err create_key(tally_ledger *l, tally_key_role role, const char *account,
                            const char *const *sources, size_t n, char *key, int64_t *id_out)
{
    unsigned char rnd[KEY_RAND_BYTES], hash[32];
    if (RAND_bytes(rnd, sizeof rnd) != 1)
        return TALLY_CRYPTO;
    memcpy(key, KEY_PREFIX, strlen(KEY_PREFIX));
    base64url(rnd, sizeof rnd, key + strlen(KEY_PREFIX));
    OPENSSL_cleanse(rnd, sizeof rnd);
    srv_key_hash(key, TALLY_APIKEY_LEN, hash);
    tally_err e =
        tally_ledger_key_insert(l, hash, role, account, sources, n, tally_now_s(), id_out);
    if (e != TALLY_OK)
        OPENSSL_cleanse(key, TALLY_APIKEY_LEN);
    return e;
}

tally_err tally_apikey_create(tally_ledger *l, const char *account, bool admin, char *key,
                              size_t cap, int64_t *id_out)
{
    if (admin == (account != NULL) || (!admin && !account_ok(account)) ||
        cap < TALLY_APIKEY_LEN + 1)
        return TALLY_INVAL;
    return create_key(l, admin ? TALLY_KEY_ADMIN : TALLY_KEY_ACCOUNT, account, NULL, 0, key,
                      id_out);
}

/* A source prefix: 1..TALLY_ID_MAX-1 bytes, no control characters. */
static bool prefix_ok(const char *p)
{
    size_t n = p ? strlen(p) : 0;
    if (n == 0 || n >= TALLY_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f)
            return false;
    return true;
}

tally_err tally_apikey_create_ingest(tally_ledger *l, const char *const *sources, size_t n,
                                     char *key, size_t cap, int64_t *id_out)
{
    if (n == 0 || n > TALLY_KEY_SOURCES_MAX || cap < TALLY_APIKEY_LEN + 1)
        return TALLY_INVAL;
    for (size_t i = 0; i < n; i++)
        if (!prefix_ok(sources[i]))
            return TALLY_INVAL;
    return create_key(l, TALLY_KEY_INGEST, NULL, sources, n, key, id_out);
}

bool tally_apikey_source_allowed(const char (*sources)[TALLY_ID_MAX], size_t n, const char *source)
{
    for (size_t i = 0; i < n; i++)
        if (strncmp(source, sources[i], strlen(sources[i])) == 0)
            return true;
    return false;
}

tally_err tally_apikey_revoke(tally_ledger *l, int64_t id)
{
    return tally_ledger_key_revoke(l, id, tally_now_s());
}

typedef struct list_state {
    tally_apikey_fn fn;
    void *ctx;
} list_state;

static tally_err list_row(void *ctx, const tally_key_row *row)
{
    list_state *st = ctx;
    tally_apikey_info k = {.id = row->id,
                           .role = row->role,
                           .admin = row->admin,
                           .n_sources = row->n_sources,
                           .created_s = row->created_s,
                           .revoked_s = row->revoked_s};
    snprintf(k.account, sizeof k.account, "%s", row->account);
    memcpy(k.sources, row->sources, sizeof k.sources);
    return st->fn(st->ctx, &k);
}

tally_err tally_apikey_list(tally_ledger *l, tally_apikey_fn fn, void *ctx)
{
    list_state st = {fn, ctx};
    return tally_ledger_keys(l, false, list_row, &st);
}
