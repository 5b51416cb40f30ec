/* Signing keys and ledger verification (OpenSSL EVP, Ed25519, SHA-256). */
#ifndef TALLY_SIGN_H
#define TALLY_SIGN_H

#include <stddef.h>
#include <stdint.h>

#include "tally/buf.h"
#include "tally/err.h"
#include "tally/ledger.h"

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

/* Checks the whole ledger: debits equal credits per currency and per entry;
 * every balance equals the sum of its postings; invoice and credit note
 * numbers have no gaps; every stored document hashes to its hash, the chain
 * links, every signature is valid; the append-only triggers are present;
 * SQLite's integrity_check is ok. On the first failure writes the bad record
 * and what is wrong to why; on success why holds a one-line summary. key_path
 * may hold the private key or only its public key (PEM).
 * Errors: TALLY_TAMPERED, TALLY_NOT_FOUND (no key file while there are signed
 * documents), TALLY_CRYPTO (not an Ed25519 key), TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_ledger_verify(tally_ledger *l, const char *key_path, char *why,
                                               size_t cap);

#endif
