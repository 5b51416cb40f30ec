/* tally account set ACCOUNT [--currency C] [--timezone TZ] [--name TEXT] */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cmd_account(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv))
        return CLI_OK;
    const char *currency = NULL, *tz = NULL, *name = NULL;
    const cli_opt opts[] = {
        {"currency", &currency, NULL}, {"timezone", &tz, NULL}, {"name", &name, NULL}, {0}};
    char *pos[2];
    int npos = 0;
    int rc = cli_parse(ctx, argc, argv, opts, pos, 2, &npos);
    if (rc)
        return rc;
    if (npos != 2 || strcmp(pos[0], "set") != 0) {
        cli_usage(ctx, true);
        return CLI_USAGE;
    }
    if (!pos[1][0] || strlen(pos[1]) >= TALLY_NAME_MAX)
        return cli_error(ctx, CLI_USAGE, "account id must be 1 to %d bytes", TALLY_NAME_MAX - 1);
    tally_ledger *l = NULL;
    rc = cli_open_ledger(ctx, &l);
    if (rc)
        return rc;
    tally_err e = tally_ledger_account_set(l, pos[1], currency, tz, name);
    tally_account a;
    if (e == TALLY_OK)
        e = tally_ledger_account_get(l, pos[1], &a);
    if (e == TALLY_OK)
        printf("account %s: currency %s, time zone %s%s%s\n", a.id, a.currency, a.timezone,
               a.name[0] ? ", name " : "", a.name);
    else if (e == TALLY_UNKNOWN_CURRENCY)
        rc = cli_error_for(ctx, e, "unknown currency '%s'", currency ? currency : "");
    else if (e == TALLY_INVAL)
        rc = cli_error_for(ctx, e, "unknown time zone '%s'", tz ? tz : "");
    else if (e == TALLY_FINALIZED)
        rc = cli_error_for(ctx, e, "%s", tally_ledger_errmsg(l));
    else
        rc = cli_error_for(ctx, e, "%s: %s", tally_err_str(e), tally_ledger_errmsg(l));
    tally_ledger_close(l);
    return rc;
}
