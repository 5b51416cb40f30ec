/* The documents' signatures in tally verify, on every core (verify.c).
 *
 * check_documents reads the documents in ledger order and checks each one
 * on the calling thread: its form, its hash, the chain link and its
 * content. The Ed25519 verification of its signature, the one cost per
 * document that cannot be removed, is queued here instead, and a full
 * queue (VSIG_BATCH documents) is verified on up to VSIG_THREADS threads
 * at once, the calling one included. Each thread verifies with a keyring
 * of its own, loaded from the same key file, so no OpenSSL object is used
 * by two threads.
 *
 * What is reported does not change: the first document in ledger order
 * whose check fails, and for one document a bad signature before a bad
 * content (the order of the checks without the queue). So a failing check
 * first verifies what is queued (documents up to and including it), and
 * the earliest failure wins. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ledger_int.h"
#include "tally/parallel.h"
#include "tally/sign.h"

#define VSIG_BATCH   1024
#define VSIG_THREADS 8 /* <= TALLY_PARALLEL_MAX */

typedef struct vsig_job { /* queued in ledger order */
    bool credit_note;
    char id[48];
    char key_id[TALLY_KEY_ID_LEN + 1];
    char hash[65], sig[129];
    tally_err result;
} vsig_job;

struct vsig_queue {
    vsig_job *jobs;
    size_t n, batch;
    size_t n_threads;
    tally_keyring *keys[VSIG_THREADS]; /* one per thread; [0] is the caller's */
};

static size_t cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > VSIG_THREADS ? VSIG_THREADS : (size_t)n;
}

void vsig_destroy(vsig_queue *q)
{
    if (!q)
        return;
    for (size_t i = 1; i < q->n_threads; i++) /* keys[0] is the caller's */
        tally_keyring_destroy(q->keys[i]);
    free(q->jobs);
    free(q);
}

tally_err vsig_create(const char *key_path, tally_keyring *keys, vsig_queue **out)
{
    *out = NULL;
    vsig_queue *q = calloc(1, sizeof *q);
    if (!q)
        return TALLY_NOMEM;
    q->jobs = malloc(VSIG_BATCH * sizeof *q->jobs);
    if (!q->jobs) {
        free(q);
        return TALLY_NOMEM;
    }
    /* TALLY_VERIFY_SIG_BATCH=n (1..VSIG_BATCH): smaller batches, for the
     * tests of the order of failures across batches. */
    const char *b = getenv("TALLY_VERIFY_SIG_BATCH");
    long nb = b ? strtol(b, NULL, 10) : 0;
    q->batch = nb >= 1 && nb <= VSIG_BATCH ? (size_t)nb : VSIG_BATCH;
    q->keys[0] = keys;
    q->n_threads = 1;
    size_t want = cores();
    /* A thread whose keyring does not load is not started: fewer threads,
     * the same answers. */
    while (q->n_threads < want && tally_keyring_load(key_path, &q->keys[q->n_threads]) == TALLY_OK)
        q->n_threads++;
    *out = q;
    return TALLY_OK;
}

static void verify_one(void *ctx, size_t worker, size_t i)
{
    vsig_queue *q = ctx;
    vsig_job *j = &q->jobs[i];
    j->result = tally_keyring_verify(q->keys[worker], j->key_id, j->hash, j->sig);
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

tally_err vsig_flush(vctx *v, vsig_queue *q)
{
    if (!q || q->n == 0)
        return TALLY_OK;
    tally_parallel_for(q->n, q->n_threads, verify_one, q);
    size_t n = q->n;
    q->n = 0;
    for (size_t i = 0; i < n; i++) /* in ledger order: the first failure */
        if (q->jobs[i].result != TALLY_OK)
            return job_failure(v, &q->jobs[i]);
    return TALLY_OK;
}

tally_err vsig_add(vctx *v, vsig_queue *q, bool credit_note, const char *id, const char *key_id,
                   const char *hash, const char *sig)
{
    vsig_job *j = &q->jobs[q->n++];
    j->credit_note = credit_note;
    snprintf(j->id, sizeof j->id, "%s", id);
    snprintf(j->key_id, sizeof j->key_id, "%s", key_id);
    snprintf(j->hash, sizeof j->hash, "%s", hash);
    snprintf(j->sig, sizeof j->sig, "%s", sig);
    j->result = TALLY_OK;
    return q->n == q->batch ? vsig_flush(v, q) : TALLY_OK;
}
