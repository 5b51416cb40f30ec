/* Signing keys, signatures and hashes (OpenSSL EVP, Ed25519, SHA-256). No
 * storage: the ledger calls these to sign and check what it stores. */
#ifndef TALLY_SIGN_H
#define TALLY_SIGN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tally/buf.h"
#include "tally/err.h"

/* Length of a key id in hex digits: the first 16 hex digits of the SHA-256
 * of the 32 raw bytes of an Ed25519 public key. */
#define TALLY_KEY_ID_LEN 16

/* Creates a new Ed25519 private key as PEM at path, mode 0600. Refuses to
 * replace an existing file unless force. Every public key ever created at
 * path (and, on force, the one replaced) is appended to the keyring file
 * "<path>.pubkeys" (PEM, mode 0644), so documents signed with an older key
 * still verify. Errors: TALLY_EXISTS, TALLY_IO, TALLY_CRYPTO. */
TALLY_MUST_CHECK tally_err tally_keygen(const char *path, int force);
/* Appends the public key of the private key at path, as PEM.
 * Errors: TALLY_NOT_FOUND, TALLY_CRYPTO. */
TALLY_MUST_CHECK tally_err tally_pubkey_pem(const char *path, tally_buf *out);

/* The key id of the key at path (private or public PEM), as
 * TALLY_KEY_ID_LEN hex digits plus NUL. Errors: TALLY_NOT_FOUND,
 * TALLY_CRYPTO. */
TALLY_MUST_CHECK tally_err tally_key_id(const char *path, char id[TALLY_KEY_ID_LEN + 1]);

/* Every public key known for a key path: the key at path itself (a private
 * key, or one or more PEM public keys, such as the output of
 * `tally pubkey --all`), then those of "<path>.pubkeys", without repeats.
 * Index 0 is the first key of path. */
typedef struct tally_keyring tally_keyring;
/* Loads the keyring of key_path. Errors: TALLY_NOT_FOUND (no key at all),
 * TALLY_CRYPTO (a file that holds no Ed25519 key), TALLY_IO, TALLY_NOMEM. */
TALLY_MUST_CHECK tally_err tally_keyring_load(const char *key_path, tally_keyring **out);
void tally_keyring_destroy(tally_keyring *kr);
size_t tally_keyring_count(const tally_keyring *kr);
/* The key id of key i (borrowed, valid until destroy). */
const char *tally_keyring_id(const tally_keyring *kr, size_t i);
/* Appends key i's public key as PEM. */
TALLY_MUST_CHECK tally_err tally_keyring_pem(const tally_keyring *kr, size_t i, tally_buf *out);
/* Checks a signature with the key named key_id; an empty key_id (documents
 * from before key ids) tries every key. It keeps each key's verification
 * context for the next check, so one keyring is used by one thread at a
 * time. Errors: TALLY_NOT_FOUND (no key with that id), TALLY_TAMPERED (bad
 * signature), TALLY_CRYPTO. */
TALLY_MUST_CHECK tally_err tally_keyring_verify(tally_keyring *kr, const char *key_id,
                                                const char hash_hex[65], const char sig_hex[129]);

/* SHA-256 of data as 64 lower-case hex digits plus NUL. */
void tally_sha256_hex(const void *data, size_t len, char hex[65]);

/* SHA-256 of data that arrives in pieces (a line longer than what is kept of
 * it). _create returns NULL when out of memory; _final writes the hex digest
 * and frees h; _destroy frees an unfinished one (accepts NULL). */
typedef struct tally_sha256 tally_sha256;
tally_sha256 *tally_sha256_create(void);
void tally_sha256_update(tally_sha256 *h, const void *data, size_t len);
void tally_sha256_final(tally_sha256 *h, char hex[65]);
void tally_sha256_destroy(tally_sha256 *h);
/* Ed25519 signature of the 32 raw bytes of a SHA-256 (given as hex), as 128
 * hex digits plus NUL. Errors: TALLY_NOT_FOUND (no key), TALLY_CRYPTO. */
TALLY_MUST_CHECK tally_err tally_sign_hash(const char *key_path, const char hash_hex[65],
                                           char sig_hex[129]);
/* A queue of hashes that a thread signs for one key while its caller does
 * other work: an invoice run pushes each document's hash as it makes the
 * document, and takes the signatures, oldest first, when it stores the
 * documents. Up to TALLY_SIGNER_QUEUE hashes wait at a time; the key is the
 * one at key_path when the signer starts, for all it signs. One caller
 * thread per signer. A hash nobody has begun to sign when the caller waits
 * for it is signed by the caller, so a wait never sleeps on an idle thread.
 *   _start   loads the key and starts the thread, which sleeps while the
 *            queue is empty and is woken by a batch of hashes (threaded
 *            false: no thread; the caller signs in _wait). Errors:
 *            TALLY_NOT_FOUND (no key), TALLY_IO, TALLY_CRYPTO, TALLY_NOMEM.
 *   _key_id  the key's id (borrowed, valid until _stop).
 *   _queued  hashes pushed and not yet taken.
 *   _push    queues a hash (hex); *ticket names it. TALLY_INVAL: not 64
 *            characters; TALLY_INTERNAL: the queue is full.
 *   _wait    the signature of the oldest queued hash, whose ticket is given:
 *            its signature, or the error signing gave (TALLY_INVAL: not
 *            hex; TALLY_CRYPTO); either way the hash leaves the queue.
 *            TALLY_INTERNAL when ticket is not the oldest queued.
 *   _drop    empties the queue, waiting for a hash being signed.
 *   _stop    drops the queue, ends the thread (accepts NULL). */
#define TALLY_SIGNER_QUEUE 512
typedef struct tally_signer tally_signer;
TALLY_MUST_CHECK tally_err tally_signer_start(const char *key_path, bool threaded,
                                              tally_signer **out);
const char *tally_signer_key_id(const tally_signer *s);
size_t tally_signer_queued(const tally_signer *s);
TALLY_MUST_CHECK tally_err tally_signer_push(tally_signer *s, const char hash_hex[65],
                                             uint64_t *ticket);
TALLY_MUST_CHECK tally_err tally_signer_wait(tally_signer *s, uint64_t ticket, char sig_hex[129]);
void tally_signer_drop(tally_signer *s);
void tally_signer_stop(tally_signer *s);
/* Checks a signature with the public key derived from key_path, or with a PEM
 * public key file. Errors: TALLY_TAMPERED (bad signature), TALLY_CRYPTO. */
TALLY_MUST_CHECK tally_err tally_verify_hash(const char *key_path, const char hash_hex[65],
                                             const char sig_hex[129]);

#endif
