/* The process's log callback (include/tally/log.h). */
#include <stdio.h>
#include <string.h>

#include "tally/log.h"

static tally_log_cb *log_cb;
static void *log_opaque;

void tally_log_set_cb(tally_log_cb *cb, void *opaque)
{
    log_cb = cb;
    log_opaque = opaque;
}

void tally_vlog(tally_log_level level, const char *fac, const char *fmt, va_list ap)
{
    tally_log_cb *cb = log_cb;
    if (!cb)
        return;
    char line[TALLY_LOG_LINE_MAX];
    int n = vsnprintf(line, sizeof line, fmt, ap);
    if (n < 0)
        snprintf(line, sizeof line, "(unformattable log line: %s)", fmt);
    else if ((size_t)n >= sizeof line) /* diagnostic only: cut, but say so */
        memcpy(line + sizeof line - 4, "...", 4);
    cb(log_opaque, level, fac ? fac : "", line);
}

void tally_log(tally_log_level level, const char *fac, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tally_vlog(level, fac, fmt, ap);
    va_end(ap);
}

const char *tally_log_level_name(tally_log_level level)
{
    switch (level) {
    case TALLY_LOG_ERR:
        return "error";
    case TALLY_LOG_WARNING:
        return "warning";
    case TALLY_LOG_NOTICE:
        return "notice";
    case TALLY_LOG_INFO:
        return "info";
    case TALLY_LOG_DEBUG:
        return "debug";
    }
    return "error";
}
