/* The meter's group membership: assignments start from the offsets stored
 * in the ledger, revocations commit the open chunk before letting go, and a
 * stale commit restarts every partition from the ledger. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meter_int.h"
#include "tally/log.h"

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
        c->parts[i].assigned = false;
    c->st.partitions = 0;
}

/* Sends the dead-letter copies that the ledger does not record as
 * delivered (an earlier run failed or died before recording them). A copy
 * that fails again is tried on the next assignment; it never holds back
 * the partition's Kafka offset. */
static void replay_dlq(tally_consumer *c, const rd_kafka_topic_partition_list_t *list)
{
    for (int i = 0; i < list->cnt; i++)
        (void)dlq_replay(c, list->elems[i].partition);
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

/* A copy of list without the partitions stopped at a gap; NULL: no memory. */
static rd_kafka_topic_partition_list_t *without_stopped(const rd_kafka_topic_partition_list_t *list)
{
    rd_kafka_topic_partition_list_t *out = rd_kafka_topic_partition_list_new(list->cnt);
    for (int i = 0; out && i < list->cnt; i++)
        if (list->elems[i].offset != RD_KAFKA_OFFSET_INVALID)
            rd_kafka_topic_partition_list_add(out, list->elems[i].topic, list->elems[i].partition)
                ->offset = list->elems[i].offset;
    return out;
}

/* Sets one listed partition's start from the ledger: its stored offset (the
 * beginning if none), checked against the broker's watermarks, or the
 * message before it to verify the log. *stopped: the partition has a gap
 * and is left out (tp->offset is RD_KAFKA_OFFSET_INVALID). */
static tally_err start_partition(tally_consumer *c, rd_kafka_topic_partition_t *tp, bool *stopped)
{
    int64_t next = -1, mark = 0, lo = -1, ignored;
    bool has_mark = false;
    *stopped = false;
    tally_err e = grow_parts(c, tp->partition);
    if (!e)
        e = c->o.shards ? shard_take(c, tp->partition, &next)
                        : tally_ledger_offset_get(c->l, c->topic, tp->partition, &next);
    tally_ledger *l = e ? NULL : shard_ledger_of(c, tp->partition);
    if (!e && next >= 0)
        e = tally_ledger_offset_mark(l, c->topic, tp->partition, &ignored, &mark, &has_mark);
    if (e)
        return e;
    if (gap_check(c, tp->partition, &next, &lo) != 0) {
        tp->offset = RD_KAFKA_OFFSET_INVALID;
        *stopped = true;
        return TALLY_OK;
    }
    part *p = &c->parts[tp->partition];
    if ((e = tally_ledger_gap_epoch(l, c->topic, tp->partition, &p->epoch)))
        return e;
    p->assigned = true;
    p->kafka_hold = false;
    p->next = p->chain = next;
    tp->offset = next >= 0 ? next : RD_KAFKA_OFFSET_BEGINNING;
    /* The message the ledger ends at is read again, to check that this log
     * is the one the ledger read (consumer_gap.c). */
    p->verify_at = has_mark && next > 0 && next - 1 >= lo ? next - 1 : -1;
    p->mark = mark;
    if (p->verify_at >= 0)
        tp->offset = p->verify_at;
    return TALLY_OK;
}

/* After a partition stopped at a gap: assigns the others (their open
 * batches are committed on the way out) and stops the meter, exit 1. */
static void assign_but_stopped(tally_consumer *c, const rd_kafka_topic_partition_list_t *list)
{
    rd_kafka_topic_partition_list_t *rest = without_stopped(list);
    if (rest && c->dlq)
        replay_dlq(c, rest);
    if (!rest || rd_kafka_assign(c->rk, rest) != RD_KAFKA_RESP_ERR_NO_ERROR)
        unassign_all(c);
    else
        c->st.partitions = rest->cnt;
    if (rest)
        rd_kafka_topic_partition_list_destroy(rest);
    c->fatal = TALLY_KAFKA;
}

/* Sets each listed partition's start from the ledger and assigns them.
 * Nothing may be in flight. */
static void assign_from_ledger(tally_consumer *c, rd_kafka_topic_partition_list_t *list)
{
    tally_err e = TALLY_OK;
    int stopped = 0;
    unassign_all(c);
    if (c->o.shards && list->cnt > 0)
        c->topic_parts = topic_partitions(c);
    if (c->o.shards)
        shard_retain(c, list);
    for (int i = 0; i < list->cnt && !e; i++) {
        bool stop = false;
        if (strcmp(list->elems[i].topic, c->topic) != 0)
            continue;
        e = start_partition(c, &list->elems[i], &stop);
        stopped += stop;
    }
    if (e) {
        tally_log(TALLY_LOG_ERR, "meter", "cannot read stored offsets: %s (%s)", tally_err_str(e),
                  tally_ledger_errmsg(c->l));
        c->fatal = e;
        unassign_all(c);
        (void)rd_kafka_assign(c->rk, NULL);
        return;
    }
    if (stopped) {
        assign_but_stopped(c, list);
        return;
    }
    if (c->dlq)
        replay_dlq(c, list);
    rd_kafka_resp_err_t err = rd_kafka_assign(c->rk, list);
    if (err) {
        tally_log(TALLY_LOG_ERR, "meter", "assign failed: %s", rd_kafka_err2str(err));
        c->fatal = TALLY_KAFKA;
        unassign_all(c);
        return;
    }
    c->st.partitions = list->cnt;
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

void group_reassign(tally_consumer *c)
{
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(c->n_parts);
    for (int32_t i = 0; i < c->n_parts; i++)
        if (c->parts[i].assigned)
            rd_kafka_topic_partition_list_add(list, c->topic, i);
    assign_from_ledger(c, list);
    rd_kafka_topic_partition_list_destroy(list);
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
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(c->n_parts);
    for (int32_t i = 0; i < c->n_parts; i++)
        if (c->parts[i].assigned)
            rd_kafka_topic_partition_list_add(list, c->topic, i);
    assign_from_ledger(c, list);
    rd_kafka_topic_partition_list_destroy(list);
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
