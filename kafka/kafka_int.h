/* Internal to the embedded broker: the loopback bootstrap forwarder. */
#ifndef TALLY_KAFKA_INT_H
#define TALLY_KAFKA_INT_H

#include <stddef.h>

#include "tally/err.h"

typedef struct fwd fwd;

/* Listens on 127.0.0.1:port and relays each accepted connection to the
 * first of the ports (also on 127.0.0.1) that accepts, in a thread of its
 * own. Errors: TALLY_IO (bind or listen failed), TALLY_NOMEM. */
TALLY_MUST_CHECK tally_err fwd_start(int port, const int *ports, size_t nports, fwd **out,
                                     char *why, size_t cap);
/* Stops the thread and closes every connection; accepts NULL. */
void fwd_stop(fwd *f);

#endif
