/* tally pubkey: prints the signing key's public key as PEM
 * (SubjectPublicKeyInfo), for `openssl pkeyutl -verify -pubin -rawin`. */
#include <stdio.h>

#include "cli.h"
#include "tally/sign.h"

int cmd_pubkey(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv))
        return CLI_OK;
    if (argc > 1) {
        cli_usage(ctx, true);
        return cli_error(ctx, CLI_USAGE, "unexpected argument '%s'", argv[1]);
    }
    tally_buf pem;
    tally_buf_init(&pem, 0);
    tally_err e = tally_pubkey_pem(ctx->key_path, &pem);
    int rc = CLI_OK;
    if (e == TALLY_NOT_FOUND)
        rc = cli_error_for(ctx, e, "no signing key at %s (create one with 'tally keygen')",
                           ctx->key_path);
    else if (e != TALLY_OK)
        rc = cli_error_for(ctx, e, "%s is not an Ed25519 key: %s", ctx->key_path, tally_err_str(e));
    else if (fwrite(pem.data, 1, pem.len, stdout) != pem.len || fflush(stdout) != 0)
        rc = cli_error(ctx, CLI_FAIL, "cannot write to stdout");
    tally_buf_release(&pem);
    return rc;
}
