/* Offsets and totals of a ledger directory, for the HTTP API's lag and
 * metrics (tally_ledger_offset_get, tally_ledger_counts_get on a directory):
 * a partition's offset lives in its shard, and the totals are main.db's plus
 * every shard's. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "ledger_int.h"
#include "tally/shard.h"

/* The source of a shard name, looking for new shards once if needed. */
static tally_err find_src(tally_ledger *l, const char *name, shard_src **out)
{
    ssize_t i = shard_src_index(l->shards, name);
    tally_err e = i < 0 ? shard_discover(l) : TALLY_OK;
    if (!e && i < 0)
        i = shard_src_index(l->shards, name);
    *out = !e && i >= 0 ? &l->shards->src[i] : NULL;
    return e;
}

tally_err ledger_shards_offset(tally_ledger *l, const char *topic, int32_t partition, int64_t *next,
                               bool *found)
{
    char name[SHARD_NAME_MAX];
    shard_src *src = NULL;
    sqlite3 *db;
    sqlite3_stmt *st;
    *found = false;
    if (!tally_shard_name(topic, partition, name, sizeof name))
        return TALLY_OK; /* no shard can exist for it */
    tally_err e = find_src(l, name, &src);
    if (e || !src)
        return e;
    e = shard_src_db(l, src, &db);
    if (e || !db)
        return e;
    int rc = sqlite3_prepare_v2(
        db, "SELECT next_offset FROM offsets WHERE topic = ?1 AND partition = ?2", -1, &st, NULL);
    if (rc != SQLITE_OK)
        return shard_src_err(l, src, rc);
    sqlite3_bind_text(st, 1, topic, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, partition);
    rc = sqlite3_step(st);
    *found = true;
    if (rc == SQLITE_ROW)
        *next = sqlite3_column_int64(st, 0);
    else if (rc != SQLITE_DONE)
        e = ledger_stmt_err(l, st, rc);
    sqlite3_finalize(st);
    return e;
}

/* Adds one shard's meta counters. */
static tally_err add_counts(tally_ledger *l, shard_src *src, tally_ledger_counts *out)
{
    static const struct {
        const char *key;
        size_t off;
    } fields[] = {
        {"count_dedupe", offsetof(tally_ledger_counts, dedupe_keys)},
        {"count_quarantine", offsetof(tally_ledger_counts, quarantined)},
        {"count_intervals", offsetof(tally_ledger_counts, intervals)},
        {"count_points", offsetof(tally_ledger_counts, points)},
    };
    sqlite3 *db;
    sqlite3_stmt *st;
    tally_err e = shard_src_db(l, src, &db);
    if (e || !db)
        return e;
    int rc = sqlite3_prepare_v2(db, "SELECT key, value FROM meta", -1, &st, NULL);
    if (rc != SQLITE_OK)
        return shard_src_err(l, src, rc);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *key = (const char *)sqlite3_column_text(st, 0);
        for (size_t i = 0; key && i < sizeof fields / sizeof *fields; i++)
            if (strcmp(key, fields[i].key) == 0)
                *(int64_t *)((char *)out + fields[i].off) += sqlite3_column_int64(st, 1);
    }
    if (rc != SQLITE_DONE)
        e = ledger_stmt_err(l, st, rc);
    sqlite3_finalize(st);
    return e;
}

tally_err ledger_shards_counts(tally_ledger *l, tally_ledger_counts *out)
{
    tally_err e = shard_discover(l);
    for (size_t i = 1; !e && i < l->shards->n_src; i++)
        e = add_counts(l, &l->shards->src[i], out);
    return e;
}
