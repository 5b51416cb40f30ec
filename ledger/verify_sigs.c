/* The documents' signatures in tally verify, on threads of their own
 * (verify.c).
 *
 * check_documents reads the documents in ledger order and checks each one
 * on the calling thread: its form, its hash, the chain link and its
 * content. The Ed25519 verification of its signature, the one cost per
 * document that cannot be removed, is queued here instead: a full batch
 * (VSIG_BATCH documents) goes to the worker threads (one fewer than the
 * cores, each with a keyring of its own loaded from the same key file, so
 * no OpenSSL object is used by two threads), and the calling thread goes on
 * with the next documents and, after the last, with verify's later checks
 * (the chain, the balances), while the workers verify. At most VSIG_RING
 * batches are queued; a full ring waits for the oldest. While the caller
 * waits, it verifies the batches no worker has started itself, oldest
 * first (with its own keyring, keys[0]). On one core, or when no second keyring loads,
 * each batch is verified on the calling thread when it is full.
 *
 * What is reported does not change: the first document in ledger order
 * whose check fails, and for one document a bad signature before a bad
 * content (the order of the checks without the queue), and a bad signature
 * before any failure of a later check. So a failing check first waits for
 * what is queued (documents up to and including it), and the earliest
 * failure wins (verify.c calls vsig_flush). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pthread.h>

#include "ledger_int.h"
#include "tally/sign.h"

#define VSIG_BATCH   1024
#define VSIG_THREADS 8  /* keyrings: the caller's and one per worker */
#define VSIG_RING    32 /* batches queued or being verified at once (~10 MB) */

typedef struct vsig_job { /* queued in ledger order */
    bool credit_note;
    char id[48];
    char key_id[TALLY_KEY_ID_LEN + 1];
    char hash[65], sig[129];
    tally_err result;
} vsig_job;

enum { B_FREE, B_FILLING, B_QUEUED, B_WORKING, B_DONE };

typedef struct vsig_batch {
    vsig_job *jobs;
    size_t n;
    int state;
    uint64_t seq; /* order of submission: ledger order */
} vsig_batch;

typedef struct vsig_worker {
    struct vsig_queue *q;
    size_t index;
} vsig_worker;

struct vsig_queue {
    vsig_batch ring[VSIG_RING];
    vsig_batch *fill; /* being filled, or NULL */
    size_t batch, n_ring;
    size_t n_workers;
    bool failed; /* a failure was returned: later ones are not reported */
    uint64_t next_seq;
    tally_keyring *keys[VSIG_THREADS]; /* [0] the caller's, [1 + w] worker w's */
    pthread_t threads[VSIG_THREADS - 1];
    vsig_worker workers[VSIG_THREADS - 1];
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    bool quit;
};

static size_t cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > VSIG_THREADS ? VSIG_THREADS : (size_t)n;
}

static void verify_jobs(vsig_job *jobs, size_t n, tally_keyring *keys)
{
    for (size_t i = 0; i < n; i++)
        jobs[i].result = tally_keyring_verify(keys, jobs[i].key_id, jobs[i].hash, jobs[i].sig);
}

/* The oldest queued batch, or NULL. */
static vsig_batch *oldest(vsig_queue *q, int state)
{
    vsig_batch *best = NULL;
    for (size_t i = 0; i < q->n_ring; i++)
        if (q->ring[i].state == state && (!best || q->ring[i].seq < best->seq))
            best = &q->ring[i];
    return best;
}

static void *worker_main(void *arg)
{
    vsig_worker *w = arg;
    vsig_queue *q = w->q;
    tally_keyring *keys = q->keys[1 + w->index];
    pthread_mutex_lock(&q->mu);
    for (;;) {
        vsig_batch *b;
        while (!q->quit && !(b = oldest(q, B_QUEUED)))
            pthread_cond_wait(&q->work, &q->mu);
        if (q->quit)
            break;
        b->state = B_WORKING;
        pthread_mutex_unlock(&q->mu);
        verify_jobs(b->jobs, b->n, keys);
        pthread_mutex_lock(&q->mu);
        b->state = B_DONE;
        pthread_cond_broadcast(&q->done);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

void vsig_destroy(vsig_queue *q)
{
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    q->quit = true;
    pthread_cond_broadcast(&q->work);
    pthread_mutex_unlock(&q->mu);
    for (size_t i = 0; i < q->n_workers; i++)
        pthread_join(q->threads[i], NULL);
    for (size_t i = 1; i < VSIG_THREADS; i++) /* keys[0] is the caller's */
        tally_keyring_destroy(q->keys[i]);
    for (size_t i = 0; i < VSIG_RING; i++)
        free(q->ring[i].jobs);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->work);
    pthread_cond_destroy(&q->done);
    free(q);
}

/* Starts up to want - 1 workers, each with a keyring of its own. */
static void start_workers(vsig_queue *q, const char *key_path, size_t want)
{
    while (q->n_workers + 1 < want) {
        size_t w = q->n_workers;
        if (tally_keyring_load(key_path, &q->keys[1 + w]) != TALLY_OK)
            return;
        q->workers[w] = (vsig_worker){q, w};
        if (pthread_create(&q->threads[w], NULL, worker_main, &q->workers[w]) != 0) {
            tally_keyring_destroy(q->keys[1 + w]);
            q->keys[1 + w] = NULL;
            return;
        }
        q->n_workers++;
    }
}

tally_err vsig_create(const char *key_path, tally_keyring *keys, vsig_queue **out)
{
    *out = NULL;
    vsig_queue *q = calloc(1, sizeof *q);
    if (!q)
        return TALLY_NOMEM;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->work, NULL);
    pthread_cond_init(&q->done, NULL);
    /* TALLY_VERIFY_SIG_BATCH=n (1..VSIG_BATCH): smaller batches, for the
     * tests of the order of failures across batches; TALLY_VERIFY_SIG_THREADS
     * (1..VSIG_THREADS) for the tests of the path without workers. */
    const char *b = getenv("TALLY_VERIFY_SIG_BATCH");
    long nb = b ? strtol(b, NULL, 10) : 0;
    q->batch = nb >= 1 && nb <= VSIG_BATCH ? (size_t)nb : VSIG_BATCH;
    const char *t = getenv("TALLY_VERIFY_SIG_THREADS");
    long nt = t ? strtol(t, NULL, 10) : 0;
    const char *r = getenv("TALLY_VERIFY_SIG_RING"); /* 1..VSIG_RING, for tests */
    long nr = r ? strtol(r, NULL, 10) : 0;
    q->n_ring = nr >= 1 && nr <= VSIG_RING ? (size_t)nr : VSIG_RING;
    q->keys[0] = keys;
    /* A worker whose keyring does not load is not started: fewer threads,
     * the same answers. */
    start_workers(q, key_path, nt >= 1 && nt <= VSIG_THREADS ? (size_t)nt : cores());
    *out = q;
    return TALLY_OK;
}

/* The message the sequential check gave for a signature that fails. */
static tally_err job_failure(vctx *v, const vsig_job *j)
{
    const char *label = j->credit_note ? "credit note" : "invoice";
    tally_err err = j->result;
    if (err == TALLY_NOT_FOUND)
        return verify_fail(v, TALLY_TAMPERED,
                           "%s %s: signed with key %s, which is not among the keys of %s "
                           "(see 'tally pubkey --all')",
                           label, j->id, j->key_id, v->key_path);
    if (err == TALLY_TAMPERED && j->key_id[0])
        return verify_fail(v, err, "%s %s: signature does not verify with its key %s", label, j->id,
                           j->key_id);
    if (err == TALLY_TAMPERED)
        return verify_fail(v, err, "%s %s: signature does not verify with any key of %s", label,
                           j->id, v->key_path);
    return verify_fail(v, err, "%s %s: cannot check the signature with %s: %s", label, j->id,
                       v->key_path, tally_err_str(err));
}

/* The first failure of a verified batch, in ledger order; frees it. */
static tally_err take_done(vctx *v, vsig_queue *q, vsig_batch *b)
{
    b->state = B_FREE;
    for (size_t i = 0; i < b->n && !q->failed; i++)
        if (b->jobs[i].result != TALLY_OK) {
            q->failed = true;
            return job_failure(v, &b->jobs[i]);
        }
    return TALLY_OK;
}

/* Waits for the oldest batch not yet taken and takes it; *none when no
 * batch is queued. Called with q->mu held. */
static tally_err take_oldest(vctx *v, vsig_queue *q, bool *none)
{
    vsig_batch *b = NULL;
    for (size_t i = 0; i < q->n_ring; i++) {
        vsig_batch *r = &q->ring[i];
        if (r->state != B_FREE && r->state != B_FILLING && (!b || r->seq < b->seq))
            b = r;
    }
    *none = !b;
    if (!b)
        return TALLY_OK;
    /* While a worker has the oldest, later batches no worker has started
     * are verified here (results are still taken in ledger order). */
    for (vsig_batch *mine; b->state != B_DONE && (mine = oldest(q, B_QUEUED));) {
        mine->state = B_WORKING;
        pthread_mutex_unlock(&q->mu);
        verify_jobs(mine->jobs, mine->n, q->keys[0]);
        pthread_mutex_lock(&q->mu);
        mine->state = B_DONE;
    }
    while (b->state != B_DONE)
        pthread_cond_wait(&q->done, &q->mu);
    return take_done(v, q, b);
}

/* Hands the batch being filled to the workers (or, with none, verifies it
 * here). */
static tally_err submit(vctx *v, vsig_queue *q)
{
    vsig_batch *b = q->fill;
    q->fill = NULL;
    if (!b || b->n == 0) {
        if (b)
            b->state = B_FREE;
        return TALLY_OK;
    }
    if (!q->n_workers) {
        verify_jobs(b->jobs, b->n, q->keys[0]);
        return take_done(v, q, b);
    }
    pthread_mutex_lock(&q->mu);
    b->seq = q->next_seq++;
    b->state = B_QUEUED;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->mu);
    return TALLY_OK;
}

/* A free batch to fill: with the ring full, the oldest is waited for and
 * its failure, if any, returned. */
static tally_err acquire(vctx *v, vsig_queue *q)
{
    tally_err err = TALLY_OK;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        for (size_t i = 0; i < q->n_ring && !q->fill; i++)
            if (q->ring[i].state == B_FREE)
                q->fill = &q->ring[i];
        if (q->fill || err != TALLY_OK)
            break;
        bool none;
        err = take_oldest(v, q, &none);
        if (err == TALLY_OK && none) /* cannot be: every batch is free or queued */
            err = verify_fail(v, TALLY_INTERNAL, "signature queue: no batch to fill");
    }
    if (q->fill) {
        q->fill->state = B_FILLING;
        q->fill->n = 0;
    }
    pthread_mutex_unlock(&q->mu);
    if (err == TALLY_OK && !q->fill->jobs) { /* allocated on first use */
        q->fill->jobs = malloc(VSIG_BATCH * sizeof *q->fill->jobs);
        if (!q->fill->jobs) {
            q->fill->state = B_FREE;
            q->fill = NULL;
            err = verify_fail(v, TALLY_NOMEM, "out of memory");
        }
    }
    return err;
}

tally_err vsig_flush(vctx *v, vsig_queue *q)
{
    if (!q)
        return TALLY_OK;
    tally_err err = submit(v, q);
    pthread_mutex_lock(&q->mu);
    for (bool none = false; err == TALLY_OK && !none;)
        err = take_oldest(v, q, &none);
    pthread_mutex_unlock(&q->mu);
    return err;
}

tally_err vsig_submit(vctx *v, vsig_queue *q)
{
    return q ? submit(v, q) : TALLY_OK;
}

tally_err vsig_add(vctx *v, vsig_queue *q, bool credit_note, const char *id, const char *key_id,
                   const char *hash, const char *sig)
{
    tally_err err = q->fill ? TALLY_OK : acquire(v, q);
    if (err != TALLY_OK)
        return err;
    vsig_job *j = &q->fill->jobs[q->fill->n++];
    j->credit_note = credit_note;
    snprintf(j->id, sizeof j->id, "%s", id);
    snprintf(j->key_id, sizeof j->key_id, "%s", key_id);
    snprintf(j->hash, sizeof j->hash, "%s", hash);
    snprintf(j->sig, sizeof j->sig, "%s", sig);
    j->result = TALLY_OK;
    return q->fill->n == q->batch ? submit(v, q) : TALLY_OK;
}
