/* The meter over a ledger directory (opts.shards, include/tally/shard.h):
 * each assigned partition is written into its own shard, whose lock this
 * member holds from assignment to revocation.
 *
 * A chunk is committed shard by shard, each in one transaction with its
 * partition's offset compare-and-set (the same pair the single-ledger path
 * gives one batch), so a shard never holds part of a partition's messages
 * beyond its stored offset. If one shard's commit fails, the shards
 * committed before it keep their messages (their offsets say so) and the
 * consumer restarts every partition from its shard's offset as it does
 * after any failed commit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consumer_int.h"

#define LOCK_TRY_MS  1000  /* one wait for a lock, between checks for a stop */
#define LOCK_NOTE_MS 10000 /* how often a long wait is reported */

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
            fprintf(stderr, "tally meter: waiting %llds for %s\n", (long long)(now - since) / 1000,
                    why);
            noted = now;
        }
    }
    if (e) {
        fprintf(stderr, "tally meter: cannot take partition %d: %s\n", (int)partition, why);
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

/* Queues the chunk's items of one partition, in order, and its offsets. */
static tally_err queue_partition(tally_consumer *c, chunk *k, const chunk_off *o, tally_batch *b)
{
    char origin[ORIGIN_MAX];
    for (size_t i = 0; i < k->n; i++) {
        const item *it = &k->items[i];
        if (it->partition != o->partition)
            continue;
        const char *raw = k->arena + it->raw_off;
        origin_format(c, it->partition, it->offset, origin);
        tally_err e = it->is_event
                          ? tally_batch_add_event(b, &it->u.ev, raw, it->raw_len, origin)
                          : tally_batch_add_reject(b, &it->u.rej, raw, it->raw_len, origin);
        if (e)
            return e;
    }
    return tally_batch_set_offset(b, c->topic, o->partition, o->expected_next, o->new_next);
}

/* Puts one shard's results back at its items' places in the chunk. */
static void scatter(chunk *k, int32_t partition, const tally_event_result *res)
{
    size_t j = 0;
    for (size_t i = 0; i < k->n; i++)
        if (k->items[i].partition == partition)
            k->results[i] = res[j++];
}

static void add_stats(tally_batch_stats *to, const tally_batch_stats *st)
{
    to->accepted += st->accepted;
    to->duplicates += st->duplicates;
    to->conflicts += st->conflicts;
    to->quarantined += st->quarantined;
}

/* One partition's part of the chunk into its shard. */
static tally_err commit_partition(tally_consumer *c, chunk *k, const chunk_off *o,
                                  tally_event_result *res)
{
    tally_shard *sh = tally_shard_find(c->o.shards, c->topic, o->partition);
    tally_batch *b = NULL;
    if (!sh) {
        fprintf(stderr, "tally meter: internal error: partition %d has no shard\n",
                (int)o->partition);
        return TALLY_INTERNAL;
    }
    tally_err e = tally_shard_batch(sh, &b);
    if (!e && (e = queue_partition(c, k, o, b)) != TALLY_OK)
        tally_shard_batch_drop(sh); /* nothing half-queued may ever commit */
    if (!e)
        e = tally_shard_prepare(sh);
    tally_batch_stats st = {0};
    if (!e)
        e = tally_batch_commit(b, &st, res);
    if (e && e != TALLY_STALE && e != TALLY_BUSY)
        fprintf(stderr, "tally meter: shard of partition %d: %s\n", (int)o->partition,
                tally_ledger_errmsg(tally_shard_ledger(sh)));
    if (!e) {
        scatter(k, o->partition, res);
        add_stats(&k->st, &st);
    }
    return e;
}

tally_err shard_chunk_commit(tally_consumer *c, chunk *k)
{
    tally_event_result *res = malloc((k->n ? k->n : 1) * sizeof *res);
    if (!res)
        return TALLY_NOMEM;
    tally_err e = TALLY_OK;
    for (size_t i = 0; i < k->n_offs && !e; i++)
        e = commit_partition(c, k, &k->offs[i], res);
    free(res);
    return e;
}
