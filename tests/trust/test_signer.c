/* Tests for trust/signer.c: the signing queue gives the signatures
 * tally_sign_hash gives (Ed25519 is deterministic), oldest first, whether
 * the thread or the waiting caller signs them; keeps its queue protocol;
 * wakes from sleep on either side; drops and stops cleanly with hashes
 * queued. Each test runs with the thread and without it. */
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

/* Pushes hashes i0 .. i0 + n - 1 and takes their signatures, checking
 * each against tally_sign_hash; pause_us after the pushes lets the thread
 * sign some (or fall asleep) first. */
static void round_trip(tally_signer *s, int i0, int n, useconds_t pause_us)
{
    uint64_t tickets[TALLY_SIGNER_QUEUE];
    char hash[65];
    for (int i = 0; i < n; i++) {
        hash_of(i0 + i, hash);
        assert_int_equal(tally_signer_push(s, hash, &tickets[i]), TALLY_OK);
    }
    assert_int_equal(tally_signer_queued(s), (size_t)n);
    if (pause_us)
        usleep(pause_us);
    for (int i = 0; i < n; i++) {
        char want[129], got[129];
        hash_of(i0 + i, hash);
        assert_int_equal(tally_sign_hash(key, hash, want), TALLY_OK);
        assert_int_equal(tally_signer_wait(s, tickets[i], got), TALLY_OK);
        assert_string_equal(got, want);
    }
    assert_int_equal(tally_signer_queued(s), 0);
}

static void test_signatures_match(void **state)
{
    bool threaded = *(bool *)*state;
    tally_signer *s = NULL;
    assert_int_equal(tally_signer_start(key, threaded, &s), TALLY_OK);
    char id[TALLY_KEY_ID_LEN + 1];
    assert_int_equal(tally_key_id(key, id), TALLY_OK);
    assert_string_equal(tally_signer_key_id(s), id);
    int i0 = 0;
    /* one at a time; fewer than a batch left to a sleeping thread; many,
     * taken at once (the caller signs beside the thread) or after the
     * thread had time; the whole queue, more than once around the ring */
    const int sizes[] = {1, 1, 3, 7, 9, 50, 50, TALLY_SIGNER_QUEUE, TALLY_SIGNER_QUEUE, 200};
    const useconds_t pauses[] = {0, 5000, 5000, 5000, 0, 0, 20000, 0, 5000, 300};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        round_trip(s, i0, sizes[k], pauses[k]);
        i0 += sizes[k];
    }
    char hash[65], sig[129];
    hash_of(0, hash);
    assert_int_equal(tally_signer_push(s, hash, &(uint64_t){0}), TALLY_OK);
    usleep(5000);
    assert_int_equal(tally_signer_wait(s, (uint64_t)i0, sig), TALLY_OK); /* tickets count on */
    assert_int_equal(tally_verify_hash(key, hash, sig), TALLY_OK);
    tally_signer_stop(s);
}

static void test_queue_protocol(void **state)
{
    bool threaded = *(bool *)*state;
    tally_signer *s = NULL;
    char hash[65], sig[129];
    uint64_t t0, t1, t;
    hash_of(1, hash);
    assert_int_equal(tally_signer_start(key, threaded, &s), TALLY_OK);
    assert_int_equal(tally_signer_wait(s, 0, sig), TALLY_INTERNAL); /* nothing queued */
    char short_hash[65] = "abc";
    assert_int_equal(tally_signer_push(s, short_hash, &t), TALLY_INVAL);
    assert_int_equal(tally_signer_queued(s), 0);
    assert_int_equal(tally_signer_push(s, hash, &t0), TALLY_OK);
    /* 64 characters that are not hex: the signer's error comes back */
    char bad[65];
    memset(bad, 'z', 64);
    bad[64] = '\0';
    assert_int_equal(tally_signer_push(s, bad, &t1), TALLY_OK);
    assert_int_equal(t1, t0 + 1);
    assert_int_equal(tally_signer_wait(s, t1, sig), TALLY_INTERNAL); /* not the oldest */
    assert_int_equal(tally_signer_wait(s, t0, sig), TALLY_OK);
    assert_int_equal(tally_verify_hash(key, hash, sig), TALLY_OK);
    assert_int_equal(tally_signer_wait(s, t1, sig), TALLY_INVAL);
    assert_int_equal(tally_signer_wait(s, t1, sig), TALLY_INTERNAL); /* it left the queue */
    /* a full queue refuses one more, and goes on once one is taken */
    uint64_t first = 0;
    for (int i = 0; i < TALLY_SIGNER_QUEUE; i++)
        assert_int_equal(tally_signer_push(s, hash, i ? &t : &first), TALLY_OK);
    assert_int_equal(tally_signer_push(s, hash, &t), TALLY_INTERNAL);
    assert_int_equal(tally_signer_wait(s, first, sig), TALLY_OK);
    assert_int_equal(tally_signer_push(s, hash, &t), TALLY_OK);
    tally_signer_drop(s);
    assert_int_equal(tally_signer_queued(s), 0);
    assert_int_equal(tally_signer_wait(s, t, sig), TALLY_INTERNAL);
    round_trip(s, 1000, 20, 0); /* and it goes on after a drop */
    tally_signer_stop(s);
}

static void test_stop_queued_and_missing_key(void **state)
{
    bool threaded = *(bool *)*state;
    tally_signer *s = NULL;
    char hash[65];
    hash_of(2, hash);
    assert_int_equal(tally_signer_start(key, threaded, &s), TALLY_OK);
    for (int i = 0; i < 40; i++)
        assert_int_equal(tally_signer_push(s, hash, &(uint64_t){0}), TALLY_OK);
    tally_signer_stop(s); /* waits for a hash being signed, then ends the thread */
    assert_int_equal(tally_signer_start(key, threaded, &s), TALLY_OK);
    usleep(1000); /* asleep, with nothing queued */
    tally_signer_stop(s);
    tally_signer_stop(NULL);
    char missing[700];
    snprintf(missing, sizeof missing, "%s.missing", key);
    s = (tally_signer *)1;
    assert_int_equal(tally_signer_start(missing, threaded, &s), TALLY_NOT_FOUND);
    assert_null(s);
}

static bool with_thread = true, without_thread = false;

int main(void)
{
    /* each test with the signing thread, then with the caller signing */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_signatures_match, &with_thread),
        cmocka_unit_test_prestate(test_queue_protocol, &with_thread),
        cmocka_unit_test_prestate(test_stop_queued_and_missing_key, &with_thread),
        cmocka_unit_test_prestate(test_signatures_match, &without_thread),
        cmocka_unit_test_prestate(test_queue_protocol, &without_thread),
        cmocka_unit_test_prestate(test_stop_queued_and_missing_key, &without_thread),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
