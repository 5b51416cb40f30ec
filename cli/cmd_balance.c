/* tally balance ACCOUNT | --sweep | --rebuild: an account's prepaid balance
 * as JSON (SPEC section 9); a refresh of the balances whose grant expiry or
 * release grace has come (for a timer; the publisher and reads do it too);
 * or a refresh of every account's (after usage written with
 * TALLY_NO_BALANCES=1). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tally/balance.h"
#include "tally/invoice.h"

int cmd_balance(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv))
        return CLI_OK;
    bool sweep = false, rebuild = false;
    const cli_opt opts[] = {{"sweep", NULL, &sweep}, {"rebuild", NULL, &rebuild}, {0}};
    char *pos[1];
    int npos = 0;
    int rc = cli_parse(ctx, argc, argv, opts, pos, 1, &npos);
    if (rc)
        return rc;
    if (npos != (sweep || rebuild ? 0 : 1) || (sweep && rebuild)) {
        cli_usage(ctx, true);
        return CLI_USAGE;
    }
    tally_ledger *l = NULL;
    if ((rc = cli_open_ledger(ctx, &l)))
        return rc;
    tally_buf out;
    tally_buf_init(&out, 0);
    int64_t n = 0;
    tally_err e = sweep     ? tally_balance_sweep(l, tally_now_s(), &n)
                  : rebuild ? tally_balance_refresh_all(l, &n)
                            : tally_balance_report(l, pos[0], &out);
    if (e == TALLY_OK && (sweep || rebuild))
        printf("%lld balances refreshed\n", (long long)n);
    else if (e == TALLY_OK)
        printf("%s\n", out.data);
    else if (e == TALLY_NOT_FOUND && !sweep && !rebuild)
        rc = cli_error_for(ctx, e, "unknown account '%s'", pos[0]);
    else
        rc = cli_error_for(ctx, e, "%s: %s", tally_err_str(e), tally_ledger_errmsg(l));
    tally_buf_release(&out);
    tally_ledger_close(l);
    return rc;
}
