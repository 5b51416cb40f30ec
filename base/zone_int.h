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
#define ZONE_CACHE_MAX 2048      /* the tz database has about 600 names */

/* The zone at path (TZDIR or /usr/share/zoneinfo, then the name), loaded on
 * first use. When the table of loaded zones is full, *owned receives a zone
 * only this caller holds (zone_free it) and *z points to it.
 * Errors: TALLY_INVAL (no such zone, or a file that is not a valid TZif
 * file), TALLY_NOMEM. */
TALLY_MUST_CHECK tally_err zone_get(const char *name, const tally_zone **z, tally_zone **owned);
void zone_free(tally_zone *z);

/* The UTC offset (seconds east) in force at UTC instant t. */
int64_t zone_offset(const tally_zone *z, int64_t t);

/* Parses one TZif file's bytes (for tests and zone_get). */
TALLY_MUST_CHECK tally_err zone_parse(const unsigned char *data, size_t len, tally_zone **out);

#endif
