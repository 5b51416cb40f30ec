/* What the Kafka path records so that nothing is skipped silently: offset
 * gaps the meter stopped at and those an operator accepted, and which
 * quarantined messages have had their dead-letter copy
 * (schemas/006_kafka_hostile.sql, 010_gap_state.sql). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ledger_int.h"

static tally_err step_done(tally_ledger *l, sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    tally_err e = rc == SQLITE_DONE ? TALLY_OK : ledger_sqlite_err(l, rc);
    sqlite3_finalize(st);
    return e;
}

/* Whether g is a gap the ledger can record: a kind it knows, a range. */
static bool gap_valid(const tally_offset_gap *g)
{
    return g && g->topic && *g->topic && g->partition >= 0 && g->from >= 0 && g->to >= g->from &&
           g->log_start >= 0 && g->stored_next >= 0 && g->kind &&
           (strcmp(g->kind, "retention") == 0 || strcmp(g->kind, "restarted") == 0);
}

static void bind_gap(sqlite3_stmt *st, const tally_offset_gap *g)
{
    sqlite3_bind_text(st, 1, g->topic, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, g->partition);
    sqlite3_bind_int64(st, 3, g->from);
    sqlite3_bind_int64(st, 4, g->to);
    sqlite3_bind_text(st, 5, g->kind, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 6, g->stored_next);
    sqlite3_bind_int64(st, 7, g->log_start);
    sqlite3_bind_int64(st, 8, g->log_end);
    sqlite3_bind_int64(st, 9, (sqlite3_int64)time(NULL));
}

static tally_err insert_gap(tally_ledger *l, const tally_offset_gap *g)
{
    sqlite3_stmt *st;
    tally_err e =
        ledger_prepare(l,
                       "INSERT INTO offset_gaps(topic, partition, from_offset, to_offset, "
                       "kind, stored_next, log_start, log_end, created_at, state) "
                       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'accepted')",
                       &st);
    if (e)
        return e;
    bind_gap(st, g);
    return step_done(l, st);
}

/* Moves the stored offset from g->stored_next to g->log_start (CAS). */
static tally_err move_offset(tally_ledger *l, const tally_offset_gap *g)
{
    sqlite3_stmt *st;
    tally_err e =
        ledger_prepare(l,
                       "UPDATE offsets SET next_offset = ?3, updated_at = ?4, last_mark = NULL "
                       "WHERE topic = ?1 AND partition = ?2 AND next_offset = ?5",
                       &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, g->topic, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, g->partition);
    sqlite3_bind_int64(st, 3, g->log_start);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)time(NULL));
    sqlite3_bind_int64(st, 5, g->stored_next);
    e = step_done(l, st);
    if (!e && sqlite3_changes(l->db) != 1) {
        snprintf(l->errmsg, sizeof l->errmsg,
                 "offset of %.120s/%d is no longer %lld: another writer moved it", g->topic,
                 (int)g->partition, (long long)g->stored_next);
        e = TALLY_STALE;
    }
    return e;
}

tally_err tally_ledger_gap_accept(tally_ledger *l, const tally_offset_gap *g)
{
    if (!gap_valid(g))
        return TALLY_INVAL;
    tally_err e = ledger_begin(l);
    if (e)
        return e;
    e = insert_gap(l, g);
    if (!e)
        e = move_offset(l, g);
    if (e) {
        ledger_rollback(l);
        return e;
    }
    return ledger_commit(l);
}

/* The open row is written only while the partition's stored offset is
 * still g->stored_next and the partition has no open gap at that offset
 * (one that no accepted row follows): a meter restarted in a loop at the
 * same gap records it once. */
static const char open_gap_sql[] =
    "INSERT INTO offset_gaps(topic, partition, from_offset, to_offset, kind, stored_next, "
    "log_start, log_end, created_at, state) "
    "SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'open' "
    "WHERE EXISTS (SELECT 1 FROM offsets WHERE topic = ?1 AND partition = ?2 AND "
    "next_offset = ?6) "
    "AND NOT EXISTS (SELECT 1 FROM offset_gaps g WHERE g.topic = ?1 AND g.partition = ?2 AND "
    "g.state = 'open' AND g.stored_next = ?6 AND NOT EXISTS (SELECT 1 FROM offset_gaps a "
    "WHERE a.topic = ?1 AND a.partition = ?2 AND a.state = 'accepted' AND a.id > g.id))";

tally_err tally_ledger_gap_open(tally_ledger *l, const tally_offset_gap *g, bool *recorded)
{
    *recorded = false;
    if (!gap_valid(g))
        return TALLY_INVAL;
    sqlite3_stmt *st;
    tally_err e = ledger_begin(l);
    if (e)
        return e;
    e = ledger_prepare(l, open_gap_sql, &st);
    if (!e) {
        bind_gap(st, g);
        e = step_done(l, st);
    }
    if (!e)
        *recorded = sqlite3_changes(l->db) == 1;
    if (e) {
        ledger_rollback(l);
        *recorded = false;
        return e;
    }
    e = ledger_commit(l);
    if (e)
        *recorded = false;
    return e;
}

tally_err tally_ledger_dlq_mark_sent(tally_ledger *l, const char *const *origins, size_t n)
{
    if (n == 0)
        return TALLY_OK;
    sqlite3_stmt *st;
    tally_err e = ledger_begin(l);
    if (e)
        return e;
    e = ledger_prepare(l,
                       "INSERT INTO dlq_sent(origin, sent_at) VALUES (?1, ?2) "
                       "ON CONFLICT DO NOTHING",
                       &st);
    for (size_t i = 0; !e && i < n; i++) {
        sqlite3_bind_text(st, 1, origins[i], -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)time(NULL));
        int rc = sqlite3_step(st);
        if (rc != SQLITE_DONE)
            e = ledger_sqlite_err(l, rc);
        sqlite3_reset(st);
    }
    if (st)
        sqlite3_finalize(st);
    if (e) {
        ledger_rollback(l);
        return e;
    }
    return ledger_commit(l);
}

tally_err tally_ledger_dlq_unsent_each(tally_ledger *l, const char *origin_prefix,
                                       tally_quarantine_fn fn, void *ctx)
{
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(
        l,
        "SELECT origin, reason, raw, raw_size, raw_sha256 FROM quarantine q "
        "WHERE origin >= ?1 AND origin < ?2 "
        "AND NOT EXISTS (SELECT 1 FROM dlq_sent s WHERE s.origin = q.origin) ORDER BY id",
        &st);
    if (e)
        return e;
    /* The rows whose origin starts with the prefix, found through the
     * origin index: [prefix, prefix with its last byte raised). */
    char upper[512];
    size_t n = strlen(origin_prefix);
    if (n == 0 || n >= sizeof upper || (unsigned char)origin_prefix[n - 1] == 0x7f) {
        sqlite3_finalize(st);
        return TALLY_INVAL;
    }
    memcpy(upper, origin_prefix, n);
    upper[n - 1] = (char)(origin_prefix[n - 1] + 1);
    sqlite3_bind_text(st, 1, origin_prefix, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, upper, (int)n, SQLITE_STATIC);
    int rc;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const unsigned char *origin = sqlite3_column_text(st, 0);
        const unsigned char *reason = sqlite3_column_text(st, 1);
        const unsigned char *sha = sqlite3_column_text(st, 4);
        tally_quarantine_row q = {.origin = origin ? (const char *)origin : "",
                                  .reason = reason ? (const char *)reason : "",
                                  .raw = sqlite3_column_blob(st, 2),
                                  .raw_len = (size_t)sqlite3_column_bytes(st, 2),
                                  .raw_size = (size_t)sqlite3_column_int64(st, 3),
                                  .raw_sha256 = sha ? (const char *)sha : ""};
        if (sqlite3_column_type(st, 3) == SQLITE_NULL)
            q.raw_size = q.raw_len;
        e = fn(ctx, &q);
    }
    if (e) {
        sqlite3_finalize(st);
        return e;
    }
    return ledger_finish(l, st, rc);
}

tally_err tally_ledger_offset_mark(tally_ledger *l, const char *topic, int32_t partition,
                                   int64_t *next, int64_t *mark, bool *has_mark)
{
    sqlite3_stmt *st;
    *next = -1;
    *mark = 0;
    *has_mark = false;
    tally_err e = ledger_prepare(
        l, "SELECT next_offset, last_mark FROM offsets WHERE topic = ?1 AND partition = ?2", &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, topic, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, partition);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *next = sqlite3_column_int64(st, 0);
        *has_mark = sqlite3_column_type(st, 1) != SQLITE_NULL;
        *mark = sqlite3_column_int64(st, 1);
        rc = SQLITE_DONE;
    }
    return ledger_finish(l, st, rc);
}

tally_err tally_ledger_gap_epoch(tally_ledger *l, const char *topic, int32_t partition, int64_t *n)
{
    sqlite3_stmt *st;
    *n = 0;
    tally_err e = ledger_prepare(l,
                                 "SELECT count(*) FROM offset_gaps WHERE topic = ?1 AND "
                                 "partition = ?2 AND kind = 'restarted' AND state = 'accepted'",
                                 &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, topic, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, partition);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *n = sqlite3_column_int64(st, 0);
        rc = SQLITE_DONE;
    }
    return ledger_finish(l, st, rc);
}
