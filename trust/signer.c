/* A signing queue (include/tally/sign.h): an Ed25519 signature costs about
 * 35-50 us, as much as writing an invoice's entry and postings, so an
 * invoice run hands each document's hash to this queue and goes on with the
 * next account; it takes the signatures, in order, when it stores the
 * documents at the end of its group.
 *
 * The queue is a ring of TALLY_SIGNER_QUEUE slots. The caller (one thread)
 * owns head and tail: it fills the slot at head (EMPTY -> PENDING) and
 * empties the one at tail (DONE -> EMPTY). The signing thread walks from its
 * cursor and claims PENDING slots (-> TAKEN) with a compare-and-swap; so
 * does the caller when it waits for a slot nobody has claimed yet, signing
 * it itself instead of waiting for a thread that may be asleep or busy
 * beside the file writers. A claimed slot's hash belongs to whoever claimed
 * it until it is DONE, whatever ticket it holds, so a cursor that lags
 * behind tail only ever signs a slot's current hash.
 *
 * Waking a sleeping thread costs tens of microseconds on a virtual machine,
 * more than a signature, so the caller wakes the thread only once BATCH
 * hashes wait, and a thread with nothing to sign sleeps at once rather than
 * spin (measured on an invoice run over 20,000 accounts: as fast as a
 * thread that spins for 200 us first, with 10 % less CPU, and faster with
 * --out, whose file writers share the second core). Sleeping is announced
 * (asleep) before the queue is looked at once more under the mutex, and a
 * slot is written before the announcement is read, all sequentially
 * consistent, so no wakeup is missed. Without a thread (threaded false),
 * every hash is signed by the caller when it waits for it. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trust_int.h"

#define SPIN_NS 100000 /* the caller's wait for a signature begun: about two of them */
#define BATCH   8      /* hashes that wake a sleeping thread */

enum { SLOT_EMPTY, SLOT_PENDING, SLOT_TAKEN, SLOT_DONE };

typedef struct slot {
    atomic_int state;
    char hash[65], sig[129]; /* owned by whoever moved state last */
    tally_err err;           /* of its signature */
} slot;

struct tally_signer {
    bool threaded;
    EVP_PKEY *pkey;
    char key_id[TALLY_KEY_ID_LEN + 1];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint_fast64_t head, tail; /* written by the caller only */
    uint64_t cursor;                 /* the thread's next ticket to look at */
    uint64_t unwoken;                /* caller: hashes pushed since it last woke the thread */
    atomic_bool signer_asleep, caller_asleep, quit;
    slot slots[TALLY_SIGNER_QUEUE];
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
    for (int i = 0; i < 64; i++)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
    for (int i = 0; i < 64; i++)
        __asm__ __volatile__("yield");
#endif
}

static slot *slot_of(tally_signer *s, uint64_t ticket)
{
    return &s->slots[ticket % TALLY_SIGNER_QUEUE];
}

/* Signs a slot this side has claimed and hands it back as DONE. */
static void sign_slot(tally_signer *s, slot *sl)
{
    sl->err = trust_sign_pkey(s->pkey, sl->hash, sl->sig);
    atomic_store(&sl->state, SLOT_DONE);
}

static void wake(tally_signer *s, atomic_bool *asleep)
{
    if (atomic_load(asleep)) {
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
}

/* The thread: claims the next PENDING slot from its cursor on; false when
 * there is none now. */
static bool claim_next(tally_signer *s)
{
    uint64_t tail = atomic_load(&s->tail), head = atomic_load(&s->head);
    if (s->cursor < tail)
        s->cursor = tail;
    for (; s->cursor < head; s->cursor++) {
        slot *sl = slot_of(s, s->cursor);
        int want = SLOT_PENDING;
        if (atomic_compare_exchange_strong(&sl->state, &want, SLOT_TAKEN)) {
            s->cursor++;
            sign_slot(s, sl);
            wake(s, &s->caller_asleep);
            return true;
        }
    }
    return false;
}

static bool has_work(tally_signer *s)
{
    return atomic_load(&s->quit) || s->cursor < atomic_load(&s->head);
}

/* The thread, idle: sleeps until a hash comes or it is told to quit. */
static void idle(tally_signer *s)
{
    pthread_mutex_lock(&s->mu);
    atomic_store(&s->signer_asleep, true);
    while (!has_work(s))
        pthread_cond_wait(&s->cv, &s->mu);
    atomic_store(&s->signer_asleep, false);
    pthread_mutex_unlock(&s->mu);
}

static void *signer_main(void *arg)
{
    tally_signer *s = arg;
    while (!atomic_load(&s->quit))
        if (!claim_next(s))
            idle(s);
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
    atomic_init(&s->head, 0);
    atomic_init(&s->tail, 0);
    atomic_init(&s->signer_asleep, false);
    atomic_init(&s->caller_asleep, false);
    atomic_init(&s->quit, false);
    for (size_t i = 0; i < TALLY_SIGNER_QUEUE; i++)
        atomic_init(&s->slots[i].state, SLOT_EMPTY);
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

size_t tally_signer_queued(const tally_signer *s)
{
    return (size_t)(atomic_load(&s->head) - atomic_load(&s->tail));
}

tally_err tally_signer_push(tally_signer *s, const char hash_hex[65], uint64_t *ticket)
{
    if (strnlen(hash_hex, 65) != 64)
        return TALLY_INVAL;
    uint64_t head = atomic_load(&s->head);
    if (head - atomic_load(&s->tail) >= TALLY_SIGNER_QUEUE)
        return TALLY_INTERNAL;
    slot *sl = slot_of(s, head);
    memcpy(sl->hash, hash_hex, 65);
    atomic_store(&sl->state, SLOT_PENDING);
    atomic_store(&s->head, head + 1);
    *ticket = head;
    if (!s->threaded)
        return TALLY_OK;
    if (!atomic_load(&s->signer_asleep)) {
        s->unwoken = 0; /* awake: it will find this hash */
    } else if (++s->unwoken >= BATCH) {
        s->unwoken = 0;
        wake(s, &s->signer_asleep);
    }
    return TALLY_OK;
}

/* Waits until the thread has signed a slot it claimed. */
static void await_done(tally_signer *s, slot *sl)
{
    for (int64_t end = now_ns() + SPIN_NS; atomic_load(&sl->state) != SLOT_DONE && now_ns() < end;)
        relax();
    if (atomic_load(&sl->state) == SLOT_DONE)
        return;
    pthread_mutex_lock(&s->mu);
    atomic_store(&s->caller_asleep, true);
    while (atomic_load(&sl->state) != SLOT_DONE)
        pthread_cond_wait(&s->cv, &s->mu);
    atomic_store(&s->caller_asleep, false);
    pthread_mutex_unlock(&s->mu);
}

/* The oldest slot, DONE: signed by the thread or, when nobody had claimed
 * it, here. */
static slot *finish_oldest(tally_signer *s)
{
    slot *sl = slot_of(s, atomic_load(&s->tail));
    int want = SLOT_PENDING;
    if (atomic_compare_exchange_strong(&sl->state, &want, SLOT_TAKEN))
        sign_slot(s, sl);
    else
        await_done(s, sl);
    return sl;
}

static void release_oldest(tally_signer *s, slot *sl)
{
    atomic_store(&sl->state, SLOT_EMPTY);
    atomic_store(&s->tail, atomic_load(&s->tail) + 1);
}

tally_err tally_signer_wait(tally_signer *s, uint64_t ticket, char sig_hex[129])
{
    uint64_t tail = atomic_load(&s->tail);
    if (tail == atomic_load(&s->head) || ticket != tail)
        return TALLY_INTERNAL;
    slot *sl = finish_oldest(s);
    tally_err e = sl->err;
    if (!e)
        memcpy(sig_hex, sl->sig, sizeof sl->sig);
    release_oldest(s, sl);
    return e;
}

void tally_signer_drop(tally_signer *s)
{
    while (atomic_load(&s->tail) != atomic_load(&s->head)) {
        slot *sl = slot_of(s, atomic_load(&s->tail));
        int want = SLOT_PENDING;
        if (!atomic_compare_exchange_strong(&sl->state, &want, SLOT_TAKEN))
            await_done(s, sl); /* being signed: its slot is the thread's until then */
        release_oldest(s, sl);
    }
}

void tally_signer_stop(tally_signer *s)
{
    if (!s)
        return;
    tally_signer_drop(s);
    if (s->threaded) {
        pthread_mutex_lock(&s->mu);
        atomic_store(&s->quit, true);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    EVP_PKEY_free(s->pkey);
    free(s);
}
