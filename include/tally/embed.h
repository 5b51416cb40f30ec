/* Files compiled into the binary: SQL migrations, JSON Schemas and the
 * fixture price book, credits and usage stream. Names are paths relative to
 * the source tree, e.g. "schemas/001_init.sql". */
#ifndef TALLY_EMBED_H
#define TALLY_EMBED_H

#include <stddef.h>

typedef struct tally_embedded {
    const char *name;
    const char *data; /* NUL-terminated */
    size_t len;
} tally_embedded;

/* Terminated by an entry with name NULL; sorted as listed in CMakeLists. */
extern const tally_embedded tally_embedded_files[];

/* The embedded file with this name, or NULL. */
const tally_embedded *tally_embedded_find(const char *name);

#endif
