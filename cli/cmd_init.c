/* tally init: create the ledger and load the fixture rate card. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tally/embed.h"

#define FIXTURE_CARD "fixtures/pricebook/ratecard.json"

int cmd_init(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv))
        return CLI_OK;
    if (argc != 1) {
        cli_usage(ctx, true);
        return CLI_USAGE;
    }
    const tally_embedded *card = tally_embedded_find(FIXTURE_CARD);
    if (!card)
        return cli_error(ctx, CLI_FAIL, "fixture rate card is not compiled in");
    tally_ledger *l = NULL;
    int rc = cli_create_ledger(ctx, &l);
    if (rc)
        return rc;
    char why[256] = "";
    tally_err e = tally_ledger_ratecard_load(l, card->data, card->len, why, sizeof why);
    if (e == TALLY_OK || e == TALLY_EXISTS) {
        printf("ledger %s ready; rate card pricebook-2026-01 %s\n", ctx->db_path,
               e == TALLY_OK ? "loaded" : "already loaded");
        rc = CLI_OK;
    } else {
        rc = cli_error(ctx, CLI_FAIL, "cannot load the fixture rate card: %s",
                       why[0] ? why : tally_err_str(e));
    }
    tally_ledger_close(l);
    return rc;
}
