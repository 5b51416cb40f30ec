/* tally head: signs the head of the ledger's own chain (schemas/009_chain.sql)
 * with the signing key and prints it as one line of JSON: sequence, hash,
 * time, key id, signature. Saved to a file, it is checked later by
 * `tally verify --head FILE`, which catches any edit or deletion up to that
 * entry and a rollback of the ledger file to an older copy. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "tally/ledger.h"

int cmd_head(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv))
        return CLI_OK;
    if (argc > 1) {
        cli_usage(ctx, true);
        return cli_error(ctx, CLI_USAGE, "unexpected argument '%s'", argv[1]);
    }
    tally_ledger *l = NULL;
    int rc = cli_open_ledger(ctx, &l);
    if (rc)
        return rc;
    tally_ledger_head h;
    tally_buf out;
    tally_buf_init(&out, 0);
    tally_err e = tally_ledger_head_sign(l, ctx->key_path, &h);
    if (e == TALLY_OK)
        e = tally_ledger_head_json(&h, &out);
    if (e == TALLY_NOT_FOUND)
        rc = cli_error_for(ctx, e, "no signing key at %s (create one with 'tally keygen')",
                           ctx->key_path);
    else if (e != TALLY_OK)
        rc = cli_error_for(ctx, e, "cannot sign the ledger head: %s", tally_err_str(e));
    else if (printf("%s\n", out.data) < 0 || fflush(stdout) != 0)
        rc = cli_error(ctx, CLI_FAIL, "cannot write to stdout");
    tally_buf_release(&out);
    tally_ledger_close(l);
    return rc;
}
