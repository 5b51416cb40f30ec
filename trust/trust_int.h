/* Private to trust/: what sign.c and keyring.c share. */
#ifndef TALLY_TRUST_INT_H
#define TALLY_TRUST_INT_H

#include <openssl/evp.h>

#include "tally/sign.h"

#define TRUST_KEY_FILE_MAX ((size_t)256 << 10) /* a PEM key is a few hundred bytes */

/* Reads the whole file at path (bounded by out's cap). Errors:
 * TALLY_NOT_FOUND, TALLY_IO, TALLY_TOO_LARGE. */
tally_err trust_read_file(const char *path, tally_buf *out);
/* The key id of an Ed25519 key: the first 16 hex digits of the SHA-256 of
 * its 32 raw public key bytes. Errors: TALLY_CRYPTO. */
tally_err trust_key_id(EVP_PKEY *pkey, char id[TALLY_KEY_ID_LEN + 1]);
/* Appends pkey's public key as SubjectPublicKeyInfo PEM. */
tally_err trust_public_pem(EVP_PKEY *pkey, tally_buf *out);

/* The Ed25519 signature (hex) of a SHA-256 (hex) with the private key
 * pkey. Errors: TALLY_INVAL (not a hash), TALLY_CRYPTO. */
tally_err trust_sign_pkey(EVP_PKEY *pkey, const char hash_hex[65], char sig_hex[129]);
/* The private key at key_path (from the key cache) and its key id; the
 * caller frees *out with EVP_PKEY_free. Errors: TALLY_NOT_FOUND, TALLY_IO,
 * TALLY_CRYPTO. */
tally_err trust_signing_key(const char *key_path, EVP_PKEY **out, char id[TALLY_KEY_ID_LEN + 1]);

/* Checks an Ed25519 signature (hex) of a SHA-256 (hex) with pkey. Errors:
 * TALLY_TAMPERED (bad or malformed signature), TALLY_CRYPTO. */
tally_err trust_verify_pkey(EVP_PKEY *pkey, const char hash_hex[65], const char sig_hex[129]);
/* The same with a context kept in *cached for pkey's next check (NULL: a
 * fresh one every time; *cached NULL: none yet). The caller frees *cached
 * with EVP_MD_CTX_free. */
tally_err trust_verify_cached(EVP_PKEY *pkey, EVP_MD_CTX **cached, const char hash_hex[65],
                              const char sig_hex[129]);

#endif
