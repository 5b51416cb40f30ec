/* A fault-injecting SQLite VFS, for tests only.
 *
 * tally_faultvfs_install() registers "tally-fault", a shim over the default
 * VFS, and makes it the default, so that every ledger opened afterwards in
 * this process goes through it. It counts the calls that change what is on
 * disk (xWrite, xSync, xTruncate) on every file SQLite opens (the database,
 * its WAL, journals) and can make the Nth of them fail:
 *
 *   FAIL_ONCE    the Nth counted call fails; later ones succeed (a transient
 *                I/O error);
 *   FAIL_STICKY  the Nth and every later counted call fail and nothing more
 *                reaches the disk (a full or dead disk; once the connection
 *                is closed, the files are exactly as a process killed at
 *                that call would have left them).
 *
 * With tracking on, the VFS also remembers what each file held at its last
 * successful xSync; tally_faultvfs_power_cut() then puts back every byte
 * written since, as a power cut would lose it if the disk honours fsync
 * and nothing else.
 *
 * Nothing in Tally calls these functions: production code never goes
 * through the shim. The state is process-wide; use it from one thread. */
#ifndef TALLY_FAULTVFS_H
#define TALLY_FAULTVFS_H

#include <stdbool.h>
#include <stdint.h>

#include "tally/err.h"

typedef enum tally_fault_mode {
    TALLY_FAULT_OFF = 0,
    TALLY_FAULT_FAIL_ONCE,
    TALLY_FAULT_FAIL_STICKY,
} tally_fault_mode;

/* Which calls count (a bit set). */
enum {
    TALLY_FAULT_WRITE = 1,
    TALLY_FAULT_SYNC = 2,
    TALLY_FAULT_TRUNCATE = 4,
    TALLY_FAULT_ANY = 7,
};

/* What a failing call returns to SQLite. */
typedef enum tally_fault_kind {
    TALLY_FAULT_EIO = 0, /* SQLITE_IOERR_WRITE / _FSYNC / _TRUNCATE */
    TALLY_FAULT_ENOSPC,  /* SQLITE_FULL */
} tally_fault_kind;

/* Registers the shim as the default VFS; later calls do nothing.
 * Errors: TALLY_DB (SQLite refused), TALLY_NOMEM. */
TALLY_MUST_CHECK tally_err tally_faultvfs_install(void);

/* Arms a fault: counting from 1 at this call, the nth call whose kind is in
 * ops fails as mode and kind say. Clears an earlier fault and the fired flag. */
void tally_faultvfs_arm(tally_fault_mode mode, unsigned ops, int64_t nth, tally_fault_kind kind);
/* No fault from now on (tracking and counters are kept). */
void tally_faultvfs_disarm(void);

/* Counted calls of kinds in ops since install (write, sync, truncate are
 * counted whether or not a fault is armed). */
int64_t tally_faultvfs_count(unsigned ops);
/* Whether the armed fault has fired, and how many calls it failed. */
int64_t tally_faultvfs_failed(void);

/* Starts or stops remembering unsynced writes (off: forgets them). */
void tally_faultvfs_track(bool on);
/* Puts back, in every tracked file, what it held at its last xSync (or at
 * tracking start): bytes written since are restored and the size reset.
 * torn_seed 0 loses every unsynced write; otherwise each 512-byte sector of
 * each lost write is kept or lost at random (seeded), as a disk that
 * reorders and tears writes may leave it. Call with every connection on the
 * files closed. Forgets the tracked writes. Errors: TALLY_IO. */
TALLY_MUST_CHECK tally_err tally_faultvfs_power_cut(uint64_t torn_seed);

#endif
