/* tally verify [--head FILE]: checks the whole ledger (balances, invoice
 * numbering, the documents' and the ledger's own hash chains, signatures,
 * append-only triggers, SQLite integrity); with --head, also that the
 * ledger still holds the signed head saved in FILE by `tally head`. Exit 0
 * only if everything holds; otherwise the first bad record is named on
 * stderr and the exit status is 1. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "tally/ledger.h"
#include "tally/sign.h"

/* Reads the head file (bounded) and checks it against the ledger. */
static tally_err check_head_file(cli_ctx *ctx, tally_ledger *l, const char *path, char *why,
                                 size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(why, cap, "head file %s: %s", path, strerror(errno));
        return TALLY_NOT_FOUND;
    }
    char text[2048];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    return tally_ledger_head_check(l, ctx->key_path, text, n, why, cap);
}

int cmd_verify(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv))
        return CLI_OK;
    const char *head = NULL;
    if (argc == 3 && strcmp(argv[1], "--head") == 0) {
        head = argv[2];
    } else if (argc > 1) {
        cli_usage(ctx, true);
        return cli_error(ctx, CLI_USAGE, "unexpected argument '%s'", argv[1]);
    }
    tally_ledger *l = NULL;
    int rc = cli_open_ledger(ctx, &l);
    if (rc)
        return rc;
    char why[512] = "";
    tally_err e = tally_ledger_verify(l, ctx->key_path, why, sizeof why);
    if (e == TALLY_OK && head) {
        char hwhy[512] = "";
        e = check_head_file(ctx, l, head, hwhy, sizeof hwhy);
        if (e != TALLY_OK)
            memcpy(why, hwhy, sizeof why);
    }
    if (e == TALLY_OK)
        printf("ok: %s%s%s%s\n", why[0] ? why : "ledger verified", head ? "; signed head in " : "",
               head ? head : "", head ? " still holds" : "");
    else
        rc = cli_error(ctx, CLI_FAIL, "FAILED: %s", why[0] ? why : tally_err_str(e));
    tally_ledger_close(l);
    return rc;
}
