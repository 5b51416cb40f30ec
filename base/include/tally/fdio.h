/* Whole writes to a file descriptor. */
#ifndef TALLY_FDIO_H
#define TALLY_FDIO_H

#include <stddef.h>

#include "tally/err.h"

/* Writes all n bytes of p to fd, again after EINTR and short writes.
 * Errors: TALLY_IO, with errno set (EIO when write wrote nothing). */
TALLY_MUST_CHECK tally_err tally_write_all(int fd, const void *p, size_t n);

#endif
