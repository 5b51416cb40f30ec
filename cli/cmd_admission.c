/* tally admission ACCOUNT --sku S --cards N --hours H [--pricing P]:
 * whether the account's balance pays for that usage at today's price
 * (SPEC section 9). Prints the answer as JSON; exit 0 when allowed, 3 when
 * the balance falls short (so a script can branch on it), 2 on bad input. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tally/balance.h"
#include "tally/money.h"

#define EXIT_SHORT 3

int cmd_admission(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv))
        return CLI_OK;
    const char *sku = NULL, *cards = NULL, *hours = NULL, *pricing = NULL;
    const cli_opt opts[] = {{"sku", &sku, NULL},
                            {"cards", &cards, NULL},
                            {"hours", &hours, NULL},
                            {"pricing", &pricing, NULL},
                            {0}};
    char *pos[1];
    int npos = 0;
    int rc = cli_parse(ctx, argc, argv, opts, pos, 1, &npos);
    if (rc)
        return rc;
    if (npos != 1 || !sku || !cards || !hours) {
        cli_usage(ctx, true);
        return CLI_USAGE;
    }
    tally_admission_req r = {.account = pos[0], .sku = sku};
    const char *why = NULL;
    if ((rc = cli_parse_int(ctx, "--cards", cards, 1, TALLY_CARDS_MAX, &r.cards)))
        return rc;
    if (tally_price_parse(hours, strlen(hours), false, &r.hours_nano, &why) != TALLY_OK)
        return cli_error(ctx, CLI_USAGE, "--hours '%s': %s", hours, why ? why : "malformed");
    if (pricing && (tally_pricing_from_name(pricing, &r.pricing) != TALLY_OK ||
                    r.pricing == TALLY_PRICING_NONE))
        return cli_error(ctx, CLI_USAGE, "--pricing '%s': on_demand, spot or reserved", pricing);
    tally_ledger *l = NULL;
    if ((rc = cli_open_ledger(ctx, &l)))
        return rc;
    tally_admission a;
    char msg[256] = "";
    tally_buf out;
    tally_buf_init(&out, 0);
    tally_err e = tally_admission_check(l, &r, &a, msg, sizeof msg);
    if (!e)
        e = tally_admission_json(&r, &a, &out);
    if (!e) {
        printf("%s\n", out.data);
        rc = a.allowed ? CLI_OK : EXIT_SHORT;
    } else if (e == TALLY_NOT_FOUND) {
        rc = cli_error_for(ctx, e, "unknown account '%s'", pos[0]);
    } else if (e == TALLY_INVAL && pricing) {
        rc = cli_error_for(ctx, e, "%s (pricing %s)", msg, pricing);
    } else {
        rc = cli_error_for(ctx, e, "%s", msg[0] ? msg : tally_err_str(e));
    }
    tally_buf_release(&out);
    tally_ledger_close(l);
    return rc;
}
