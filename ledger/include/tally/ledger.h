/* The ledger: Tally's SQLite database (WAL, synchronous=FULL, STRICT tables).
 *
 * It holds configuration (accounts, rate cards, spot prices, commitments,
 * credit grants), usage aggregates, the dedupe index, quarantine, Kafka
 * offsets, invoices and debit/credit postings. Only this module links
 * SQLite. A tally_ledger is one connection: use it from one thread at a time.
 * Several processes may open the same file; SQLite serialises their writes. */
#ifndef TALLY_LEDGER_H
#define TALLY_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tally/buf.h"
#include "tally/err.h"
#include "tally/event.h"
#include "tally/rating.h"

typedef struct tally_ledger tally_ledger;

/* Opens (creating if needed) the ledger at path and applies any missing
 * migrations from schemas/. An existing directory opens as a ledger
 * directory: its main.db plus one shard per Kafka partition
 * (include/tally/shard.h). On error *out is NULL and, if why is not NULL,
 * a one-line reason is written there.
 * Errors: TALLY_DB, TALLY_IO, TALLY_NOMEM, TALLY_UNSUPPORTED (newer schema),
 * TALLY_INVAL (a directory whose main.db is not a file). */
TALLY_MUST_CHECK tally_err tally_ledger_open(const char *path, tally_ledger **out, char *why,
                                             size_t cap);
/* Whether path holds a ledger to open: a file that is not empty, or a
 * ledger directory with such a main.db (what tally_ledger_open would open
 * rather than create). */
bool tally_ledger_exists(const char *path);
/* Closes the connection; accepts NULL. */
void tally_ledger_close(tally_ledger *l);

/* The last SQLite error message of this connection (for one-line errors). */
const char *tally_ledger_errmsg(tally_ledger *l);

/* The clock used for created_at stamps and the future-time check: the real
 * time, unless $TALLY_NOW (RFC 3339) is set, which tests and the demo use. */
int64_t tally_now_s(void);

/* ---- Configuration -------------------------------------------------------- */

typedef struct tally_account {
    char id[TALLY_NAME_MAX];
    char currency[4];
    char timezone[64]; /* IANA name, "UTC" by default */
    char name[128];
} tally_account;

/* Creates or updates an account. NULL fields keep their stored value (or
 * default: currency of the newest rate card, "UTC", ""). The currency and
 * time zone of an account that has invoices cannot change.
 * Errors: TALLY_UNKNOWN_CURRENCY, TALLY_INVAL (bad time zone), TALLY_FINALIZED,
 * TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_ledger_account_set(tally_ledger *l, const char *id,
                                                    const char *currency, const char *timezone,
                                                    const char *name);
/* Errors: TALLY_NOT_FOUND, TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_ledger_account_get(tally_ledger *l, const char *id,
                                                    tally_account *out);

/* Loads a rate card (JSON, schemas/ratecard.schema.json). Loading the same
 * card again is TALLY_EXISTS; a different card with the same id or the same
 * effective_from is TALLY_EXISTS_DIFFERENT. On error why names the problem.
 * Errors: TALLY_PARSE, TALLY_EXISTS, TALLY_EXISTS_DIFFERENT, TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_ledger_ratecard_load(tally_ledger *l, const char *json, size_t len,
                                                      char *why, size_t cap);

/* Adds a spot price point for a SKU from from_s on.
 * Errors: TALLY_NOT_FOUND (no card lists the SKU), TALLY_NO_PRICE (the SKU has
 * no spot pricing), TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_ledger_spot_set(tally_ledger *l, const char *sku,
                                                 int64_t price_nano, int64_t from_s);

/* Adds a commitment of cards x sku over [from_s, to_s). The account is created
 * if new. Errors: TALLY_INVAL, TALLY_NO_PRICE (no reserved price), TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_ledger_commit_add(tally_ledger *l, const char *account,
                                                   const char *sku, int64_t cards, int64_t from_s,
                                                   int64_t to_s, int64_t *id_out);

typedef struct tally_grant_spec {
    const char *account;
    tally_grant_kind kind;
    int64_t amount_minor;
    const char *currency; /* NULL: the account's */
    int priority;         /* default 50 */
    int64_t effective_s;
    int64_t expires_s; /* TALLY_TIME_MAX: never */
    const char *scope; /* "" or NULL: everything */
    /* The client's idempotency key (tally_idempotency_key_ok), or NULL. */
    const char *idempotency_key;
    /* effective_s is not the client's but "now", filled in because it gave
     * none: left out of the request's fingerprint, so that a retry made
     * later is still the same request. */
    bool effective_defaulted;
} tally_grant_spec;

/* The longest idempotency key (bytes). */
#define TALLY_IDEMPOTENCY_KEY_MAX 255

/* Whether key is an acceptable idempotency key: 1 to
 * TALLY_IDEMPOTENCY_KEY_MAX printable ASCII characters, no spaces (0x21 to
 * 0x7e), e.g. a UUID. NULL is not. */
bool tally_idempotency_key_ok(const char *key);

/* Grants a credit; posts it (promotions:<kind> to grant:<id>). The account is
 * created if new. Errors: TALLY_INVAL, TALLY_PARSE (scope),
 * TALLY_CURRENCY_MISMATCH, TALLY_RANGE (over SPEC section 4's bound),
 * TALLY_DB; nothing is stored on any error.
 *
 * With g->idempotency_key the grant, its postings and the key are stored in
 * one transaction, and the key is remembered with a fingerprint (SHA-256)
 * of the request: account, kind, amount_minor, the grant's currency (g's,
 * else the account's), priority, effective_s (unless effective_defaulted),
 * expires_s and scope. Keys are one space per ledger, across accounts. A
 * key used before is answered without writing anything:
 *   TALLY_EXISTS            same fingerprint: *id_out is the grant that the
 *                           first request made (a replay);
 *   TALLY_EXISTS_DIFFERENT  another fingerprint (another amount, account,
 *                           ...): *id_out is untouched and why says so.
 * A bad key is TALLY_INVAL. Requests refused with an error leave no key
 * behind. Keys never expire. */
TALLY_MUST_CHECK tally_err tally_ledger_grant_add(tally_ledger *l, const tally_grant_spec *g,
                                                  int64_t *id_out, char *why, size_t cap);

/* ---- Ingest: batches ------------------------------------------------------ */

typedef enum tally_event_result {
    TALLY_RESULT_ACCEPTED = 0,
    TALLY_RESULT_DUPLICATE,   /* same (source, id), same content: not billed again */
    TALLY_RESULT_CONFLICT,    /* same (source, id), different content: quarantined */
    TALLY_RESULT_QUARANTINED, /* rejected: quarantined with its reason */
} tally_event_result;

const char *tally_event_result_name(tally_event_result r);

typedef struct tally_batch_stats {
    int64_t accepted, duplicates, conflicts, quarantined;
} tally_batch_stats;

/* A unit of ingest: events and rejects gathered in memory, then written in
 * one SQLite transaction together with the partition offsets they end at.
 * Either everything in a batch is stored, or nothing is. */
typedef struct tally_batch tally_batch;

TALLY_MUST_CHECK tally_err tally_batch_create(tally_ledger *l, tally_batch **out);
/* Accepts NULL. Discards anything not committed. */
void tally_batch_destroy(tally_batch *b);

/* Queues a decoded event. raw/len is the original message (kept if the event
 * turns out to be a conflict); origin names where it came from
 * ("kafka:<topic>/<partition>@<offset>", "file:<name>:<line>", "http:<n>") and
 * must be unique per message. Events whose SKU or pricing the rate card in
 * force cannot price are quarantined (unknown_sku, no_price) at commit.
 * Errors: TALLY_NOMEM, TALLY_TOO_LARGE. */
TALLY_MUST_CHECK tally_err tally_batch_add_event(tally_batch *b, const tally_event *ev,
                                                 const char *raw, size_t len, const char *origin);

/* The same without copying: ev, raw[0..len) and origin stay the caller's and
 * must stay valid and unchanged until the next tally_batch_commit() has
 * returned or the batch is destroyed. For a caller that keeps its messages
 * until they are committed anyway (the meter's chunks). Errors: as
 * tally_batch_add_event. */
TALLY_MUST_CHECK tally_err tally_batch_add_event_ref(tally_batch *b, const tally_event *ev,
                                                     const char *raw, size_t len,
                                                     const char *origin);

/* The same, copying the event and origin and keeping raw[0..len) the
 * caller's, valid and unchanged until the next tally_batch_commit() has
 * returned or the batch is destroyed: for a caller whose messages sit in
 * memory until then anyway (tally ingest's mapped file), so that the batch
 * holds no second copy of them. Errors: as tally_batch_add_event. */
TALLY_MUST_CHECK tally_err tally_batch_add_event_raw_ref(tally_batch *b, const tally_event *ev,
                                                         const char *raw, size_t len,
                                                         const char *origin);

/* Queues a rejected message for quarantine. A message whose origin is already
 * in quarantine is not stored twice. Errors: TALLY_NOMEM. */
TALLY_MUST_CHECK tally_err tally_batch_add_reject(tally_batch *b, const tally_reject *rej,
                                                  const char *raw, size_t len, const char *origin);

/* The same for a message of which only raw[0..len) was kept (a file line cut
 * when read): whole_size and whole_sha256 (hex) describe the whole message
 * and are stored with the kept prefix. */
TALLY_MUST_CHECK tally_err tally_batch_add_reject_cut(tally_batch *b, const tally_reject *rej,
                                                      const char *raw, size_t len,
                                                      size_t whole_size,
                                                      const char whole_sha256[65],
                                                      const char *origin);

/* While on, the origin given with each message queued is a prefix: the
 * message's origin is that prefix followed by 16 hex digits of
 * tally_hash128(raw, len, 0)[0], computed only if the message is
 * quarantined (an origin is stored with quarantined rows alone). `tally
 * ingest` names lines so, and one hash a line was 3.7 % of its CPU.
 * tally_batch_add_reject_cut's origin is whole whatever this says. Off when
 * a batch is created. */
void tally_batch_set_origin_hash(tally_batch *b, bool on);

/* Records that this batch ends partition (topic, partition) at new_next. At
 * commit the stored offset must still be expected_next (-1: none stored), or
 * the whole batch is rolled back with TALLY_STALE. */
TALLY_MUST_CHECK tally_err tally_batch_set_offset(tally_batch *b, const char *topic,
                                                  int32_t partition, int64_t expected_next,
                                                  int64_t new_next);
/* Stores with the offset set for (topic, partition) in this batch a mark of
 * the message at new_next - 1 (the meter's hash of its key and value), read
 * back with tally_ledger_offset_mark. A later range for the partition in
 * the same batch clears it. Errors: TALLY_INVAL (no offset set). */
TALLY_MUST_CHECK tally_err tally_batch_set_offset_mark(tally_batch *b, const char *topic,
                                                       int32_t partition, int64_t mark);

/* The API key (api_keys.id) that sent what the batch holds, stored with
 * every row it quarantines; 0 (the default) stores none (file, Kafka). */
void tally_batch_set_key_id(tally_batch *b, int64_t key_id);

/* Number of events and rejects queued. */
size_t tally_batch_count(const tally_batch *b);
/* Bytes of raw messages and origins queued (at most 512 MiB a batch). */
size_t tally_batch_bytes(const tally_batch *b);

/* Writes the batch in one transaction (BEGIN IMMEDIATE ... COMMIT):
 * dedupe, aggregation, quarantine and offsets. Fills *st (may be NULL) and,
 * if results is not NULL, one result per queued item in the order added
 * (it must have room for tally_batch_count()). The batch is empty afterwards,
 * whether or not it committed.
 * Errors: TALLY_STALE (offset moved: nothing written), TALLY_BUSY, TALLY_DB,
 * TALLY_IO (disk full, I/O error). After TALLY_IO the batch is either stored
 * whole or not at all, never in part: when the final WAL sync fails after
 * its frames were written, the batch can still be there after a restart.
 * The stored offsets say which (tally_ledger_offset_get); retrying from them
 * is always safe (a batch already stored comes back TALLY_STALE). */
TALLY_MUST_CHECK tally_err tally_batch_commit(tally_batch *b, tally_batch_stats *st,
                                              tally_event_result *results);

/* The stored next offset of a partition, or -1 if none (in a ledger
 * directory, the partition's shard's). Errors: TALLY_DB, TALLY_IO. */
TALLY_MUST_CHECK tally_err tally_ledger_offset_get(tally_ledger *l, const char *topic,
                                                   int32_t partition, int64_t *next);

/* Totals over the whole ledger (in a ledger directory, main.db's plus every
 * shard's), for progress lines and tests. */
typedef struct tally_ledger_counts {
    int64_t dedupe_keys, quarantined, intervals, points;
} tally_ledger_counts;
TALLY_MUST_CHECK tally_err tally_ledger_counts_get(tally_ledger *l, tally_ledger_counts *out);

/* ---- Reading back, for the invoice engine, CLI and HTTP API --------------- */

/* ---- Small reads and API keys' rows (ledger/lookup.c, ledger/keys.c) ---- */

/* The currency for a new grant or account: wanted if given; else the
 * account's; else (a new account) the newest rate card's. The one place this
 * rule is written. Errors: TALLY_UNKNOWN_CURRENCY (wanted is not a 3-letter
 * code, or there is no account and no rate card), TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_ledger_currency_for(tally_ledger *l, const char *account,
                                                     const char *wanted, char out[4]);

/* The account a finalized invoice or credit note belongs to; "" if the id is
 * unknown. Errors: TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_ledger_invoice_owner(tally_ledger *l, const char *id,
                                                      char owner[TALLY_NAME_MAX]);

/* Calls fn once per quarantine reason with the count of rows whose id is
 * above after_id, and raises *max_id to the highest id seen. */
typedef tally_err (*tally_reason_count_fn)(void *ctx, const char *reason, int64_t n);
TALLY_MUST_CHECK tally_err tally_ledger_quarantine_counts(tally_ledger *l, int64_t after_id,
                                                          tally_reason_count_fn fn, void *ctx,
                                                          int64_t *max_id);

/* The reason a message was quarantined with, by its origin.
 * Errors: TALLY_NOT_FOUND, TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_ledger_quarantine_reason(tally_ledger *l, const char *origin,
                                                          char *reason, size_t cap);

/* One quarantine row; every field is borrowed for the callback only. */
typedef struct tally_quarantine_row {
    const char *origin, *reason;
    const void *raw; /* at most the first 64 KiB of the message */
    size_t raw_len;
    int64_t key_id;         /* the API key that sent it; 0: none (file, Kafka, older rows) */
    size_t raw_size;        /* the whole message's length */
    const char *raw_sha256; /* its SHA-256 in hex ("" if unknown) */
} tally_quarantine_row;
typedef tally_err (*tally_quarantine_fn)(void *ctx, const tally_quarantine_row *q);

/* Calls fn for every quarantine row whose origin starts with origin_prefix,
 * oldest first; a non-OK return from fn stops and is returned.
 * Errors: TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_ledger_quarantine_each(tally_ledger *l, const char *origin_prefix,
                                                        tally_quarantine_fn fn, void *ctx);

/* Like tally_ledger_quarantine_each, for the rows whose dead-letter copy
 * has not been recorded as delivered (tally_ledger_dlq_mark_sent); reads
 * through the origin index. Errors: TALLY_INVAL (an empty prefix or one
 * over 511 bytes), TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_ledger_dlq_unsent_each(tally_ledger *l, const char *origin_prefix,
                                                        tally_quarantine_fn fn, void *ctx);

/* Records, in one transaction, that the dead-letter copies of the
 * quarantine rows with these origins were delivered; recording one twice
 * is not an error. origins are borrowed. Errors: TALLY_DB, TALLY_BUSY. */
TALLY_MUST_CHECK tally_err tally_ledger_dlq_mark_sent(tally_ledger *l, const char *const *origins,
                                                      size_t n);

/* An offset range of a partition that the broker no longer has. */
typedef struct tally_offset_gap {
    const char *topic;
    int32_t partition;
    int64_t from, to;           /* the offsets never read: [from, to) */
    const char *kind;           /* "retention" (log start past the stored offset) or
                                 * "restarted" (the log restarted below it) */
    int64_t stored_next;        /* the ledger's next offset before */
    int64_t log_start, log_end; /* the broker's watermarks */
} tally_offset_gap;

/* Records an accepted gap (table offset_gaps, append-only, state
 * "accepted") and moves the partition's stored offset from stored_next to
 * log_start, in one transaction. A row of state "open" for the same gap
 * stays as it was; this later row is what says it was accepted.
 * Errors: TALLY_INVAL, TALLY_STALE (the stored offset is no longer
 * stored_next), TALLY_DB, TALLY_BUSY. */
TALLY_MUST_CHECK tally_err tally_ledger_gap_accept(tally_ledger *l, const tally_offset_gap *g);

/* Records a gap the meter stopped the partition at (an offset_gaps row of
 * state "open"), in a transaction of its own; the stored offset does not
 * move. *recorded is false, and nothing is written, when the partition's
 * stored offset is no longer g->stored_next or the partition already has
 * an open gap at that offset (so a meter restarted in a loop records it
 * once). Errors: TALLY_INVAL, TALLY_DB, TALLY_BUSY. */
TALLY_MUST_CHECK tally_err tally_ledger_gap_open(tally_ledger *l, const tally_offset_gap *g,
                                                 bool *recorded);

/* The offset gaps of one partition. An open gap is one the meter stopped
 * the partition at, whose stored offset has not moved since and which no
 * accepted row followed; at most one per partition. *_messages: offsets
 * never read ([from, to) of each row, as recorded when it was written). */
typedef struct tally_gap_stats {
    char topic[256];
    int32_t partition;
    int64_t open, open_messages;
    int64_t accepted, accepted_messages;
} tally_gap_stats;

/* Every partition with an offset_gaps row, ordered by topic and
 * partition, into *out (allocated, free() it; NULL when *n is 0). On a
 * ledger directory, main.db's rows and every shard's (read through the
 * read-only shard readers), one entry per partition. Errors: TALLY_NOMEM,
 * TALLY_DB, TALLY_BUSY. */
TALLY_MUST_CHECK tally_err tally_ledger_gap_stats(tally_ledger *l, tally_gap_stats **out,
                                                  size_t *n);

/* The partition's stored next offset (-1: none) and the mark stored with
 * it (tally_batch_set_offset_mark; *has_mark false if none). Reads l's own
 * offsets table (for a ledger directory, call it on the partition's shard).
 * Errors: TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_ledger_offset_mark(tally_ledger *l, const char *topic,
                                                    int32_t partition, int64_t *next, int64_t *mark,
                                                    bool *has_mark);

/* How many times the partition's log restarted below the stored offset and
 * an operator accepted it (offset_gaps rows of kind "restarted", state
 * "accepted"). The meter
 * adds it to the origins of the new log's messages ("...@<offset>+r<n>"),
 * so a new message at an offset an old one had is not taken for it.
 * Errors: TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_ledger_gap_epoch(tally_ledger *l, const char *topic,
                                                  int32_t partition, int64_t *n);

/* One read snapshot over several calls (BEGIN DEFERRED ... COMMIT), which
 * also takes the file locks once. Errors: TALLY_DB, TALLY_BUSY. */
TALLY_MUST_CHECK tally_err tally_ledger_read_begin(tally_ledger *l);
TALLY_MUST_CHECK tally_err tally_ledger_read_end(tally_ledger *l);

/* SQLite's data_version: changes whenever another connection commits. */
TALLY_MUST_CHECK tally_err tally_ledger_data_version(tally_ledger *l, int64_t *out);

/* Reads a real table: TALLY_OK when the ledger answers. Errors: TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_ledger_ping(tally_ledger *l);

/* An API key's role (SPEC section 7, schemas/007_key_roles.sql). */
typedef enum tally_key_role {
    TALLY_KEY_ACCOUNT = 0, /* one account's data; never sends usage */
    TALLY_KEY_INGEST,      /* sends usage under its source prefixes, nothing else */
    TALLY_KEY_ADMIN,       /* everything */
} tally_key_role;

#define TALLY_KEY_SOURCES_MAX 16 /* source prefixes of one ingest key */

/* An API key's row: only the SHA-256 of the key is stored. */
typedef struct tally_key_row {
    int64_t id;
    unsigned char hash[32];
    tally_key_role role;
    bool admin;                                        /* role == TALLY_KEY_ADMIN */
    char account[TALLY_NAME_MAX];                      /* "" unless role is TALLY_KEY_ACCOUNT */
    char sources[TALLY_KEY_SOURCES_MAX][TALLY_ID_MAX]; /* ingest keys: the prefixes, sorted */
    size_t n_sources;
    int64_t created_s, revoked_s; /* revoked_s 0: active */
} tally_key_row;

typedef tally_err (*tally_key_fn)(void *ctx, const tally_key_row *k);

/* Calls fn for every key (or every unrevoked one) in id order; a non-OK
 * return from fn stops and is returned. Errors: TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_ledger_keys(tally_ledger *l, bool active_only, tally_key_fn fn,
                                             void *ctx);

/* Stores a key's hash with its role: an account key (account not NULL, no
 * sources), an ingest key (account NULL, 1..TALLY_KEY_SOURCES_MAX non-empty
 * prefixes of at most TALLY_ID_MAX - 1 bytes; repeats are stored once) or an
 * admin key (account NULL, no sources). sources are borrowed.
 * Errors: TALLY_INVAL (another combination), TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_ledger_key_insert(tally_ledger *l, const unsigned char hash[32],
                                                   tally_key_role role, const char *account,
                                                   const char *const *sources, size_t n_sources,
                                                   int64_t created_s, int64_t *id_out);

/* Marks key id revoked at now_s. Errors: TALLY_NOT_FOUND, TALLY_EXISTS
 * (already revoked), TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_ledger_key_revoke(tally_ledger *l, int64_t id, int64_t now_s);

/* Checks the whole ledger: debits equal credits per currency and per entry;
 * every balance equals the sum of its postings; invoice and credit note
 * numbers have no gaps; every stored document hashes to its hash, the chain
 * links, every signature is valid; the append-only triggers are present;
 * SQLite's integrity_check is ok. On the first failure writes the bad record
 * and what is wrong to why; on success why holds a one-line summary. key_path
 * may hold the private key or only its public key (PEM).
 * Errors: TALLY_TAMPERED, TALLY_NOT_FOUND (no key file while there are signed
 * documents), TALLY_CRYPTO (not an Ed25519 key), TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_ledger_verify(tally_ledger *l, const char *key_path, char *why,
                                               size_t cap);

/* ---- Signed heads of the ledger's own chain (SPEC section 5) ------------ */

/* The head of the ledger chain (schemas/009_chain.sql), signed: the last
 * entry's seq and hash, when it was signed, and the key that signed it.
 * The signature is Ed25519 over the SHA-256 of
 * "tally ledger head\n<seq>\n<hash>\n<time, RFC 3339>\n". */
typedef struct tally_ledger_head {
    int64_t seq; /* 0 and 64 zeros for an empty chain */
    char hash[65];
    int64_t time_s;
    char key_id[17];
    char signature[129];
} tally_ledger_head;

/* Signs the current head with the key at key_path. Errors: TALLY_NOT_FOUND
 * (no key), TALLY_CRYPTO, TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_ledger_head_sign(tally_ledger *l, const char *key_path,
                                                  tally_ledger_head *out);
/* Appends h as one line of JSON: {"type":"ledger.head","seq","hash","time",
 * "key_id","signature"}. */
TALLY_MUST_CHECK tally_err tally_ledger_head_json(const tally_ledger_head *h, tally_buf *out);
/* Checks a head saved from `tally head` (json, len): its signature with the
 * keys of key_path, and that the ledger's chain still holds that entry with
 * that hash. Run after tally_ledger_verify, which checks every entry before
 * it. Errors: TALLY_TAMPERED (why says what), TALLY_PARSE (not a head). */
TALLY_MUST_CHECK tally_err tally_ledger_head_check(tally_ledger *l, const char *key_path,
                                                   const char *json, size_t len, char *why,
                                                   size_t cap);
/* Adds a "ledger.head" outbox event (id "ledger.head:<seq>", subject
 * "ledger", data = the signed head) when the chain has grown since the last
 * one (other than by ledger.head events themselves); `tally publish` calls
 * it before draining, so heads are announced like invoices. *added says
 * whether one was added. Errors: those of tally_ledger_head_sign. */
TALLY_MUST_CHECK tally_err tally_ledger_head_announce(tally_ledger *l, const char *key_path,
                                                      bool *added);

#endif
