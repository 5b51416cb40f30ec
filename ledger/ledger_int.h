/* The ledger module's one private header: the connection's body and the
 * helpers its files share, then one section per part (shard locks, ingest
 * batches, ledger directories, the invoice engine). */
#ifndef TALLY_LEDGER_INT_H
#define TALLY_LEDGER_INT_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tally/balance.h"
#include "tally/document.h"
#include "tally/err.h"
#include "tally/invoice.h"
#include "tally/ledger.h"
#include "tally/rating.h"

#define LEDGER_CACHED_MAX 64
/* How long a write waits for another writer's lock (sqlite3_busy_timeout). */
#define LEDGER_BUSY_TIMEOUT_MS 10000

struct tally_ledger {
    sqlite3 *db;
    char *path;
    /* Rate cards, parsed once and reloaded when the ratecards table changes
     * (ledger_cards() checks a cheap counter). Sorted by effective_from. */
    tally_card *cards;
    const tally_ratecard **card_ptrs;
    int64_t *card_entered_s; /* when each card was entered (migration 8) */
    size_t n_cards;
    int64_t cards_version;
    sqlite3_stmt *st_cards_version; /* prepared on first use */
    char errmsg[256];
    /* Opened from a ledger directory: its shards (the ledger directories section below); else NULL.
     */
    struct ledger_shards *shards;
    /* The chain's cached statements (chain.c), owned by the SQL function. */
    struct chain_conn *chain;
    /* Statements of hot lookups, prepared once per connection
     * (ledger_cached), keyed by the address of their SQL text. */
    struct ledger_cached_stmt {
        const char *sql;
        sqlite3_stmt *st;
    } cached[LEDGER_CACHED_MAX];
    size_t n_cached;
    /* A shard of a ledger directory (shard_write.c): it holds no grants, so
     * its writes refresh no balances (include/tally/balance.h). */
    bool no_balances;
    /* A shard written by a meter, balances kept (not TALLY_NO_BALANCES=1):
     * each batch commit records the accounts it touched in balance_pending
     * for main.db to refresh (shard_balance.c, schemas/014_balance_pending.sql). */
    bool balances_in_main;
    /* With balances_in_main: the highest seq of balance_pending main.db is
     * known to have refreshed (its shard_balance_marks row; 0: none). Rows at
     * or below it are done, so a commit replaces their span instead of
     * widening it. Set by the flush, on the thread that commits. */
    int64_t balance_mark;
    /* The highest usage_seq this connection wrote into balance_pending: a
     * flush with it at or below the mark has nothing to read. */
    int64_t balance_pending_seq;
};

/* The rate cards, sorted by effective_from_s; valid until the next call that
 * loads a card. Errors: TALLY_DB, TALLY_PARSE (a stored card no longer parses). */
tally_err ledger_cards(tally_ledger *l, const tally_ratecard *const **cards, size_t *n);

/* Drops the cached cards (the next ledger_cards() reloads them). */
void ledger_cards_clear(tally_ledger *l);

/* All spot points (rate cards' and runtime), in the order they were stored;
 * *out and *entered_s (when each was entered) allocated.
 * Errors: TALLY_DB, TALLY_NOMEM. */
tally_err ledger_spot_points(tally_ledger *l, tally_spot_point **out, int64_t **entered_s,
                             size_t *n);

/* Prepares sql; on failure records the message in l->errmsg. */
tally_err ledger_prepare(tally_ledger *l, const char *sql, sqlite3_stmt **st);

/* A statement of static SQL text, prepared on first use and kept for the
 * connection's life (hot lookups: balances, accounts). It comes reset with
 * its bindings cleared; hand it back with ledger_cached_done, never
 * sqlite3_finalize. sql must be a string literal (its address is the key)
 * and the statement must not be in use by a caller up the stack.
 * Errors: as ledger_prepare. */
tally_err ledger_cached(tally_ledger *l, const char *sql, sqlite3_stmt **st);
/* ledger_finish for a cached statement: resets it instead of finalizing
 * (finalizes one that did not fit in the cache). */
tally_err ledger_cached_done(tally_ledger *l, sqlite3_stmt *st, int rc);
/* Runs a cached statement that returns no rows (SAVEPOINT, RELEASE,
 * ROLLBACK TO; sql a string literal, as for ledger_cached). quiet: a failure
 * leaves l->errmsg as it was (an undo after an error keeps that error's
 * message). Errors: as ledger_sqlite_err. */
tally_err ledger_cached_exec(tally_ledger *l, const char *sql, bool quiet);

/* Makes room for one more element in a growable array of n elements of
 * size bytes: *cap doubles (from first). Errors: TALLY_NOMEM (the array is
 * unchanged). */
tally_err ledger_grow(void **arr, size_t n, size_t *cap, size_t size, size_t first);

/* Finalizes st after its last step returned rc: TALLY_OK for SQLITE_DONE,
 * else the mapped error (recorded as l->errmsg). */
tally_err ledger_finish(tally_ledger *l, sqlite3_stmt *st, int rc);
/* Records sqlite's current error as l->errmsg and maps rc to a tally_err
 * (SQLITE_FULL / SQLITE_IOERR -> TALLY_IO, SQLITE_BUSY -> TALLY_BUSY, else
 * TALLY_DB). */
tally_err ledger_sqlite_err(tally_ledger *l, int rc);

/* BEGIN IMMEDIATE / COMMIT / ROLLBACK. A failed COMMIT rolls back. Errors as
 * ledger_sqlite_err(). */
tally_err ledger_begin(tally_ledger *l);
tally_err ledger_commit(tally_ledger *l);
void ledger_rollback(tally_ledger *l);

/* ---- Checkpoints (checkpointer.c) ----------------------------------------
 * A thread that checkpoints l's WAL on a connection of its own while l's
 * writer goes on; the writer checkpoints itself only when the thread falls
 * far behind. Start and stop on the thread that writes on l, outside a
 * transaction; stop before l is closed. Does nothing (*out NULL) for an
 * in-memory ledger. Errors: TALLY_NOMEM, TALLY_IO (the second connection). */
typedef struct ledger_ckpt ledger_ckpt;
tally_err ledger_ckpt_start(tally_ledger *l, ledger_ckpt **out);
/* Stops and frees c (NULL: nothing); *pages is what the thread's
 * checkpoints copied, *inline_runs the checkpoints the writer ran itself
 * (either may be NULL). */
void ledger_ckpt_stop(ledger_ckpt *c, int64_t *pages, int64_t *inline_runs);

/* Ensures the account exists (created with the newest card's currency and
 * UTC); if created is not NULL, it is the new account, or has an empty id
 * when the account existed. Errors: TALLY_UNKNOWN_CURRENCY (new account, no
 * rate card loaded), TALLY_DB. */
tally_err ledger_account_ensure(tally_ledger *l, const char *account, tally_account *created);

/* Appends one balanced entry of postings. Each posting is (ledger account,
 * signed amount: positive = debit, negative = credit). Atomic on its own (a
 * savepoint), so it may be called inside or outside a transaction.
 * Errors: TALLY_INVAL (does not balance, or an amount is INT64_MIN), TALLY_DB. */
typedef struct ledger_posting {
    char acct[96];
    int64_t amount_minor; /* > 0 debit, < 0 credit, 0 skipped */
} ledger_posting;
tally_err ledger_post(tally_ledger *l, const char *kind, const char *ref, const char *currency,
                      const ledger_posting *p, size_t n);

/* Appends a self-contained, printable HTML page for a canonical invoice or
 * credit note document with the ledger as its page source (ledger/page_source.c,
 * document/html.c). l may be NULL. Errors: TALLY_PARSE, TALLY_NOMEM,
 * TALLY_TOO_LARGE, TALLY_DB. */
tally_err ledger_invoice_html(tally_ledger *l, const char *doc, size_t len, tally_buf *out);
/* The same for a document tally_invoice_parse gave (root stays the caller's). */
tally_err ledger_invoice_html_parsed(tally_ledger *l, struct json_object *root, tally_buf *out);

/* ---- outbox.c: announcements written with the change they announce ------- */

/* Appends one outbox event (schemas/003_outbox.sql): the CloudEvent
 * {"specversion":"1.0","id":event_id,"source":"tally","type":type,
 * "subject":subject,"time":<the document's issued_at, else now>,
 * "datacontenttype":"application/json","data":<doc, verbatim>} is built
 * here, once. doc must be one JSON object (strict RFC 8259). Must be called
 * INSIDE the caller's open transaction, so that the event commits or rolls
 * back with the change it announces; event types and what each carries are
 * in include/tally/outbox.h.
 * Errors: TALLY_INVAL (no open transaction, empty names), TALLY_PARSE (doc),
 * TALLY_EXISTS (event_id recorded with the same payload),
 * TALLY_EXISTS_DIFFERENT (recorded with another), TALLY_NOMEM,
 * TALLY_TOO_LARGE, TALLY_DB. */
tally_err ledger_outbox_add(tally_ledger *l, const char *type, const char *subject,
                            const char *event_id, const char *doc, size_t len);

/* One-line helpers for the invoice engine, inside its transaction.
 *
 * ledger_outbox_invoice_finalized: "invoice.finalized", id
 * "invoice.finalized:<invoice_id>", data = the invoice's canonical JSON.
 * ledger_outbox_invoice_voided: two events, in this order:
 * "creditnote.issued" (id "creditnote.issued:<cn_id>", data = the credit
 * note's canonical JSON) and "invoice.voided" (id
 * "invoice.voided:<invoice_id>", data = {"invoice_id","credit_note_id",
 * "account","voided_at","credit_note":<the credit note's JSON>}).
 * The document must name the same id and account (a wiring check).
 * Errors: those of ledger_outbox_add; TALLY_INVAL when the document names
 * another id or account, or is not a finalized document. */
tally_err ledger_outbox_invoice_finalized(tally_ledger *l, const char *invoice_id,
                                          const char *account, const char *doc, size_t len);
tally_err ledger_outbox_invoice_voided(tally_ledger *l, const char *invoice_id, const char *cn_id,
                                       const char *account, const char *cn_doc, size_t len);

/* What is left of grant g (a table alias in SQL): the credit balance of
 * ledger account grant:<id> (granting credits it, invoices debit it, a void
 * credits it back). For string-literal concatenation into queries. */
#define LEDGER_GRANT_LEFT(g)                                                                       \
    "coalesce((SELECT x.credit_minor - x.debit_minor FROM balances x WHERE x.ledger_acct = "       \
    "'grant:' || " g ".id AND x.currency = " g ".currency), 0)"

/* ======== prepaid balances (balance*.c) ======== */

/* Working memory for refreshing balances (a batch keeps one from commit
 * to commit, with its cache: balance_cache.c). */
typedef struct bal_engine bal_engine;
typedef struct bal_cache bal_cache;
/* Errors: those of inv_gatherer_create. */
tally_err bal_engine_create(tally_ledger *l, bal_engine **out);
void bal_engine_destroy(bal_engine *b);

/* Recomputes the account's running charges, credits, balance and state
 * inside the caller's transaction and writes the events of the state change
 * to the outbox (include/tally/balance.h). [lo_s, hi_s] is the span of usage
 * the caller just wrote (lo_s > hi_s: none); cause names the write ("usage",
 * "grant", "limits", "price", "invoice", "void", "clock").
 * Errors: TALLY_NOT_FOUND, TALLY_NO_PRICE, TALLY_OVERFLOW, TALLY_NOMEM,
 * TALLY_DB. */
tally_err bal_refresh(bal_engine *b, const char *account, int64_t lo_s, int64_t hi_s,
                      const char *cause);

/* Makes b's refreshes read what c holds and keep it up to date (NULL: read
 * everything from the ledger). */
void bal_engine_use_cache(bal_engine *b, bal_cache *c);

/* bal_refresh of an account the caller's transaction just created (acct),
 * whose only usage is [lo_s, hi_s]: with a cache, nothing but its usage is
 * read (it has no balance, limits, grants, commitments or invoices yet). */
tally_err bal_refresh_created(bal_engine *b, const tally_account *acct, int64_t lo_s, int64_t hi_s);

/* bal_refresh with an engine of its own, for writes that touch one account;
 * a no-op on a shard. */
tally_err ledger_balance_refresh(tally_ledger *l, const char *account, const char *cause);

/* The same for a write of the account's usage or invoices over [lo_s, hi_s]
 * (a voided period comes back into the running charges). */
tally_err ledger_balance_refresh_span(tally_ledger *l, const char *account, int64_t lo_s,
                                      int64_t hi_s, const char *cause);
/* After the account's time zone or currency changed: its periods are found
 * again and its grants counted again. */
tally_err ledger_balance_rezone(tally_ledger *l, const char *account);

/* Refreshes every account that has a balance, in the caller's transaction
 * (a spot price or rate card changes them all). A no-op on a shard. */
tally_err ledger_balance_refresh_all(tally_ledger *l, const char *cause);

/* The accounts (first column) of sql with ?1 bound to t, copied out into
 * *out (allocated, *n of them) so that the caller may write while it goes
 * through them. Errors: TALLY_DB, TALLY_NOMEM. */
tally_err ledger_accounts_of(tally_ledger *l, const char *sql, int64_t t,
                             char (**out)[TALLY_NAME_MAX], size_t *n);

/* One stored account_balances row. */
typedef struct bal_row {
    int64_t v[5]; /* running, covered, credits, balance, burn */
    char state[16];
    char currency[4];
    bool exhausted, released, has_next;
    int64_t exhausted_since_s, next_check_s, updated_at_s, event_seq;
} bal_row;
/* Reads the account's row (*found false when it has none). Errors: TALLY_DB. */
tally_err bal_row_get(tally_ledger *l, const char *account, bal_row *r, bool *found);

/* The state stored under a name ("ok", "low", "exhausted"). */
tally_balance_state bal_state_from_name(const char *name);

/* The account's limits (defaults when none are stored) and, if controlled
 * is not NULL, whether spend control applies to it: it has a grant (not an
 * adjustment) or limits of its own. One lookup. Errors: TALLY_DB. */
tally_err bal_limits_get(tally_ledger *l, const char *account, tally_limits *out, bool *controlled);

/* One open period's figures, as running_periods stores them. */
typedef struct bal_period {
    char period[8];
    int64_t subtotal, credits, due;
} bal_period;

/* ---- What a batch remembers between its commits (balance_cache.c) ----
 *
 * A meter refreshes the same accounts commit after commit. Between two
 * commits of one batch nothing that a refresh reads changes unless some
 * write happened in between: the batch's own usage writes are applied to
 * the cache as they are made (bal_cache_iv_*, bal_cache_point_put: an
 * account's kept late-usage adjustments end at a write into the periods
 * they read), and the refresh updates what it stores; any other write on
 * the connection (sqlite3_total_changes64 moves) or a commit by another
 * connection (PRAGMA data_version moves) empties it (batch_commit.c).
 * So a refresh served from the cache reads what the statements would have
 * returned; tally verify recomputes from the ledger and never uses it.
 * Bounded: BAL_CACHE_ACCOUNTS accounts (past it, it starts again, empty),
 * BAL_CACHE_WINDOWS windows of interval rows per account and
 * BAL_CACHE_ROWS rows in all (past it, the account whose rows would
 * grow holds none) and BAL_CACHE_ADJ_LINES adjustment lines (past it, no more are
 * kept). */
#define BAL_CACHE_ACCOUNTS  32768
#define BAL_CACHE_ROWS      262144
#define BAL_CACHE_PERIODS   4
#define BAL_CACHE_WINDOWS   BAL_CACHE_PERIODS /* interval windows per account: one a period */
#define BAL_CACHE_ADJ_LINES 65536             /* adjustment lines held by all entries */

typedef struct bal_cache_iv {
    int64_t id;
    tally_interval iv;
} bal_cache_iv;

/* A window [start, end) whose gather the entry's rows serve (while ok). */
typedef struct bal_cache_win {
    bool ok;
    int64_t start, end;
} bal_cache_win;

typedef struct bal_cache_entry {
    tally_account acct;
    bool row_found;
    bal_row row;     /* as stored (when row_found) */
    bool periods_ok; /* periods holds every stored running period */
    bal_period periods[BAL_CACHE_PERIODS];
    size_t n_periods;
    tally_limits lim;
    bool controlled;
    bool invoiced; /* the account has an invoice or credit note */
    /* The interval rows of up to BAL_CACHE_WINDOWS gathers: an account
     * has two open periods (or more) until the last is finalized, and each
     * refresh rates them all. A row is held once, however many of the
     * windows read it (the day either side of a period is read by both
     * periods: on the first day of a month every row would otherwise be
     * held twice). */
    bal_cache_win win[BAL_CACHE_WINDOWS];
    unsigned win_next; /* the slot the next load replaces, when all are held */
    bal_cache_iv *ivs; /* the rows of the ok windows, in id order */
    size_t n_ivs, cap_ivs;
    /* The late-usage adjustments of period adj_period (inv_adjustments),
     * while adj_ok: the batch's usage writes before adj_reads_to, and any
     * row it deletes, end it. */
    bool adj_ok;
    char adj_period[8];
    int64_t adj_reads_to;
    tally_line *adj;
    size_t n_adj, cap_adj;
} bal_cache_entry;

tally_err bal_cache_create(bal_cache **out);
void bal_cache_destroy(bal_cache *c);
void bal_cache_clear(bal_cache *c);
/* The account's entry, or NULL. */
bal_cache_entry *bal_cache_find(bal_cache *c, const char *account);
/* A new, empty entry for the account (not in the cache). Errors: TALLY_NOMEM. */
tally_err bal_cache_add(bal_cache *c, const tally_account *acct, bal_cache_entry **out);
/* Whether an interval row belongs to what the gather of [start, end) reads
 * (INV_Q_INTERVALS: a day either side). */
bool bal_cache_iv_in(int64_t row_start, int64_t row_end, int64_t start, int64_t end);
/* e's window [start, end), or NULL if it does not hold it. */
const bal_cache_win *bal_cache_window(const bal_cache_entry *e, int64_t start, int64_t end);
/* Holds rows (ids[i], rows[i]) as the window [start, end) of e, in a free
 * slot or, when all are held, in place of each in turn. Past
 * BAL_CACHE_ROWS rows in all, or without memory, e holds no window. */
void bal_cache_iv_load(bal_cache *c, bal_cache_entry *e, int64_t start, int64_t end,
                       const tally_interval *rows, const int64_t *ids, size_t n);
/* A row of the account written (inserted or updated) or deleted by the batch. */
void bal_cache_iv_put(bal_cache *c, const char *account, int64_t id, const tally_interval *iv);
void bal_cache_iv_drop(bal_cache *c, const char *account, int64_t id);
/* A point of the account at t_s written by the batch. */
void bal_cache_point_put(bal_cache *c, const char *account, int64_t t_s);
/* Appends e's adjustment lines for period to *v (realloc'd; *n, *cap
 * updated) and returns true if it holds them; false (nothing appended) if
 * not. */
bool bal_cache_adj_get(const bal_cache_entry *e, const char *period, tally_line **v, size_t *n,
                       size_t *cap);
/* Keeps n lines as e's adjustments for period, read below reads_to. Past
 * BAL_CACHE_ADJ_LINES lines in all, or without memory, it keeps nothing. */
void bal_cache_adj_keep(bal_cache *c, bal_cache_entry *e, const char *period, int64_t reads_to,
                        const tally_line *v, size_t n);
/* The rows of e's window w in the order the gather returns them (start_s,
 * then id) into out (n_out of them). Errors: TALLY_NOMEM. */
tally_err bal_cache_iv_rows(bal_cache *c, const bal_cache_entry *e, const bal_cache_win *w,
                            tally_interval **out, size_t *cap, size_t *n_out);

/* Refreshes the n accounts of t (each with its span of new usage, cause
 * "usage") inside the caller's transaction with eng and its cache (NULL,
 * NULL: an engine of its own), all under one savepoint; if one
 * cannot be rated (a price missing since), they are done again one
 * savepoint each, so that only that account keeps its previous balance (it
 * is logged). Errors: those of a refresh that are fatal, TALLY_NOMEM,
 * TALLY_IO. */
struct batch_touch;
tally_err bal_refresh_touched(tally_ledger *l, bal_engine *eng, bal_cache *cache,
                              const struct batch_touch *t, size_t n);

/* For tally verify (verify_balance.c): recomputes the account's balance as
 * of its stored updated_at with the refresh's code, from all its usage,
 * writing nothing, and compares it with its account_balances and
 * running_periods rows; why is "" when they agree, else names the first
 * difference. An account without a stored balance agrees. Errors: those of
 * a refresh. */
tally_err bal_check(bal_engine *b, const char *account, char *why, size_t cap);

/* ======== the lock file of a shard (shard_lock.c) ======== */

/* Internal to the ledger module: the lock file of a shard (shard_lock.c). */

/* Opens (creating) the lock file at path and takes an exclusive lock on it,
 * retrying every 50 ms for up to wait_ms. On success *fd_out holds it.
 * Errors: TALLY_BUSY (still held by another open file; why names the holder
 * line), TALLY_IO. */
tally_err shard_lock_take(const char *path, int64_t wait_ms, int *fd_out, char *why, size_t cap);

/* Replaces the lock file's text with line (who holds it); best effort. */
void shard_lock_note(int fd, const char *line);

/* Drops the lock (closes fd); accepts -1. */
void shard_lock_drop(int fd);

/* ======== ingest batches (batch*.c) ======== */

/* Internal to the ingest batch (batch.c, batch_agg.c, batch_table.c).
 *
 * A batch queues copies of events and rejects in memory; commit writes them
 * in one transaction. Aggregation state lives here too:
 *   - open intervals: accelerator and storage usage being coalesced into
 *     usage_intervals rows; kept across commits (bounded, LRU-evicted) so a
 *     long-running instance keeps extending the same row;
 *   - points: traffic and token quantities summed per second for one commit.
 * Nothing here allocates per event: every array grows geometrically and is
 * reused from one commit to the next. */

#define BATCH_ARENA_CAP    ((size_t)512 << 20) /* raw messages and origins of one batch */
#define BATCH_ITEMS_MAX    ((size_t)4 << 20)
#define IV_FIRST           4096   /* open intervals held at first; the table doubles */
#define IV_MAX             262144 /* open intervals remembered across commits */
#define IV_MAX_SPAN_S      86400  /* a usage_intervals row never covers more */
#define ACCOUNTS_KNOWN_MAX 65536  /* accounts known to exist, before the set is reset */
/* Open intervals and held dedupe windows from which the commit prefetches
 * (batch_commit.c): below, the tables stay in the caches and prefetching
 * only costs. 16,384 intervals with their index slots are about 4.5 MB. */
#define BATCH_PREFETCH_FROM 16384

/* ---- An index of entries by 64-bit hash (open addressing, linear probing).
 * A slot holds entry index + 1 (0 = empty, so a zeroed table is empty) and
 * the hash's low 32 bits beside it: a probe reads one cache line, not one in
 * each of two arrays, and compares entries only when those bits match. */
typedef struct idx_slot {
    uint32_t idx1; /* entry index + 1; 0 = empty */
    uint32_t h;    /* the hash's low 32 bits (its home slot is h & mask) */
} idx_slot;

typedef struct idx_table {
    idx_slot *slots;
    size_t mask; /* capacity - 1; capacity is a power of two, at most 2^31 */
    size_t used;
} idx_table;

typedef bool (*idx_eq_fn)(const void *ctx, uint32_t idx);

/* Sizes t for at least n entries at load <= 1/2, emptying it. Errors: NOMEM. */
tally_err idx_table_reserve(idx_table *t, size_t n);
void idx_table_clear(idx_table *t);
void idx_table_free(idx_table *t);
/* The entry with this hash for which eq(ctx, idx) holds, or -1. */
int64_t idx_table_find(const idx_table *t, uint64_t hash, idx_eq_fn eq, const void *ctx);
/* Prefetch hints, never needed for a right answer: the home slot of hash;
 * the entry index that slot holds when its bits are hash's (else -1). */
void idx_table_prefetch(const idx_table *t, uint64_t hash);
int64_t idx_table_peek(const idx_table *t, uint64_t hash);
/* Adds idx under hash; t must have room (reserved). */
void idx_table_insert(idx_table *t, uint64_t hash, uint32_t idx);
/* Removes idx (which must be present under hash). */
void idx_table_remove(idx_table *t, uint64_t hash, uint32_t idx);

/* ---- Items ----------------------------------------------------------------- */

/* A quarantine row keeps at most this much of its raw message, with the
 * whole message's size and SHA-256 (schemas/006_kafka_hostile.sql). */
#define QUARANTINE_RAW_MAX ((size_t)64 << 10)
#define NO_SHA             ((size_t)-1)

/* An event as a batch keeps it (tally_batch_add_event): its fixed fields,
 * and its strings back to back in the batch's string arena (strs), each
 * NUL-terminated, in the order of BATCH_EVENT_STRS. A tally_event holds
 * 528 bytes of fixed-size strings whatever their length; the items of
 * bench/ingest.sh's 200,000-line batches took 118 MB that way, and faulting
 * in those pages was a tenth of the ingest's CPU. The commit unpacks each
 * event into a tally_event of its own (batch_item_event). */
#define BATCH_EVENT_STRS 6 /* id, source, account, resource, dim, dim2 */

/* An event's keys in the commit's in-memory tables, hashed when it is
 * queued: the commit hashes nothing again, and prefetches the slots they
 * name a few events ahead (batch_prefetch), which a stream of many sources
 * keeps past the caches. 0: the event has no such key, or the hash is to
 * be taken at commit. */
typedef struct batch_hashes {
    uint64_t iv;  /* its open interval's key (agg_key_hash) */
    uint64_t run; /* its dedupe window (runs_window_hash) */
    int64_t src;  /* its source (runs_source_hash), always set */
} batch_hashes;

/* h, time_s and seconds are set for a borrowed event too (the prefetch
 * reads them from here); the rest only for a packed one. */
typedef struct batch_event {
    int64_t time_s, seconds, weight;
    uint64_t key[2];
    uint64_t untimed;
    batch_hashes h;
    size_t strs_off;
    int32_t meter, pricing;
    bool migration;
    uint8_t len[BATCH_EVENT_STRS]; /* each string's length, without its NUL */
} batch_event;

typedef struct batch_item {
    bool is_event;
    bool borrowed;     /* tally_batch_add_event_ref: ev, raw and origin are the caller's */
    bool raw_borrowed; /* tally_batch_add_event_raw_ref: raw alone is the caller's */
    bool origin_hash;  /* the origin is a prefix; its raw's hash follows (item_origin_full) */
    size_t origin_off, raw_off, raw_len; /* in the arena; origin is NUL-terminated */
    size_t raw_size;                     /* the whole message's length (raw_len may be a prefix) */
    size_t sha_off;            /* its SHA-256 as hex in the arena, or NO_SHA: hash raw at commit */
    const tally_event *ev_ref; /* borrowed */
    const char *raw_ref, *origin_ref;
    union {
        batch_event ev;
        struct {
            size_t reason_off, detail_off; /* in strs, NUL-terminated */
        } rej;
    } u;
} batch_item;

typedef struct batch_offset {
    char topic[256];
    int32_t partition;
    int64_t expected_next, new_next;
    int64_t mark; /* of the message at new_next - 1, when has_mark */
    bool has_mark;
} batch_offset;

/* An open interval: one usage_intervals row (stored or not yet). */
typedef struct iv_entry {
    uint64_t key_hash;   /* of (account, meter, pricing, migration, resource, dim, weight) */
    int64_t row_id;      /* 0: not stored yet */
    int64_t row_start_s; /* start_s as the row holds it (when row_id) */
    int64_t start_s, end_s, weight;
    uint32_t lru_prev, lru_next; /* index + 1; 0 = none */
    bool dirty, live;
    uint8_t meter, pricing, migration;
    char account[TALLY_NAME_MAX], resource[TALLY_NAME_MAX], dim[TALLY_NAME_MAX];
} iv_entry;

/* A traffic or token quantity summed over one second within a commit. */
typedef struct pt_entry {
    struct pt_key { /* (account, meter, dim, dim2, t_s), copied from its first event */
        char account[TALLY_NAME_MAX], dim[TALLY_NAME_MAX], dim2[16];
        tally_meter meter;
        int64_t time_s;
    } key;
    int64_t qty;
    int64_t stored; /* the row's qty before this commit (read only when careful) */
} pt_entry;

enum batch_stmt {
    ST_DEDUPE_INS,
    ST_DEDUPE_FP,
    ST_RUN_FIND,
    ST_RUN_INS,
    ST_RUN_UPD,
    ST_RUN_V1,
    ST_QUARANTINE,
    ST_IV_INS,
    ST_IV_UPD,
    ST_IV_END,
    ST_IV_DEL,
    ST_PT_INS,
    ST_PT_ADD,
    ST_PT_GET,
    ST_HR_ADD,
    ST_OFF_INS,
    ST_OFF_UPD,
    ST_SEQ,
    ST_COUNT,
    ST_COUNT_OF
};

/* ---- Dedupe runs (dedupe_runs.c) ---------------------------------------- */

/* An id of the run form: prefix (not NUL-terminated), then width digits of
 * value n. */
typedef struct runs_id {
    const char *prefix;
    size_t prefix_len;
    int width;
    int64_t n;
} runs_id;

/* The dedupe windows one commit has used (dedupe_runs.c). */
typedef struct runs_cache {
    struct run_slot *slots;
    size_t n, cap;
    size_t bytes;       /* records and legacy runs the slots hold, in all */
    uint64_t commit_no; /* counts the commits that used them */
    uint8_t age_seed;   /* the age a new window starts with (dedupe_runs.c) */
    uint64_t reopens;   /* windows decoded again to add a late id (slot_reopen) */
    idx_table index;
    uint8_t code[1 + 480 * 17]; /* one window's content as written (ENC_MAX) */
} runs_cache;

/* Whether the id (len bytes) ends in 4 to 18 decimal digits; fills *out. */
bool runs_split(const char *id, size_t len, runs_id *out);
/* The dedupe table's src column: a 64-bit hash of the source. */
int64_t runs_source_hash(const char *source);
/* The hash under which the commit holds the window of (source, id), src
 * being runs_source_hash(source); 0 for an id that does not split
 * (runs_split). */
uint64_t runs_window_hash(int64_t src, const char *id);
/* Prefetches the held windows' index slot for hash h, or with entry the
 * window that slot names (batch_prefetch). */
void runs_prefetch(const tally_batch *b, uint64_t h, bool entry);
/* Checks and records (src, k) for ev: *res is ACCEPTED (recorded in memory
 * until runs_flush), DUPLICATE (the same content and time) or CONFLICT
 * (another; for an id a run of migration 15 holds, another fingerprint).
 * Errors: TALLY_DB, TALLY_TAMPERED (a stored window or run is malformed),
 * TALLY_NOMEM. */
tally_err runs_dedupe(tally_batch *b, int64_t src, const runs_id *k, const tally_event *ev,
                      uint64_t window_hash, tally_event_result *res);
/* Writes the windows this commit changed; they stay held, as stored. */
tally_err runs_flush(tally_batch *b);
/* Forgets them without writing (the commit rolled back, or another writer
 * may have changed them). */
void runs_forget(tally_batch *b);
/* Before a commit that uses the held windows again: keeps only those the
 * last commit used (a source's finished windows are let go, so the windows
 * held follow the sources that report, not the stream's length). */
void runs_keep_recent(tally_batch *b);
void runs_free(tally_batch *b);
/* tally verify: every dedupe window's bitmap counts its n ids and its
 * content holds n records. TALLY_TAMPERED names the first that does not in
 * *bad_row. Errors: TALLY_DB. */
tally_err runs_check_windows(tally_ledger *l, int64_t *bad_row);

struct tally_batch {
    tally_ledger *l;
    sqlite3_stmt *st[ST_COUNT_OF];

    batch_item *items;
    size_t n_items, items_alloc, n_points_queued;
    char *arena;
    size_t arena_len, arena_alloc;
    size_t ref_bytes; /* raw bytes of the borrowed items, counted as if copied */
    /* The copied events' strings and the rejects' reasons (batch_event). An
     * event's strings are at most as long as its raw message, so this stays
     * within the arena's bound; it is not counted in tally_batch_bytes,
     * which paces the commits by the messages' bytes. */
    char *strs;
    size_t strs_len, strs_alloc;
    bool origin_hash; /* tally_batch_set_origin_hash */
    batch_offset *offsets;
    size_t n_offsets, offsets_alloc;

    /* Open intervals, found by (key, end_s) to append and (key, start_s) to
     * prepend; a doubly linked LRU list for eviction. */
    iv_entry *iv;
    size_t iv_used, iv_cap;
    idx_table iv_by_end, iv_by_start;
    uint32_t lru_head, lru_tail; /* index + 1; head = most recently touched */
    uint32_t free_head;          /* dropped entries, chained by lru_next */
    uint32_t *dirty;
    struct iv_flush *flush_order; /* agg_flush's working copy of dirty, dirty_alloc long */
    size_t n_dirty, dirty_alloc;

    /* Per commit. */
    pt_entry *pts;
    size_t n_pts, pts_alloc;
    /* pts sorted by (account, meter, dim, dim2, hour), pts_alloc long: pointers, so
     * the sort needs no shared state (shards commit on several threads). */
    const pt_entry **pt_order;
    idx_table pt_index;
    idx_table known_accounts; /* hashes of accounts known to exist */
    char (*account_names)[TALLY_NAME_MAX];
    size_t n_accounts, cap_accounts;
    size_t known_max;     /* ACCOUNTS_KNOWN_MAX (tests set fewer) */
    size_t prefetch_from; /* BATCH_PREFETCH_FROM (tests set 0) */
    int64_t seq;          /* usage_seq of this commit; 0 until usage is written */
    int64_t now_s;
    int64_t key_id; /* the API key that sent what is queued; 0: none */
    int64_t new_keys, new_quarantine, new_intervals, new_points;
    runs_cache runs;
    /* The ledger held dedupe keys before migration 15: ids of the run form
     * may be in the dedupe table too (meta dedupe_legacy). */
    bool dedupe_legacy;
    /* The ledger has runs of migration 15 (meta dedupe_runs_legacy): a
     * window is read with the runs it covers. */
    bool runs_legacy;
    /* Set for the second attempt of a commit whose first one found a stored
     * per-second sum that would overflow: agg_point then reads each second's
     * stored qty, so the one event that does not fit is quarantined. */
    bool careful;
    /* Accounts this commit added usage to, with the span of that usage,
     * whose balances it refreshes (balance.c). */
    struct batch_touch *touched;
    size_t n_touched, cap_touched;
    idx_table touch_index;
    /* Kept from commit to commit for those refreshes (balance_cache.c):
     * valid while no other write happened on the connection (bal_changes:
     * sqlite3_total_changes64 after the last commit) and none by another
     * connection (bal_data_version: PRAGMA data_version). */
    bal_engine *bal_eng;
    bal_cache *bal_cache;
    bool bal_valid, bal_refreshed;
    int64_t bal_changes, bal_data_version;
    /* The same for the dedupe runs held from the last commit (runs). */
    bool runs_valid;
    int64_t runs_changes, runs_data_version;
    int64_t changes_at_begin, data_version_at_begin;
    /* This commit's new usage per meter, for the ledger chain (chain.c). */
    int64_t chain_events[TALLY_METER_COUNT];
    __int128 chain_qty[TALLY_METER_COUNT];
};

/* An item's event: the caller's (tally_batch_add_event_ref), or the copy
 * unpacked into *scratch, which it stays in until the next call with the
 * same scratch. */
const tally_event *batch_item_event(const tally_batch *b, const batch_item *it,
                                    tally_event *scratch);
/* A reject's reason and detail. */
static inline const char *item_reason(const tally_batch *b, const batch_item *it)
{
    return b->strs + it->u.rej.reason_off;
}
static inline const char *item_detail(const tally_batch *b, const batch_item *it)
{
    return b->strs + it->u.rej.detail_off;
}
/* An item's raw bytes and origin: in the arena, or the caller's
 * (tally_batch_add_event_ref; the raw bytes alone with
 * tally_batch_add_event_raw_ref). */
static inline const char *item_raw(const tally_batch *b, const batch_item *it)
{
    return it->borrowed || it->raw_borrowed ? it->raw_ref : b->arena + it->raw_off;
}
/* The most bytes an origin prefix takes under tally_batch_set_origin_hash,
 * and the whole origin made of one. */
#define BATCH_ORIGIN_PREFIX_MAX 512
#define BATCH_ORIGIN_MAX        (BATCH_ORIGIN_PREFIX_MAX + 17)
/* The item's whole origin: item_origin, or its prefix and hash in out. */
const char *item_origin_full(const tally_batch *b, const batch_item *it,
                             char out[BATCH_ORIGIN_MAX]);
static inline const char *item_origin(const tally_batch *b, const batch_item *it)
{
    return it->borrowed ? it->origin_ref : b->arena + it->origin_off;
}

typedef struct batch_touch {
    char account[TALLY_NAME_MAX];
    int64_t lo_s, hi_s; /* the first and last second of its new usage */
    /* The account was created by this commit (its only usage is this
     * commit's; it has no balance, limits, grants or invoices yet). */
    bool created;
    tally_account acct; /* when created */
} batch_touch;

/* ---- Aggregation (batch_agg.c); called inside the commit's transaction ---- */

tally_err agg_init(tally_batch *b);
void agg_free(tally_batch *b);
/* Forgets every open interval (after a failed commit: rows may not exist). */
void agg_forget(tally_batch *b);
/* Prepares the per-commit point index for n point events. */
tally_err agg_begin(tally_batch *b, size_t n_point_events);
/* The hash of an accelerator or storage event's interval key; 0 for other
 * meters. */
uint64_t agg_key_hash(const tally_event *ev);
/* Adds an accepted accelerator or storage event to the open intervals;
 * key_hash is agg_key_hash(ev), or 0 to take it here. */
tally_err agg_interval(tally_batch *b, const tally_event *ev, uint64_t key_hash);
/* Prefetches the open-interval index slots of an interval event [start_s,
 * end_s) with key hash kh, or with entry the intervals those slots name. */
void agg_prefetch(const tally_batch *b, uint64_t kh, int64_t start_s, int64_t end_s, bool entry);
/* Adds an accepted traffic or token event to this commit's points.
 * Errors: TALLY_OVERFLOW (the second's sum in this commit, or with
 * b->careful also the stored sum, would not fit; nothing added), TALLY_DB. */
tally_err agg_point(tally_batch *b, const tally_event *ev);
/* Writes dirty intervals and this commit's points. Errors: TALLY_OVERFLOW (a
 * stored per-second sum plus this commit's would not fit in 64 bits; the
 * caller rolls back and commits again with b->careful), TALLY_DB. */
tally_err agg_flush(tally_batch *b);
/* The usage_seq for rows written by this commit (bumped on first use). */
tally_err batch_seq(tally_batch *b, int64_t *seq);
/* Steps a write statement to completion and resets it. */
tally_err batch_step(tally_batch *b, sqlite3_stmt *st);

/* ======== ledger directories (shard_*.c) ======== */

/* Internal to the ledger module: reading the usage of a ledger directory
 * (include/tally/shard.h) from the files that need it (ledger.c, the invoice
 * engine, html_chart.c).
 *
 * A ledger opened from a directory has l->shards set. Its usage sources are
 * main.db itself (usage ingested from files or HTTP into the directory) and
 * every shard-<topic>-<partition>.db found there; each source has its own
 * meta.usage_seq. An invoice of a ledger directory records, in
 * invoices.usage_seq, the id of a usage snapshot: one row per source in
 * main.db's shard_snapshots table (schema in shard_read.c) with that
 * source's usage_seq when the invoice was finalized. Snapshot ids grow with
 * every snapshot and are taken inside the invoice's write transaction on
 * main.db, so a later id is never behind an earlier one for any source, and
 * the largest id among an account's invoices is what it was billed up to. */

#define SHARD_DB_SUFFIX   ".db"
#define SHARD_LOCK_SUFFIX ".lock"
#define SHARD_NAME_MAX    280 /* "shard-" topic(<=249) "-" partition */
#define SHARD_MAIN_NAME   "main"
#define SHARD_MAIN_FILE   "main.db"
#define SHARD_FLUSH_ROWS  10000 /* balance_pending rows refreshed per flush, about */

/* The statements ledger_usage_each caches per source: one slot per query
 * text (a slot must always be given the same text). */
typedef enum ledger_usage_slot {
    LEDGER_USAGE_INTERVALS,
    LEDGER_USAGE_POINTS,
    LEDGER_USAGE_LATE,
    LEDGER_USAGE_CHART_INTERVALS,
    LEDGER_USAGE_CHART_POINTS,
    LEDGER_USAGE_SPAN, /* an account's first and last second of usage (balance.c) */
    LEDGER_USAGE_SLOTS
} ledger_usage_slot;

/* One usage source of a ledger directory: main.db or a shard. */
typedef struct shard_src {
    char name[SHARD_NAME_MAX]; /* "main" or "shard-<topic>-<partition>" */
    bool is_main;
    bool ready;  /* its tables exist (a meter may have just created the file) */
    sqlite3 *db; /* main: the ledger's own (borrowed); shard: read-only, opened on first use */
    sqlite3_stmt *st[LEDGER_USAGE_SLOTS];
    sqlite3_stmt *st_seq; /* its meta.usage_seq */
    int64_t map_rowid;    /* its accounts rows indexed up to this rowid */
} shard_src;

/* An account held by a source (the index is sorted by account, then src). */
typedef struct shard_ref {
    char account[TALLY_NAME_MAX];
    uint32_t src;
} shard_ref;

struct ledger_shards {
    char *dir;
    shard_src *src; /* src[0] is main.db */
    size_t n_src, cap_src;
    shard_ref *refs;
    size_t n_refs, cap_refs;
    bool mapped; /* refs built at least once */
    /* The snapshot whose rows were looked up last (ledger_usage_each). */
    int64_t snap_id;
    int64_t *snap_seqs; /* per source, cap_src long */
};

/* Opens the ledger directory dir: main.db (created if missing, with
 * migrations), the shard tables of main.db, the shards present, and adds the
 * accounts first seen in shards to main.db. Called by tally_ledger_open for
 * a directory. Errors: those of tally_ledger_open. */
tally_err ledger_dir_open(const char *dir, tally_ledger **out, char *why, size_t cap);

/* Frees the reader state (called by tally_ledger_close); accepts NULL. */
void ledger_shards_free(struct ledger_shards *s);

/* Looks for shards created since the last look, adds accounts first seen in
 * shards to main.db (only outside a transaction), and brings the index of
 * which shards hold which accounts up to date. A no-op for a plain ledger.
 * Errors: TALLY_DB, TALLY_IO, TALLY_NOMEM. */
tally_err ledger_shards_refresh(tally_ledger *l);

/* Calls fn once per database that may hold usage of account: for a plain
 * ledger, l's own database with snap_seq = snap; for a directory, main.db and
 * each shard holding the account, with snap_seq = that database's usage_seq
 * in snapshot snap (0 if snap is 0 or the database is not in it; a snap with
 * no rows is an invoice finalized before the ledger became a directory: snap
 * for main.db, 0 for shards). st is sql prepared on that database (cached in
 * slot), reset, bindings cleared; fn binds and steps it, and reports step
 * errors with ledger_stmt_err. Errors: TALLY_DB (message in l->errmsg),
 * TALLY_NOMEM, or what fn returns. */
typedef tally_err (*ledger_usage_fn)(void *ctx, sqlite3_stmt *st, int64_t snap_seq);
tally_err ledger_usage_each(tally_ledger *l, const char *account, ledger_usage_slot slot,
                            const char *sql, int64_t snap, ledger_usage_fn fn, void *ctx);

/* For a ledger directory, inside the caller's write transaction on main.db:
 * records the usage_seq of main.db and of every shard as a snapshot and
 * returns its id (the previous id when nothing changed since it). For a
 * plain ledger: main's meta.usage_seq. Errors: TALLY_DB, TALLY_NOMEM. */
tally_err ledger_usage_snapshot(tally_ledger *l, int64_t *id);

/* ---- Balances of the accounts meters wrote into shards (shard_balance.c) ---- */

/* Refreshes in main.db the balances the balance_pending rows of shard name
 * ask for (those above main.db's shard_balance_marks row for it: at most
 * about SHARD_FLUSH_ROWS, never part of one commit's rows), in one main.db
 * write transaction that also raises the mark. Outside a transaction only.
 * *mark is raised to main.db's mark as read first, then to the new one; *n
 * (may be NULL) counts the accounts refreshed. main.db busy (another writer
 * holds it past a short wait): TALLY_BUSY, nothing written, the rows stay
 * pending. A no-op with TALLY_NO_BALANCES=1 or for a shard not found.
 * Errors: TALLY_BUSY, TALLY_DB, TALLY_NOMEM, those of a fatal refresh. */
tally_err ledger_shard_balances_flush(tally_ledger *main, const char *name, int64_t *mark,
                                      int64_t *n);

/* ledger_shard_balances_flush of every shard of the directory, each until
 * nothing is pending; a busy main.db ends it quietly (the next call goes
 * on). *n counts the accounts refreshed. A no-op for a plain ledger. */
tally_err ledger_shard_balances_flush_all(tally_ledger *main, int64_t *n);
/* main.db's mark for the shard name: the highest seq of its balance_pending
 * refreshed (0: none). Errors: TALLY_DB. */
tally_err ledger_shard_balance_mark(tally_ledger *main, const char *name, int64_t *mark);

/* Whether some shard holds a balance_pending row of account above main.db's
 * mark for that shard, as main.db's current snapshot has it: its balance in
 * main.db may lag its usage (for tally verify). Errors: TALLY_DB. */
tally_err ledger_shard_balance_pending(tally_ledger *main, const char *account, bool *pending);

/* Records the message of st's database in l->errmsg and maps rc as
 * ledger_sqlite_err does. */
tally_err ledger_stmt_err(tally_ledger *l, sqlite3_stmt *st, int rc);

/* The source's connection, opening a shard on first use; *db is NULL (and
 * the result TALLY_OK) while the shard has no tables yet, which callers take
 * as an empty shard. Errors: those of shard_open_reader, TALLY_DB. */
tally_err shard_src_db(tally_ledger *l, shard_src *src, sqlite3 **db);
/* Records "<source>: <its SQLite message>" in l->errmsg and maps rc as
 * ledger_sqlite_err does. */
tally_err shard_src_err(tally_ledger *l, const shard_src *src, int rc);
/* Adds the shards created since the last look, in name order.
 * Errors: TALLY_IO, TALLY_NOMEM. */
tally_err shard_discover(tally_ledger *l);
/* The index of the source named name, or -1. */
ssize_t shard_src_index(const struct ledger_shards *s, const char *name);

/* For a ledger directory (shard_stats.c): the stored offset of (topic,
 * partition) from its shard; *found is false when there is no such shard.
 * Errors: TALLY_DB, TALLY_IO. */
tally_err ledger_shards_offset(tally_ledger *l, const char *topic, int32_t partition, int64_t *next,
                               bool *found);
/* For a ledger directory: adds every shard's totals to *out.
 * Errors: TALLY_DB, TALLY_IO, TALLY_NOMEM. */
tally_err ledger_shards_counts(tally_ledger *l, tally_ledger_counts *out);

/* Opens a shard file for reading (shard_read.c) or writing (shard_write.c):
 * read-only connections get query_only and a busy timeout. Errors: TALLY_IO
 * (cannot open), TALLY_DB. */
tally_err shard_open_reader(const char *path, sqlite3 **out, char *errmsg, size_t cap);

/* Milliseconds of the real-time clock (owner rows, fences). */
int64_t shard_now_ms(void);

/* ======== the invoice engine (invoice_*.c) ======== */

/* The invoice engine (invoice_*.c): gathering one account's rating input from the ledger, the
 * canonical document model and its JSON/CSV forms. */

#define INV_ZERO_HASH "0000000000000000000000000000000000000000000000000000000000000000"

/* ---- config.c ---------------------------------------------------------------- */

/* Inserts the grants row of g (already checked) in the caller's transaction
 * and returns its id; posting it is the caller's. The invoice engine issues
 * `adjustment` credits through it (SPEC section 4). Errors: TALLY_DB. */
tally_err ledger_grant_insert(tally_ledger *l, const tally_grant_spec *g, const char *currency,
                              int64_t *id);

/* ---- invoice_gather.c: one account's rating input --------------------------- */

/* What a run reads once (rate cards, spot points) and the statements it
 * prepares once, reused for every account. */
typedef struct inv_gatherer inv_gatherer;

/* One earlier live invoice of an account (inv_history). */
typedef struct inv_past {
    int64_t seq;
    char period[8];
    char timezone[64];      /* as invoiced: the account's zone may have changed since */
    int64_t billed_to;      /* the usage_seq up to which its period is billed: its own, or that
                               of a later live invoice carrying adjustments for it */
    int64_t finalized_at_s; /* its invoice's: the prices it was rated with */
} inv_past;

/* The account's live invoices of periods before period, in period order,
 * into *out (malloc'd, *n rows). Errors: TALLY_NOMEM, TALLY_DB. */
tally_err inv_history(inv_gatherer *g, const char *account, const char *period, inv_past **out,
                      size_t *n);

/* Errors: TALLY_DB, TALLY_PARSE (a stored card), TALLY_NOMEM. */
tally_err inv_gatherer_create(tally_ledger *l, inv_gatherer **out);
void inv_gatherer_destroy(inv_gatherer *g);

/* Bitemporal prices (SPEC section 2): later inv_gather() calls rate with the
 * rate cards and spot points entered at or before as_of_s; INT64_MAX (the
 * gatherer's default) uses all of them. */
void inv_gather_as_of(inv_gatherer *g, int64_t as_of_s);

/* The prepared queries a gatherer holds (texts in invoice_gather.c). */
typedef enum inv_query {
    INV_Q_INTERVALS,
    INV_Q_POINTS,
    INV_Q_HOURS, /* ?1 account, ?2 start, ?3 end: usage_points_hourly rows around it */
    INV_Q_COMMITMENTS,
    INV_Q_GRANTS,
    INV_Q_LIVE,     /* ?1 account, ?2 period: the live finalized invoice */
    INV_Q_HISTORY,  /* ?1 account, ?2 period: earlier live invoices */
    INV_Q_ADJUSTED, /* ?1 account: live invoices' adjusted periods */
    INV_Q_EVER,     /* ?1 account, ?2 period: an invoice of it exists */
    INV_Q_LATE,     /* ?1 account, ?2 start, ?3 end, ?4 seq: later usage exists */
    INV_Q_BILLED,   /* ?1 invoice seq, ?2 account, ?3 period: lines billed for it */
    INV_Q_COUNT
} inv_query;

/* A prepared statement, reset and with its bindings cleared. */
sqlite3_stmt *inv_stmt(inv_gatherer *g, inv_query q);
/* The SQL text of a query (for running it on the shards of a ledger
 * directory, the ledger directories section). */
const char *inv_query_sql(inv_query q);
tally_ledger *inv_gatherer_ledger(inv_gatherer *g);
/* How far past a period's edges late usage is looked for (invoice_gather.c),
 * and whether every earlier period counts as late (TALLY_LATE_ALWAYS=1). */
int64_t inv_late_margin(const inv_gatherer *g);
bool inv_late_always(const inv_gatherer *g);

/* One account's input for one window. Owns the arrays `in` borrows. */
typedef struct inv_input {
    tally_rating_input in;
    tally_account account;
    int64_t start_s, end_s; /* the window being rated */
    tally_interval *intervals;
    size_t n_intervals, cap_intervals;
    int64_t *interval_ids; /* each interval's row id (a plain ledger's) */
    size_t cap_interval_ids;
    /* Set by the caller before inv_gather: intervals holds the window's rows
     * already (a balance refresh served from its cache), read no others. */
    bool intervals_given;
    tally_point *points;
    size_t n_points, cap_points;
    tally_commitment *commitments;
    size_t n_commitments, cap_commitments;
    tally_grant *grants;
    size_t n_grants, cap_grants;
    size_t n_in_window; /* intervals overlapping [start, end), plus points */
} inv_input;

void inv_input_release(inv_input *x);

/* Fills x for acct over [start_s, end_s): cards, spot, usage (intervals a day
 * either side), commitments overlapping the window and, if with_grants,
 * grants of the account's currency touching it that have money left, with
 * their remaining balance. x must be zeroed or previously filled (its memory
 * is reused). Errors: TALLY_UNKNOWN_CURRENCY, TALLY_DB, TALLY_NOMEM. */
tally_err inv_gather(inv_gatherer *g, const tally_account *acct, int64_t start_s, int64_t end_s,
                     bool with_grants, inv_input *x);

/* ---- invoice_adjust.c: late usage in finalized periods --------------------- */

/* Appends to *lines (realloc'd; *n and *cap updated) the adjustment lines for
 * usage that arrived after earlier live finalized periods of acct (before
 * `period`) were billed: each such period is re-rated now and compared with
 * what was billed for it. scratch is working memory. When reads_to is not
 * NULL it is set to the instant below which usage was read: a usage row
 * starting (an interval) or at (a point) before it can change the result,
 * one at or after it cannot (INT64_MIN: the account has no such period).
 * Errors: those of inv_gather, tally_rate_period and tally_lines_diff. */
tally_err inv_adjustments(inv_gatherer *g, const tally_account *acct, const char *period,
                          inv_input *scratch, tally_line **lines, size_t *n, size_t *cap, char *why,
                          size_t why_cap, int64_t *reads_to);

/* ---- invoice_json.c: the document model and its formats --------------------- */

typedef struct inv_doc {
    const char *invoice_id; /* INV-..., CN-..., draft:<account>:<period> */
    bool credit_note;
    int64_t number; /* 0 for drafts */
    const char *account;
    const char *currency;
    int minor_digits;
    bool finalized;
    const char *period; /* YYYY-MM */
    int64_t period_start_s, period_end_s;
    const char *timezone;
    int64_t issued_at_s;
    const tally_line *lines;
    size_t n_lines;
    const tally_credit_use *credits; /* line_index refers to lines */
    size_t n_credits;
    int64_t subtotal_minor, total_credits_minor, amount_due_minor;
    /* An `adjustment` credit the invoice issues (credit notes: takes back,
     * negative); amount_due = subtotal - total_credits + credit_issued. 0:
     * none, and the document has no credit_issued. grant id 0 in drafts. */
    int64_t credit_issued_minor, credit_grant_id;
    const char *refers_to; /* credit notes */
    const char *reason;    /* credit notes */
    const char *prev_hash; /* "" for drafts */
} inv_doc;

/* Appends the canonical JSON of d. For finalized documents it computes the
 * hash over the bytes up to the prev_hash value plus '}' and signs it with
 * key_path; hash_hex and sig_hex receive them (may be NULL).
 * Errors: TALLY_NOMEM, TALLY_TOO_LARGE, TALLY_OVERFLOW, TALLY_CRYPTO,
 * TALLY_NOT_FOUND (key). */
tally_err inv_doc_json(const inv_doc *d, const char *key_path, tally_buf *out, char hash_hex[65],
                       char sig_hex[129]);
/* The same in two steps, for a signature made elsewhere (a tally_signer):
 * _unsealed appends a finalized document up to its prev_hash, with key_id
 * named in it, and computes its hash; _seal appends the hash and signature
 * that close it. Each leaves out as it was on an error. Errors:
 * TALLY_NOMEM, TALLY_TOO_LARGE, TALLY_OVERFLOW. */
tally_err inv_doc_unsealed(const inv_doc *d, const char *key_id, tally_buf *out, char hash_hex[65]);
tally_err inv_doc_seal(tally_buf *out, const char hash_hex[65], const char sig_hex[129]);

/* Appends the CSV form of a canonical JSON document (header + one row per
 * line). Errors: TALLY_PARSE, TALLY_NOMEM, TALLY_TOO_LARGE. */
tally_err inv_doc_csv(const char *doc, size_t len, tally_buf *out);
/* The same for a document tally_invoice_parse gave (root stays the caller's). */
tally_err inv_doc_csv_parsed(struct json_object *root, tally_buf *out);

/* Decimal parse of a quantity as stored ("-12345"), into __int128.
 * Errors: TALLY_PARSE, TALLY_OVERFLOW. */
tally_err inv_i128_parse(const char *s, __int128 *out);

/* Copies a text column into dst (cap bytes, truncated), "" for NULL. */
void inv_col_text(sqlite3_stmt *st, int col, char *dst, size_t cap);

/* The columns to SELECT from invoice_lines for inv_line_from_row, in order. */
#define INV_LINE_COLS                                                                              \
    "kind, meter, pricing, migration, sku, dim2, quantity, unit_price_nano, amount_minor, "        \
    "adjusts, original_period"

/* Decodes one stored invoice line from columns 0..10 of st, selected as
 * INV_LINE_COLS, exactly as stored (an adjustment keeps kind ADJUSTMENT and
 * the kind it adjusts in `adjusts`). Errors: TALLY_DB (a field does not
 * parse: the stored line is damaged). */
tally_err inv_line_from_row(sqlite3_stmt *st, tally_line *ln);

/* Appends money (minor units) as a JSON string in major units. */
tally_err inv_json_money(tally_buf *b, int64_t minor, int digits);
/* Appends a UTC time as a JSON string "YYYY-MM-DDTHH:MM:SSZ". */
tally_err inv_json_time(tally_buf *b, int64_t t_s);

/* ---- invoice_store.c: finalized documents ---------------------------------- */

/* A sealed document: its bytes, hash and signature, and the usage_seq it
 * bills up to. */
typedef struct inv_sealed {
    const char *doc;
    size_t len;
    char hash[65];
    char signature[129];
    int64_t usage_seq;
} inv_sealed;

/* Inside the caller's transaction. Errors: TALLY_DB. inv_usage_seq gives
 * meta.usage_seq, or in a ledger directory the id of a new usage snapshot
 * (the ledger directories section below). */
tally_err inv_next_number(tally_ledger *l, const char *doc_type, int year, int64_t *number);
tally_err inv_usage_seq(tally_ledger *l, int64_t *seq);
/* The hash of the newest finalized document, or 64 zeros. */
tally_err inv_last_hash(tally_ledger *l, char hash[65]);
/* Inserts the invoices row, its lines and credits. Errors: TALLY_DB. */
tally_err inv_store(tally_ledger *l, const inv_doc *d, const inv_sealed *s);
/* Posts an invoice's entry (see invoice_store.c). Errors: TALLY_DB,
 * TALLY_INVAL, TALLY_OVERFLOW, TALLY_NOMEM. */
tally_err inv_post_invoice(tally_ledger *l, const inv_doc *d);

/* ---- invoice_files.c -------------------------------------------------------- */

/* Writes <account>-<period>.{json,csv,html} of a document into dir (the
 * account id percent-encoded where it is not a safe file name).
 * Errors: TALLY_IO (why names the file), and those of the formats. */
tally_err inv_write_files(tally_ledger *l, const char *dir, const char *account, const char *period,
                          const char *doc, size_t len, char *why, size_t cap);

/* ---- invoice_writer.c: a run's files on a thread of their own -------------- */

typedef struct inv_writer inv_writer;
/* Starts the thread, with a connection of its own to l's file or
 * directory, that writes the files of documents into dir. *out is NULL
 * when it cannot (an in-memory ledger, no thread, no connection; also with
 * TALLY_INVOICE_FILES_IN_PLACE=1): the caller writes them itself.
 * Errors: TALLY_NOMEM. */
tally_err inv_writer_start(const tally_ledger *l, const char *dir, const char *period,
                           inv_writer **out);
/* Adds a document to the next batch (copied; between a wait and a go).
 * Errors: TALLY_NOMEM. */
tally_err inv_writer_add(inv_writer *w, const char *account, const char *doc, size_t len);
/* Hands the batch to the thread and returns. */
void inv_writer_go(inv_writer *w);
/* Waits until the batch handed over is written and returns its first
 * failure in account order (why: "account A: ..."); empties the batch. */
tally_err inv_writer_wait(inv_writer *w, char *why, size_t cap);
/* Waits for the thread and frees everything (accepts NULL). */
void inv_writer_stop(inv_writer *w);

/* ---- Idempotency keys (idempotency.c) ------------------------------------ */

/* The scope of credit grants' keys (idempotency_keys.scope). */
#define LEDGER_IDEM_GRANT "credit.grant"

/* The fingerprint of the request g for a grant in currency (see
 * idempotency.c for its canonical form), lower-case hex. Errors: TALLY_NOMEM. */
tally_err ledger_idem_grant_hash(const tally_grant_spec *g, const char *currency, char hex[65]);
/* Looks key up in scope, in the caller's transaction: TALLY_OK when it is
 * new (*id 0); TALLY_EXISTS when it was stored with this hash (*id: the
 * grant it made); TALLY_EXISTS_DIFFERENT with another (l->errmsg says so).
 * Errors: TALLY_DB. */
tally_err ledger_idem_check(tally_ledger *l, const char *scope, const char *key,
                            const char hash[65], int64_t *id);
/* Stores key with hash and the grant id it made, in the caller's
 * transaction. Errors: TALLY_DB (among them a key already stored). */
tally_err ledger_idem_record(tally_ledger *l, const char *scope, const char *key,
                             const char hash[65], const char *account, int64_t id);

/* ---- The ledger's own chain (chain.c, verify_chain.c) -------------------- */

/* Registers tally_canon(), tally_sha256(), tally_qty_sum() and
 * tally_chain_add(), which the chain's triggers (schemas/009_chain.sql)
 * call, on l->db. */
tally_err ledger_chain_register(tally_ledger *l);
/* hash = SHA-256(tally_canon(prev, seq, tbl, key, row_hash)) of texts of
 * the given byte lengths: an entry's link to the one before. Errors:
 * TALLY_NOMEM. */
tally_err ledger_chain_link(const char *prev, size_t np, int64_t seq, const char *tbl, size_t nt,
                            int64_t key, const char *row_hash, size_t nr, char hash[65]);
/* A canonical form being built: len bytes of cap at p (libc's realloc;
 * the owner frees p). */
typedef struct ledger_canon {
    char *p;
    size_t len, cap;
} ledger_canon;
/* Appends tally_canon(table, the n columns of st's current row from first)
 * to c. Errors: TALLY_TAMPERED (a real number), TALLY_NOMEM. */
tally_err ledger_canon_row(ledger_canon *c, const char *table, sqlite3_stmt *st, int first, int n);

/* The columns of the chained tables a document writes, in the order their
 * canonical forms take them (schemas/009_chain.sql). */
#define CHAIN_COLS_ENTRIES  "id, kind, ref, created_at"
#define CHAIN_COLS_POSTINGS "id, entry_id, ledger_acct, currency, debit_minor, credit_minor"
#define CHAIN_COLS_INVOICES                                                                        \
    "seq, id, doc_type, year, number, account, period, currency, subtotal_minor, "                 \
    "credits_minor, amount_due_minor, refers_to, reason, usage_seq, doc, hash, prev_hash, "        \
    "signature, finalized_at"
#define CHAIN_COLS_INVOICE_LINES                                                                   \
    "invoice_seq, line_no, kind, meter, pricing, migration, sku, dim2, quantity, "                 \
    "unit_price_nano, amount_minor, original_period, adjusts"
#define CHAIN_COLS_INVOICE_CREDITS "invoice_seq, grant_id, line_no, amount_minor"

/* A table whose rows join the chain with their parent's (a group). */
typedef struct ledger_chain_kid {
    const char *table, *cols;
    const char *key;   /* the column naming the parent's rowid */
    const char *order; /* the column ordering a parent's rows */
    const char *sql;   /* cols of one parent's rows in order: ?1 the parent's
                          rowid, ?2 the lowest rowid that may hold one */
} ledger_chain_kid;

/* A group (schemas/017_chain_groups.sql): one chain entry, tbl = name and
 * row_key = the parent's rowid, whose row_hash is the SHA-256 of the
 * parent's canonical form followed by each kid table's rows' in order. */
typedef struct ledger_chain_group {
    const char *name;
    const char *table, *cols, *sql; /* the parent; sql: its row, ?1 its rowid */
    const char *what;               /* what the entry covers, for messages */
    ledger_chain_kid kids[2];
    size_t n_kids;
} ledger_chain_group;

enum { LEDGER_GROUP_INVOICE, LEDGER_GROUP_ENTRY, LEDGER_GROUP_COUNT };
extern const ledger_chain_group ledger_chain_groups[LEDGER_GROUP_COUNT];

/* Appends the chain entry of group g for the parent row key, whose kids
 * were written at rowids >= kid_from. Inside the writer's transaction,
 * after the parent and all its kids. Errors: as ledger_sqlite_err,
 * TALLY_NOMEM. */
tally_err ledger_chain_group_add(tally_ledger *l, int g, int64_t key, int64_t kid_from);
/* Finalizes the chain's cached statements; before closing l->db. */
void ledger_chain_close(tally_ledger *l);
/* Counts one new usage event into b's totals for the chain. */
void ledger_chain_count(tally_batch *b, const tally_event *ev);
/* Writes b's totals as usage_batches rows (one per meter with new usage),
 * which the chain records; clears them. Inside the commit's transaction. */
tally_err ledger_chain_batch(tally_batch *b);

/* One run of tally_ledger_verify (verify.c): the ledger, the keys, and where
 * the first problem is described. */
typedef struct vctx {
    tally_ledger *l;
    const char *key_path;
    struct tally_keyring *keys; /* loaded on first use (verify_keys) */
    char *why;
    size_t cap;
    int64_t n_docs;
    int64_t n_chain;         /* entries of the ledger chain */
    struct vsig_queue *sigs; /* the documents' signatures to verify (verify_sigs.c) */
} vctx;

/* The documents' Ed25519 signatures, verified in batches on worker threads
 * while verify goes on (verify_sigs.c). keys is v->keys (borrowed, used on
 * the calling thread only); each worker loads its own from key_path.
 * Errors: TALLY_NOMEM. */
typedef struct vsig_queue vsig_queue;
tally_err vsig_create(const char *key_path, struct tally_keyring *keys, vsig_queue **out);
void vsig_destroy(vsig_queue *q);
/* Queues one document's signature (verifying the batch when it is full). */
tally_err vsig_add(vctx *v, vsig_queue *q, bool credit_note, const char *id, const char *key_id,
                   const char *hash, const char *sig);
/* Waits for everything queued to be verified: the first failure in ledger
 * order is described in v->why (as the check one document at a time
 * describes it) and returned. Accepts NULL. */
tally_err vsig_flush(vctx *v, vsig_queue *q);
/* Hands what is queued to the workers without waiting (with no workers,
 * verifies it here). Accepts NULL. */
tally_err vsig_submit(vctx *v, vsig_queue *q);

/* Describes the failure in v->why (printf-style) and returns err. */
tally_err verify_fail(vctx *v, tally_err err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Runs a query whose first row, if any, describes a violation in its first
 * column: TALLY_TAMPERED with that text. */
tally_err verify_sql(vctx *v, const char *sql);
/* Loads v->keys from v->key_path once, or says what is missing. */
tally_err verify_keys(vctx *v);
/* The chain's checks (verify_chain.c). */
tally_err verify_chain(vctx *v);
/* The signed heads held as ledger.head outbox events (chain_head.c). */
tally_err verify_heads(vctx *v);
/* The prepaid balances against their recomputation (verify_balance.c). */
tally_err verify_balances(vctx *v);

/* What verify reads of a stored document (verify_doc.c). A text is NULL
 * when the member is absent or not a string; a sum is not ok when a money
 * field is absent or malformed, an array is missing, or it overflows. */
typedef struct vdoc_text {
    const char *s; /* borrowed from the document or json-c's tree */
    size_t n;
} vdoc_text;
typedef struct vdoc_sum {
    bool ok;
    int64_t v; /* minor units */
} vdoc_sum;
typedef struct vdoc_fields {
    vdoc_text invoice_id, type, account, currency, refers_to;
    vdoc_sum subtotal, total_credits, amount_due;
    vdoc_sum lines, applied; /* the amounts of lines[] and credits_applied[] */
    bool issued_present;     /* credit_issued is a member */
    bool issued_ok;          /* ... an object: kind "adjustment", an amount, an integer grant_id */
    int64_t issued, grant_id;
    struct json_object *tree; /* json-c's, which the texts point into; NULL: they point into doc */
} vdoc_fields;
/* Reads doc (len bytes; money with minor_digits) into f: by the scanner
 * when the text is in its subset, else by json-c. *object is false when
 * json-c finds no JSON object (then f is empty). f's texts point into doc
 * or json-c's tree: vdoc_release frees the tree. Errors: TALLY_NOMEM. */
tally_err vdoc_read(const char *doc, size_t len, int minor_digits, vdoc_fields *f, bool *object);
void vdoc_release(vdoc_fields *f);
/* The scanner alone (1: read; -1: outside its subset) and json-c alone,
 * for the tests that hold the two to the same answers. */
int vdoc_read_fast(const char *doc, size_t len, int minor_digits, vdoc_fields *f);
tally_err vdoc_read_json_c(const char *doc, size_t len, int minor_digits, vdoc_fields *f,
                           bool *object);

#endif
