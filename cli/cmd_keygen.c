/* tally keygen [--force]: creates the invoice signing key (Ed25519, PEM,
 * mode 0600) at --key / $TALLY_KEY / ./tally.key. An existing key is never
 * replaced without --force, since every signed invoice depends on it. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tally/sign.h"

int cmd_keygen(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv))
        return CLI_OK;
    int force = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--force") == 0) {
            force = 1;
            continue;
        }
        cli_usage(ctx, true);
        return cli_error(ctx, CLI_USAGE, "unexpected argument '%s'", argv[i]);
    }
    tally_err e = tally_keygen(ctx->key_path, force);
    if (e == TALLY_EXISTS)
        return cli_error_for(ctx, e,
                             "%s already exists; invoices signed with it could no longer be "
                             "checked with a new key (use --force to replace it anyway)",
                             ctx->key_path);
    if (e != TALLY_OK)
        return cli_error_for(ctx, e, "cannot create %s: %s", ctx->key_path, tally_err_str(e));
    printf("created signing key %s (Ed25519, mode 0600); export it with 'tally pubkey'\n",
           ctx->key_path);
    return CLI_OK;
}
