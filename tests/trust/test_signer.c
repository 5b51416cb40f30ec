/* Tests for trust/signer.c: the signing thread gives the signatures
 * tally_sign_hash gives (Ed25519 is deterministic), keeps its one-slot
 * protocol, wakes from sleep on either side, and stops cleanly with a hash
 * in flight; the same without a thread. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "tally/sign.h"

static char key[600];

static int setup(void **state)
{
    (void)state;
    snprintf(key, sizeof key, "%s/signer.key", tu_tmpdir("signer"));
    return tally_keygen(key, 0) == TALLY_OK ? 0 : -1;
}

static void hash_of(int i, char hex[65])
{
    char text[32];
    int n = snprintf(text, sizeof text, "document %d", i);
    tally_sha256_hex(text, (size_t)n, hex);
}

/* Every round trip signs what tally_sign_hash signs; some rounds leave a
 * side waiting longer than it spins, so both sleep-and-wake paths run. */
static void test_signatures_match(void **state)
{
    bool threaded = *(bool *)*state;
    tally_signer *s = NULL;
    assert_int_equal(tally_signer_start(key, threaded, &s), TALLY_OK);
    char id[TALLY_KEY_ID_LEN + 1];
    assert_int_equal(tally_key_id(key, id), TALLY_OK);
    assert_string_equal(tally_signer_key_id(s), id);
    for (int i = 0; i < 300; i++) {
        char hash[65], want[129], got[129];
        hash_of(i, hash);
        assert_int_equal(tally_sign_hash(key, hash, want), TALLY_OK);
        if (i % 50 == 1)
            usleep(5000);  /* the signer falls asleep before this hash */
        if (i % 50 == 3) { /* asleep, told a hash is coming, spinning for it */
            usleep(5000);
            tally_signer_expect(s);
            usleep(100);
        }
        if (i % 50 == 4) { /* told, and the hash comes after it slept again */
            tally_signer_expect(s);
            usleep(5000);
        }
        assert_int_equal(tally_signer_submit(s, hash), TALLY_OK);
        if (i % 50 == 2)
            usleep(5000); /* the signature waits for the caller */
        assert_int_equal(tally_signer_take(s, got), TALLY_OK);
        assert_string_equal(got, want);
        assert_int_equal(tally_verify_hash(key, hash, got), TALLY_OK);
    }
    tally_signer_stop(s);
}

static void test_one_slot(void **state)
{
    bool threaded = *(bool *)*state;
    tally_signer *s = NULL;
    char hash[65], sig[129];
    hash_of(1, hash);
    assert_int_equal(tally_signer_start(key, threaded, &s), TALLY_OK);
    assert_int_equal(tally_signer_take(s, sig), TALLY_INTERNAL); /* nothing submitted */
    char short_hash[65] = "abc";
    assert_int_equal(tally_signer_submit(s, short_hash), TALLY_INVAL);
    assert_int_equal(tally_signer_submit(s, hash), TALLY_OK);
    assert_int_equal(tally_signer_submit(s, hash), TALLY_INTERNAL); /* one in flight */
    assert_int_equal(tally_signer_take(s, sig), TALLY_OK);
    assert_int_equal(tally_signer_take(s, sig), TALLY_INTERNAL);
    /* 64 characters that are not hex: the signer's error comes back */
    char bad[65];
    memset(bad, 'z', 64);
    bad[64] = '\0';
    assert_int_equal(tally_signer_submit(s, bad), TALLY_OK);
    assert_int_equal(tally_signer_take(s, sig), TALLY_INVAL);
    assert_int_equal(tally_signer_submit(s, hash), TALLY_OK); /* and it goes on */
    assert_int_equal(tally_signer_take(s, sig), TALLY_OK);
    assert_int_equal(tally_verify_hash(key, hash, sig), TALLY_OK);
    tally_signer_stop(s);
}

static void test_stop_in_flight_and_missing_key(void **state)
{
    bool threaded = *(bool *)*state;
    tally_signer *s = NULL;
    char hash[65];
    hash_of(2, hash);
    assert_int_equal(tally_signer_start(key, threaded, &s), TALLY_OK);
    assert_int_equal(tally_signer_submit(s, hash), TALLY_OK);
    tally_signer_stop(s); /* waits for the signature, then ends the thread */
    assert_int_equal(tally_signer_start(key, threaded, &s), TALLY_OK);
    tally_signer_expect(s); /* a hash that never comes */
    usleep(1000);
    tally_signer_stop(s);
    tally_signer_stop(NULL);
    char missing[700];
    snprintf(missing, sizeof missing, "%s.missing", key);
    s = (tally_signer *)1;
    assert_int_equal(tally_signer_start(missing, true, &s), TALLY_NOT_FOUND);
    assert_null(s);
}

static bool with_thread = true, without_thread = false;

int main(void)
{
    /* each test with the signing thread, then signing in _submit */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_signatures_match, &with_thread),
        cmocka_unit_test_prestate(test_one_slot, &with_thread),
        cmocka_unit_test_prestate(test_stop_in_flight_and_missing_key, &with_thread),
        cmocka_unit_test_prestate(test_signatures_match, &without_thread),
        cmocka_unit_test_prestate(test_one_slot, &without_thread),
        cmocka_unit_test_prestate(test_stop_in_flight_and_missing_key, &without_thread),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
