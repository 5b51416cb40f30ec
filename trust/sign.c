/* Invoice signing keys, SHA-256 and Ed25519 signatures (OpenSSL 3 EVP).
 *
 * The key is a PEM file outside the ledger (PKCS#8 private key, mode 0600).
 * Signatures are Ed25519 over the 32 raw bytes of a document's SHA-256, so a
 * customer can check them with `openssl pkeyutl -verify -rawin` and the
 * exported public key (SubjectPublicKeyInfo PEM). */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "tally/fdio.h"
#include "trust_int.h"

#define KEY_FILE_MAX TRUST_KEY_FILE_MAX
#define HASH_LEN     32
#define SIG_LEN      64

static const char hexdig[] = "0123456789abcdef";

static void to_hex(const unsigned char *in, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hexdig[in[i] >> 4];
        out[2 * i + 1] = hexdig[in[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hex_val(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Decodes exactly 2n lower-case hex digits followed by NUL; 0 on success. */
static int from_hex(const char *in, unsigned char *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int hi = hex_val(in[2 * i]);
        int lo = hi < 0 ? -1 : hex_val(in[2 * i + 1]);
        if (lo < 0)
            return -1;
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    return in[2 * n] == '\0' ? 0 : -1;
}

/* Never prompts for a passphrase: Tally's keys are not encrypted. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf, (void)size, (void)rwflag, (void)u;
    return -1;
}

tally_err trust_read_file(const char *path, tally_buf *out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? TALLY_NOT_FOUND : TALLY_IO;
    tally_err err = TALLY_OK;
    char chunk[4096];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            err = TALLY_IO;
            break;
        }
        if (n == 0)
            break;
        err = tally_buf_append(out, chunk, (size_t)n);
        if (err != TALLY_OK)
            break;
    }
    close(fd);
    return err;
}

/* Loads an Ed25519 key from path: a private key, or (if allow_public) a
 * public key. Errors: TALLY_NOT_FOUND, TALLY_IO, TALLY_CRYPTO. */
static tally_err load_key(const char *path, int allow_public, EVP_PKEY **out)
{
    tally_buf text;
    tally_buf_init(&text, KEY_FILE_MAX);
    tally_err err = trust_read_file(path, &text);
    if (err != TALLY_OK)
        goto out_text;
    err = TALLY_CRYPTO;
    if (text.len == 0)
        goto out_text;
    BIO *bio = BIO_new_mem_buf(text.data, (int)text.len);
    if (!bio)
        goto out_text;
    EVP_PKEY *pkey = PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL);
    if (!pkey && allow_public && BIO_reset(bio) == 1)
        pkey = PEM_read_bio_PUBKEY(bio, NULL, no_passphrase, NULL);
    BIO_free(bio);
    if (pkey && !EVP_PKEY_is_a(pkey, "ED25519")) {
        EVP_PKEY_free(pkey);
        pkey = NULL;
    }
    if (pkey) {
        *out = pkey;
        err = TALLY_OK;
    }
out_text:
    ERR_clear_error();
    tally_buf_release(&text);
    return err;
}

/* The last key loaded, kept while its file is unchanged (same inode, size
 * and modification time): finalizing thousands of invoices would otherwise
 * read and decode the PEM file once per document. Callers get their own
 * reference. */
static struct {
    pthread_mutex_t lock;
    char path[4096];
    int allow_public;
    struct stat st;
    EVP_PKEY *pkey;
    char id[TALLY_KEY_ID_LEN + 1]; /* its key id ("" if it could not be had) */
} key_cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

static bool same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* The key at path, and (when id is not NULL) its key id as the cache knows
 * it: "" when the caller must work it out. */
static tally_err cached_key(const char *path, int allow_public, EVP_PKEY **out, char *id)
{
    struct stat st;
    if (id)
        id[0] = '\0';
    if (stat(path, &st) != 0)
        return errno == ENOENT ? TALLY_NOT_FOUND : TALLY_IO;
    pthread_mutex_lock(&key_cache.lock);
    /* A private key loaded for signing also serves a public-key use. */
    if (key_cache.pkey && (key_cache.allow_public == allow_public || allow_public) &&
        strcmp(key_cache.path, path) == 0 && same_file(&key_cache.st, &st) &&
        EVP_PKEY_up_ref(key_cache.pkey) == 1) {
        *out = key_cache.pkey;
        if (id)
            memcpy(id, key_cache.id, sizeof key_cache.id);
        pthread_mutex_unlock(&key_cache.lock);
        return TALLY_OK;
    }
    tally_err err = load_key(path, allow_public, out);
    if (err == TALLY_OK && strlen(path) < sizeof key_cache.path && EVP_PKEY_up_ref(*out) == 1) {
        EVP_PKEY_free(key_cache.pkey);
        key_cache.pkey = *out;
        key_cache.allow_public = allow_public;
        key_cache.st = st;
        snprintf(key_cache.path, sizeof key_cache.path, "%s", path);
        if (trust_key_id(*out, key_cache.id) != TALLY_OK)
            key_cache.id[0] = '\0';
    }
    pthread_mutex_unlock(&key_cache.lock);
    return err;
}

static tally_err keep_public(const char *path, EVP_PKEY *pkey);
static tally_err keep_old_public(const char *path);

/* Writes the key file's bytes to fd (already open, created by us), makes it
 * 0600 whatever the umask, and flushes it to disk. Closes fd. */
static tally_err fill_key_file(int fd, const char *pem, size_t len)
{
    tally_err err = TALLY_IO;
    if (fchmod(fd, S_IRUSR | S_IWUSR) != 0)
        goto out_fd;
    err = tally_write_all(fd, pem, len);
    if (err == TALLY_OK && fsync(fd) != 0)
        err = TALLY_IO;
out_fd:
    if (close(fd) != 0 && err == TALLY_OK)
        err = TALLY_IO;
    return err;
}

/* Replaces path atomically: a temporary file in the same directory, renamed
 * over it, so a crash never leaves a half-written key. */
static tally_err replace_key_file(const char *path, const char *pem, size_t len)
{
    tally_buf tmp;
    tally_buf_init(&tmp, 0);
    tally_err err = tally_buf_printf(&tmp, "%s.tmp.XXXXXX", path);
    if (err != TALLY_OK)
        goto out_tmp;
    int fd = mkstemp(tmp.data); /* mode 0600, O_EXCL */
    if (fd < 0) {
        err = TALLY_IO;
        goto out_tmp;
    }
    err = fill_key_file(fd, pem, len);
    if (err == TALLY_OK && rename(tmp.data, path) != 0)
        err = TALLY_IO;
    if (err != TALLY_OK)
        unlink(tmp.data);
out_tmp:
    tally_buf_release(&tmp);
    return err;
}

/* The private key as PKCS#8 PEM, in a buffer the caller releases. */
static tally_err private_pem(EVP_PKEY *pkey, tally_buf *out)
{
    tally_err err = TALLY_CRYPTO;
    BIO *mem = BIO_new(BIO_s_mem());
    if (!mem)
        return TALLY_NOMEM;
    if (PEM_write_bio_PrivateKey(mem, pkey, NULL, NULL, 0, NULL, NULL) == 1) {
        char *p = NULL;
        long n = BIO_get_mem_data(mem, &p);
        if (n > 0)
            err = tally_buf_append(out, p, (size_t)n);
    }
    BIO_free(mem);
    return err;
}

tally_err tally_keygen(const char *path, int force)
{
    if (!path || !*path)
        return TALLY_INVAL;
    EVP_PKEY *pkey = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    if (!pkey) {
        ERR_clear_error();
        return TALLY_CRYPTO;
    }
    tally_buf pem;
    tally_buf_init(&pem, KEY_FILE_MAX);
    tally_err err = private_pem(pkey, &pem);
    if (err != TALLY_OK)
        goto out_pem;
    if (force) {
        err = keep_old_public(path);
        if (err == TALLY_OK)
            err = replace_key_file(path, pem.data, pem.len);
        if (err == TALLY_OK)
            err = keep_public(path, pkey);
        goto out_pem;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, S_IRUSR | S_IWUSR);
    if (fd < 0) {
        err = errno == EEXIST ? TALLY_EXISTS : TALLY_IO;
        goto out_pem;
    }
    err = fill_key_file(fd, pem.data, pem.len);
    if (err != TALLY_OK)
        unlink(path); /* we created it; do not leave a broken key behind */
    else
        err = keep_public(path, pkey);
out_pem:
    if (pem.data)
        OPENSSL_cleanse(pem.data, pem.len);
    tally_buf_release(&pem);
    EVP_PKEY_free(pkey);
    ERR_clear_error();
    return err;
}

tally_err trust_public_pem(EVP_PKEY *pkey, tally_buf *out)
{
    tally_err err = TALLY_CRYPTO;
    BIO *mem = BIO_new(BIO_s_mem());
    if (!mem)
        return TALLY_NOMEM;
    if (PEM_write_bio_PUBKEY(mem, pkey) == 1) {
        char *p = NULL;
        long n = BIO_get_mem_data(mem, &p);
        if (n > 0)
            err = tally_buf_append(out, p, (size_t)n);
    }
    BIO_free(mem);
    ERR_clear_error();
    return err;
}

tally_err tally_pubkey_pem(const char *path, tally_buf *out)
{
    EVP_PKEY *pkey = NULL;
    tally_err err = load_key(path, 1, &pkey);
    if (err != TALLY_OK)
        return err;
    err = trust_public_pem(pkey, out);
    EVP_PKEY_free(pkey);
    return err;
}

tally_err trust_key_id(EVP_PKEY *pkey, char id[TALLY_KEY_ID_LEN + 1])
{
    unsigned char raw[32];
    size_t n = sizeof raw;
    char hex[65];
    if (EVP_PKEY_get_raw_public_key(pkey, raw, &n) != 1 || n != sizeof raw) {
        ERR_clear_error();
        return TALLY_CRYPTO;
    }
    tally_sha256_hex(raw, n, hex);
    memcpy(id, hex, TALLY_KEY_ID_LEN);
    id[TALLY_KEY_ID_LEN] = '\0';
    return TALLY_OK;
}

tally_err tally_key_id(const char *path, char id[TALLY_KEY_ID_LEN + 1])
{
    EVP_PKEY *pkey = NULL;
    tally_err err = cached_key(path, 1, &pkey, id); /* once per document finalized */
    if (err != TALLY_OK)
        return err;
    if (id[0] == '\0')
        err = trust_key_id(pkey, id);
    EVP_PKEY_free(pkey);
    return err;
}

/* Appends pkey's public key to "<path>.pubkeys" unless its id is there. */
static tally_err keep_public(const char *path, EVP_PKEY *pkey)
{
    tally_buf ring, pem;
    tally_buf_init(&ring, 0);
    tally_buf_init(&pem, KEY_FILE_MAX);
    char id[TALLY_KEY_ID_LEN + 1];
    tally_err err = trust_key_id(pkey, id);
    if (err == TALLY_OK)
        err = tally_buf_printf(&ring, "%s.pubkeys", path);
    if (err == TALLY_OK)
        err = trust_read_file(ring.data, &pem);
    if (err == TALLY_NOT_FOUND)
        err = TALLY_OK;
    if (err != TALLY_OK || (pem.data && strstr(pem.data, id)))
        goto out;
    tally_buf_reset(&pem);
    err = tally_buf_printf(&pem, "key id %s\n", id);
    if (err == TALLY_OK)
        err = trust_public_pem(pkey, &pem);
    if (err != TALLY_OK)
        goto out;
    int fd = open(ring.data, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        err = TALLY_IO;
        goto out;
    }
    err = tally_write_all(fd, pem.data, pem.len);
    if (err == TALLY_OK && fsync(fd) != 0)
        err = TALLY_IO;
    if (close(fd) != 0 && err == TALLY_OK)
        err = TALLY_IO;
out:
    tally_buf_release(&pem);
    tally_buf_release(&ring);
    return err;
}

/* Before a forced replacement: keeps the public key of the key at path. */
static tally_err keep_old_public(const char *path)
{
    EVP_PKEY *old = NULL;
    tally_err err = load_key(path, 0, &old);
    if (err == TALLY_NOT_FOUND)
        return TALLY_OK;
    if (err != TALLY_OK)
        return err;
    err = keep_public(path, old);
    EVP_PKEY_free(old);
    return err;
}

/* SHA-256 fetched once: OpenSSL 3 looks EVP_sha256() up in its provider
 * store, under locks, on every use, which costs more than hashing the few
 * hundred bytes of a ledger chain row. */
static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void fetch_sha256(void)
{
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

void tally_sha256_hex(const void *data, size_t len, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    pthread_once(&sha256_once, fetch_sha256);
    const EVP_MD *alg = sha256_md ? sha256_md : EVP_sha256();
    if (EVP_Digest(data, len, md, &n, alg, NULL) != 1 || n != HASH_LEN) {
        /* Only on a broken OpenSSL installation; never a valid-looking hash. */
        memset(hex, 'x', 64);
        hex[64] = '\0';
        ERR_clear_error();
        return;
    }
    to_hex(md, HASH_LEN, hex);
}

tally_err trust_sign_pkey(EVP_PKEY *pkey, const char hash_hex[65], char sig_hex[129])
{
    unsigned char hash[HASH_LEN], sig[SIG_LEN];
    if (from_hex(hash_hex, hash, HASH_LEN) != 0)
        return TALLY_INVAL;
    tally_err err = TALLY_CRYPTO;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    size_t sig_len = sizeof sig;
    /* Ed25519 is "pure": no separate digest, hence the NULL md. */
    if (ctx && EVP_DigestSignInit(ctx, NULL, NULL, NULL, pkey) == 1 &&
        EVP_DigestSign(ctx, sig, &sig_len, hash, sizeof hash) == 1 && sig_len == SIG_LEN) {
        to_hex(sig, SIG_LEN, sig_hex);
        err = TALLY_OK;
    }
    EVP_MD_CTX_free(ctx);
    ERR_clear_error();
    return err;
}

tally_err trust_signing_key(const char *key_path, EVP_PKEY **out, char id[TALLY_KEY_ID_LEN + 1])
{
    tally_err err = cached_key(key_path, 0, out, id);
    if (err == TALLY_OK && id[0] == '\0' && (err = trust_key_id(*out, id)) != TALLY_OK) {
        EVP_PKEY_free(*out);
        *out = NULL;
    }
    return err;
}

tally_err tally_sign_hash(const char *key_path, const char hash_hex[65], char sig_hex[129])
{
    EVP_PKEY *pkey = NULL; /* trust_sign_pkey refuses a malformed hash */
    tally_err err = cached_key(key_path, 0, &pkey, NULL);
    if (err != TALLY_OK)
        return err;
    err = trust_sign_pkey(pkey, hash_hex, sig_hex);
    EVP_PKEY_free(pkey);
    return err;
}

tally_err trust_verify_cached(EVP_PKEY *pkey, EVP_MD_CTX **cached, const char hash_hex[65],
                              const char sig_hex[129])
{
    unsigned char hash[HASH_LEN], sig[SIG_LEN];
    /* A malformed hash or signature cannot have been produced by Tally. */
    if (from_hex(hash_hex, hash, HASH_LEN) != 0 || from_hex(sig_hex, sig, SIG_LEN) != 0)
        return TALLY_TAMPERED;
    /* Setting a context up costs about a fifth of an Ed25519 verification
     * (OpenSSL 3 fetches the algorithm for it), and OpenSSL 3.0 lets a
     * context verify one message after another. Only its yes is taken: a
     * no (a bad signature, or a version that refuses a used context) is
     * asked again of a fresh context, whose answer stands. */
    if (cached && *cached) {
        if (EVP_DigestVerify(*cached, sig, sizeof sig, hash, sizeof hash) == 1)
            return TALLY_OK;
        EVP_MD_CTX_free(*cached);
        *cached = NULL;
        ERR_clear_error();
    }
    tally_err err = TALLY_CRYPTO;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx)
        return err;
    if (EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, pkey) == 1) {
        int ok = EVP_DigestVerify(ctx, sig, sizeof sig, hash, sizeof hash);
        err = ok == 1 ? TALLY_OK : ok == 0 ? TALLY_TAMPERED : TALLY_CRYPTO;
    }
    if (cached && err == TALLY_OK)
        *cached = ctx;
    else
        EVP_MD_CTX_free(ctx);
    ERR_clear_error();
    return err;
}

tally_err trust_verify_pkey(EVP_PKEY *pkey, const char hash_hex[65], const char sig_hex[129])
{
    return trust_verify_cached(pkey, NULL, hash_hex, sig_hex);
}

tally_err tally_verify_hash(const char *key_path, const char hash_hex[65], const char sig_hex[129])
{
    unsigned char hash[HASH_LEN], sig[SIG_LEN];
    if (from_hex(hash_hex, hash, HASH_LEN) != 0 || from_hex(sig_hex, sig, SIG_LEN) != 0)
        return TALLY_TAMPERED;
    EVP_PKEY *pkey = NULL;
    tally_err err = cached_key(key_path, 1, &pkey, NULL);
    if (err != TALLY_OK)
        return err;
    err = trust_verify_pkey(pkey, hash_hex, sig_hex);
    EVP_PKEY_free(pkey);
    return err;
}

/* ---- SHA-256 in pieces ------------------------------------------------------ */

struct tally_sha256 {
    EVP_MD_CTX *ctx;
    bool ok;
};

tally_sha256 *tally_sha256_create(void)
{
    tally_sha256 *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    pthread_once(&sha256_once, fetch_sha256);
    h->ctx = EVP_MD_CTX_new();
    h->ok = h->ctx && EVP_DigestInit_ex(h->ctx, sha256_md ? sha256_md : EVP_sha256(), NULL) == 1;
    return h;
}

void tally_sha256_update(tally_sha256 *h, const void *data, size_t len)
{
    if (h->ok && len)
        h->ok = EVP_DigestUpdate(h->ctx, data, len) == 1;
}

void tally_sha256_final(tally_sha256 *h, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (h->ok && EVP_DigestFinal_ex(h->ctx, md, &n) == 1 && n == HASH_LEN) {
        to_hex(md, HASH_LEN, hex);
    } else {
        /* Only on a broken OpenSSL installation; never a valid-looking hash. */
        memset(hex, 'x', 64);
        hex[64] = '\0';
        ERR_clear_error();
    }
    tally_sha256_destroy(h);
}

void tally_sha256_destroy(tally_sha256 *h)
{
    if (!h)
        return;
    EVP_MD_CTX_free(h->ctx);
    free(h);
}
