/* Scale-out: a ledger split into one shard per Kafka partition (SPEC section 8).
 *
 * A ledger directory DIR (an existing directory given as the ledger path,
 * e.g. `tally --db DIR ...`) holds:
 *
 *   DIR/main.db                        account-level state: accounts, rate
 *                                      cards, spot prices, commitments,
 *                                      grants, invoices (numbered here,
 *                                      without gaps), postings, outbox
 *   DIR/shard-<topic>-<partition>.db   one partition's usage, dedupe keys,
 *                                      quarantine and stored offset
 *   DIR/shard-<topic>-<partition>.lock the lock that proves who writes it
 *
 * tally_ledger_open(DIR) opens main.db and reads every shard it finds
 * (read-only connections, opened lazily): invoice runs, `tally usage` and
 * the HTTP API see the usage of all shards; accounts first seen in a shard
 * are added to main.db. Writers of shards are `tally meter` processes
 * through a tally_shard_set, one shard per partition they are assigned.
 *
 * Ownership. Only the holder of a shard's lock writes the shard. The lock
 * is an exclusive open-file-description lock (fcntl F_OFD_SETLK, or POSIX
 * F_SETLK where OFD locks do not exist) on the .lock file, held for as long
 * as the partition is assigned; the kernel drops it when the holder dies.
 * Each acquisition appends an owner row (a new epoch) to the shard's
 * shard_owners table, and the holder's connection carries a fence: every
 * write of the shard's offset checks, inside the batch's own transaction,
 * that its epoch is still the newest, and counts the write against that
 * epoch (writes, first and last offset and time). A writer that lost its
 * lock without noticing (e.g. an NFS lease that expired) is refused there,
 * and the offset compare-and-set of every batch refuses it as well.
 *
 * Routing. Producers key usage by account and partition keys with murmur2
 * (TALLY_KAFKA_PARTITIONER), so one account's events, and all copies of one
 * event, land in one partition and so in one shard: the dedupe index of a
 * shard is complete for its events. Invoicing does not depend on it: an
 * account's usage is read from every shard that holds it. */
#ifndef TALLY_SHARD_H
#define TALLY_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tally/err.h"
#include "tally/ledger.h"
#include "tally/partition.h"

/* Whether l was opened from a ledger directory. */
bool tally_ledger_is_dir(const tally_ledger *l);

/* The directory l was opened from, or NULL for a plain ledger file. */
const char *tally_ledger_dir(const tally_ledger *l);

/* ---- Writing shards (the meter) -------------------------------------------- */

typedef struct tally_shard_set tally_shard_set;
typedef struct tally_shard tally_shard;

/* A writer of the shards of the ledger directory that main was opened from.
 * main (borrowed; it must outlive the set) is used to copy rate cards into
 * shards; the set uses it only inside its own calls. owner names this
 * process in owner rows (NULL: "<hostname>:<pid>").
 * Errors: TALLY_INVAL (main is not a ledger directory), TALLY_NOMEM. */
TALLY_MUST_CHECK tally_err tally_shard_set_create(tally_ledger *main, const char *owner,
                                                  tally_shard_set **out);
/* Releases every shard still held, then frees s; accepts NULL. */
void tally_shard_set_destroy(tally_shard_set *s);

/* Takes the shard of (topic, partition), on one thread at a time (it uses
 * main.db's connection): the lock (retrying every 50 ms for
 * up to wait_ms; 0: one try), then the shard database (created if new), a new
 * owner row and the fence, and the rate cards of main.db; then it refreshes
 * in main.db the balances that an earlier holder's commits left pending (as
 * tally_shard_set_balances_flush; a failure there is logged, not returned). If this set holds
 * the shard already, *out is that shard. topic must be a Kafka topic name
 * (1..249 of [A-Za-z0-9._-]). On error *out is NULL and why says why.
 * Errors: TALLY_BUSY (another process holds the lock), TALLY_INVAL,
 * TALLY_IO, TALLY_DB, TALLY_NOMEM. */
TALLY_MUST_CHECK tally_err tally_shard_acquire(tally_shard_set *s, const char *topic,
                                               int32_t partition, int64_t wait_ms,
                                               tally_shard **out, char *why, size_t cap);

/* The shard of (topic, partition) if this set holds it, else NULL. */
tally_shard *tally_shard_find(tally_shard_set *s, const char *topic, int32_t partition);

/* Stamps the owner row released, closes the shard and drops the lock;
 * accepts NULL. The shard's batch is destroyed with it. */
void tally_shard_release(tally_shard *sh);

/* Releases every shard the set holds. */
void tally_shard_release_all(tally_shard_set *s);

/* The shard's ledger connection (owned by the shard): for
 * tally_ledger_offset_get and reads. */
tally_ledger *tally_shard_ledger(tally_shard *sh);

/* The shard's ingest batch (owned by the shard, created on first use), so
 * that its open intervals keep coalescing across commits. Call
 * tally_shard_prepare before each tally_batch_commit.
 * Errors: TALLY_NOMEM. */
TALLY_MUST_CHECK tally_err tally_shard_batch(tally_shard *sh, tally_batch **out);

/* Destroys the shard's batch with anything queued in it (after a failed
 * queueing); the next tally_shard_batch creates a fresh one. */
void tally_shard_batch_drop(tally_shard *sh);

/* Copies rate cards loaded into main.db since the last copy (a cheap check
 * when there are none), so the next commit prices events as main.db would.
 * It uses the set's main.db connection: call it from one thread at a time,
 * while nothing else uses main. Errors: TALLY_DB, TALLY_BUSY. */
TALLY_MUST_CHECK tally_err tally_shard_prepare(tally_shard *sh);

/* Refreshes in main.db the prepaid balances of the accounts that the held
 * shards' commits touched since the last flush (include/tally/balance.h):
 * per shard, one main.db write transaction for what its balance_pending
 * rows ask (about 10,000 accounts at most; the rest on the next call). Call
 * it after each round of commits, on the thread that uses main (it uses
 * main.db's connection, and each shard's ledger, which no commit may be
 * using meanwhile). It never undoes usage. When another writer holds
 * main.db past a short wait (100 ms), the rows stay pending, it is logged,
 * and the call answers TALLY_OK: the next flush, the next acquisition of
 * the shard or `tally publish`'s sweep takes them. Errors (logged, rows
 * pending): TALLY_DB, TALLY_NOMEM, those of a refresh that are fatal. */
TALLY_MUST_CHECK tally_err tally_shard_set_balances_flush(tally_shard_set *s);

/* The epoch of the shard's current owner row (1, 2, ...). */
int64_t tally_shard_epoch(const tally_shard *sh);

#endif
