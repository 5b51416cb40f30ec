/* The lock that proves who writes a shard: an exclusive lock on
 * DIR/shard-<topic>-<partition>.lock held from acquisition to release.
 *
 * Open-file-description locks (F_OFD_SETLK) belong to the open file, not to
 * the process: two sets in one process exclude each other, closing another
 * descriptor of the file does not drop the lock (as it would a POSIX
 * F_SETLK lock), and the kernel drops the lock when the holder's last
 * descriptor closes, which includes the holder dying. Where OFD locks do
 * not exist, POSIX F_SETLK locks are used (each lock file is opened once
 * per process, so their closing rule does no harm). The holder writes a
 * line naming itself into the file, for people and for error messages; the
 * lock, not that line, is what counts. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ledger_int.h"

#define LOCK_RETRY_MS 50

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One non-blocking try: 0 taken, 1 held by someone else, -1 error (errno). */
static int try_lock(int fd)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    int rc = -1;
#ifdef F_OFD_SETLK
    rc = fcntl(fd, F_OFD_SETLK, &fl);
    if (rc != 0 && errno == EINVAL) /* a kernel or file system without OFD locks */
#endif
        rc = fcntl(fd, F_SETLK, &fl);
    if (rc == 0)
        return 0;
    return errno == EAGAIN || errno == EACCES || errno == EINTR ? 1 : -1;
}

/* The holder's line from the lock file, for messages ("" if unreadable). */
static void holder_line(int fd, char *out, size_t cap)
{
    ssize_t n = pread(fd, out, cap - 1, 0);
    out[n > 0 ? (size_t)n : 0] = '\0';
    out[strcspn(out, "\r\n")] = '\0';
}

tally_err shard_lock_take(const char *path, int64_t wait_ms, int *fd_out, char *why, size_t cap)
{
    *fd_out = -1;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(why, cap, "%s: %s", path, strerror(errno));
        return TALLY_IO;
    }
    int64_t until = mono_ms() + (wait_ms > 0 ? wait_ms : 0);
    for (;;) {
        int rc = try_lock(fd);
        if (rc == 0)
            break;
        if (rc < 0) {
            snprintf(why, cap, "%s: cannot lock: %s", path, strerror(errno));
            close(fd);
            return TALLY_IO;
        }
        if (mono_ms() >= until) {
            char holder[200];
            holder_line(fd, holder, sizeof holder);
            snprintf(why, cap, "%s is held by another process (%s)", path,
                     holder[0] ? holder : "no owner line");
            close(fd);
            return TALLY_BUSY;
        }
        struct timespec ts = {.tv_sec = 0, .tv_nsec = LOCK_RETRY_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
    *fd_out = fd;
    return TALLY_OK;
}

void shard_lock_note(int fd, const char *line)
{
    size_t n = strlen(line);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, n, 0) != (ssize_t)n)
        return; /* informational only */
}

void shard_lock_drop(int fd)
{
    if (fd >= 0)
        close(fd); /* the last descriptor of the open file: the lock goes with it */
}
