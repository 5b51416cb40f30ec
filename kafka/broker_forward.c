/* A loopback TCP forwarder for `tally broker --port`.
 *
 * librdkafka's mock brokers bind ephemeral ports. To offer a port chosen by
 * the user, this relays every connection made to 127.0.0.1:port to the first
 * mock broker that accepts it. Only bootstrap traffic goes through it: the
 * cluster's metadata names the brokers' own ports. One thread polls all
 * sockets; each direction has one buffer, read only when it is empty, so a
 * slow side slows the other instead of growing memory. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kafka_int.h"

#define FWD_MAX_CONNS 64
#define FWD_BUF       65536
#define FWD_MAX_PORTS 16

typedef struct pipe_dir {
    char data[FWD_BUF];
    size_t len, off;
} pipe_dir;

typedef struct conn {
    int fd[2];      /* 0: client, 1: broker */
    pipe_dir to[2]; /* to[i]: bytes waiting to be written to fd[i] */
} conn;

struct fwd {
    int listen_fd;
    int wake[2];
    int ports[FWD_MAX_PORTS];
    size_t nports;
    conn *conns[FWD_MAX_CONNS];
    pthread_t thread;
};

static void set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static struct sockaddr_in loopback(int port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return sin;
}

/* A connected socket to the first broker that accepts, or -1. */
static int connect_upstream(const fwd *f)
{
    for (size_t i = 0; i < f->nports; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -1;
        struct sockaddr_in sin = loopback(f->ports[i]);
        if (connect(fd, (struct sockaddr *)&sin, sizeof sin) == 0) {
            int one = 1;
            (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            set_nonblock(fd);
            return fd;
        }
        close(fd);
    }
    return -1;
}

static void conn_close(fwd *f, size_t i)
{
    close(f->conns[i]->fd[0]);
    close(f->conns[i]->fd[1]);
    free(f->conns[i]);
    f->conns[i] = NULL;
}

static void accept_one(fwd *f)
{
    int cfd = accept4(f->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (cfd < 0)
        return;
    size_t slot = 0;
    while (slot < FWD_MAX_CONNS && f->conns[slot])
        slot++;
    int bfd = slot < FWD_MAX_CONNS ? connect_upstream(f) : -1;
    conn *c = bfd >= 0 ? calloc(1, sizeof *c) : NULL;
    if (!c) {
        if (bfd >= 0)
            close(bfd);
        close(cfd);
        return;
    }
    int one = 1;
    (void)setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->fd[0] = cfd;
    c->fd[1] = bfd;
    f->conns[slot] = c;
}

/* Moves bytes for one side of a connection; false when it should close. */
static bool pump(conn *c, int side, short revents)
{
    pipe_dir *out = &c->to[1 - side]; /* what we read from fd[side] */
    if ((revents & (POLLIN | POLLHUP | POLLERR)) && out->len == 0) {
        ssize_t n = read(c->fd[side], out->data, sizeof out->data);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            return false;
        if (n > 0) {
            out->len = (size_t)n;
            out->off = 0;
        }
    }
    pipe_dir *in = &c->to[side]; /* what we write to fd[side] */
    if (in->len > in->off) {
        ssize_t n = write(c->fd[side], in->data + in->off, in->len - in->off);
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return false;
        if (n > 0)
            in->off += (size_t)n;
        if (in->off == in->len)
            in->len = in->off = 0;
    }
    return true;
}

static void *fwd_main(void *arg)
{
    fwd *f = arg;
    struct pollfd pfd[2 + 2 * FWD_MAX_CONNS];
    size_t owner[2 * FWD_MAX_CONNS];
    for (;;) {
        size_t n = 0;
        pfd[n++] = (struct pollfd){.fd = f->wake[0], .events = POLLIN};
        pfd[n++] = (struct pollfd){.fd = f->listen_fd, .events = POLLIN};
        for (size_t i = 0; i < FWD_MAX_CONNS; i++) {
            conn *c = f->conns[i];
            if (!c)
                continue;
            for (int s = 0; s < 2; s++) {
                short ev = 0;
                if (c->to[1 - s].len == 0)
                    ev |= POLLIN;
                if (c->to[s].len > c->to[s].off)
                    ev |= POLLOUT;
                owner[n - 2] = i;
                pfd[n++] = (struct pollfd){.fd = c->fd[s], .events = ev};
            }
        }
        if (poll(pfd, n, 1000) < 0 && errno != EINTR)
            break;
        if (pfd[0].revents)
            break;
        for (size_t k = 2; k < n; k++) {
            size_t i = owner[k - 2];
            if (!f->conns[i] || !pfd[k].revents)
                continue;
            if (!pump(f->conns[i], (int)(k % 2), pfd[k].revents))
                conn_close(f, i);
        }
        if (pfd[1].revents & POLLIN)
            accept_one(f);
    }
    return NULL;
}

static tally_err fwd_listen(fwd *f, int port, char *why, size_t cap)
{
    f->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (f->listen_fd < 0) {
        snprintf(why, cap, "socket: %s", strerror(errno));
        return TALLY_IO;
    }
    int one = 1;
    (void)setsockopt(f->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sin = loopback(port);
    if (bind(f->listen_fd, (struct sockaddr *)&sin, sizeof sin) != 0 ||
        listen(f->listen_fd, 64) != 0) {
        snprintf(why, cap, "cannot listen on 127.0.0.1:%d: %s", port, strerror(errno));
        return TALLY_IO;
    }
    return TALLY_OK;
}

tally_err fwd_start(int port, const int *ports, size_t nports, fwd **out, char *why, size_t cap)
{
    *out = NULL;
    if (nports == 0 || nports > FWD_MAX_PORTS || port <= 0 || port > 65535) {
        snprintf(why, cap, "bad forwarder port");
        return TALLY_INVAL;
    }
    fwd *f = calloc(1, sizeof *f);
    if (!f) {
        snprintf(why, cap, "out of memory");
        return TALLY_NOMEM;
    }
    f->wake[0] = f->wake[1] = -1;
    memcpy(f->ports, ports, nports * sizeof *ports);
    f->nports = nports;
    tally_err e = fwd_listen(f, port, why, cap);
    if (e)
        goto out_fail;
    e = TALLY_IO;
    if (pipe2(f->wake, O_CLOEXEC) != 0) {
        snprintf(why, cap, "pipe: %s", strerror(errno));
        goto out_fail;
    }
    if (pthread_create(&f->thread, NULL, fwd_main, f) != 0) {
        snprintf(why, cap, "cannot start the forwarder thread");
        goto out_fail;
    }
    *out = f;
    return TALLY_OK;
out_fail:
    if (f->listen_fd >= 0)
        close(f->listen_fd);
    if (f->wake[0] >= 0) {
        close(f->wake[0]);
        close(f->wake[1]);
    }
    free(f);
    return e;
}

void fwd_stop(fwd *f)
{
    if (!f)
        return;
    ssize_t w = write(f->wake[1], "x", 1);
    (void)w;
    pthread_join(f->thread, NULL);
    for (size_t i = 0; i < FWD_MAX_CONNS; i++)
        if (f->conns[i])
            conn_close(f, i);
    close(f->listen_fd);
    close(f->wake[0]);
    close(f->wake[1]);
    free(f);
}
