/* tally verify: checks the whole ledger (balances, invoice numbering, hash
 * chain, signatures, append-only triggers, SQLite integrity). Exit 0 only if
 * everything holds; otherwise the first bad record is named on stderr and
 * the exit status is 1. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "tally/sign.h"

int cmd_verify(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv))
        return CLI_OK;
    if (argc > 1) {
        cli_usage(ctx, true);
        return cli_error(ctx, CLI_USAGE, "unexpected argument '%s'", argv[1]);
    }
    /* Opening creates a missing ledger; an empty new one would "verify". */
    if (access(ctx->db_path, F_OK) != 0)
        return cli_error(ctx, CLI_FAIL, "no ledger at %s: %s", ctx->db_path, strerror(errno));
    tally_ledger *l = NULL;
    int rc = cli_open_ledger(ctx, &l);
    if (rc)
        return rc;
    char why[512] = "";
    tally_err e = tally_ledger_verify(l, ctx->key_path, why, sizeof why);
    if (e == TALLY_OK)
        printf("ok: %s\n", why[0] ? why : "ledger verified");
    else
        rc = cli_error(ctx, CLI_FAIL, "FAILED: %s", why[0] ? why : tally_err_str(e));
    tally_ledger_close(l);
    return rc;
}
