/* Internal to the ledger module: the lock file of a shard (shard_lock.c). */
#ifndef TALLY_SHARD_LOCK_H
#define TALLY_SHARD_LOCK_H

#include <stddef.h>
#include <stdint.h>

#include "tally/err.h"

/* Opens (creating) the lock file at path and takes an exclusive lock on it,
 * retrying every 50 ms for up to wait_ms. On success *fd_out holds it.
 * Errors: TALLY_BUSY (still held by another open file; why names the holder
 * line), TALLY_IO. */
tally_err shard_lock_take(const char *path, int64_t wait_ms, int *fd_out, char *why, size_t cap);

/* Replaces the lock file's text with line (who holds it); best effort. */
void shard_lock_note(int fd, const char *line);

/* Drops the lock (closes fd); accepts -1. */
void shard_lock_drop(int fd);

#endif
