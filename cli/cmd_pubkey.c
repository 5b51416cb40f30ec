/* tally pubkey [--all]: prints the signing key's public key as PEM
 * (SubjectPublicKeyInfo), for `openssl pkeyutl -verify -pubin -rawin`. With
 * --all, every public key kept for the key path (the current one first, then
 * those of earlier keys from "<key>.pubkeys"), each after a "key id <id>"
 * line; the output can be passed back as --key to `tally verify`. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tally/sign.h"

static tally_err all_pems(const char *key_path, tally_buf *out)
{
    tally_keyring *kr = NULL;
    tally_err e = tally_keyring_load(key_path, &kr);
    for (size_t i = 0; e == TALLY_OK && i < tally_keyring_count(kr); i++) {
        e = tally_buf_printf(out, "key id %s\n", tally_keyring_id(kr, i));
        if (e == TALLY_OK)
            e = tally_keyring_pem(kr, i, out);
    }
    tally_keyring_destroy(kr);
    return e;
}

int cmd_pubkey(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv))
        return CLI_OK;
    bool all = argc == 2 && strcmp(argv[1], "--all") == 0;
    if (argc > 1 && !all) {
        cli_usage(ctx, true);
        return cli_error(ctx, CLI_USAGE, "unexpected argument '%s'", argv[1]);
    }
    tally_buf pem;
    tally_buf_init(&pem, 0);
    tally_err e = all ? all_pems(ctx->key_path, &pem) : tally_pubkey_pem(ctx->key_path, &pem);
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
