/* The `tally` command line: shared context and helpers for subcommands.
 *
 * Exit status (SPEC section 6): 0 success, 2 bad usage or input, 1 other
 * failures. Errors go to stderr as one line: "tally <cmd>: <what>". */
#ifndef TALLY_CLI_H
#define TALLY_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "tally/err.h"
#include "tally/ledger.h"
#include "tally/log.h"

#define CLI_OK    0
#define CLI_FAIL  1
#define CLI_USAGE 2

typedef struct cli_ctx {
    const char *db_path;  /* --db, $TALLY_DB, ./tally.db */
    const char *key_path; /* --key, $TALLY_KEY, ./tally.key */
    const char *cmd;      /* subcommand name, for messages */
    bool describe;        /* say what was created in words, not as a bare id (the demo) */
} cli_ctx;

typedef struct cli_command {
    const char *name;
    const char *usage;                               /* one line: arguments after the name */
    const char *summary;                             /* one line: what it does */
    int (*run)(cli_ctx *ctx, int argc, char **argv); /* argv[0] is the name */
} cli_command;

/* The exit status for a library error, from its class (tally/err.h): 0 for
 * TALLY_OK, CLI_USAGE for bad input, CLI_FAIL for retriable and fatal
 * errors. Every subcommand derives its status from an error through this. */
int cli_exit_code(tally_err e);
/* cli_error(ctx, cli_exit_code(e), ...): the one-line message for e. */
int cli_error_for(const cli_ctx *ctx, tally_err e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The library's log callback (tally/log.h): "tally <fac>: <line>" on stderr. */
void cli_log(void *opaque, tally_log_level level, const char *fac, const char *line);

/* Prints "tally <cmd>: <message>" to stderr and returns code. */
int cli_error(const cli_ctx *ctx, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prints the command's usage line (and summary) to stdout or stderr. */
void cli_usage(const cli_ctx *ctx, bool to_stderr);
/* True if argv holds -h or --help; prints the usage to stdout. */
bool cli_wants_help(const cli_ctx *ctx, int argc, char **argv);

/* Opens the ledger at ctx->db_path, which must exist (a ledger directory or
 * file that tally init made), reporting failure as a one-line error. A
 * mistyped --db, or none where ./tally.db is missing, is refused: usage
 * ingested into a new, empty ledger would be quarantined there, unpriced,
 * and billed nowhere, and an empty ledger would verify or sign a head of
 * nothing. */
int cli_open_ledger(const cli_ctx *ctx, tally_ledger **out);
/* Only the check: CLI_OK, or the one-line error, for a command whose ledger
 * another layer opens (tally serve). */
int cli_ledger_exists(const cli_ctx *ctx);

/* The same, creating the ledger when the path is missing: tally init and the
 * demo's own ledger only. */
int cli_create_ledger(const cli_ctx *ctx, tally_ledger **out);

/* Parses RFC 3339 time, a decimal amount for a currency, or an integer in
 * [min, max], reporting a one-line error naming what (returns CLI_USAGE). */
int cli_parse_time(const cli_ctx *ctx, const char *what, const char *s, int64_t *out);
int cli_parse_int(const cli_ctx *ctx, const char *what, const char *s, int64_t min, int64_t max,
                  int64_t *out);
/* A duration: whole seconds, or a number with s, m, h or d ("15d").
 * Prints the error and returns CLI_USAGE when it does not parse or is
 * outside [0, max_s]. */
int cli_parse_duration(const cli_ctx *ctx, const char *what, const char *s, int64_t max_s,
                       int64_t *out);

/* One long option: "--name VALUE" / "--name=VALUE" when value is set, a bare
 * "--name" flag when flag is set. */
typedef struct cli_opt {
    const char *name; /* without the dashes */
    const char **value;
    bool *flag;
} cli_opt;

/* Parses argv[1..] into the options (NULL-name terminated) and positional
 * arguments (at most max_pos, stored in pos, count in *npos). "--" ends
 * options. Unknown options, missing values and too many positionals print a
 * one-line error plus the usage and return CLI_USAGE. */
int cli_parse(const cli_ctx *ctx, int argc, char **argv, const cli_opt *opts, char **pos,
              int max_pos, int *npos);

/* Reads a whole file ("-" is stdin) into a malloc'd NUL-terminated buffer. */
int cli_read_file(const cli_ctx *ctx, const char *path, char **data, size_t *len);

/* Subcommand handlers, one file each: cli/cmd_<name>.c */
#define CLI_COMMANDS(X)                                                                            \
    X(demo)                                                                                        \
    X(init)                                                                                        \
    X(account)                                                                                     \
    X(ratecard)                                                                                    \
    X(spot)                                                                                        \
    X(commit)                                                                                      \
    X(credit)                                                                                      \
    X(balance)                                                                                     \
    X(admission)                                                                                   \
    X(ingest)                                                                                      \
    X(broker)                                                                                      \
    X(meter)                                                                                       \
    X(invoice)                                                                                     \
    X(usage)                                                                                       \
    X(keygen)                                                                                      \
    X(pubkey)                                                                                      \
    X(verify)                                                                                      \
    X(head)                                                                                        \
    X(serve)                                                                                       \
    X(apikey)                                                                                      \
    X(publish)                                                                                     \
    X(partition_of)

#define CLI_DECLARE(name) int cmd_##name(cli_ctx *ctx, int argc, char **argv);
CLI_COMMANDS(CLI_DECLARE)
#undef CLI_DECLARE

/* The table, for `tally --help` and for sub-dispatch by nested commands. */
extern const cli_command cli_commands[];
const cli_command *cli_find(const char *name);

#endif
