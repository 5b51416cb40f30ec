/* The offset gaps of a ledger per partition, for /metrics
 * (tally_ledger_gap_stats; schemas/010_gap_state.sql): main.db's rows and,
 * on a ledger directory, every shard's, read through the shard readers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"

/* One row per partition: its open gap (migration 10 says which rows are
 * still open) and its accepted ones, with the offsets they never read. */
static const char stats_sql[] =
    "WITH r AS (SELECT topic, partition, state, to_offset - from_offset n, state = 'open' AND "
    "EXISTS (SELECT 1 FROM offsets o WHERE o.topic = g.topic AND o.partition = g.partition AND "
    "o.next_offset = g.stored_next) AND NOT EXISTS (SELECT 1 FROM offset_gaps a WHERE "
    "a.topic = g.topic AND a.partition = g.partition AND a.state = 'accepted' AND a.id > g.id) "
    "live FROM offset_gaps g) "
    "SELECT topic, partition, sum(live), sum(CASE WHEN live THEN n ELSE 0 END), "
    "sum(state = 'accepted'), sum(CASE WHEN state = 'accepted' THEN n ELSE 0 END) "
    "FROM r GROUP BY topic, partition ORDER BY topic, partition";

/* A shard no meter has opened since migration 10: every row is accepted. */
static const char stats_sql_9[] =
    "SELECT topic, partition, 0, 0, count(*), sum(to_offset - from_offset) FROM offset_gaps "
    "GROUP BY topic, partition ORDER BY topic, partition";

typedef struct gap_acc {
    tally_gap_stats *v;
    size_t n, cap;
} gap_acc;

static tally_err acc_add(gap_acc *a, sqlite3_stmt *st)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        tally_gap_stats *v = realloc(a->v, cap * sizeof *v);
        if (!v)
            return TALLY_NOMEM;
        a->v = v;
        a->cap = cap;
    }
    tally_gap_stats *g = &a->v[a->n++];
    const unsigned char *topic = sqlite3_column_text(st, 0);
    snprintf(g->topic, sizeof g->topic, "%s", topic ? (const char *)topic : "");
    g->partition = sqlite3_column_int(st, 1);
    g->open = sqlite3_column_int64(st, 2);
    g->open_messages = sqlite3_column_int64(st, 3);
    g->accepted = sqlite3_column_int64(st, 4);
    g->accepted_messages = sqlite3_column_int64(st, 5);
    return TALLY_OK;
}

/* The error of rc on db: main.db's (src NULL) or a shard's. */
static tally_err db_err(tally_ledger *l, const shard_src *src, int rc)
{
    return src ? shard_src_err(l, src, rc) : ledger_sqlite_err(l, rc);
}

static int schema_version(sqlite3 *db, int64_t *v)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(st);
    *v = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? SQLITE_OK : rc;
}

/* Appends the rows of one database (main.db when src is NULL). */
static tally_err read_rows(tally_ledger *l, sqlite3 *db, const shard_src *src, gap_acc *a)
{
    int64_t version = 0;
    int rc = schema_version(db, &version);
    if (rc != SQLITE_OK)
        return db_err(l, src, rc);
    if (version < 6) /* no offset_gaps table yet */
        return TALLY_OK;
    sqlite3_stmt *st;
    rc = sqlite3_prepare_v2(db, version >= 10 ? stats_sql : stats_sql_9, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return db_err(l, src, rc);
    tally_err e = TALLY_OK;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW)
        e = acc_add(a, st);
    if (!e && rc != SQLITE_DONE)
        e = db_err(l, src, rc);
    sqlite3_finalize(st);
    return e;
}

static int by_partition(const void *pa, const void *pb)
{
    const tally_gap_stats *a = pa, *b = pb;
    int c = strcmp(a->topic, b->topic);
    return c ? c : (a->partition > b->partition) - (a->partition < b->partition);
}

/* Sorts the entries and folds those of one partition (main.db and a shard
 * may both hold rows of it) into one. */
static void acc_merge(gap_acc *a)
{
    if (a->n < 2)
        return;
    qsort(a->v, a->n, sizeof *a->v, by_partition);
    size_t w = 0;
    for (size_t i = 1; i < a->n; i++) {
        tally_gap_stats *d = &a->v[w];
        const tally_gap_stats *s = &a->v[i];
        if (by_partition(d, s) != 0) {
            a->v[++w] = *s;
            continue;
        }
        d->open += s->open;
        d->open_messages += s->open_messages;
        d->accepted += s->accepted;
        d->accepted_messages += s->accepted_messages;
    }
    a->n = w + 1;
}

tally_err tally_ledger_gap_stats(tally_ledger *l, tally_gap_stats **out, size_t *n)
{
    gap_acc a = {0};
    *out = NULL;
    *n = 0;
    tally_err e = read_rows(l, l->db, NULL, &a);
    if (!e && l->shards)
        e = shard_discover(l);
    for (size_t i = 1; !e && l->shards && i < l->shards->n_src; i++) {
        shard_src *src = &l->shards->src[i];
        sqlite3 *db = NULL;
        e = shard_src_db(l, src, &db);
        if (!e && db) /* NULL: a shard whose tables are not there yet */
            e = read_rows(l, db, src, &a);
    }
    if (e) {
        free(a.v);
        return e;
    }
    acc_merge(&a);
    *out = a.v;
    *n = a.n;
    return TALLY_OK;
}
