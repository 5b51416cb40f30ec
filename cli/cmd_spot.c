/* tally spot set SKU PRICE --from TIME */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tally/money.h"

int cmd_spot(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv))
        return CLI_OK;
    const char *from = NULL;
    const cli_opt opts[] = {{"from", &from, NULL}, {0}};
    char *pos[3];
    int npos = 0;
    int rc = cli_parse(ctx, argc, argv, opts, pos, 3, &npos);
    if (rc)
        return rc;
    if (npos != 3 || strcmp(pos[0], "set") != 0 || !from) {
        cli_usage(ctx, true);
        return CLI_USAGE;
    }
    int64_t price = 0, from_s = 0;
    const char *why = NULL;
    if (tally_price_parse(pos[2], strlen(pos[2]), false, &price, &why) != TALLY_OK)
        return cli_error(ctx, CLI_USAGE, "price '%s': %s", pos[2], why ? why : "malformed");
    rc = cli_parse_time(ctx, "--from", from, &from_s);
    if (rc)
        return rc;
    tally_ledger *l = NULL;
    rc = cli_open_ledger(ctx, &l);
    if (rc)
        return rc;
    tally_err e = tally_ledger_spot_set(l, pos[1], price, from_s);
    if (e == TALLY_OK)
        printf("spot price of %s is %s from %s\n", pos[1], pos[2], from);
    else if (e == TALLY_NOT_FOUND)
        rc = cli_error_for(ctx, e, "unknown sku '%s'", pos[1]);
    else if (e == TALLY_NO_PRICE)
        rc = cli_error_for(ctx, e, "sku '%s' has no spot pricing", pos[1]);
    else
        rc = cli_error_for(ctx, e, "%s: %s", tally_err_str(e), tally_ledger_errmsg(l));
    tally_ledger_close(l);
    return rc;
}
