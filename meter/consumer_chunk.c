/* The meter's commit side: chunks of decoded messages into the ledger, one
 * transaction each, on a commit thread of their own (see consumer_int.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meter_int.h"
#include "tally/buf.h"
#include "tally/log.h"

tally_err chunk_init(chunk *k, size_t cap)
{
    memset(k, 0, sizeof *k);
    k->items = malloc(cap * sizeof *k->items);
    k->results = malloc(cap * sizeof *k->results);
    if (!k->items || !k->results) {
        chunk_free(k);
        return TALLY_NOMEM;
    }
    k->cap = cap;
    return TALLY_OK;
}

void chunk_free(chunk *k)
{
    chunk_drop(k);
    free(k->items);
    free(k->arena);
    free(k->results);
    free(k->offs);
    memset(k, 0, sizeof *k);
}

static void release_messages(chunk *k)
{
    k->n = 0;
    k->arena_len = 0;
}

void chunk_drop(chunk *k)
{
    release_messages(k);
    k->n_offs = 0;
}

static tally_err arena_put(chunk *k, const void *data, size_t len, size_t *off)
{
    if (len > k->arena_cap - k->arena_len) {
        size_t cap = k->arena_cap ? k->arena_cap : (size_t)1 << 20;
        while (len > cap - k->arena_len)
            cap *= 2;
        char *a = realloc(k->arena, cap);
        if (!a)
            return TALLY_NOMEM;
        k->arena = a;
        k->arena_cap = cap;
    }
    if (len)
        memcpy(k->arena + k->arena_len, data, len);
    *off = k->arena_len;
    k->arena_len += len;
    return TALLY_OK;
}

/* The message's key, value and origin, into the chunk's arena. The origin
 * is formatted here, on the main thread, with the partition's epoch as it is
 * while the message is taken (check_partition sets it before a partition's
 * first message, and only while no chunk is in flight). */
tally_err chunk_copy(const tally_consumer *c, chunk *k, item *it, const rd_kafka_message_t *m)
{
    char origin[ORIGIN_MAX];
    it->partition = m->partition;
    it->offset = m->offset;
    it->key_len = m->key_len;
    it->raw_len = m->len;
    origin_format(c, m->partition, m->offset, origin);
    tally_err e = arena_put(k, m->key, m->key_len, &it->key_off);
    if (!e)
        e = arena_put(k, m->payload, m->len, &it->raw_off);
    return e ? e : arena_put(k, origin, strlen(origin) + 1, &it->origin_off);
}

void pipeline_drop_fill(tally_consumer *c)
{
    chunk_drop(&c->chunks[c->fill]);
    c->chunks[c->fill].gen = ++c->next_gen;
}

/* On the hot path (once per message), so no printf. */
void origin_format(const tally_consumer *c, int32_t partition, int64_t offset, char *out)
{
    char *p = out;
    memcpy(p, "kafka:", 6);
    p += 6;
    memcpy(p, c->topic, c->topic_len);
    p += c->topic_len;
    *p++ = '/';
    p += tally_dec_u64(p, (uint64_t)(partition < 0 ? 0 : partition));
    *p++ = '@';
    p += tally_dec_u64(p, (uint64_t)(offset < 0 ? 0 : offset));
    const part *pt = partition >= 0 && partition < c->n_parts ? &c->parts[partition] : NULL;
    if (pt && pt->epoch > 0) {
        memcpy(p, "+r", 2);
        p += 2;
        p += tally_dec_u64(p, (uint64_t)pt->epoch);
    }
    *p = '\0';
}

/* ---- Commit ----------------------------------------------------------------- */

static tally_err queue_chunk(tally_consumer *c, chunk *k)
{
    /* The chunk keeps its messages until the commit has returned
     * (chunk_commit), so the batch borrows them. */
    for (size_t i = 0; i < k->n; i++) {
        const item *it = &k->items[i];
        tally_err e = tally_pipeline_queue_ref(c->b, &it->d, k->arena + it->raw_off, it->raw_len,
                                               k->arena + it->origin_off);
        if (e)
            return e;
    }
    for (size_t i = 0; i < k->n_offs; i++) {
        const chunk_off *o = &k->offs[i];
        tally_err e =
            tally_batch_set_offset(c->b, c->topic, o->partition, o->expected_next, o->new_next);
        if (!e)
            e = tally_batch_set_offset_mark(c->b, c->topic, o->partition, o->mark);
        if (e)
            return e;
    }
    return TALLY_OK;
}

/* Empties the batch after a failed queueing: a commit that cannot succeed
 * (its offsets are not all set) would write something, so the batch is
 * replaced instead. */
static tally_err reset_batch(tally_consumer *c)
{
    tally_batch_destroy(c->b);
    c->b = NULL;
    return tally_batch_create(c->l, &c->b);
}

void chunk_commit(tally_consumer *c, chunk *k)
{
    memset(&k->st, 0, sizeof k->st);
    k->dlq = 0;
    k->dlq_failed = false;
    if (c->o.shards) /* a ledger directory: one transaction per shard */
        k->err = shard_chunk_commit(c, k);
    else if ((k->err = queue_chunk(c, k)) != TALLY_OK) {
        if (reset_batch(c) != TALLY_OK)
            k->err = TALLY_NOMEM;
    } else {
        k->err = tally_batch_commit(c->b, &k->st, k->results);
    }
    if (k->err == TALLY_OK && c->dlq)
        dlq_chunk(c, k);
    release_messages(k);
}

/* ---- The commit thread ---------------------------------------------------- */

static void *commit_main(void *arg)
{
    tally_consumer *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->job && !c->quit)
            pthread_cond_wait(&c->cv, &c->mu);
        chunk *k = c->job;
        if (!k)
            break;
        pthread_mutex_unlock(&c->mu);
        chunk_commit(c, k);
        pthread_mutex_lock(&c->mu);
        c->job = NULL;
        c->done = k;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

tally_err pipeline_start(tally_consumer *c)
{
    if (c->o.no_pipeline || c->thread_started)
        return TALLY_OK;
    c->quit = false;
    if (pthread_create(&c->thread, NULL, commit_main, c) != 0)
        return TALLY_NOMEM;
    c->thread_started = true;
    return TALLY_OK;
}

void pipeline_stop(tally_consumer *c)
{
    if (!c->thread_started)
        return;
    pipeline_collect(c, true);
    pthread_mutex_lock(&c->mu);
    c->quit = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    c->thread_started = false;
}

/* Books a committed (or failed) chunk: totals, Kafka offsets, and after a
 * stale or busy commit, a restart from what the ledger holds. */
static void finish(tally_consumer *c, chunk *k)
{
    /* What was stored: all of it, none, or with shards the partitions
     * committed before one failed. */
    c->st.messages += k->st.accepted + k->st.duplicates + k->st.conflicts + k->st.quarantined;
    c->st.accepted += k->st.accepted;
    c->st.duplicates += k->st.duplicates;
    c->st.conflicts += k->st.conflicts;
    c->st.quarantined += k->st.quarantined;
    if (k->err == TALLY_OK) {
        /* A copy that failed is sent again on the next assignment (the
         * ledger knows which); it never holds back the Kafka offset. */
        c->st.dlq += k->dlq;
        c->st.batches++;
        c->st.last_ms = cons_now_ms() - c->start_ms;
        group_commit_kafka(c, k);
    } else if (k->err == TALLY_STALE || k->err == TALLY_BUSY) {
        c->st.stale++;
        tally_log(TALLY_LOG_WARNING, "meter",
                  "batch dropped (%s); resuming from the ledger's offsets", tally_err_name(k->err));
        group_resync(c);
    } else {
        tally_log(TALLY_LOG_ERR, "meter", "commit failed: %s (%s)", tally_err_str(k->err),
                  c->o.shards ? "see above" : tally_ledger_errmsg(c->l));
        c->fatal = k->err;
    }
    k->n_offs = 0;
}

/* Fixes each touched partition's CAS pair and advances its chain. */
static void seal_offsets(tally_consumer *c, chunk *k)
{
    for (size_t i = 0; i < k->n_offs; i++) {
        chunk_off *o = &k->offs[i];
        part *p = group_part(c, o->partition);
        const item *last = &k->items[p->last_item];
        o->expected_next = p->chain;
        o->new_next = p->next;
        o->mark = message_mark(k->arena + last->key_off, last->key_len,
                               last->tombstone ? NULL : k->arena + last->raw_off, last->raw_len);
        p->chain = p->next;
    }
}

void pipeline_collect(tally_consumer *c, bool wait)
{
    if (!c->in_flight)
        return;
    pthread_mutex_lock(&c->mu);
    while (wait && !c->done)
        pthread_cond_wait(&c->cv, &c->mu);
    chunk *k = c->done;
    c->done = NULL;
    pthread_mutex_unlock(&c->mu);
    if (!k)
        return;
    c->in_flight = false;
    finish(c, k);
}

void pipeline_seal(tally_consumer *c, bool wait)
{
    chunk *k = &c->chunks[c->fill];
    if (k->n > 0) {
        pipeline_collect(c, true);
        /* The collected chunk may have been stale, which drops this one. */
        if (k->n > 0 && !c->fatal) {
            seal_offsets(c, k);
            if (c->thread_started) {
                pthread_mutex_lock(&c->mu);
                c->job = k;
                pthread_cond_broadcast(&c->cv);
                pthread_mutex_unlock(&c->mu);
                c->in_flight = true;
                c->fill = 1 - c->fill;
            } else {
                chunk_commit(c, k);
                finish(c, k);
            }
        }
        c->chunks[c->fill].gen = ++c->next_gen;
    }
    if (wait)
        pipeline_collect(c, true);
}
