/* tally keygen [--force]: creates the invoice signing key (Ed25519, PEM,
 * mode 0600) at --key / $TALLY_KEY / ./tally.key. An existing key is never
 * replaced without --force; with --force the old public key is kept in
 * "<key>.pubkeys" (tally/sign.h), so invoices signed with it still verify. */
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
                             "%s already exists (use --force to rotate it: its public key is "
                             "kept in %s.pubkeys, so documents signed with it still verify)",
                             ctx->key_path, ctx->key_path);
    if (e != TALLY_OK)
        return cli_error_for(ctx, e, "cannot create %s: %s", ctx->key_path, tally_err_str(e));
    char id[TALLY_KEY_ID_LEN + 1] = "";
    if (tally_key_id(ctx->key_path, id) != TALLY_OK)
        id[0] = '\0';
    printf("created signing key %s (Ed25519, mode 0600, key id %s); export it with 'tally "
           "pubkey'\n",
           ctx->key_path, id);
    return CLI_OK;
}
