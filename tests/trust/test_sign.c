/* Tests for trust/sign.c: key files, SHA-256, Ed25519 sign and verify, and
 * a cross-check of our signatures with the openssl command-line tool. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "tally/sign.h"

static char dir[512];

static const char *path_in(const char *name)
{
    static char p[4][600];
    static int slot;
    slot = (slot + 1) % 4;
    snprintf(p[slot], sizeof p[slot], "%s/%s", dir, name);
    return p[slot];
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "%s", tu_tmpdir("sign"));
    return 0;
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void hex_to_bytes(const char *hex, unsigned char *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v = 0;
        assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
        out[i] = (unsigned char)v;
    }
}

static void test_sha256_known(void **state)
{
    (void)state;
    char hex[65];
    tally_sha256_hex("", 0, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    tally_sha256_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

static void test_keygen_mode_and_overwrite(void **state)
{
    (void)state;
    const char *key = path_in("k1.key");
    mode_t old = umask(0); /* the key must be 0600 whatever the umask */
    assert_int_equal(tally_keygen(key, 0), TALLY_OK);
    umask(old);
    struct stat st;
    assert_int_equal(stat(key, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);

    tally_buf a, b;
    tally_buf_init(&a, 0);
    tally_buf_init(&b, 0);
    assert_int_equal(tu_read_file(key, &a), 0);
    assert_non_null(strstr(a.data, "-----BEGIN PRIVATE KEY-----"));

    assert_int_equal(tally_keygen(key, 0), TALLY_EXISTS);
    assert_int_equal(tu_read_file(key, &b), 0);
    assert_string_equal(a.data, b.data); /* untouched */

    tally_buf_reset(&b);
    assert_int_equal(tally_keygen(key, 1), TALLY_OK);
    assert_int_equal(tu_read_file(key, &b), 0);
    assert_string_not_equal(a.data, b.data);
    assert_int_equal(stat(key, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    /* no temporary files left behind */
    tally_buf ls;
    tally_buf_init(&ls, 0);
    assert_int_equal(tu_sh(&ls, "ls '%s' | grep -c tmp || true", dir), 0);
    assert_string_equal(ls.data, "0\n");
    tally_buf_release(&ls);
    tally_buf_release(&a);
    tally_buf_release(&b);

    assert_int_equal(tally_keygen(path_in("no/such/dir.key"), 0), TALLY_IO);
    assert_int_equal(tally_keygen("", 0), TALLY_INVAL);
}

static void test_round_trip_and_tamper(void **state)
{
    (void)state;
    const char *key = path_in("k2.key");
    assert_int_equal(tally_keygen(key, 0), TALLY_OK);
    char hash[65], sig[129];
    tally_sha256_hex("document", 8, hash);
    assert_int_equal(tally_sign_hash(key, hash, sig), TALLY_OK);
    assert_int_equal(strlen(sig), 128);
    assert_int_equal(tally_verify_hash(key, hash, sig), TALLY_OK);

    /* Ed25519 is deterministic */
    char sig2[129];
    assert_int_equal(tally_sign_hash(key, hash, sig2), TALLY_OK);
    assert_string_equal(sig, sig2);

    char bad[129];
    memcpy(bad, sig, sizeof bad);
    bad[10] = bad[10] == '0' ? '1' : '0';
    assert_int_equal(tally_verify_hash(key, hash, bad), TALLY_TAMPERED);
    memcpy(bad, sig, sizeof bad);
    bad[127] = bad[127] == 'f' ? 'e' : 'f';
    assert_int_equal(tally_verify_hash(key, hash, bad), TALLY_TAMPERED);

    char other[65];
    tally_sha256_hex("documenT", 8, other);
    assert_int_equal(tally_verify_hash(key, other, sig), TALLY_TAMPERED);

    /* malformed hex is tampering, not a crash */
    char shortsig[129] = "zz";
    assert_int_equal(tally_verify_hash(key, hash, shortsig), TALLY_TAMPERED);
    memcpy(bad, sig, sizeof bad);
    bad[0] = 'G';
    assert_int_equal(tally_verify_hash(key, hash, bad), TALLY_TAMPERED);
    char shorthash[65] = "abc";
    assert_int_equal(tally_sign_hash(key, shorthash, sig2), TALLY_INVAL);
    char upper[65];
    memcpy(upper, hash, sizeof upper);
    upper[0] = 'A';
    assert_int_equal(tally_sign_hash(key, upper, sig2), TALLY_INVAL);

    /* a different key does not verify it */
    const char *key3 = path_in("k3.key");
    assert_int_equal(tally_keygen(key3, 0), TALLY_OK);
    assert_int_equal(tally_verify_hash(key3, hash, sig), TALLY_TAMPERED);
}

static void test_missing_and_bad_keys(void **state)
{
    (void)state;
    char hash[65], sig[129];
    tally_sha256_hex("x", 1, hash);
    const char *missing = path_in("missing.key");
    assert_int_equal(tally_sign_hash(missing, hash, sig), TALLY_NOT_FOUND);
    tally_buf pem;
    tally_buf_init(&pem, 0);
    assert_int_equal(tally_pubkey_pem(missing, &pem), TALLY_NOT_FOUND);

    const char *junk = path_in("junk.key");
    write_bytes(junk, "not a key\n", 10);
    assert_int_equal(tally_sign_hash(junk, hash, sig), TALLY_CRYPTO);
    assert_int_equal(tally_pubkey_pem(junk, &pem), TALLY_CRYPTO);
    const char *empty = path_in("empty.key");
    write_bytes(empty, "", 0);
    assert_int_equal(tally_sign_hash(empty, hash, sig), TALLY_CRYPTO);

    /* an RSA key is not an Ed25519 key */
    const char *rsa = path_in("rsa.key");
    assert_int_equal(tu_sh(NULL,
                           "openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:1024 "
                           "-out '%s' 2>/dev/null",
                           rsa),
                     0);
    assert_int_equal(tally_sign_hash(rsa, hash, sig), TALLY_CRYPTO);
    assert_int_equal(tally_pubkey_pem(missing, &pem), TALLY_NOT_FOUND);
    assert_int_equal(pem.len, 0);
    tally_buf_release(&pem);
}

static void test_pubkey_pem_and_public_key_file(void **state)
{
    (void)state;
    const char *key = path_in("k4.key");
    assert_int_equal(tally_keygen(key, 0), TALLY_OK);
    tally_buf pem, ossl;
    tally_buf_init(&pem, 0);
    tally_buf_init(&ossl, 0);
    assert_int_equal(tally_pubkey_pem(key, &pem), TALLY_OK);
    assert_non_null(strstr(pem.data, "-----BEGIN PUBLIC KEY-----"));
    assert_null(strstr(pem.data, "PRIVATE"));
    /* the same as openssl derives from the private key */
    assert_int_equal(tu_sh(&ossl, "openssl pkey -in '%s' -pubout", key), 0);
    assert_string_equal(pem.data, ossl.data);

    /* verification also works with only the public key */
    const char *pub = path_in("k4.pub.pem");
    write_bytes(pub, pem.data, pem.len);
    char hash[65], sig[129];
    tally_sha256_hex("y", 1, hash);
    assert_int_equal(tally_sign_hash(key, hash, sig), TALLY_OK);
    assert_int_equal(tally_verify_hash(pub, hash, sig), TALLY_OK);
    /* but signing needs the private key */
    assert_int_equal(tally_sign_hash(pub, hash, sig), TALLY_CRYPTO);
    /* and pubkey of a public key file is itself */
    tally_buf again;
    tally_buf_init(&again, 0);
    assert_int_equal(tally_pubkey_pem(pub, &again), TALLY_OK);
    assert_string_equal(again.data, pem.data);
    tally_buf_release(&again);
    tally_buf_release(&pem);
    tally_buf_release(&ossl);
}

/* Our signature checked by the openssl tool, not by our code. */
static void test_openssl_cli_verifies(void **state)
{
    (void)state;
    const char *key = path_in("k5.key");
    assert_int_equal(tally_keygen(key, 0), TALLY_OK);
    tally_buf pem;
    tally_buf_init(&pem, 0);
    assert_int_equal(tally_pubkey_pem(key, &pem), TALLY_OK);
    const char *pub = path_in("k5.pub.pem");
    write_bytes(pub, pem.data, pem.len);
    tally_buf_release(&pem);

    const char doc[] = "{\"invoice_id\":\"INV-2026-000001\",\"prev_hash\":\"00\"}";
    char hash[65], sig[129];
    tally_sha256_hex(doc, sizeof doc - 1, hash);
    assert_int_equal(tally_sign_hash(key, hash, sig), TALLY_OK);
    unsigned char hb[32], sb[64];
    hex_to_bytes(hash, hb, 32);
    hex_to_bytes(sig, sb, 64);
    write_bytes(path_in("h.bin"), hb, 32);
    write_bytes(path_in("s.bin"), sb, 64);
    write_bytes(path_in("doc.json"), doc, sizeof doc - 1);

    tally_buf out;
    tally_buf_init(&out, 0);
    assert_int_equal(tu_sh(&out,
                           "cd '%s' && sha256sum doc.json | cut -d' ' -f1 && "
                           "openssl pkeyutl -verify -pubin -inkey k5.pub.pem -rawin -in h.bin "
                           "-sigfile s.bin",
                           dir),
                     0);
    assert_non_null(strstr(out.data, hash));
    assert_non_null(strstr(out.data, "Signature Verified Successfully"));

    /* and openssl rejects a flipped byte */
    sb[5] ^= 1;
    write_bytes(path_in("s.bin"), sb, 64);
    assert_int_not_equal(tu_sh(NULL,
                               "cd '%s' && openssl pkeyutl -verify -pubin -inkey k5.pub.pem "
                               "-rawin -in h.bin -sigfile s.bin >/dev/null 2>&1",
                               dir),
                         0);
    tally_buf_release(&out);
}

/* Key ids and keyrings: rotation keeps every public key, each found by its
 * id; a file without keys, an unknown id and a bad signature are refused. */
static void test_keyring_rotation(void **state)
{
    (void)state;
    const char *key = path_in("ring.key");
    char id1[TALLY_KEY_ID_LEN + 1], id2[TALLY_KEY_ID_LEN + 1], hash[65], sig1[129], sig2[129];
    tally_sha256_hex("doc", 3, hash);
    assert_int_equal(tally_keygen(key, 0), TALLY_OK);
    assert_int_equal(tally_key_id(key, id1), TALLY_OK);
    assert_int_equal(strlen(id1), TALLY_KEY_ID_LEN);
    assert_int_equal(tally_sign_hash(key, hash, sig1), TALLY_OK);
    assert_int_equal(tally_keygen(key, 1), TALLY_OK);
    assert_int_equal(tally_key_id(key, id2), TALLY_OK);
    assert_string_not_equal(id1, id2);
    assert_int_equal(tally_sign_hash(key, hash, sig2), TALLY_OK);

    tally_keyring *kr = NULL;
    assert_int_equal(tally_keyring_load(key, &kr), TALLY_OK);
    assert_int_equal(tally_keyring_count(kr), 2);
    assert_string_equal(tally_keyring_id(kr, 0), id2); /* the current key first */
    assert_string_equal(tally_keyring_id(kr, 1), id1);
    assert_int_equal(tally_keyring_verify(kr, id1, hash, sig1), TALLY_OK);
    assert_int_equal(tally_keyring_verify(kr, id2, hash, sig2), TALLY_OK);
    assert_int_equal(tally_keyring_verify(kr, "", hash, sig1), TALLY_OK); /* no id: any key */
    assert_int_equal(tally_keyring_verify(kr, id2, hash, sig1), TALLY_TAMPERED);
    assert_int_equal(tally_keyring_verify(kr, "0123456789abcdef", hash, sig1), TALLY_NOT_FOUND);
    /* each key keeps its context from one check to the next: a bad
     * signature after a good one, and a good one after a bad one, are
     * still told apart, with an id and without */
    char bad[129];
    memcpy(bad, sig1, sizeof bad);
    bad[10] = bad[10] == '0' ? '1' : '0';
    for (int i = 0; i < 4; i++) {
        assert_int_equal(tally_keyring_verify(kr, id1, hash, sig1), TALLY_OK);
        assert_int_equal(tally_keyring_verify(kr, id1, hash, bad), TALLY_TAMPERED);
        assert_int_equal(tally_keyring_verify(kr, id1, hash, sig1), TALLY_OK);
        assert_int_equal(tally_keyring_verify(kr, "", hash, bad), TALLY_TAMPERED);
        assert_int_equal(tally_keyring_verify(kr, id1, bad + 64, sig1),
                         TALLY_TAMPERED); /* other hash */
        assert_int_equal(tally_keyring_verify(kr, "", hash, sig2), TALLY_OK);
    }
    tally_buf pems;
    tally_buf_init(&pems, 0);
    for (size_t i = 0; i < tally_keyring_count(kr); i++)
        assert_int_equal(tally_keyring_pem(kr, i, &pems), TALLY_OK);
    assert_int_equal(tally_keyring_pem(kr, 2, &pems), TALLY_INVAL);
    tally_keyring_destroy(kr);

    /* a file of public keys alone is a keyring */
    write_bytes(path_in("ring.pub"), pems.data, pems.len);
    assert_int_equal(tally_keyring_load(path_in("ring.pub"), &kr), TALLY_OK);
    assert_int_equal(tally_keyring_count(kr), 2);
    assert_int_equal(tally_keyring_verify(kr, id1, hash, sig1), TALLY_OK);
    tally_keyring_destroy(kr);
    tally_buf_release(&pems);

    /* forcing again does not repeat a kept key */
    assert_int_equal(tally_keyring_load(key, &kr), TALLY_OK);
    size_t n = tally_keyring_count(kr);
    tally_keyring_destroy(kr);
    assert_int_equal(n, 2);

    write_bytes(path_in("junk.pem"), "not a key\n", 10);
    assert_int_equal(tally_keyring_load(path_in("junk.pem"), &kr), TALLY_CRYPTO);
    assert_null(kr);
    assert_int_equal(tally_keyring_load(path_in("none.key"), &kr), TALLY_NOT_FOUND);
    assert_int_equal(tally_keyring_load("", &kr), TALLY_NOT_FOUND);
    assert_int_equal(tally_key_id(path_in("none.key"), id1), TALLY_NOT_FOUND);
    tally_keyring_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_known),
        cmocka_unit_test(test_keygen_mode_and_overwrite),
        cmocka_unit_test(test_round_trip_and_tamper),
        cmocka_unit_test(test_missing_and_bad_keys),
        cmocka_unit_test(test_pubkey_pem_and_public_key_file),
        cmocka_unit_test(test_openssl_cli_verifies),
        cmocka_unit_test(test_keyring_rotation),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
