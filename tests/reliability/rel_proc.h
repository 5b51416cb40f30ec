/* Processes for the reliability tests: children that are always reaped,
 * the embedded broker driven through its stdin, and an in-process producer
 * that writes each message to the partition the test chose (idempotent, so
 * a partition's order is the order of the calls). Header-only: each test is
 * one executable. */
#ifndef TALLY_REL_PROC_H
#define TALLY_REL_PROC_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "testutil.h"

#define REL_MAX_CHILDREN 32

static pid_t rel_children[REL_MAX_CHILDREN];

static inline int64_t rel_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void rel_sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static inline long rel_env(const char *name, long dflt)
{
    const char *s = getenv(name);
    return s && *s ? strtol(s, NULL, 10) : dflt;
}

static inline uint64_t rel_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* ---- Children ----------------------------------------------------------------- */

static inline void rel_track(pid_t pid)
{
    for (int i = 0; i < REL_MAX_CHILDREN; i++)
        if (rel_children[i] == 0) {
            rel_children[i] = pid;
            return;
        }
    kill(pid, SIGKILL);
    fail_msg("too many child processes");
}

/* Waits up to ms for pid: its exit status, 128+signal, or -1 if running. */
static inline int rel_wait(pid_t pid, int64_t ms)
{
    int64_t until = rel_ms() + ms;
    for (;;) {
        int st = 0;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid || r < 0) {
            for (int i = 0; i < REL_MAX_CHILDREN; i++)
                if (rel_children[i] == pid)
                    rel_children[i] = 0;
            if (r < 0)
                return -2;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        if (rel_ms() >= until)
            return -1;
        rel_sleep_ms(10);
    }
}

/* Sends sig, then SIGKILL after grace_ms; returns what rel_wait returns. */
static inline int rel_stop(pid_t pid, int sig, int64_t grace_ms)
{
    if (pid <= 0)
        return -2;
    kill(pid, sig);
    int rc = rel_wait(pid, grace_ms);
    if (rc == -1) {
        kill(pid, SIGKILL);
        rc = rel_wait(pid, 10000);
    }
    return rc;
}

/* Kills and reaps every child still running (test teardown). */
static inline int rel_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < REL_MAX_CHILDREN; i++)
        if (rel_children[i] > 0)
            (void)rel_stop(rel_children[i], SIGKILL, 2000);
    return 0;
}

/* Starts argv with stdout and stderr appended to log (if not NULL), and,
 * if in_fd/out_fd are not NULL, pipes to its stdin and from its stdout. */
static inline pid_t rel_spawn(const char *const *argv, const char *log, int *in_fd, int *out_fd)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1};
    if ((in_fd && pipe(in) != 0) || (out_fd && pipe(out) != 0))
        fail_msg("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        fail_msg("fork: %s", strerror(errno));
    if (pid == 0) {
        int fd = open(log ? log : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        dup2(in_fd ? in[0] : open("/dev/null", O_RDONLY), 0);
        if (out_fd)
            dup2(out[1], 1);
        for (int i = 3; i < 256; i++)
            close(i);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    rel_track(pid);
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

/* Reads one line from fd within ms (one byte at a time: never past it). */
static inline bool rel_read_line(int fd, char *buf, size_t cap, int64_t ms)
{
    size_t n = 0;
    int64_t until = rel_ms() + ms;
    while (n + 1 < cap) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int left = (int)(until - rel_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0 || read(fd, buf + n, 1) != 1)
            return false;
        if (buf[n] == '\n') {
            buf[n] = '\0';
            return true;
        }
        n++;
    }
    return false;
}

/* ---- The broker ------------------------------------------------------------------ */

typedef struct rel_broker {
    pid_t pid;
    int ctl, out; /* its stdin and stdout */
    char bootstrap[256];
} rel_broker;

static inline void rel_broker_start(rel_broker *b, int partitions, const char *log)
{
    char parts[16];
    snprintf(parts, sizeof parts, "%d", partitions);
    const char *argv[] = {TALLY_BINARY, "broker", "--partitions", parts, NULL};
    b->pid = rel_spawn(argv, log, &b->ctl, &b->out);
    if (!rel_read_line(b->out, b->bootstrap, sizeof b->bootstrap, 20000))
        fail_msg("the broker printed no bootstrap address");
    assert_non_null(strstr(b->bootstrap, "127.0.0.1:"));
}

/* Sends one fault-injection command and expects "ok". */
static inline void rel_broker_ctl(rel_broker *b, const char *cmd)
{
    char line[256];
    size_t len = strlen(cmd);
    if (write(b->ctl, cmd, len) != (ssize_t)len || write(b->ctl, "\n", 1) != 1)
        fail_msg("cannot write to the broker");
    if (!rel_read_line(b->out, line, sizeof line, 10000))
        fail_msg("the broker did not answer '%s'", cmd);
    if (strcmp(line, "ok") != 0)
        fail_msg("broker: '%s' -> '%s'", cmd, line);
}

static inline void rel_broker_stop(rel_broker *b)
{
    if (b->pid <= 0)
        return;
    close(b->ctl);
    close(b->out);
    assert_int_equal(rel_stop(b->pid, SIGTERM, 10000), 0);
    b->pid = 0;
}

/* ---- Producing ---------------------------------------------------------------------- */

/* Delivery reports: the offset each message got goes to the int64_t its
 * opaque points at (if any); failures are counted. */
static long rel_dr_failed;

static inline void rel_dr(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    (void)opaque;
    if (m->err)
        rel_dr_failed++;
    else if (m->_private)
        *(int64_t *)m->_private = m->offset;
}

static inline rd_kafka_t *rel_producer(const rel_broker *b)
{
    char err[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set_dr_msg_cb(conf, rel_dr);
    const char *kv[][2] = {{"bootstrap.servers", b->bootstrap},
                           {"enable.idempotence", "true"},
                           {"linger.ms", "5"},
                           {"log.connection.close", "false"}};
    for (size_t i = 0; i < sizeof kv / sizeof *kv; i++)
        if (rd_kafka_conf_set(conf, kv[i][0], kv[i][1], err, sizeof err) != RD_KAFKA_CONF_OK)
            fail_msg("%s: %s", kv[i][0], err);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk)
        fail_msg("producer: %s", err);
    return rk;
}

/* Queues val for partition; *offset_out (if not NULL) gets its offset on
 * delivery (read it after rel_flush). */
static inline void rel_produce(rd_kafka_t *rk, int partition, const char *key, const char *val,
                               int64_t *offset_out)
{
    for (int tries = 0;; tries++) {
        rd_kafka_resp_err_t e = rd_kafka_producev(
            rk, RD_KAFKA_V_TOPIC("usage"), RD_KAFKA_V_PARTITION(partition),
            RD_KAFKA_V_KEY(key, strlen(key)), RD_KAFKA_V_VALUE((void *)val, strlen(val)),
            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_OPAQUE(offset_out),
            RD_KAFKA_V_END);
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
            return;
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL || tries > 1000)
            fail_msg("produce: %s", rd_kafka_err2str(e));
        rd_kafka_poll(rk, 10);
    }
}

static inline void rel_flush(rd_kafka_t *rk)
{
    if (rd_kafka_flush(rk, 30000) != RD_KAFKA_RESP_ERR_NO_ERROR)
        fail_msg("the producer could not deliver everything in 30 s");
    if (rel_dr_failed)
        fail_msg("%ld messages were not delivered", rel_dr_failed);
}

/* Starts `tally meter` on db in group with extra arguments (NULL-ended). */
static inline pid_t rel_meter(const char *db, const rel_broker *b, const char *group,
                              const char *log, const char *const *extra)
{
    const char *argv[40] = {TALLY_BINARY,           "--db",    db,      "meter",   "--brokers",
                            b->bootstrap,           "--topic", "usage", "--group", group,
                            "--session-timeout-ms", "3000"};
    int n = 12;
    for (int i = 0; extra && extra[i] && n < 39; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    return rel_spawn(argv, log, NULL, NULL);
}

#endif
