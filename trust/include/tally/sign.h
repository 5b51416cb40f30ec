/* Signing keys, signatures and hashes (OpenSSL EVP, Ed25519, SHA-256). No
 * storage: the ledger calls these to sign and check what it stores. */
#ifndef TALLY_SIGN_H
#define TALLY_SIGN_H

#include <stddef.h>
#include <stdint.h>

#include "tally/buf.h"
#include "tally/err.h"

/* Creates a new Ed25519 private key as PEM at path, mode 0600. Refuses to
 * replace an existing file unless force. Errors: TALLY_EXISTS, TALLY_IO,
 * TALLY_CRYPTO. */
TALLY_MUST_CHECK tally_err tally_keygen(const char *path, int force);
/* Appends the public key of the private key at path, as PEM.
 * Errors: TALLY_NOT_FOUND, TALLY_CRYPTO. */
TALLY_MUST_CHECK tally_err tally_pubkey_pem(const char *path, tally_buf *out);

/* SHA-256 of data as 64 lower-case hex digits plus NUL. */
void tally_sha256_hex(const void *data, size_t len, char hex[65]);
/* Ed25519 signature of the 32 raw bytes of a SHA-256 (given as hex), as 128
 * hex digits plus NUL. Errors: TALLY_NOT_FOUND (no key), TALLY_CRYPTO. */
TALLY_MUST_CHECK tally_err tally_sign_hash(const char *key_path, const char hash_hex[65],
                                           char sig_hex[129]);
/* Checks a signature with the public key derived from key_path, or with a PEM
 * public key file. Errors: TALLY_TAMPERED (bad signature), TALLY_CRYPTO. */
TALLY_MUST_CHECK tally_err tally_verify_hash(const char *key_path, const char hash_hex[65],
                                             const char sig_hex[129]);

#endif
