/* Ingest batches: queue events and rejects in memory, then write them in one
 * transaction with the partition offsets they end at.
 *
 * Commit, in one BEGIN IMMEDIATE ... COMMIT:
 *   1. offsets: compare-and-set per partition (a miss is TALLY_STALE);
 *   2. per item in order: rejects go to quarantine; events are checked
 *      against the rate card in force (unknown_sku / no_price ->
 *      quarantine), then deduplicated by (source, id): a new key is accepted,
 *      a known key with the same fingerprint is a duplicate, with another
 *      fingerprint a conflict (quarantined with the raw message);
 *   3. accepted usage is aggregated (batch_agg.c) and written once;
 *   4. meta counters move by what was inserted.
 * Any failure rolls everything back. Statements are prepared once per batch
 * object and raw messages live in one arena reset after every commit, so the
 * per-event cost is a few hundred nanoseconds of copying plus one dedupe
 * INSERT. */
#include <assert.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"
#include "tally/sign.h"

static const char *const batch_sql[ST_COUNT_OF] = {
    [ST_DEDUPE_INS] = "INSERT INTO dedupe(src, id, fp) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
    [ST_DEDUPE_FP] = "SELECT fp FROM dedupe WHERE src = ?1 AND id = ?2",
    [ST_RUN_FIND] = "SELECT id, bits_at, bits, n, content FROM dedupe_windows WHERE src = ?1 "
                    "AND prefix = ?2 AND width = ?3 AND lo = ?4",
    [ST_RUN_INS] = "INSERT INTO dedupe_windows(src, prefix, width, lo, bits_at, bits, n, content) "
                   "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT DO NOTHING",
    [ST_RUN_UPD] = "UPDATE dedupe_windows SET bits_at = ?5, bits = ?6, n = ?7, content = ?8 WHERE "
                   "id = ?9 AND src = ?1 AND prefix = ?2 AND width = ?3 AND lo = ?4",
    /* The runs of migration 15 a window covers (three at most). */
    [ST_RUN_V1] = "SELECT id, lo, bits, fps FROM dedupe_runs WHERE src = ?1 AND prefix = ?2 AND "
                  "width = ?3 AND lo >= ?4 AND lo < ?4 + 480 ORDER BY lo",
    [ST_QUARANTINE] = "INSERT INTO quarantine(origin, reason, detail, source, event_id, raw, "
                      "created_at, key_id, raw_size, raw_sha256) VALUES (?1, ?2, ?3, ?4, ?5, ?6, "
                      "?7, ?8, ?9, ?10) "
                      "ON CONFLICT(origin) DO NOTHING",
    [ST_IV_INS] = "INSERT INTO usage_intervals(account, meter, pricing, migration, resource, dim, "
                  "weight, start_s, end_s, seq) VALUES (?1, ?5, ?6, ?7, ?8, ?9, ?10, ?2, ?3, ?4)",
    [ST_IV_UPD] = "UPDATE usage_intervals SET start_s = ?2, end_s = ?3, seq = ?4 WHERE id = ?1",
    /* The usual case: the row grew at its end only. start_s is not in its
     * SET, so SQLite leaves usage_intervals_by_account alone. */
    [ST_IV_END] = "UPDATE usage_intervals SET end_s = ?3, seq = ?4 WHERE id = ?1",
    [ST_IV_DEL] = "DELETE FROM usage_intervals WHERE id = ?1",
    [ST_PT_INS] = "INSERT INTO usage_points(account, meter, dim, dim2, t_s, qty, seq) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT DO NOTHING",
    /* Never past INT64_MAX (SQLite would turn the sum into a REAL): no row
     * changes, and agg_flush reports TALLY_OVERFLOW. */
    [ST_PT_ADD] = "UPDATE usage_points SET qty = qty + ?6, seq = ?7 WHERE account = ?1 AND "
                  "meter = ?2 AND dim = ?3 AND dim2 = ?4 AND t_s = ?5 AND "
                  "qty <= 9223372036854775807 - ?6",
    /* One hour's new quantity (NULL: it does not fit in 64 bits); the sum
     * turns NULL rather than pass INT64_MAX (schemas/013_points_hourly.sql). */
    [ST_HR_ADD] = "INSERT INTO usage_points_hourly(account, meter, dim, dim2, hour_s, qty) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO UPDATE SET qty = CASE "
                  "WHEN qty IS NULL OR excluded.qty IS NULL "
                  "OR excluded.qty > 9223372036854775807 - qty THEN NULL "
                  "ELSE qty + excluded.qty END",
    [ST_PT_GET] = "SELECT qty FROM usage_points WHERE account = ?1 AND meter = ?2 AND dim = ?3 "
                  "AND dim2 = ?4 AND t_s = ?5",
    [ST_OFF_INS] = "INSERT INTO offsets(topic, partition, next_offset, updated_at, last_mark) "
                   "VALUES (?1, ?2, ?3, ?4, ?6) ON CONFLICT DO NOTHING",
    [ST_OFF_UPD] = "UPDATE offsets SET next_offset = ?3, updated_at = ?4, last_mark = ?6 "
                   "WHERE topic = ?1 AND partition = ?2 AND next_offset = ?5",
    [ST_SEQ] = "UPDATE meta SET value = value + 1 WHERE key = 'usage_seq' RETURNING value",
    [ST_COUNT] = "UPDATE meta SET value = value + ?2 WHERE key = ?1",
};

/* Events after year 9999 cannot be formatted, and time + seconds must fit. */
#define EVENT_TIME_MAX_S 253402300799LL

/* One flag of meta (a missing one counts as set). */
static tally_err read_flag(tally_batch *b, const char *sql, bool *out)
{
    sqlite3_stmt *st;
    tally_err e = ledger_prepare(b->l, sql, &st);
    if (e != TALLY_OK)
        return e;
    int rc = sqlite3_step(st);
    *out = rc != SQLITE_ROW || sqlite3_column_int64(st, 0) != 0;
    return ledger_finish(b->l, st, rc == SQLITE_ROW ? SQLITE_DONE : rc);
}

/* Whether the ledger held dedupe keys before migration 15 (its ids of the
 * run form may be in the dedupe table), and runs before migration 16. */
static tally_err read_legacy(tally_batch *b)
{
    tally_err e =
        read_flag(b, "SELECT value FROM meta WHERE key = 'dedupe_legacy'", &b->dedupe_legacy);
    if (e == TALLY_OK)
        e = read_flag(b, "SELECT value FROM meta WHERE key = 'dedupe_runs_legacy'",
                      &b->runs_legacy);
    return e;
}

tally_err tally_batch_create(tally_ledger *l, tally_batch **out)
{
    *out = NULL;
    tally_batch *b = calloc(1, sizeof *b);
    if (!b)
        return TALLY_NOMEM;
    b->l = l;
    b->known_max = ACCOUNTS_KNOWN_MAX;
    b->prefetch_from = BATCH_PREFETCH_FROM;
    tally_err e = TALLY_OK;
    for (int i = 0; i < ST_COUNT_OF && e == TALLY_OK; i++)
        e = ledger_prepare(l, batch_sql[i], &b->st[i]);
    if (e == TALLY_OK)
        e = agg_init(b);
    if (e == TALLY_OK)
        e = read_legacy(b);
    if (e != TALLY_OK) {
        tally_batch_destroy(b);
        return e;
    }
    *out = b;
    return TALLY_OK;
}

void tally_batch_destroy(tally_batch *b)
{
    if (!b)
        return;
    for (int i = 0; i < ST_COUNT_OF; i++)
        sqlite3_finalize(b->st[i]);
    agg_free(b);
    runs_free(b);
    idx_table_free(&b->known_accounts);
    idx_table_free(&b->touch_index);
    free(b->touched);
    bal_engine_destroy(b->bal_eng);
    bal_cache_destroy(b->bal_cache);
    free(b->account_names);
    free(b->items);
    free(b->arena);
    free(b->strs);
    free(b->offsets);
    free(b);
}

size_t tally_batch_count(const tally_batch *b)
{
    return b->n_items;
}

size_t tally_batch_bytes(const tally_batch *b)
{
    return b->arena_len + b->ref_bytes;
}

/* ---- Queueing ------------------------------------------------------------- */

/* Whether n more bytes stay within BATCH_ARENA_CAP, counting the borrowed
 * items' bytes as if they were copied. */
static bool bytes_fit(const tally_batch *b, size_t n)
{
    size_t used = b->arena_len + b->ref_bytes;
    return used <= BATCH_ARENA_CAP && n <= BATCH_ARENA_CAP - used;
}

/* Room for n more bytes after the len used of *buf (the arena, the
 * strings), doubling from 64 KiB. Errors: TALLY_NOMEM. */
static tally_err bytes_room(char **buf, size_t *alloc, size_t len, size_t n)
{
    if (*alloc - len >= n)
        return TALLY_OK;
    size_t cap = *alloc ? *alloc : 65536;
    while (cap - len < n)
        cap *= 2;
    char *p = realloc(*buf, cap);
    if (!p)
        return TALLY_NOMEM;
    *buf = p;
    *alloc = cap;
    return TALLY_OK;
}

/* Copies len bytes (plus a NUL when nul) into the arena; *off is where. */
static tally_err arena_put(tally_batch *b, const char *data, size_t len, bool nul, size_t *off)
{
    size_t n = len + (nul ? 1 : 0);
    if (!bytes_fit(b, n))
        return TALLY_TOO_LARGE;
    tally_err e = bytes_room(&b->arena, &b->arena_alloc, b->arena_len, n);
    if (e != TALLY_OK)
        return e;
    *off = b->arena_len;
    if (len)
        memcpy(b->arena + b->arena_len, data, len);
    if (nul)
        b->arena[b->arena_len + len] = '\0';
    b->arena_len += n;
    return TALLY_OK;
}

_Static_assert(TALLY_ID_MAX <= 256 && TALLY_NAME_MAX <= 256,
               "a packed string's length fits a byte");
/* What the packing is for: an item a quarter of a tally_event's size (8
 * bytes more than 160 for the source's hash, which the commit used to take
 * again for every event of a stream whose sources interleave). */
_Static_assert(sizeof(batch_item) <= 168, "a batch item holds its event packed");

/* Room for n more bytes of strings. Errors: TALLY_NOMEM. */
static tally_err strs_room(tally_batch *b, size_t n)
{
    return bytes_room(&b->strs, &b->strs_alloc, b->strs_len, n);
}

/* Appends s (n bytes) and its NUL to strs; strs_room made room. */
static size_t strs_put(tally_batch *b, const char *s, size_t n)
{
    size_t off = b->strs_len;
    memcpy(b->strs + off, s, n);
    b->strs[off + n] = '\0';
    b->strs_len += n + 1;
    return off;
}

/* Where an event's strings are, in the order of BATCH_EVENT_STRS. */
static const struct {
    size_t off, cap;
} event_strs[BATCH_EVENT_STRS] = {
    {offsetof(tally_event, id), sizeof((tally_event *)0)->id},
    {offsetof(tally_event, source), sizeof((tally_event *)0)->source},
    {offsetof(tally_event, account), sizeof((tally_event *)0)->account},
    {offsetof(tally_event, resource), sizeof((tally_event *)0)->resource},
    {offsetof(tally_event, dim), sizeof((tally_event *)0)->dim},
    {offsetof(tally_event, dim2), sizeof((tally_event *)0)->dim2},
};

static batch_hashes event_hashes(const tally_event *ev)
{
    int64_t src = runs_source_hash(ev->source);
    return (batch_hashes){.iv = agg_key_hash(ev), .run = runs_window_hash(src, ev->id), .src = src};
}

/* Packs a valid event (its strings terminated within their arrays) into
 * *out and strs. Errors: TALLY_NOMEM. */
static tally_err pack_event(tally_batch *b, const tally_event *ev, batch_event *out)
{
    size_t len[BATCH_EVENT_STRS], total = 0;
    for (int i = 0; i < BATCH_EVENT_STRS; i++) {
        len[i] = strnlen((const char *)ev + event_strs[i].off, event_strs[i].cap);
        total += len[i] + 1;
    }
    tally_err e = strs_room(b, total);
    if (e != TALLY_OK)
        return e;
    *out = (batch_event){.time_s = ev->time_s,
                         .seconds = ev->seconds,
                         .weight = ev->weight,
                         .key = {ev->key[0], ev->key[1]},
                         .untimed = ev->untimed,
                         .h = event_hashes(ev),
                         .strs_off = b->strs_len,
                         .meter = (int32_t)ev->meter,
                         .pricing = (int32_t)ev->pricing,
                         .migration = ev->migration};
    for (int i = 0; i < BATCH_EVENT_STRS; i++) {
        out->len[i] = (uint8_t)len[i]; /* each below 256 (below) */
        (void)strs_put(b, (const char *)ev + event_strs[i].off, len[i]);
    }
    return TALLY_OK;
}

const tally_event *batch_item_event(const tally_batch *b, const batch_item *it,
                                    tally_event *scratch)
{
    if (it->borrowed)
        return it->ev_ref;
    const batch_event *p = &it->u.ev;
    memset(scratch, 0, sizeof *scratch);
    scratch->meter = (tally_meter)p->meter;
    scratch->pricing = (tally_pricing)p->pricing;
    scratch->migration = p->migration;
    scratch->time_s = p->time_s;
    scratch->seconds = p->seconds;
    scratch->weight = p->weight;
    scratch->key[0] = p->key[0];
    scratch->key[1] = p->key[1];
    scratch->untimed = p->untimed;
    const char *from = b->strs + p->strs_off;
    for (int i = 0; i < BATCH_EVENT_STRS; i++) {
        memcpy((char *)scratch + event_strs[i].off, from, p->len[i]); /* the rest is zero */
        from += p->len[i] + 1;
    }
    return scratch;
}

/* Whether origin may be queued: under tally_batch_set_origin_hash, a
 * prefix of at most BATCH_ORIGIN_PREFIX_MAX bytes. */
static bool origin_fits(const tally_batch *b, const char *origin)
{
    return !b->origin_hash ||
           strnlen(origin, BATCH_ORIGIN_PREFIX_MAX + 1) <= BATCH_ORIGIN_PREFIX_MAX;
}

/* prefix followed by 16 hex digits of tally_hash128 of raw[0..len), in out. */
static const char *origin_hashed(const char *prefix, const char *raw, size_t len,
                                 char out[BATCH_ORIGIN_MAX])
{
    uint64_t h[2];
    size_t n = strlen(prefix); /* at most BATCH_ORIGIN_PREFIX_MAX: origin_fits */
    tally_hash128(raw ? raw : "", raw ? len : 0, 0, h);
    memcpy(out, prefix, n);
    n += tally_hex64(out + n, h[0]);
    out[n] = '\0';
    return out;
}

const char *item_origin_full(const tally_batch *b, const batch_item *it, char out[BATCH_ORIGIN_MAX])
{
    const char *o = item_origin(b, it);
    return it->origin_hash ? origin_hashed(o, item_raw(b, it), it->raw_len, out) : o;
}

void tally_batch_set_origin_hash(tally_batch *b, bool on)
{
    b->origin_hash = on;
}

/* Room for one more item. Errors: TALLY_TOO_LARGE, TALLY_NOMEM. */
static tally_err items_room(tally_batch *b)
{
    if (b->n_items == b->items_alloc && b->items_alloc == BATCH_ITEMS_MAX)
        return TALLY_TOO_LARGE;
    return ledger_grow((void **)&b->items, b->n_items, &b->items_alloc, sizeof *b->items, 256);
}

/* A new item with its origin copied and its raw bytes copied or, with
 * raw_ref, kept as the caller's; or an error. */
static tally_err push_item(tally_batch *b, const char *raw, size_t len, const char *origin,
                           bool raw_ref, batch_item **out)
{
    size_t n = raw ? len : 0;
    if (raw_ref && !bytes_fit(b, n + strlen(origin) + 1))
        return TALLY_TOO_LARGE;
    tally_err e = items_room(b);
    if (e != TALLY_OK)
        return e;
    size_t arena_mark = b->arena_len;
    batch_item *it = &b->items[b->n_items];
    e = arena_put(b, origin, strlen(origin), true, &it->origin_off);
    if (e == TALLY_OK && !raw_ref)
        e = arena_put(b, raw, n, false, &it->raw_off);
    if (e != TALLY_OK) {
        b->arena_len = arena_mark;
        return e;
    }
    it->raw_borrowed = raw_ref;
    it->raw_ref = raw_ref ? (raw ? raw : "") : NULL; /* bound as a blob: never NULL */
    if (raw_ref)
        b->ref_bytes += n;
    it->raw_len = it->raw_size = n;
    it->sha_off = NO_SHA;
    it->borrowed = false;
    it->origin_hash = b->origin_hash;
    b->n_items++;
    *out = it;
    return TALLY_OK;
}

static bool terminated(const char *s, size_t cap)
{
    return strnlen(s, cap) < cap;
}

/* What the decoder guarantees; checked so a hand-made event cannot corrupt
 * the aggregates. */
static bool valid_event(const tally_event *ev)
{
    if ((unsigned)ev->meter >= TALLY_METER_COUNT || ev->time_s < 0 ||
        ev->time_s > EVENT_TIME_MAX_S || ev->weight < 0 || !terminated(ev->id, TALLY_ID_MAX) ||
        !terminated(ev->source, TALLY_ID_MAX) || !terminated(ev->account, TALLY_NAME_MAX) ||
        !terminated(ev->resource, TALLY_NAME_MAX) || !terminated(ev->dim, TALLY_NAME_MAX) ||
        !terminated(ev->dim2, sizeof ev->dim2) || !ev->id[0] || !ev->source[0] || !ev->account[0])
        return false;
    switch (ev->meter) {
    case TALLY_METER_ACCELERATOR:
        return ev->pricing >= TALLY_PRICING_ON_DEMAND && ev->pricing <= TALLY_PRICING_RESERVED &&
               ev->seconds >= 1 && ev->seconds <= 3600 && ev->weight >= 1;
    case TALLY_METER_STORAGE:
        return ev->seconds >= 1 && ev->seconds <= 86400;
    default:
        return true;
    }
}

/* A new item whose raw bytes and origin stay the caller's, or an error. */
static tally_err push_ref(tally_batch *b, const char *raw, size_t len, const char *origin,
                          batch_item **out)
{
    size_t n = raw ? len : 0;
    if (!bytes_fit(b, n))
        return TALLY_TOO_LARGE;
    tally_err e = items_room(b);
    if (e != TALLY_OK)
        return e;
    batch_item *it = &b->items[b->n_items++];
    it->borrowed = true;
    it->raw_borrowed = false;
    it->raw_ref = raw ? raw : ""; /* bound as a blob: never NULL */
    it->origin_ref = origin;
    it->raw_len = it->raw_size = n;
    it->sha_off = NO_SHA;
    it->origin_hash = b->origin_hash;
    b->ref_bytes += n;
    *out = it;
    return TALLY_OK;
}

/* What tally_batch_add_event* keep of the caller's. */
typedef enum { KEEP_NOTHING, KEEP_ALL, KEEP_RAW } keep_mode;

/* tally_batch_add_event, copying the event, raw and origin, or keeping
 * pointers to all three (KEEP_ALL) or to raw alone (KEEP_RAW). */
static tally_err add_event(tally_batch *b, const tally_event *ev, const char *raw, size_t len,
                           const char *origin, keep_mode keep)
{
    batch_item *it;
    assert(origin);
    if (len > TALLY_EVENT_MAX_BYTES || !origin_fits(b, origin))
        return TALLY_TOO_LARGE;
    if (!valid_event(ev))
        return TALLY_INVAL;
    size_t arena_mark = b->arena_len;
    tally_err e = keep == KEEP_ALL ? push_ref(b, raw, len, origin, &it)
                                   : push_item(b, raw, len, origin, keep == KEEP_RAW, &it);
    if (e != TALLY_OK)
        return e;
    it->is_event = true;
    if (keep == KEEP_ALL) {
        it->ev_ref = ev;
        it->u.ev =
            (batch_event){.time_s = ev->time_s, .seconds = ev->seconds, .h = event_hashes(ev)};
    } else if ((e = pack_event(b, ev, &it->u.ev)) != TALLY_OK) {
        b->n_items--; /* the item goes, with its copies */
        b->arena_len = arena_mark;
        if (it->raw_borrowed)
            b->ref_bytes -= it->raw_len;
        return e;
    }
    if (ev->meter == TALLY_METER_TRAFFIC || ev->meter == TALLY_METER_TOKENS)
        b->n_points_queued++;
    return TALLY_OK;
}

tally_err tally_batch_add_event(tally_batch *b, const tally_event *ev, const char *raw, size_t len,
                                const char *origin)
{
    return add_event(b, ev, raw, len, origin, KEEP_NOTHING);
}

tally_err tally_batch_add_event_ref(tally_batch *b, const tally_event *ev, const char *raw,
                                    size_t len, const char *origin)
{
    return add_event(b, ev, raw, len, origin, KEEP_ALL);
}

tally_err tally_batch_add_event_raw_ref(tally_batch *b, const tally_event *ev, const char *raw,
                                        size_t len, const char *origin)
{
    return add_event(b, ev, raw, len, origin, KEEP_RAW);
}

static tally_err reject_item(tally_batch *b, const tally_reject *rej, const char *raw, size_t len,
                             size_t whole_size, const char whole_sha256[65], const char *origin,
                             bool origin_hash);

tally_err tally_batch_add_reject(tally_batch *b, const tally_reject *rej, const char *raw,
                                 size_t len, const char *origin)
{
    if (!origin_fits(b, origin))
        return TALLY_TOO_LARGE;
    if (!raw || len <= QUARANTINE_RAW_MAX)
        return reject_item(b, rej, raw, len, raw ? len : 0, NULL, origin, b->origin_hash);
    /* Only a bounded prefix is kept; the hash stands for the rest, and an
     * origin to be hashed is made whole now, while all of raw is here. */
    char sha[65], whole[BATCH_ORIGIN_MAX];
    tally_sha256_hex(raw, len, sha);
    if (b->origin_hash)
        origin = origin_hashed(origin, raw, len, whole);
    return reject_item(b, rej, raw, len, len, sha, origin, false);
}

tally_err tally_batch_add_reject_cut(tally_batch *b, const tally_reject *rej, const char *raw,
                                     size_t len, size_t whole_size, const char whole_sha256[65],
                                     const char *origin)
{
    return reject_item(b, rej, raw, len, whole_size, whole_sha256, origin, false);
}

static tally_err reject_item(tally_batch *b, const tally_reject *rej, const char *raw, size_t len,
                             size_t whole_size, const char whole_sha256[65], const char *origin,
                             bool origin_hash)
{
    batch_item *it;
    size_t sha_off = NO_SHA, arena_mark = b->arena_len;
    assert(origin && rej);
    if (whole_sha256) {
        tally_err e = arena_put(b, whole_sha256, 64, true, &sha_off);
        if (e != TALLY_OK)
            return e;
    }
    tally_err e = push_item(b, raw, raw && len > QUARANTINE_RAW_MAX ? QUARANTINE_RAW_MAX : len,
                            origin, false, &it);
    if (e != TALLY_OK)
        return e;
    if (whole_sha256) {
        it->raw_size = whole_size;
        it->sha_off = sha_off;
    }
    it->is_event = false;
    it->origin_hash = origin_hash;
    const char *reason = rej->reason[0] ? rej->reason : "rejected";
    size_t nr = strnlen(reason, sizeof rej->reason - 1),
           nd = strnlen(rej->detail, sizeof rej->detail - 1);
    e = strs_room(b, nr + nd + 2);
    if (e != TALLY_OK) {
        b->n_items--; /* the item goes, with its copies */
        b->arena_len = arena_mark;
        return e;
    }
    it->u.rej.reason_off = strs_put(b, reason, nr);
    it->u.rej.detail_off = strs_put(b, rej->detail, nd);
    return TALLY_OK;
}

tally_err tally_batch_set_offset(tally_batch *b, const char *topic, int32_t partition,
                                 int64_t expected_next, int64_t new_next)
{
    if (!topic || !*topic || !terminated(topic, sizeof b->offsets->topic) || partition < 0 ||
        expected_next < -1 || new_next < 0 || new_next < expected_next)
        return TALLY_INVAL;
    for (size_t i = 0; i < b->n_offsets; i++) {
        batch_offset *o = &b->offsets[i];
        if (o->partition != partition || strcmp(o->topic, topic) != 0)
            continue;
        if (expected_next != o->new_next) /* a second range must continue the first */
            return TALLY_INVAL;
        o->new_next = new_next;
        o->has_mark = false;
        return TALLY_OK;
    }
    if (b->n_offsets == b->offsets_alloc) {
        size_t n = b->offsets_alloc ? b->offsets_alloc * 2 : 8;
        batch_offset *o = realloc(b->offsets, n * sizeof *o);
        if (!o)
            return TALLY_NOMEM;
        b->offsets = o;
        b->offsets_alloc = n;
    }
    batch_offset *o = &b->offsets[b->n_offsets++];
    if (tally_fmt(o->topic, sizeof o->topic, "%s", topic) != TALLY_OK) {
        b->n_offsets--; /* a cut topic would store another topic's offset */
        return TALLY_TOO_LARGE;
    }
    o->partition = partition;
    o->expected_next = expected_next;
    o->new_next = new_next;
    o->has_mark = false;
    return TALLY_OK;
}

void tally_batch_set_key_id(tally_batch *b, int64_t key_id)
{
    b->key_id = key_id;
}

tally_err tally_batch_set_offset_mark(tally_batch *b, const char *topic, int32_t partition,
                                      int64_t mark)
{
    for (size_t i = 0; topic && i < b->n_offsets; i++) {
        batch_offset *o = &b->offsets[i];
        if (o->partition == partition && strcmp(o->topic, topic) == 0) {
            o->mark = mark;
            o->has_mark = true;
            return TALLY_OK;
        }
    }
    return TALLY_INVAL;
}
