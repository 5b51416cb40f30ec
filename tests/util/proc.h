/* Child processes and the embedded broker for Tally's end-to-end and
 * reliability tests: every child is tracked so that a failing test still
 * reaps it (tu_proc_teardown), and the broker is driven through its stdin
 * fault-injection commands. */
#ifndef TALLY_TEST_PROC_H
#define TALLY_TEST_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TU_MAX_CHILDREN 32

/* Monotonic milliseconds; sleeping. */
int64_t tu_ms(void);
void tu_sleep_ms(int64_t ms);
/* An integer from the environment, or dflt. */
long tu_env(const char *name, long dflt);
/* xorshift64: a small seeded generator for reproducible schedules. */
uint64_t tu_rand(uint64_t *s);

void tu_track(pid_t pid);
void tu_untrack(pid_t pid);
/* Waits up to ms for pid: its exit status, 128+signal, -1 if still running,
 * -2 if it is not our child. */
int tu_wait(pid_t pid, int64_t ms);
/* Sends sig, waits grace_ms, then SIGKILL; returns tu_wait's result. */
int tu_stop(pid_t pid, int sig, int64_t grace_ms);
/* cmocka teardown: kills every tracked child. */
int tu_proc_teardown(void **state);
/* Starts argv with stdout and stderr appended to log (if not NULL), and,
 * if in_fd/out_fd are not NULL, pipes to its stdin and from its stdout. */
pid_t tu_spawn(const char *const *argv, const char *log, int *in_fd, int *out_fd);
/* Reads one line from fd within ms (without reading past it). */
bool tu_read_line(int fd, char *buf, size_t cap, int64_t ms);

/* `tally broker` in its own process. */
typedef struct tu_broker {
    pid_t pid;
    int ctl, out; /* its stdin and stdout */
    char bootstrap[256];
} tu_broker;

void tu_broker_start(tu_broker *b, int partitions, const char *log);
/* Sends one fault-injection command and expects "ok". */
void tu_broker_ctl(tu_broker *b, const char *cmd);
void tu_broker_stop(tu_broker *b);

#endif
