/* The meter's group membership: assignments start from the offsets stored
 * in the ledger, paused until the poll loop has checked each partition's
 * watermarks (group_start_pending), revocations commit the open chunk
 * before letting go, and a stale commit restarts every partition from the
 * ledger. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meter_int.h"
#include "tally/log.h"

#define SEEK_MS       5000  /* one seek of checked partitions to their start */
#define SEEK_RETRY_MS 10000 /* then the partitions are assigned again */

part *group_part(tally_consumer *c, int32_t partition)
{
    if (partition < 0 || partition >= c->n_parts)
        return NULL;
    return &c->parts[partition];
}

static tally_err grow_parts(tally_consumer *c, int32_t partition)
{
    if (partition < c->n_parts)
        return TALLY_OK;
    int32_t n = partition + 1;
    part *p = realloc(c->parts, (size_t)n * sizeof *p);
    if (!p)
        return TALLY_NOMEM;
    memset(p + c->n_parts, 0, (size_t)(n - c->n_parts) * sizeof *p);
    for (int32_t i = c->n_parts; i < n; i++)
        p[i].next = p[i].chain = p[i].verify_at = -1;
    c->parts = p;
    c->n_parts = n;
    return TALLY_OK;
}

static void unassign_all(tally_consumer *c)
{
    for (int32_t i = 0; i < c->n_parts; i++)
        c->parts[i].assigned = c->parts[i].pending = false;
    c->pending = c->unchecked = false;
    c->st.partitions = 0;
}

/* The topic's partition count from the broker's metadata; 0 if unknown. */
static int32_t topic_partitions(tally_consumer *c)
{
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_topic_t *t = rd_kafka_topic_new(c->rk, c->topic, NULL);
    int32_t n = 0;
    if (t && rd_kafka_metadata(c->rk, 0, t, &md, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR && md &&
        md->topic_cnt == 1 && !md->topics[0].err)
        n = md->topics[0].partition_cnt;
    if (md)
        rd_kafka_metadata_destroy(md);
    if (t)
        rd_kafka_topic_destroy(t);
    return n;
}

/* Reads one listed partition's stored offset (the beginning if none) and
 * the mark of the message before it, and marks it pending: it is assigned
 * paused, and nothing of it is consumed until the poll loop has checked its
 * watermarks (group_start_pending). It is assigned at the message before
 * the stored offset when the ledger has its mark, since that message is
 * read again to check the log (consumer_gap.c): the offset it will most
 * likely start at. */
static tally_err start_partition(tally_consumer *c, rd_kafka_topic_partition_t *tp)
{
    int64_t next = -1, mark = 0, ignored;
    bool has_mark = false;
    tally_err e = grow_parts(c, tp->partition);
    if (!e)
        e = c->o.shards ? shard_take(c, tp->partition, &next)
                        : tally_ledger_offset_get(c->l, c->topic, tp->partition, &next);
    tally_ledger *l = e ? NULL : shard_ledger_of(c, tp->partition);
    if (!e && next >= 0)
        e = tally_ledger_offset_mark(l, c->topic, tp->partition, &ignored, &mark, &has_mark);
    if (e)
        return e;
    part *p = &c->parts[tp->partition];
    p->assigned = false;
    p->pending = true;
    p->checked = false;
    p->kafka_hold = false;
    p->next = p->chain = next;
    p->has_mark = has_mark;
    p->mark = mark;
    p->verify_at = -1;
    tp->offset = has_mark && next > 0 ? next - 1 : next >= 0 ? next : RD_KAFKA_OFFSET_BEGINNING;
    p->assigned_at = tp->offset;
    return TALLY_OK;
}

/* Pauses the listed partitions right after their assignment, before this
 * thread polls again. A partition the pause missed is still not consumed:
 * take() drops messages of a pending partition, and it starts with a seek. */
static void pause_assigned(tally_consumer *c, rd_kafka_topic_partition_list_t *list)
{
    rd_kafka_resp_err_t err = rd_kafka_pause_partitions(c->rk, list);
    for (int i = 0; i < list->cnt; i++)
        if ((err || list->elems[i].err) && strcmp(list->elems[i].topic, c->topic) == 0) {
            tally_log(TALLY_LOG_WARNING, "meter", "%s/%d: cannot pause it for its check: %s",
                      c->topic, (int)list->elems[i].partition,
                      rd_kafka_err2str(err ? err : list->elems[i].err));
            c->parts[list->elems[i].partition].assigned_at = RD_KAFKA_OFFSET_INVALID;
        }
}

/* Reads each listed partition's start from the ledger, assigns them all
 * paused, and leaves their watermark check to the poll loop (a rebalance
 * callback that queried the broker for each partition delayed the assign
 * by up to WATERMARK_MS a partition). Nothing may be in flight. */
static void assign_from_ledger(tally_consumer *c, rd_kafka_topic_partition_list_t *list)
{
    tally_err e = TALLY_OK;
    unassign_all(c);
    if (c->o.shards)
        shard_retain(c, list);
    for (int i = 0; i < list->cnt && !e; i++)
        if (strcmp(list->elems[i].topic, c->topic) == 0)
            e = start_partition(c, &list->elems[i]);
    if (e) {
        tally_log(TALLY_LOG_ERR, "meter", "cannot read stored offsets: %s (%s)", tally_err_str(e),
                  tally_ledger_errmsg(c->l));
        c->fatal = e;
        unassign_all(c);
        (void)rd_kafka_assign(c->rk, NULL);
        return;
    }
    rd_kafka_resp_err_t err = rd_kafka_assign(c->rk, list);
    if (err) {
        tally_log(TALLY_LOG_ERR, "meter", "assign failed: %s", rd_kafka_err2str(err));
        c->fatal = TALLY_KAFKA;
        unassign_all(c);
        return;
    }
    if (list->cnt > 0) {
        pause_assigned(c, list);
        c->pending = c->unchecked = true;
        c->pending_since_ms = cons_now_ms();
        c->topic_parts_due = c->o.shards != NULL;
    }
    c->last_msg_ms = cons_now_ms();
}

/* Checks one pending partition's stored offset against the watermarks and
 * decides where it starts (p->start); false: it stops at a gap (it stays
 * paused and is never consumed). */
static bool check_partition(tally_consumer *c, int32_t partition)
{
    part *p = &c->parts[partition];
    int64_t next = p->next, lo = -1;
    if (gap_check(c, partition, &next, &lo) != 0)
        return false;
    tally_ledger *l = shard_ledger_of(c, partition);
    tally_err e = tally_ledger_gap_epoch(l, c->topic, partition, &p->epoch);
    if (e) {
        tally_log(TALLY_LOG_ERR, "meter", "%s/%d: cannot read its accepted gaps: %s", c->topic,
                  (int)partition, tally_ledger_errmsg(l));
        c->fatal = e;
        return false;
    }
    p->next = p->chain = next;
    /* The message the ledger ends at is read again, to check that this log
     * is the one the ledger read (consumer_gap.c). */
    p->verify_at = p->has_mark && next > 0 && next - 1 >= lo ? next - 1 : -1;
    p->start = p->verify_at >= 0 ? p->verify_at : next >= 0 ? next : RD_KAFKA_OFFSET_BEGINNING;
    p->checked = true;
    /* The dead-letter copies the ledger does not record as delivered (an
     * earlier run failed or died before recording them). A copy that fails
     * again is tried on the next assignment; it never holds back the
     * partition's Kafka offset. */
    if (c->dlq)
        (void)dlq_replay(c, partition);
    return true;
}

/* Seeks the checked partitions whose start is not where they were
 * assigned, then resumes them and every other checked one. A partition
 * whose seek fails (its fetcher has not started yet, as after a rebalance
 * with commits in flight) stays pending and is tried again on the next
 * turn of the poll loop. */
static void resume_checked(tally_consumer *c, rd_kafka_topic_partition_list_t *go)
{
    rd_kafka_topic_partition_list_t *seek = rd_kafka_topic_partition_list_new(go->cnt);
    for (int i = 0; i < go->cnt; i++) {
        const part *p = &c->parts[go->elems[i].partition];
        if (p->start != p->assigned_at)
            rd_kafka_topic_partition_list_add(seek, c->topic, go->elems[i].partition)->offset =
                p->start;
    }
    if (seek->cnt > 0) {
        rd_kafka_error_t *err = rd_kafka_seek_partitions(c->rk, seek, SEEK_MS);
        for (int i = 0; i < seek->cnt; i++) {
            part *p = &c->parts[seek->elems[i].partition];
            if (!err && !seek->elems[i].err)
                p->assigned_at = p->start;
        }
        if (err)
            rd_kafka_error_destroy(err);
    }
    rd_kafka_topic_partition_list_destroy(seek);
    rd_kafka_topic_partition_list_t *ready = rd_kafka_topic_partition_list_new(go->cnt);
    for (int i = 0; i < go->cnt; i++) {
        part *p = &c->parts[go->elems[i].partition];
        if (p->start != p->assigned_at) {
            c->pending = true;
            continue;
        }
        rd_kafka_topic_partition_list_add(ready, c->topic, go->elems[i].partition);
        p->pending = false;
        p->assigned = true;
        c->st.partitions++;
    }
    if (ready->cnt > 0 && rd_kafka_resume_partitions(c->rk, ready) != RD_KAFKA_RESP_ERR_NO_ERROR)
        c->fatal = TALLY_KAFKA;
    rd_kafka_topic_partition_list_destroy(ready);
}

void group_start_pending(tally_consumer *c)
{
    if (!c->pending || c->closing)
        return;
    if (c->unchecked)
        pipeline_seal(c, true); /* the checks read and write the ledger */
    if (c->fatal || !c->pending)
        return;
    if (c->topic_parts_due) { /* for the misrouted check (consumer.c) */
        c->topic_parts = topic_partitions(c);
        c->topic_parts_due = false;
    }
    c->pending = c->unchecked = false;
    bool stopped = false;
    rd_kafka_topic_partition_list_t *go = rd_kafka_topic_partition_list_new(c->n_parts);
    for (int32_t i = 0; i < c->n_parts && !c->fatal; i++) {
        part *p = &c->parts[i];
        if (!p->pending)
            continue;
        if (!p->checked && !check_partition(c, i)) {
            p->pending = false; /* stopped at a gap: it stays paused */
            stopped = true;
            continue;
        }
        rd_kafka_topic_partition_list_add(go, c->topic, i);
    }
    if (!c->fatal && go->cnt > 0)
        resume_checked(c, go);
    rd_kafka_topic_partition_list_destroy(go);
    if (stopped) /* the others' open batches are committed on the way out */
        c->fatal = TALLY_KAFKA;
    if (c->pending && !c->fatal && cons_now_ms() - c->pending_since_ms > SEEK_RETRY_MS) {
        tally_log(TALLY_LOG_WARNING, "meter",
                  "partitions could not be started at their checked offsets for %ds; "
                  "assigning them again",
                  SEEK_RETRY_MS / 1000);
        pipeline_seal(c, true);
        if (!c->fatal)
            group_reassign(c);
    }
    if (!c->pending)
        c->last_msg_ms = cons_now_ms();
}

/* Before letting partitions go, their ledger offsets are committed to Kafka
 * and confirmed, so the next owner's lag and dead-letter replay start from
 * there (async commits may still be in flight or refused by the
 * rebalance). Failure only means some copies are sent again. */
static void commit_kafka_sync(tally_consumer *c)
{
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(c->n_parts);
    for (int32_t i = 0; i < c->n_parts; i++) {
        const part *p = &c->parts[i];
        if (p->assigned && !p->kafka_hold && p->chain >= 0)
            rd_kafka_topic_partition_list_add(list, c->topic, i)->offset = p->chain;
    }
    if (list->cnt > 0)
        (void)rd_kafka_commit(c->rk, list, 0);
    rd_kafka_topic_partition_list_destroy(list);
}

void group_rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                        rd_kafka_topic_partition_list_t *list, void *opaque)
{
    tally_consumer *c = opaque;
    (void)rk;
    c->in_rebalance = true;
    /* Whatever happens next, the open chunk is committed first, while these
     * partitions are still ours (a stale commit is refused by the ledger). */
    pipeline_seal(c, true);
    c->in_rebalance = false;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS && !c->closing && !c->fatal) {
        assign_from_ledger(c, list);
        c->joined = true;
        c->st.rebalances++;
        return;
    }
    if (err != RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS && err != RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS)
        tally_log(TALLY_LOG_ERR, "meter", "rebalance error: %s", rd_kafka_err2str(err));
    commit_kafka_sync(c);
    unassign_all(c);
    (void)rd_kafka_assign(c->rk, NULL);
    if (c->o.shards) /* the next owner may take them now */
        tally_shard_release_all(c->o.shards);
}

/* Assigns the partitions that are ours (consumed, or pending their check)
 * again from the ledger. */
static void assign_ours_again(tally_consumer *c)
{
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(c->n_parts);
    for (int32_t i = 0; i < c->n_parts; i++)
        if (c->parts[i].assigned || c->parts[i].pending)
            rd_kafka_topic_partition_list_add(list, c->topic, i);
    assign_from_ledger(c, list);
    rd_kafka_topic_partition_list_destroy(list);
}

void group_reassign(tally_consumer *c)
{
    assign_ours_again(c);
}

void group_resync(tally_consumer *c)
{
    pipeline_drop_fill(c);
    if (c->in_rebalance || c->closing) {
        /* The partitions are being let go anyway; their chains ran ahead of
         * the ledger, so none of them is committed to Kafka on the way. */
        for (int32_t i = 0; i < c->n_parts; i++)
            c->parts[i].kafka_hold = true;
        return;
    }
    assign_ours_again(c);
}

int64_t group_lag(tally_consumer *c)
{
    int64_t lag = 0;
    for (int32_t i = 0; i < c->n_parts; i++) {
        const part *p = &c->parts[i];
        int64_t lo = -1, hi = -1;
        if (!p->assigned)
            continue;
        if (rd_kafka_get_watermark_offsets(c->rk, c->topic, i, &lo, &hi) || hi < 0)
            return -1;
        int64_t pos = p->next >= 0 ? p->next : lo;
        if (pos < 0)
            return -1;
        if (hi > pos)
            lag += hi - pos;
    }
    return lag;
}

void group_commit_kafka(tally_consumer *c, const chunk *k)
{
    if (k->n_offs == 0)
        return;
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new((int)k->n_offs);
    for (size_t i = 0; i < k->n_offs; i++) {
        const part *p = group_part(c, k->offs[i].partition);
        if (p && p->assigned && !p->kafka_hold)
            rd_kafka_topic_partition_list_add(list, c->topic, k->offs[i].partition)->offset =
                k->offs[i].new_next;
    }
    if (list->cnt > 0)
        (void)rd_kafka_commit(c->rk, list, 1);
    rd_kafka_topic_partition_list_destroy(list);
}
