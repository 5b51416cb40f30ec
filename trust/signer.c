/* A signing thread (include/tally/sign.h): an Ed25519 signature costs about
 * 50 us, as much as writing an invoice's entry and postings, so an invoice
 * run signs one document on this thread while it writes those on its own.
 *
 * The handover is one slot: the caller puts a hash in and takes its
 * signature out. Waking a sleeping thread costs tens of microseconds on a
 * virtual machine (more than the work it saves, measured: a run 1.23x
 * slower with a plain condition variable), so each side first spins on the
 * slot for up to SPIN_NS and only then sleeps; a side that finds the other
 * asleep wakes it. Sleeping is announced (sleeper) before the slot is
 * looked at once more under the mutex, and the slot is written before the
 * announcement is read, both sequentially consistent, so no wakeup is
 * missed. A wakeup also takes time: about 45 us in which the caller waited
 * for a signature that had not begun (perf: 11 % of an invoice run's main
 * thread). So the caller says a hash is coming (_expect) when it starts the
 * work that ends in one, and a signer asleep wakes and spins meanwhile.
 *
 * Without a thread (threaded false) the same calls sign in _submit: for a
 * caller whose other threads keep the second core busy, where the spinning
 * would take time from them. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trust_int.h"

#define SPIN_NS 200000 /* about the time an invoice run spends between two documents */

enum { SLOT_EMPTY, SLOT_HASH, SLOT_SIGNED, SLOT_QUIT };

struct tally_signer {
    bool threaded; /* else each hash is signed in _submit */
    EVP_PKEY *pkey;
    char key_id[TALLY_KEY_ID_LEN + 1];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int slot;
    atomic_bool signer_asleep, caller_asleep;
    atomic_bool nudged;      /* a hash is coming: the sleeping signer spins again */
    char hash[65], sig[129]; /* written by the side that owns the slot */
    tally_err err;           /* of the last signature */
};

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* One step of a spin: tells the core this is a wait loop where it can. */
static void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static bool wanted(int v, int want_a, int want_b)
{
    return v == want_a || v == want_b;
}

/* Waits until the slot holds one of want_a, want_b; returns it. A nudge
 * (when nudged is not NULL) wakes a sleeping wait to spin again. */
static int await(tally_signer *s, int want_a, int want_b, atomic_bool *asleep, atomic_bool *nudged)
{
    for (;;) {
        int v = atomic_load(&s->slot);
        for (int64_t end = now_ns() + SPIN_NS; !wanted(v, want_a, want_b) && now_ns() < end;
             v = atomic_load(&s->slot))
            for (int i = 0; i < 64; i++)
                relax();
        if (wanted(v, want_a, want_b))
            return v;
        bool woken = false;
        pthread_mutex_lock(&s->mu);
        atomic_store(asleep, true);
        while (!wanted(v = atomic_load(&s->slot), want_a, want_b) &&
               !(woken = nudged && atomic_exchange(nudged, false)))
            pthread_cond_wait(&s->cv, &s->mu);
        atomic_store(asleep, false);
        pthread_mutex_unlock(&s->mu);
        if (!woken)
            return v;
    }
}

/* Wakes the other side if it said it sleeps; call after writing what it
 * waits for. */
static void wake(tally_signer *s, atomic_bool *other_asleep)
{
    if (atomic_load(other_asleep)) {
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
}

static void put(tally_signer *s, int v, atomic_bool *other_asleep)
{
    atomic_store(&s->slot, v);
    wake(s, other_asleep);
}

static void *signer_main(void *arg)
{
    tally_signer *s = arg;
    while (await(s, SLOT_HASH, SLOT_QUIT, &s->signer_asleep, &s->nudged) == SLOT_HASH) {
        atomic_store(&s->nudged, false); /* that nudge was for this hash */
        s->err = trust_sign_pkey(s->pkey, s->hash, s->sig);
        put(s, SLOT_SIGNED, &s->caller_asleep);
    }
    return NULL;
}

tally_err tally_signer_start(const char *key_path, bool threaded, tally_signer **out)
{
    *out = NULL;
    tally_signer *s = calloc(1, sizeof *s);
    if (!s)
        return TALLY_NOMEM;
    tally_err e = trust_signing_key(key_path, &s->pkey, s->key_id);
    if (e) {
        free(s);
        return e;
    }
    s->threaded = threaded;
    atomic_init(&s->slot, SLOT_EMPTY);
    atomic_init(&s->signer_asleep, false);
    atomic_init(&s->caller_asleep, false);
    atomic_init(&s->nudged, false);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (threaded && pthread_create(&s->thread, NULL, signer_main, s) != 0) {
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        EVP_PKEY_free(s->pkey);
        free(s);
        return TALLY_NOMEM;
    }
    *out = s;
    return TALLY_OK;
}

const char *tally_signer_key_id(const tally_signer *s)
{
    return s->key_id;
}

void tally_signer_expect(tally_signer *s)
{
    if (!s->threaded)
        return;
    atomic_store(&s->nudged, true);
    wake(s, &s->signer_asleep);
}

tally_err tally_signer_submit(tally_signer *s, const char hash_hex[65])
{
    if (strnlen(hash_hex, 65) != 64)
        return TALLY_INVAL;
    if (atomic_load(&s->slot) != SLOT_EMPTY)
        return TALLY_INTERNAL;
    memcpy(s->hash, hash_hex, 65);
    if (!s->threaded) {
        s->err = trust_sign_pkey(s->pkey, s->hash, s->sig);
        atomic_store(&s->slot, SLOT_SIGNED);
        return TALLY_OK;
    }
    put(s, SLOT_HASH, &s->signer_asleep);
    return TALLY_OK;
}

tally_err tally_signer_take(tally_signer *s, char sig_hex[129])
{
    if (!wanted(atomic_load(&s->slot), SLOT_HASH, SLOT_SIGNED))
        return TALLY_INTERNAL;
    await(s, SLOT_SIGNED, SLOT_SIGNED, &s->caller_asleep, NULL);
    tally_err e = s->err;
    if (!e)
        memcpy(sig_hex, s->sig, sizeof s->sig);
    atomic_store(&s->slot, SLOT_EMPTY);
    return e;
}

void tally_signer_stop(tally_signer *s)
{
    if (!s)
        return;
    if (s->threaded) {
        if (atomic_load(&s->slot) == SLOT_HASH) /* a hash in flight is signed first */
            await(s, SLOT_SIGNED, SLOT_SIGNED, &s->caller_asleep, NULL);
        put(s, SLOT_QUIT, &s->signer_asleep);
        pthread_join(s->thread, NULL);
    }
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    EVP_PKEY_free(s->pkey);
    free(s);
}
