/* tally commit add ACCOUNT --sku S --cards N --from T --to T */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cmd_commit(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv))
        return CLI_OK;
    const char *sku = NULL, *cards_s = NULL, *from = NULL, *to = NULL;
    const cli_opt opts[] = {{"sku", &sku, NULL},
                            {"cards", &cards_s, NULL},
                            {"from", &from, NULL},
                            {"to", &to, NULL},
                            {0}};
    char *pos[2];
    int npos = 0;
    int rc = cli_parse(ctx, argc, argv, opts, pos, 2, &npos);
    if (rc)
        return rc;
    if (npos != 2 || strcmp(pos[0], "add") != 0 || !sku || !cards_s || !from || !to) {
        cli_usage(ctx, true);
        return CLI_USAGE;
    }
    int64_t cards = 0, from_s = 0, to_s = 0, id = 0;
    if ((rc = cli_parse_int(ctx, "--cards", cards_s, 1, 1000000, &cards)) ||
        (rc = cli_parse_time(ctx, "--from", from, &from_s)) ||
        (rc = cli_parse_time(ctx, "--to", to, &to_s)))
        return rc;
    if (to_s <= from_s)
        return cli_error(ctx, CLI_USAGE, "--to must be after --from");
    tally_ledger *l = NULL;
    rc = cli_open_ledger(ctx, &l);
    if (rc)
        return rc;
    tally_err e = tally_ledger_commit_add(l, pos[1], sku, cards, from_s, to_s, &id);
    if (e == TALLY_OK && ctx->describe)
        printf("commitment %lld: %s, %lld x %s from %s to %s\n", (long long)id, pos[1],
               (long long)cards, sku, from, to);
    else if (e == TALLY_OK)
        printf("%lld\n", (long long)id);
    else if (e == TALLY_NO_PRICE || e == TALLY_NOT_FOUND)
        rc = cli_error_for(ctx, e, "sku '%s' has no reserved price", sku);
    else if (e == TALLY_INVAL)
        rc = cli_error_for(ctx, e, "invalid commitment for account '%s'", pos[1]);
    else
        rc = cli_error_for(ctx, e, "%s: %s", tally_err_str(e), tally_ledger_errmsg(l));
    tally_ledger_close(l);
    return rc;
}
