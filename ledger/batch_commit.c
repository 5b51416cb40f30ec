/* Committing an ingest batch (the order of work is described in batch.c). */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"
#include "tally/log.h"
#include "tally/sign.h"
#include "tally/utf8.h"

/* ---- Offsets ---------------------------------------------------------------- */

static tally_err apply_offsets(tally_batch *b)
{
    for (size_t i = 0; i < b->n_offsets; i++) {
        const batch_offset *o = &b->offsets[i];
        bool fresh = o->expected_next < 0;
        sqlite3_stmt *st = b->st[fresh ? ST_OFF_INS : ST_OFF_UPD];
        sqlite3_bind_text(st, 1, o->topic, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 2, o->partition);
        sqlite3_bind_int64(st, 3, o->new_next);
        sqlite3_bind_int64(st, 4, b->now_s);
        if (!fresh)
            sqlite3_bind_int64(st, 5, o->expected_next);
        if (o->has_mark)
            sqlite3_bind_int64(st, 6, o->mark);
        else
            sqlite3_bind_null(st, 6);
        tally_err e = batch_step(b, st);
        if (e != TALLY_OK)
            return e;
        if (sqlite3_changes(b->l->db) != 1) {
            snprintf(b->l->errmsg, sizeof b->l->errmsg,
                     "offset of %.120s/%d moved: expected %lld, another writer got there first",
                     o->topic, (int)o->partition, (long long)o->expected_next);
            return TALLY_STALE;
        }
    }
    return TALLY_OK;
}

/* ---- Quarantine ------------------------------------------------------------- */

/* Quarantines the item: ev is its event, or NULL for a reject. */
static tally_err quarantine(tally_batch *b, const batch_item *it, const tally_event *ev,
                            const char *reason, const char *detail)
{
    sqlite3_stmt *st = b->st[ST_QUARANTINE];
    const char *raw = item_raw(b, it);
    char origin[BATCH_ORIGIN_MAX];
    sqlite3_bind_text(st, 1, item_origin_full(b, it, origin), -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, reason, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, detail, -1, SQLITE_STATIC);
    if (ev) {
        sqlite3_bind_text(st, 4, ev->source, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 5, ev->id, -1, SQLITE_STATIC);
    } else {
        sqlite3_bind_null(st, 4);
        sqlite3_bind_null(st, 5);
    }
    /* Never NULL: the arena holds at least this item's origin, and a
     * borrowed item's raw is never NULL (tally_batch_add_event_ref). */
    sqlite3_bind_blob(st, 6, raw, (int)it->raw_len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 7, b->now_s);
    if (b->key_id > 0)
        sqlite3_bind_int64(st, 8, b->key_id);
    else
        sqlite3_bind_null(st, 8);
    sqlite3_bind_int64(st, 9, (sqlite3_int64)it->raw_size);
    char sha[65];
    if (it->sha_off == NO_SHA)
        tally_sha256_hex(raw, it->raw_len, sha);
    else
        memcpy(sha, b->arena + it->sha_off, sizeof sha);
    sqlite3_bind_text(st, 10, sha, 64, SQLITE_TRANSIENT);
    tally_err e = batch_step(b, st);
    if (e == TALLY_OK)
        b->new_quarantine += sqlite3_changes(b->l->db);
    return e;
}

/* Why the rate card cannot price ev, in words. */
static void card_detail(const tally_event *ev, const char *reason, char *out, size_t cap)
{
    char when[32];
    if (tally_time_format(ev->time_s, when, sizeof when) != TALLY_OK)
        snprintf(when, sizeof when, "%lld", (long long)ev->time_s);
    if (ev->meter == TALLY_METER_ACCELERATOR && strcmp(reason, "unknown_sku") == 0)
        snprintf(out, cap, "SKU %s is not on the rate card in force at %s", ev->dim, when);
    else if (ev->meter == TALLY_METER_ACCELERATOR)
        snprintf(out, cap, "SKU %s has no %s price on the rate card in force at %s", ev->dim,
                 tally_pricing_name(ev->pricing), when);
    else
        snprintf(out, cap, "no %s price for %s%s%s on the rate card in force at %s",
                 tally_meter_name(ev->meter), ev->dim, ev->dim2[0] ? "/" : "", ev->dim2, when);
}

/* ---- Dedupe ------------------------------------------------------------------ */

/* The key's stored fingerprint in the dedupe table: *res is DUPLICATE or
 * CONFLICT, or *found is false. */
static tally_err key_lookup(tally_batch *b, const tally_event *ev, int64_t src, bool *found,
                            tally_event_result *res)
{
    sqlite3_stmt *st = b->st[ST_DEDUPE_FP];
    sqlite3_bind_int64(st, 1, src);
    sqlite3_bind_blob(st, 2, ev->id, (int)strlen(ev->id), SQLITE_STATIC);
    int rc = sqlite3_step(st);
    *found = rc == SQLITE_ROW;
    if (*found)
        *res = (uint64_t)sqlite3_column_int64(st, 0) == tally_event_fingerprint(ev)
                   ? TALLY_RESULT_DUPLICATE
                   : TALLY_RESULT_CONFLICT;
    sqlite3_reset(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? TALLY_OK : ledger_sqlite_err(b->l, rc);
}

/* Inserts the key into the dedupe table; *res is ACCEPTED (new),
 * DUPLICATE or CONFLICT. */
static tally_err key_dedupe(tally_batch *b, const tally_event *ev, int64_t src,
                            tally_event_result *res)
{
    sqlite3_stmt *st = b->st[ST_DEDUPE_INS];
    sqlite3_bind_int64(st, 1, src);
    sqlite3_bind_blob(st, 2, ev->id, (int)strlen(ev->id), SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, (int64_t)tally_event_fingerprint(ev));
    tally_err e = batch_step(b, st);
    if (e != TALLY_OK)
        return e;
    if (sqlite3_changes(b->l->db) == 1) {
        *res = TALLY_RESULT_ACCEPTED;
        return TALLY_OK;
    }
    bool found;
    e = key_lookup(b, ev, src, &found, res);
    if (e == TALLY_OK && !found) {
        snprintf(b->l->errmsg, sizeof b->l->errmsg, "dedupe key vanished");
        e = TALLY_DB;
    }
    return e;
}

/* Checks and records (source, id): *res is ACCEPTED (new), DUPLICATE or
 * CONFLICT. Ids that count up are kept as runs (dedupe_runs.c), every
 * other id as a row of its own; which one depends on the id alone. */
static tally_err dedupe(tally_batch *b, const tally_event *ev, int64_t src, uint64_t window_hash,
                        tally_event_result *res)
{
    runs_id k;
    tally_err e;
    if (!runs_split(ev->id, strlen(ev->id), &k)) {
        e = key_dedupe(b, ev, src, res);
    } else {
        bool found = false;
        e = b->dedupe_legacy ? key_lookup(b, ev, src, &found, res) : TALLY_OK;
        if (e == TALLY_OK && !found)
            e = runs_dedupe(b, src, &k, ev, window_hash, res);
    }
    if (e == TALLY_OK && *res == TALLY_RESULT_ACCEPTED)
        b->new_keys++;
    return e;
}

/* ---- Accounts seen in usage ------------------------------------------------- */

typedef struct acct_probe {
    const tally_batch *b;
    const char *account;
} acct_probe;

static bool acct_eq(const void *ctx, uint32_t idx)
{
    const acct_probe *p = ctx;
    return strcmp(p->b->account_names[idx], p->account) == 0;
}

/* Makes room for one more known account: the set grows by doubling up to
 * known_max names (then it starts again, empty). */
static tally_err known_grow(tally_batch *b)
{
    if (b->n_accounts >= b->known_max) {
        idx_table_clear(&b->known_accounts);
        b->n_accounts = 0;
    }
    if (b->n_accounts < b->cap_accounts)
        return TALLY_OK;
    size_t nc = b->cap_accounts ? b->cap_accounts * 2 : 1024;
    char(*names)[TALLY_NAME_MAX] = realloc(b->account_names, nc * sizeof *names);
    if (!names)
        return TALLY_NOMEM;
    b->account_names = names;
    b->cap_accounts = nc;
    tally_err e = idx_table_reserve(&b->known_accounts, nc);
    for (size_t i = 0; e == TALLY_OK && i < b->n_accounts; i++) {
        uint64_t h[2];
        tally_hash128(names[i], strlen(names[i]), 1, h);
        idx_table_insert(&b->known_accounts, h[0], (uint32_t)i);
    }
    return e;
}

/* Creates accounts on first sight; remembers which exist so that the ledger
 * is asked once per account, not once per event. */
static tally_err ensure_account(tally_batch *b, const char *account, uint64_t hash,
                                tally_account *created)
{
    acct_probe p = {b, account};
    created->id[0] = '\0';
    if (idx_table_find(&b->known_accounts, hash, acct_eq, &p) >= 0)
        return TALLY_OK;
    tally_err e = ledger_account_ensure(b->l, account, created);
    if (e == TALLY_OK)
        e = known_grow(b);
    if (e != TALLY_OK)
        return e;
    snprintf(b->account_names[b->n_accounts], TALLY_NAME_MAX, "%s", account);
    idx_table_insert(&b->known_accounts, hash, (uint32_t)b->n_accounts++);
    return TALLY_OK;
}

/* ---- Balances of the accounts a commit touched ------------------------------ */

typedef struct touch_probe {
    const tally_batch *b;
    const char *account;
} touch_probe;

static bool touch_eq(const void *ctx, uint32_t idx)
{
    const touch_probe *p = ctx;
    return strcmp(p->b->touched[idx].account, p->account) == 0;
}

/* Rebuilds the index at twice the size when it is half full. */
static tally_err touch_grow(tally_batch *b)
{
    if (b->touch_index.slots && (b->n_touched + 1) * 2 <= b->touch_index.mask + 1)
        return TALLY_OK;
    tally_err e = idx_table_reserve(&b->touch_index, (b->n_touched + 1) * 2);
    for (size_t i = 0; e == TALLY_OK && i < b->n_touched; i++) {
        uint64_t h[2];
        tally_hash128(b->touched[i].account, strlen(b->touched[i].account), 1, h);
        idx_table_insert(&b->touch_index, h[0], (uint32_t)i);
    }
    return e;
}

/* Remembers that ev's account got new usage, and when. */
/* hash: of the account, as ensure_account has it (seed 1); created: the
 * account if this event's ensure_account created it (id "" otherwise). */
static tally_err touch(tally_batch *b, const tally_event *ev, uint64_t hash,
                       const tally_account *created)
{
    if (b->l->no_balances && !b->l->balances_in_main)
        return TALLY_OK;
    touch_probe p = {b, ev->account};
    int64_t lo = ev->time_s, hi = ev->time_s + (ev->seconds > 0 ? ev->seconds - 1 : 0);
    int64_t i = b->touch_index.slots ? idx_table_find(&b->touch_index, hash, touch_eq, &p) : -1;
    if (i >= 0) {
        batch_touch *t = &b->touched[i];
        t->lo_s = lo < t->lo_s ? lo : t->lo_s;
        t->hi_s = hi > t->hi_s ? hi : t->hi_s;
        return TALLY_OK;
    }
    if (b->n_touched == b->cap_touched) {
        size_t nc = b->cap_touched ? b->cap_touched * 2 : 64;
        batch_touch *v = realloc(b->touched, nc * sizeof *v);
        if (!v)
            return TALLY_NOMEM;
        b->touched = v;
        b->cap_touched = nc;
    }
    tally_err e = touch_grow(b);
    if (e != TALLY_OK)
        return e;
    batch_touch *t = &b->touched[b->n_touched];
    snprintf(t->account, sizeof t->account, "%s", ev->account);
    t->lo_s = lo;
    t->hi_s = hi;
    t->created = created->id[0] != '\0';
    if (t->created)
        t->acct = *created;
    idx_table_insert(&b->touch_index, hash, (uint32_t)b->n_touched++);
    return TALLY_OK;
}

static tally_err exec_cached(tally_ledger *l, const char *sql)
{
    sqlite3_stmt *st;
    tally_err e = ledger_cached(l, sql, &st);
    return e ? e : ledger_cached_done(l, st, sqlite3_step(st));
}

static bool refresh_recoverable(tally_err e)
{
    return e != TALLY_OK && !tally_err_is_fatal(e) && e != TALLY_NOMEM && e != TALLY_IO;
}

/* One account's refresh under a savepoint: an account that cannot be rated
 * (a price missing since) keeps its previous balance and is logged; the
 * batch, and every other account in it, goes on. */
static tally_err refresh_one(tally_ledger *l, bal_engine *eng, const batch_touch *t)
{
    tally_err e = exec_cached(l, "SAVEPOINT balance");
    if (e != TALLY_OK)
        return e;
    e = bal_refresh(eng, t->account, t->lo_s, t->hi_s, "usage");
    if (refresh_recoverable(e)) {
        tally_log(TALLY_LOG_WARNING, "ledger", "balance of %s not refreshed: %s (%s)", t->account,
                  tally_err_str(e), l->errmsg);
        e = exec_cached(l, "ROLLBACK TO balance");
    }
    tally_err r = exec_cached(l, "RELEASE balance");
    return e != TALLY_OK ? e : r;
}

static tally_err data_version(tally_ledger *l, int64_t *v)
{
    sqlite3_stmt *st;
    tally_err e = ledger_cached(l, "PRAGMA data_version", &st);
    if (e)
        return e;
    int rc = sqlite3_step(st);
    *v = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    return ledger_cached_done(l, st, rc == SQLITE_ROW ? SQLITE_DONE : rc);
}

/* The batch's engine and cache for this commit's refreshes: kept from the
 * last commit when nothing but this batch wrote since (ledger_int.h), else
 * made anew (prices, grants, settings or invoices may have changed). */
static tally_err refresh_session(tally_batch *b)
{
    int64_t dv = b->data_version_at_begin;
    tally_err e = TALLY_OK;
    bool kept = b->bal_eng && b->bal_valid && b->changes_at_begin == b->bal_changes &&
                dv == b->bal_data_version;
    b->bal_valid = false; /* until this commit is durable */
    b->bal_refreshed = true;
    b->bal_data_version = dv;
    if (kept)
        return TALLY_OK;
    bal_engine_destroy(b->bal_eng);
    b->bal_eng = NULL;
    bal_cache_clear(b->bal_cache);
    if (!b->bal_cache)
        e = bal_cache_create(&b->bal_cache);
    if (!e)
        e = bal_engine_create(b->l, &b->bal_eng);
    /* Not on a ledger directory's main.db: the usage it rates is also in
     * shards that other connections write. */
    if (!e && !b->l->shards)
        bal_engine_use_cache(b->bal_eng, b->bal_cache);
    return e;
}

/* All under one savepoint, then one savepoint each (ledger_int.h). */
tally_err bal_refresh_touched(tally_ledger *l, bal_engine *eng, bal_cache *cache,
                              const batch_touch *t, size_t n)
{
    if (n == 0)
        return TALLY_OK;
    bal_engine *own = NULL; /* per call: prices may change between calls */
    tally_err e = eng ? TALLY_OK : bal_engine_create(l, &own);
    if (!eng)
        eng = own;
    if (e == TALLY_OK)
        e = exec_cached(l, "SAVEPOINT balances");
    if (e != TALLY_OK) {
        bal_engine_destroy(own);
        return e;
    }
    size_t i = 0;
    for (; e == TALLY_OK && i < n; i++)
        e = t[i].created ? bal_refresh_created(eng, &t[i].acct, t[i].lo_s, t[i].hi_s)
                         : bal_refresh(eng, t[i].account, t[i].lo_s, t[i].hi_s, "usage");
    if (refresh_recoverable(e)) {
        /* the rollback undoes what the cache recorded: from the ledger alone */
        bal_cache_clear(cache);
        bal_engine_use_cache(eng, NULL);
        e = exec_cached(l, "ROLLBACK TO balances");
        for (i = 0; e == TALLY_OK && i < n; i++)
            e = refresh_one(l, eng, &t[i]);
        bal_engine_use_cache(eng, cache);
    }
    tally_err r = exec_cached(l, "RELEASE balances");
    bal_engine_destroy(own);
    return e != TALLY_OK ? e : r;
}

/* After the commit: the cache stays valid until some other write. */
static void refresh_committed(tally_batch *b, bool durable)
{
    /* A commit that refreshed nothing keeps the cache only if nothing else
     * wrote before it either. */
    b->bal_valid = durable && b->bal_eng &&
                   (b->bal_refreshed || (b->bal_valid && b->changes_at_begin == b->bal_changes));
    b->bal_refreshed = false;
    b->bal_changes = sqlite3_total_changes64(b->l->db);
    if (!durable)
        bal_cache_clear(b->bal_cache);
}

/* A shard's commit (balances_in_main): each touched account joins the
 * shard's balance_pending with this commit's usage_seq, for main.db to
 * refresh (shard_balance.c). A row main.db refreshed already (its seq at or
 * below the mark) takes the new span; one still pending is widened. */
static tally_err record_pending(tally_batch *b)
{
    int64_t seq = 0;
    tally_err e = batch_seq(b, &seq);
    for (size_t i = 0; e == TALLY_OK && i < b->n_touched; i++) {
        sqlite3_stmt *st;
        e = ledger_cached(b->l,
                          "INSERT INTO balance_pending(account, lo_s, hi_s, seq) "
                          "VALUES (?1, ?2, ?3, ?4) ON CONFLICT(account) DO UPDATE SET "
                          "lo_s = CASE WHEN seq <= ?5 THEN excluded.lo_s "
                          "ELSE min(lo_s, excluded.lo_s) END, "
                          "hi_s = CASE WHEN seq <= ?5 THEN excluded.hi_s "
                          "ELSE max(hi_s, excluded.hi_s) END, seq = excluded.seq",
                          &st);
        if (e != TALLY_OK)
            break;
        sqlite3_bind_text(st, 1, b->touched[i].account, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, b->touched[i].lo_s);
        sqlite3_bind_int64(st, 3, b->touched[i].hi_s);
        sqlite3_bind_int64(st, 4, seq);
        sqlite3_bind_int64(st, 5, b->l->balance_mark);
        e = ledger_cached_done(b->l, st, sqlite3_step(st));
    }
    if (e == TALLY_OK && seq > b->l->balance_pending_seq)
        b->l->balance_pending_seq = seq; /* if the commit fails, a flush reads for nothing */
    return e;
}

/* The balances of the accounts the commit touched: refreshed here, with the
 * batch's engine and cache, or on a meter's shard recorded for main.db. */
static tally_err refresh_touched(tally_batch *b)
{
    if (b->n_touched == 0)
        return TALLY_OK;
    if (b->l->balances_in_main)
        return record_pending(b);
    tally_err e = refresh_session(b);
    return e ? e : bal_refresh_touched(b->l, b->bal_eng, b->bal_cache, b->touched, b->n_touched);
}

static void touch_reset(tally_batch *b)
{
    b->n_touched = 0;
    if (b->touch_index.slots)
        idx_table_clear(&b->touch_index);
}

/* ---- Items ------------------------------------------------------------------- */

typedef struct commit_ctx {
    const tally_ratecard *const *cards;
    size_t n_cards;
    tally_event scratch; /* the item's event, unpacked (batch_item_event) */
    tally_batch_stats st;
} commit_ctx;

static tally_err aggregate(tally_batch *b, const batch_item *it, const tally_event *ev,
                           tally_event_result *res)
{
    char detail[160], when[32];
    uint64_t h[2]; /* one hash of the account for both indexes */
    tally_hash128(ev->account, strlen(ev->account), 1, h);
    tally_account created;
    tally_err e = ensure_account(b, ev->account, h[0], &created);
    if (e != TALLY_OK)
        return e;
    if (ev->meter == TALLY_METER_ACCELERATOR || ev->meter == TALLY_METER_STORAGE)
        e = agg_interval(b, ev, it->u.ev.h.iv);
    else
        e = agg_point(b, ev);
    if (e == TALLY_OK)
        ledger_chain_count(b, ev);
    if (e == TALLY_OK)
        e = touch(b, ev, h[0], &created);
    if (e != TALLY_OVERFLOW)
        return e;
    /* Ten maximal traffic events in one second do not fit: quarantined,
     * never wrapped, never dropped. */
    if (tally_time_format(ev->time_s, when, sizeof when) != TALLY_OK)
        snprintf(when, sizeof when, "?");
    snprintf(detail, sizeof detail, "%s quantity of %s at %s does not fit in 64 bits",
             tally_meter_name(ev->meter), ev->account, when);
    *res = TALLY_RESULT_QUARANTINED;
    return quarantine(b, it, ev, "overflow", detail);
}

static tally_err process_event(tally_batch *b, commit_ctx *c, const batch_item *it,
                               tally_event_result *res)
{
    const tally_event *ev = batch_item_event(b, it, &c->scratch);
    char reason[48], detail[256];
    if (tally_ratecard_check_event(c->cards, c->n_cards, ev, reason, sizeof reason) != TALLY_OK) {
        card_detail(ev, reason, detail, sizeof detail);
        *res = TALLY_RESULT_QUARANTINED;
        return quarantine(b, it, ev, reason, detail);
    }
    tally_err e = dedupe(b, ev, it->u.ev.h.src, it->u.ev.h.run, res);
    if (e != TALLY_OK || *res == TALLY_RESULT_DUPLICATE)
        return e;
    if (*res == TALLY_RESULT_CONFLICT) {
        snprintf(detail, sizeof detail,
                 "(source, id) = (%.*s, %.*s) is already recorded with different content",
                 tally_utf8_cut(ev->source, 60), ev->source, tally_utf8_cut(ev->id, 60), ev->id);
        return quarantine(b, it, ev, "conflict", detail);
    }
    return aggregate(b, it, ev, res);
}

static void count_result(tally_batch_stats *st, tally_event_result r)
{
    int64_t *slot[] = {
        [TALLY_RESULT_ACCEPTED] = &st->accepted,
        [TALLY_RESULT_DUPLICATE] = &st->duplicates,
        [TALLY_RESULT_CONFLICT] = &st->conflicts,
        [TALLY_RESULT_QUARANTINED] = &st->quarantined,
    };
    (*slot[r])++;
}

static tally_err bump_counters(tally_batch *b)
{
    const struct {
        const char *key;
        int64_t delta;
    } c[] = {
        {"count_dedupe", b->new_keys},
        {"count_quarantine", b->new_quarantine},
        {"count_intervals", b->new_intervals},
        {"count_points", b->new_points},
    };
    tally_err e = TALLY_OK;
    for (size_t i = 0; e == TALLY_OK && i < sizeof c / sizeof *c; i++) {
        if (!c[i].delta)
            continue;
        sqlite3_bind_text(b->st[ST_COUNT], 1, c[i].key, -1, SQLITE_STATIC);
        sqlite3_bind_int64(b->st[ST_COUNT], 2, c[i].delta);
        e = batch_step(b, b->st[ST_COUNT]);
    }
    return e;
}

/* How far ahead of the event it works on the commit prefetches: the index
 * slots of the event PREFETCH_SLOTS ahead, and the entries named by the
 * slots of the one PREFETCH_ENTRIES ahead (fetched by then). A stream of
 * 80,000 instances keeps these tables past the caches: without it the
 * lookups were 16 % of its ingest (bench/RESULTS.md, seventeenth pass). */
#define PREFETCH_SLOTS   16
#define PREFETCH_ENTRIES 8

static void prefetch_item(const tally_batch *b, size_t i, bool entry)
{
    if (i >= b->n_items || !b->items[i].is_event)
        return;
    const batch_event *p = &b->items[i].u.ev;
    agg_prefetch(b, p->h.iv, p->time_s, p->time_s + p->seconds, entry);
    runs_prefetch(b, p->h.run, entry);
}

/* Everything between BEGIN and COMMIT. */
static tally_err commit_body(tally_batch *b, commit_ctx *c, tally_event_result *results)
{
    tally_err e = apply_offsets(b);
    if (e == TALLY_OK)
        e = ledger_cards(b->l, &c->cards, &c->n_cards);
    if (e == TALLY_OK)
        e = agg_begin(b, b->n_points_queued);
    bool prefetch = b->iv_used + b->runs.n >= b->prefetch_from;
    for (size_t i = 0; e == TALLY_OK && i < b->n_items; i++) {
        const batch_item *it = &b->items[i];
        tally_event_result r = TALLY_RESULT_QUARANTINED;
        if (prefetch) {
            prefetch_item(b, i + PREFETCH_SLOTS, false);
            prefetch_item(b, i + PREFETCH_ENTRIES, true);
        }
        if (it->is_event)
            e = process_event(b, c, it, &r);
        else
            e = quarantine(b, it, NULL, item_reason(b, it), item_detail(b, it));
        count_result(&c->st, r);
        if (results)
            results[i] = r;
    }
    if (e == TALLY_OK)
        e = runs_flush(b);
    if (e == TALLY_OK)
        e = agg_flush(b);
    if (e == TALLY_OK)
        e = refresh_touched(b);
    if (e == TALLY_OK)
        e = bump_counters(b);
    if (e == TALLY_OK)
        e = ledger_chain_batch(b);
    return e;
}

static void reset_queue(tally_batch *b)
{
    b->n_items = 0;
    b->n_points_queued = 0;
    b->arena_len = 0;
    b->strs_len = 0;
    b->ref_bytes = 0;
    b->n_offsets = 0;
    b->seq = 0;
    b->new_keys = b->new_quarantine = b->new_intervals = b->new_points = 0;
}

/* The dedupe runs held from the last commit are used again only if that
 * commit is durable and nothing but this batch wrote since: no other write
 * on the connection (total changes as the commit left them) and no commit
 * by another connection (PRAGMA data_version), as for the balance cache.
 * The open intervals (row id and stored start of each) are forgotten only
 * on the second: on this connection only the batch writes usage_intervals,
 * but another connection may have edited or deleted the rows they point
 * at, and an update by id would then change nothing or keep the edit. */
static void runs_session(tally_batch *b)
{
    int64_t dv = b->data_version_at_begin;
    if (b->runs_valid && dv != b->runs_data_version)
        agg_forget(b);
    if (!b->runs_valid || b->changes_at_begin != b->runs_changes || dv != b->runs_data_version)
        runs_forget(b);
    else
        runs_keep_recent(b);
    b->runs_valid = false; /* until this commit is durable */
    b->runs_data_version = dv;
}

/* One transaction: everything or nothing. */
static tally_err commit_once(tally_batch *b, commit_ctx *c, tally_event_result *results)
{
    *c = (commit_ctx){0};
    b->seq = 0;
    b->new_keys = b->new_quarantine = b->new_intervals = b->new_points = 0;
    memset(b->chain_events, 0, sizeof b->chain_events);
    memset(b->chain_qty, 0, sizeof b->chain_qty);
    b->now_s = tally_now_s();
    touch_reset(b);
    tally_err e = ledger_begin(b->l);
    b->changes_at_begin = sqlite3_total_changes64(b->l->db);
    if (e == TALLY_OK) {
        /* once: BEGIN IMMEDIATE holds the write lock, so no other
         * connection commits before this transaction ends */
        e = data_version(b->l, &b->data_version_at_begin);
        if (e == TALLY_OK) {
            runs_session(b);
            e = commit_body(b, c, results);
        }
        if (e == TALLY_OK)
            e = ledger_commit(b->l);
        else
            ledger_rollback(b->l);
    }
    refresh_committed(b, e == TALLY_OK);
    b->runs_valid = e == TALLY_OK;
    b->runs_changes = sqlite3_total_changes64(b->l->db);
    if (e != TALLY_OK) {
        /* Rows written by this commit are gone: forget what points at them. */
        agg_forget(b);
        runs_forget(b);
        idx_table_clear(&b->known_accounts);
        b->n_accounts = 0;
        memset(&c->st, 0, sizeof c->st);
    }
    return e;
}

tally_err tally_batch_commit(tally_batch *b, tally_batch_stats *st, tally_event_result *results)
{
    commit_ctx c;
    tally_err e = commit_once(b, &c, results);
    if (e == TALLY_OVERFLOW) {
        /* A stored per-second sum would pass INT64_MAX. Rare (it takes
         * about ten maximal traffic events in one second): commit again,
         * checking each event against what is stored, so that the event
         * that does not fit is quarantined as "overflow" and the batch goes
         * on instead of failing on every retry. */
        b->careful = true;
        e = commit_once(b, &c, results);
        b->careful = false;
    }
    reset_queue(b);
    if (st)
        *st = c.st;
    return e;
}
