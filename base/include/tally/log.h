/* Logging from library code, in the manner of librdkafka's
 * rd_kafka_conf_set_log_cb(): the library never writes to stderr itself; it
 * hands each line to the callback the application set. The CLI sets one that
 * prints "tally <cmd>: <line>" to stderr; the server's lines go through the
 * same callback. With no callback set, lines are dropped: a program that
 * links the library and says nothing about logging gets a silent library.
 *
 * The callback is process-wide (one per process, as a program has one
 * stderr). It may be called from any thread Tally runs, concurrently; it must
 * not call back into Tally. Lines have no trailing newline and are at most
 * TALLY_LOG_LINE_MAX - 1 bytes (longer ones are cut and end in "..."). */
#ifndef TALLY_LOG_H
#define TALLY_LOG_H

#include <stdarg.h>

/* Severities, numbered as syslog's (and librdkafka's) levels. */
typedef enum tally_log_level {
    TALLY_LOG_ERR = 3,     /* a request or a run failed */
    TALLY_LOG_WARNING = 4, /* something was lost or will be retried */
    TALLY_LOG_NOTICE = 5,  /* a normal but significant event */
    TALLY_LOG_INFO = 6,
    TALLY_LOG_DEBUG = 7,
} tally_log_level;

#define TALLY_LOG_LINE_MAX 1024

/* fac names the part of Tally that speaks ("serve", "meter", "ledger");
 * line is the message. Both are borrowed for the duration of the call. */
typedef void tally_log_cb(void *opaque, tally_log_level level, const char *fac, const char *line);

/* Sets (or with cb NULL, clears) the process's log callback; opaque is
 * passed back to it. Not synchronised with concurrent tally_log() calls: set
 * it before starting threads, as librdkafka's is set before rd_kafka_new(). */
void tally_log_set_cb(tally_log_cb *cb, void *opaque);

/* Formats one line and hands it to the callback; does nothing without one. */
void tally_log(tally_log_level level, const char *fac, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void tally_vlog(tally_log_level level, const char *fac, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* "error", "warning", "notice", "info" or "debug"; never NULL. */
const char *tally_log_level_name(tally_log_level level);

#endif
