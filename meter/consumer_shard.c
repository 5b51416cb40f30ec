/* The meter over a ledger directory (opts.shards, include/tally/shard.h):
 * each assigned partition is written into its own shard, whose lock this
 * member holds from assignment to revocation.
 *
 * A chunk is committed shard by shard, each in one transaction with its
 * partition's offset compare-and-set (the same pair the single-ledger path
 * gives one batch), so a shard never holds part of a partition's messages
 * beyond its stored offset. Up to COMMIT_THREADS shards commit at once:
 * each waits on its own fsync, and on one core or two that wait, not the
 * CPU, is what one transaction per shard costs. If a shard's commit fails,
 * the shards that committed keep their messages (their offsets say so)
 * and the consumer restarts every partition from its shard's offset as it
 * does after any failed commit. After the commits, the prepaid balances
 * of the accounts they touched are refreshed in main.db (balances_flush). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meter_int.h"
#include "tally/log.h"
#include "tally/parallel.h"

#define LOCK_TRY_MS    1000  /* one wait for a lock, between checks for a stop */
#define LOCK_NOTE_MS   10000 /* how often a long wait is reported */
#define COMMIT_THREADS 8     /* shards committed at once (their fsyncs overlap) */

tally_ledger *shard_ledger_of(tally_consumer *c, int32_t partition)
{
    tally_shard *sh = c->o.shards ? tally_shard_find(c->o.shards, c->topic, partition) : NULL;
    return sh ? tally_shard_ledger(sh) : c->l;
}

/* Whether the consumer should stop waiting (stopping, or leaving the group). */
static bool give_up(const tally_consumer *c)
{
    return c->closing || (c->stop && *c->stop);
}

tally_err shard_take(tally_consumer *c, int32_t partition, int64_t *next)
{
    tally_shard *sh = NULL;
    char why[512] = "";
    int64_t since = cons_now_ms(), noted = since;
    tally_err e;
    /* Another member may still hold the lock (it has not let the partition
     * go yet, or it lost the group without noticing): wait, never write. */
    while ((e = tally_shard_acquire(c->o.shards, c->topic, partition, LOCK_TRY_MS, &sh, why,
                                    sizeof why)) == TALLY_BUSY &&
           !give_up(c)) {
        int64_t now = cons_now_ms();
        if (now - noted >= LOCK_NOTE_MS) {
            tally_log(TALLY_LOG_WARNING, "meter", "waiting %llds for %s",
                      (long long)(now - since) / 1000, why);
            noted = now;
        }
    }
    if (e) {
        tally_log(TALLY_LOG_ERR, "meter", "cannot take partition %d: %s", (int)partition, why);
        return e;
    }
    return tally_ledger_offset_get(tally_shard_ledger(sh), c->topic, partition, next);
}

void shard_retain(tally_consumer *c, const rd_kafka_topic_partition_list_t *list)
{
    for (int32_t p = 0; p < c->n_parts; p++) {
        tally_shard *sh = tally_shard_find(c->o.shards, c->topic, p);
        bool keep = false;
        for (int i = 0; sh && !keep && i < list->cnt; i++)
            keep = list->elems[i].partition == p && strcmp(list->elems[i].topic, c->topic) == 0;
        if (sh && !keep)
            tally_shard_release(sh);
    }
}

/* One partition's share of a chunk, committed into its shard. */
typedef struct part_job {
    tally_consumer *c;
    chunk *k;
    const chunk_off *o;
    tally_shard *sh;
    tally_batch *b;
    tally_event_result *res; /* room for the partition's items */
    tally_batch_stats st;
    tally_err err;
} part_job;

/* Queues the chunk's items of one partition, in order, and its offsets. */
static tally_err queue_partition(tally_consumer *c, chunk *k, const chunk_off *o, tally_batch *b)
{
    for (size_t i = 0; i < k->n; i++) { /* borrowed until the commit: see queue_chunk */
        const item *it = &k->items[i];
        if (it->partition != o->partition)
            continue;
        tally_err e = tally_pipeline_queue_ref(b, &it->d, k->arena + it->raw_off, it->raw_len,
                                               k->arena + it->origin_off);
        if (e)
            return e;
    }
    tally_err e = tally_batch_set_offset(b, c->topic, o->partition, o->expected_next, o->new_next);
    return e ? e : tally_batch_set_offset_mark(b, c->topic, o->partition, o->mark);
}

/* Commits one job; runs on any of the committing threads (each shard's
 * connection and batch are used by one thread at a time). */
static void run_job(part_job *j)
{
    j->err = queue_partition(j->c, j->k, j->o, j->b);
    if (j->err)
        tally_shard_batch_drop(j->sh); /* nothing half-queued may ever commit */
    else
        j->err = tally_batch_commit(j->b, &j->st, j->res);
    if (j->err && j->err != TALLY_STALE && j->err != TALLY_BUSY)
        tally_log(TALLY_LOG_ERR, "meter", "shard of partition %d: %s", (int)j->o->partition,
                  tally_ledger_errmsg(tally_shard_ledger(j->sh)));
}

static void commit_one(void *ctx, size_t worker, size_t i)
{
    (void)worker;
    run_job(&((part_job *)ctx)[i]);
}

/* Sets up one job per partition of the chunk, on this thread: the shard,
 * its batch, its slice of res, and the rate cards of main.db (whose
 * connection only this thread uses). */
static tally_err plan_jobs(tally_consumer *c, chunk *k, part_job *jobs, tally_event_result *res)
{
    size_t base = 0;
    for (size_t i = 0; i < k->n_offs; i++) {
        part_job *j = &jobs[i];
        *j = (part_job){.c = c, .k = k, .o = &k->offs[i], .res = res + base};
        j->sh = tally_shard_find(c->o.shards, c->topic, j->o->partition);
        if (!j->sh) {
            tally_log(TALLY_LOG_ERR, "meter", "internal error: partition %d has no shard",
                      (int)j->o->partition);
            return TALLY_INTERNAL;
        }
        tally_err e = tally_shard_batch(j->sh, &j->b);
        if (!e)
            e = tally_shard_prepare(j->sh);
        if (e) {
            tally_log(TALLY_LOG_ERR, "meter", "shard of partition %d: %s", (int)j->o->partition,
                      tally_ledger_errmsg(tally_shard_ledger(j->sh)));
            return e;
        }
        for (size_t n = 0; n < k->n; n++)
            base += k->items[n].partition == j->o->partition;
    }
    return TALLY_OK;
}

/* Puts one shard's results back at its items' places in the chunk. */
static void scatter(chunk *k, int32_t partition, const tally_event_result *res)
{
    size_t j = 0;
    for (size_t i = 0; i < k->n; i++)
        if (k->items[i].partition == partition)
            k->results[i] = res[j++];
}

/* The chunk's outcome: a failure that is not a stale or busy commit first
 * (it stops the meter), else a stale or busy one (it resyncs), else OK;
 * what committed is counted and its results kept either way. */
static tally_err gather(chunk *k, const part_job *jobs)
{
    tally_err worst = TALLY_OK;
    for (size_t i = 0; i < k->n_offs; i++) {
        const part_job *j = &jobs[i];
        if (j->err) {
            bool fatal = j->err != TALLY_STALE && j->err != TALLY_BUSY;
            if (!worst || (fatal && (worst == TALLY_STALE || worst == TALLY_BUSY)))
                worst = j->err;
            continue;
        }
        scatter(k, j->o->partition, j->res);
        k->st.accepted += j->st.accepted;
        k->st.duplicates += j->st.duplicates;
        k->st.conflicts += j->st.conflicts;
        k->st.quarantined += j->st.quarantined;
    }
    return worst;
}

/* After the chunk's shard commits, on this thread (the only user of
 * main.db's connection): the balances of the accounts they touched are
 * refreshed in main.db, one transaction per shard. The usage is durable
 * already and its pending rows in the shards make the refresh crash-safe,
 * so a failure here never fails the chunk: the rows are refreshed by the
 * next chunk's flush, the next acquisition, or `tally publish`'s sweep. */
static void balances_flush(tally_consumer *c)
{
    tally_err e = tally_shard_set_balances_flush(c->o.shards);
    if (e)
        tally_log(TALLY_LOG_WARNING, "meter", "balances left pending in shards: %s",
                  tally_err_str(e));
}

tally_err shard_chunk_commit(tally_consumer *c, chunk *k)
{
    tally_event_result *res = malloc((k->n ? k->n : 1) * sizeof *res);
    part_job *jobs = calloc(k->n_offs ? k->n_offs : 1, sizeof *jobs);
    tally_err e = res && jobs ? plan_jobs(c, k, jobs, res) : TALLY_NOMEM;
    if (!e) {
        /* up to COMMIT_THREADS at once, this thread included: the shards'
         * commits, each waiting on its own fsync, overlap */
        tally_parallel_for(k->n_offs, COMMIT_THREADS, commit_one, jobs);
        e = gather(k, jobs);
        balances_flush(c);
    }
    free(jobs);
    free(res);
    return e;
}
