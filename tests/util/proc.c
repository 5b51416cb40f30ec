#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

static pid_t children[TU_MAX_CHILDREN];

int64_t tu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void tu_sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

long tu_env(const char *name, long dflt)
{
    const char *s = getenv(name);
    return s && *s ? strtol(s, NULL, 10) : dflt;
}

uint64_t tu_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

void tu_track(pid_t pid)
{
    for (int i = 0; i < TU_MAX_CHILDREN; i++)
        if (children[i] == 0) {
            children[i] = pid;
            return;
        }
    kill(pid, SIGKILL);
    fail_msg("too many child processes");
}

void tu_untrack(pid_t pid)
{
    for (int i = 0; i < TU_MAX_CHILDREN; i++)
        if (children[i] == pid)
            children[i] = 0;
}

int tu_wait(pid_t pid, int64_t ms)
{
    int64_t until = tu_ms() + ms;
    for (;;) {
        int st = 0;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            tu_untrack(pid);
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        if (r < 0) {
            tu_untrack(pid);
            return -2;
        }
        if (tu_ms() >= until)
            return -1;
        tu_sleep_ms(10);
    }
}

int tu_stop(pid_t pid, int sig, int64_t grace_ms)
{
    if (pid <= 0)
        return -2;
    kill(pid, sig);
    int rc = tu_wait(pid, grace_ms);
    if (rc == -1) {
        kill(pid, SIGKILL);
        rc = tu_wait(pid, 10000);
    }
    return rc;
}

int tu_proc_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < TU_MAX_CHILDREN; i++)
        if (children[i] > 0)
            (void)tu_stop(children[i], SIGKILL, 2000);
    return 0;
}

pid_t tu_spawn(const char *const *argv, const char *log, int *in_fd, int *out_fd)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1};
    if ((in_fd && pipe(in) != 0) || (out_fd && pipe(out) != 0))
        fail_msg("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        fail_msg("fork: %s", strerror(errno));
    if (pid == 0) {
        int fd = log ? open(log, O_WRONLY | O_CREAT | O_APPEND, 0644) : open("/dev/null", O_WRONLY);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        dup2(in_fd ? in[0] : open("/dev/null", O_RDONLY), 0);
        if (out_fd)
            dup2(out[1], 1);
        for (int i = 3; i < 64; i++)
            close(i);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    tu_track(pid);
    if (in_fd) {
        close(in[0]);
        *in_fd = in[1];
    }
    if (out_fd) {
        close(out[1]);
        *out_fd = out[0];
    }
    return pid;
}

bool tu_read_line(int fd, char *buf, size_t cap, int64_t ms)
{
    size_t n = 0;
    int64_t until = tu_ms() + ms;
    while (n + 1 < cap) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int left = (int)(until - tu_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0)
            return false;
        ssize_t r = read(fd, buf + n, 1);
        if (r <= 0)
            return false;
        if (buf[n] == '\n') {
            buf[n] = '\0';
            return true;
        }
        n++;
    }
    return false;
}

void tu_broker_start(tu_broker *b, int partitions, const char *log)
{
    char parts[16];
    snprintf(parts, sizeof parts, "%d", partitions);
    const char *argv[] = {TALLY_BINARY, "broker", "--partitions", parts, NULL};
    /* A broker that dies must fail a write with EPIPE, so the test can say
     * so, instead of killing the test with SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    b->pid = tu_spawn(argv, log, &b->ctl, &b->out);
    if (!tu_read_line(b->out, b->bootstrap, sizeof b->bootstrap, 20000))
        fail_msg("the broker printed no bootstrap address");
    assert_non_null(strstr(b->bootstrap, "127.0.0.1:"));
}

void tu_broker_ctl(tu_broker *b, const char *cmd)
{
    char line[256];
    size_t len = strlen(cmd);
    if (write(b->ctl, cmd, len) != (ssize_t)len || write(b->ctl, "\n", 1) != 1)
        fail_msg("cannot write to the broker");
    /* 60 s: a command answers at once, but a machine busy with the
     * sanitizer build's tests can stall the broker for a while. */
    if (!tu_read_line(b->out, line, sizeof line, 60000))
        fail_msg("the broker did not answer '%s'", cmd);
    if (strcmp(line, "ok") != 0)
        fail_msg("broker: '%s' -> '%s'", cmd, line);
}

void tu_broker_stop(tu_broker *b)
{
    if (b->pid <= 0)
        return;
    close(b->ctl);
    close(b->out);
    assert_int_equal(tu_stop(b->pid, SIGTERM, 10000), 0);
    b->pid = 0;
}
