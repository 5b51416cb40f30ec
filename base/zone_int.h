/* IANA time zones read from their TZif files (RFC 8536), for period.c.
 *
 * The C library answers "which UTC offset is in force at t" only for the
 * process's one TZ, which must be switched with setenv() and tzset(): that
 * is not safe while other threads run (an invoice run's file writers, a
 * meter's shard commits, verify's second connection) and each switch reads
 * the zone's file again. So Tally reads each zone's file itself, once, and
 * keeps it: a loaded zone never changes and is never freed, so threads
 * share it without locks; only the table of loaded zones takes a mutex. */
#ifndef TALLY_ZONE_INT_H
#define TALLY_ZONE_INT_H

#include <stdint.h>

#include "tally/err.h"

typedef struct tally_zone tally_zone;

#define ZONE_FILE_MAX  (1 << 20) /* real zone files are a few kilobytes */
#define ZONE_CACHE_MAX 4096      /* Debian's zone directory holds about 900 files */

/* The zone at path (TZDIR or /usr/share/zoneinfo, then the name), loaded on
 * first use and kept for the process.
 * Errors: TALLY_INVAL (no such zone, or a file that is not a valid TZif
 * file), TALLY_TOO_LARGE (ZONE_CACHE_MAX zones loaded already), TALLY_NOMEM. */
TALLY_MUST_CHECK tally_err zone_get(const char *name, const tally_zone **z);
/* Frees a zone of zone_parse (never one of zone_get). */
void zone_free(tally_zone *z);

/* The UTC offset (seconds east) in force at UTC instant t. */
int64_t zone_offset(const tally_zone *z, int64_t t);

/* Parses one TZif file's bytes (for tests and zone_get). */
TALLY_MUST_CHECK tally_err zone_parse(const unsigned char *data, size_t len, tally_zone **out);

#endif
