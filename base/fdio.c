#include "tally/fdio.h"

#include <errno.h>
#include <unistd.h>

tally_err tally_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EIO;
            return TALLY_IO;
        }
        c += w;
        n -= (size_t)w;
    }
    return TALLY_OK;
}
