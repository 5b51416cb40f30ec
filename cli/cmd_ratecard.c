/* tally ratecard load FILE */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cmd_ratecard(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv))
        return CLI_OK;
    if (argc != 3 || strcmp(argv[1], "load") != 0) {
        cli_usage(ctx, true);
        return CLI_USAGE;
    }
    char *json = NULL;
    size_t len = 0;
    int rc = cli_read_file(ctx, argv[2], &json, &len);
    if (rc)
        return rc;
    tally_ledger *l = NULL;
    rc = cli_open_ledger(ctx, &l);
    if (rc)
        goto out_json;
    char why[256] = "";
    tally_err e = tally_ledger_ratecard_load(l, json, len, why, sizeof why);
    if (e == TALLY_OK)
        printf("loaded rate card from %s\n", argv[2]);
    else if (e == TALLY_EXISTS)
        printf("rate card from %s was already loaded\n", argv[2]);
    else
        rc = cli_error_for(ctx, e, "%s: %s", argv[2], why[0] ? why : tally_err_str(e));
    tally_ledger_close(l);
out_json:
    free(json);
    return rc;
}
