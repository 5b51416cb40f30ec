/* Keyrings: every public key that ever signed for a key path.
 *
 * Rotating the signing key (`tally keygen --force`) keeps the old public
 * keys in "<key>.pubkeys" beside the key file, so documents and ledger heads
 * signed with an older key still verify: each names its key id, and the
 * keyring finds the key with that id. */
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/pem.h>

#include "trust_int.h"

#define KEYRING_MAX 256

struct tally_keyring {
    size_t n;
    EVP_PKEY *key[KEYRING_MAX];
    EVP_MD_CTX *verify[KEYRING_MAX]; /* each key's context for the next check, or NULL */
    char id[KEYRING_MAX][TALLY_KEY_ID_LEN + 1];
};

static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf, (void)size, (void)rwflag, (void)u;
    return -1;
}

/* Adds pkey (taking ownership) unless a key with its id is there. */
static tally_err add_key(tally_keyring *kr, EVP_PKEY *pkey)
{
    char id[TALLY_KEY_ID_LEN + 1];
    tally_err err = EVP_PKEY_is_a(pkey, "ED25519") ? trust_key_id(pkey, id) : TALLY_CRYPTO;
    for (size_t i = 0; err == TALLY_OK && i < kr->n; i++)
        if (strcmp(kr->id[i], id) == 0)
            err = TALLY_EXISTS;
    if (err == TALLY_OK && kr->n == KEYRING_MAX)
        err = TALLY_TOO_LARGE;
    if (err != TALLY_OK) {
        EVP_PKEY_free(pkey);
        return err == TALLY_EXISTS ? TALLY_OK : err;
    }
    kr->key[kr->n] = pkey;
    memcpy(kr->id[kr->n], id, sizeof id);
    kr->n++;
    return TALLY_OK;
}

/* Adds the keys of one file: a private key, or any number of public keys.
 * Returns how many it found in *found. */
static tally_err add_file(tally_keyring *kr, const char *path, size_t *found)
{
    tally_buf text;
    tally_buf_init(&text, TRUST_KEY_FILE_MAX);
    size_t before = kr->n;
    tally_err err = trust_read_file(path, &text);
    if (err != TALLY_OK || text.len == 0)
        goto out;
    BIO *bio = BIO_new_mem_buf(text.data, (int)text.len);
    if (!bio) {
        err = TALLY_NOMEM;
        goto out;
    }
    EVP_PKEY *pkey = PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL);
    if (pkey) {
        err = add_key(kr, pkey);
    } else {
        (void)BIO_reset(bio);
        while (err == TALLY_OK && (pkey = PEM_read_bio_PUBKEY(bio, NULL, no_passphrase, NULL)))
            err = add_key(kr, pkey);
    }
    BIO_free(bio);
out:
    ERR_clear_error();
    tally_buf_release(&text);
    *found = kr->n - before;
    return err;
}

tally_err tally_keyring_load(const char *key_path, tally_keyring **out)
{
    *out = NULL;
    if (!key_path || !*key_path)
        return TALLY_NOT_FOUND;
    tally_keyring *kr = calloc(1, sizeof *kr);
    if (!kr)
        return TALLY_NOMEM;
    size_t found = 0, kept = 0;
    tally_buf ring;
    tally_buf_init(&ring, 0);
    tally_err err = add_file(kr, key_path, &found);
    tally_err err_main = err;
    if (err == TALLY_NOT_FOUND || err == TALLY_OK)
        err = tally_buf_printf(&ring, "%s.pubkeys", key_path);
    if (err == TALLY_OK) {
        err = add_file(kr, ring.data, &kept);
        if (err == TALLY_NOT_FOUND)
            err = TALLY_OK;
    }
    tally_buf_release(&ring);
    if (err == TALLY_OK && kr->n == 0)
        err = err_main == TALLY_NOT_FOUND ? TALLY_NOT_FOUND : TALLY_CRYPTO;
    if (err == TALLY_OK && found == 0 && err_main == TALLY_OK)
        err = TALLY_CRYPTO; /* the key file itself holds no key */
    if (err != TALLY_OK) {
        tally_keyring_destroy(kr);
        return err;
    }
    *out = kr;
    return TALLY_OK;
}

void tally_keyring_destroy(tally_keyring *kr)
{
    if (!kr)
        return;
    for (size_t i = 0; i < kr->n; i++) {
        EVP_MD_CTX_free(kr->verify[i]);
        EVP_PKEY_free(kr->key[i]);
    }
    free(kr);
}

size_t tally_keyring_count(const tally_keyring *kr)
{
    return kr ? kr->n : 0;
}

const char *tally_keyring_id(const tally_keyring *kr, size_t i)
{
    return kr && i < kr->n ? kr->id[i] : "";
}

tally_err tally_keyring_pem(const tally_keyring *kr, size_t i, tally_buf *out)
{
    if (!kr || i >= kr->n)
        return TALLY_INVAL;
    return trust_public_pem(kr->key[i], out);
}

tally_err tally_keyring_verify(tally_keyring *kr, const char *key_id, const char hash_hex[65],
                               const char sig_hex[129])
{
    tally_err err = TALLY_NOT_FOUND;
    for (size_t i = 0; kr && i < kr->n; i++) {
        if (key_id && *key_id && strcmp(kr->id[i], key_id) != 0)
            continue;
        err = trust_verify_cached(kr->key[i], &kr->verify[i], hash_hex, sig_hex);
        if (err != TALLY_TAMPERED)
            return err;
    }
    return err;
}
