#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "tally/buf.h"
#include "tally/event.h"

static void vcli_error(const cli_ctx *ctx, const char *fmt, va_list ap)
{
    fprintf(stderr, "tally %s: ", ctx->cmd ? ctx->cmd : "");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

int cli_error(const cli_ctx *ctx, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vcli_error(ctx, fmt, ap);
    va_end(ap);
    return code;
}

int cli_error_for(const cli_ctx *ctx, tally_err e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vcli_error(ctx, fmt, ap);
    va_end(ap);
    return cli_exit_code(e);
}

void cli_log(void *opaque, tally_log_level level, const char *fac, const char *line)
{
    (void)opaque;
    (void)level; /* every line the library logs is worth an operator's eye */
    fprintf(stderr, "tally %s: %s\n", fac, line);
}

void cli_usage(const cli_ctx *ctx, bool to_stderr)
{
    const cli_command *c = cli_find(ctx->cmd);
    FILE *f = to_stderr ? stderr : stdout;
    if (!c)
        return;
    fprintf(f, "usage: tally %s %s\n", c->name, c->usage);
    if (!to_stderr)
        fprintf(f, "\n%s.\n", c->summary);
}

bool cli_wants_help(const cli_ctx *ctx, int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            cli_usage(ctx, false);
            return true;
        }
    return false;
}

int cli_create_ledger(const cli_ctx *ctx, tally_ledger **out)
{
    char why[256] = "";
    tally_err e = tally_ledger_open(ctx->db_path, out, why, sizeof why);
    if (e)
        return cli_error_for(ctx, e, "cannot open ledger %s: %s", ctx->db_path,
                             why[0] ? why : tally_err_str(e));
    return CLI_OK;
}

int cli_ledger_exists(const cli_ctx *ctx)
{
    if (!tally_ledger_exists(ctx->db_path))
        return cli_error(ctx, CLI_FAIL, "no ledger at %s (tally --db %s init creates one)",
                         ctx->db_path, ctx->db_path);
    return CLI_OK;
}

int cli_open_ledger(const cli_ctx *ctx, tally_ledger **out)
{
    int rc = cli_ledger_exists(ctx);
    return rc ? rc : cli_create_ledger(ctx, out);
}

int cli_parse_time(const cli_ctx *ctx, const char *what, const char *s, int64_t *out)
{
    if (tally_time_parse(s, strlen(s), out) != TALLY_OK)
        return cli_error(ctx, CLI_USAGE, "%s: '%s' is not an RFC 3339 time", what, s);
    return CLI_OK;
}

int cli_parse_int(const cli_ctx *ctx, const char *what, const char *s, int64_t min, int64_t max,
                  int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < min || v > max || s[0] == ' ' || s[0] == '+')
        return cli_error(ctx, CLI_USAGE, "%s: '%s' is not an integer in [%lld, %lld]", what, s,
                         (long long)min, (long long)max);
    *out = v;
    return CLI_OK;
}

int cli_parse_duration(const cli_ctx *ctx, const char *what, const char *s, int64_t max_s,
                       int64_t *out)
{
    size_t n = strlen(s);
    int64_t unit = 1;
    char num[32];
    if (n > 0 && strchr("smhd", s[n - 1])) {
        unit = s[n - 1] == 'm' ? 60 : s[n - 1] == 'h' ? 3600 : s[n - 1] == 'd' ? 86400 : 1;
        n--;
    }
    bool digits = n > 0 && n < sizeof num;
    for (size_t i = 0; digits && i < n; i++)
        digits = s[i] >= '0' && s[i] <= '9';
    if (digits) {
        memcpy(num, s, n);
        num[n] = '\0';
        long long v = strtoll(num, NULL, 10);
        if (n <= 12 && v <= max_s / unit) {
            *out = v * unit;
            return CLI_OK;
        }
    }
    return cli_error(ctx, CLI_USAGE,
                     "%s: '%s' is not a duration (seconds, or a number with s, m, h or d) "
                     "of at most %lld s",
                     what, s, (long long)max_s);
}

int cli_read_file(const cli_ctx *ctx, const char *path, char **data, size_t *len)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f)
        return cli_error(ctx, CLI_USAGE, "cannot open %s: %s", path, strerror(errno));
    tally_buf b;
    tally_buf_init(&b, (size_t)1 << 30);
    char chunk[65536];
    size_t n;
    tally_err e = TALLY_OK;
    while (!e && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        e = tally_buf_append(&b, chunk, n);
    int err = ferror(f);
    if (f != stdin)
        fclose(f);
    if (e || err) {
        tally_buf_release(&b);
        return cli_error(ctx, CLI_FAIL, "cannot read %s: %s", path,
                         e ? tally_err_str(e) : "read error");
    }
    if (!b.data && tally_buf_append(&b, "", 0) != TALLY_OK)
        return cli_error(ctx, CLI_FAIL, "out of memory");
    *data = b.data;
    *len = b.len;
    return CLI_OK;
}

static const cli_opt *find_opt(const cli_opt *opts, const char *name, size_t len)
{
    for (const cli_opt *o = opts; o && o->name; o++)
        if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
            return o;
    return NULL;
}

int cli_parse(const cli_ctx *ctx, int argc, char **argv, const cli_opt *opts, char **pos,
              int max_pos, int *npos)
{
    bool only_pos = false;
    *npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!only_pos && strcmp(a, "--") == 0) {
            only_pos = true;
            continue;
        }
        if (only_pos || strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            if (*npos >= max_pos) {
                cli_usage(ctx, true);
                return cli_error(ctx, CLI_USAGE, "unexpected argument '%s'", a);
            }
            pos[(*npos)++] = argv[i];
            continue;
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        const cli_opt *o = find_opt(opts, name, eq ? (size_t)(eq - name) : strlen(name));
        if (!o) {
            cli_usage(ctx, true);
            return cli_error(ctx, CLI_USAGE, "unknown option '%s'", a);
        }
        if (o->flag) {
            if (eq)
                return cli_error(ctx, CLI_USAGE, "option --%s takes no value", o->name);
            *o->flag = true;
        } else if (eq) {
            *o->value = eq + 1;
        } else if (i + 1 < argc) {
            *o->value = argv[++i];
        } else {
            return cli_error(ctx, CLI_USAGE, "option --%s needs a value", o->name);
        }
    }
    return CLI_OK;
}
