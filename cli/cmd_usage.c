/* tally usage ACCOUNT --from T --to T [--by sku|day|meter]: the account's
 * usage and running charges in [from, to), as JSON (tally_usage_report). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tally/invoice.h"

static const struct by_name {
    const char *name;
    tally_usage_by by;
} by_names[] = {{"sku", TALLY_BY_SKU}, {"day", TALLY_BY_DAY}, {"meter", TALLY_BY_METER}};

static int parse_by(const cli_ctx *ctx, const char *s, tally_usage_by *out)
{
    for (size_t i = 0; i < sizeof by_names / sizeof *by_names; i++)
        if (strcmp(s, by_names[i].name) == 0) {
            *out = by_names[i].by;
            return CLI_OK;
        }
    return cli_error(ctx, CLI_USAGE, "--by: '%s' is not sku, day or meter", s);
}

int cmd_usage(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv))
        return CLI_OK;
    const char *from = NULL, *to = NULL, *by_s = "sku";
    const cli_opt opts[] = {{"from", &from, NULL}, {"to", &to, NULL}, {"by", &by_s, NULL}, {0}};
    char *pos[1];
    int npos = 0;
    int rc = cli_parse(ctx, argc, argv, opts, pos, 1, &npos);
    if (rc)
        return rc;
    if (npos != 1 || !from || !to) {
        cli_usage(ctx, true);
        return CLI_USAGE;
    }
    int64_t from_s = 0, to_s = 0;
    tally_usage_by by = TALLY_BY_SKU;
    if ((rc = cli_parse_time(ctx, "--from", from, &from_s)) ||
        (rc = cli_parse_time(ctx, "--to", to, &to_s)) || (rc = parse_by(ctx, by_s, &by)))
        return rc;
    if (to_s <= from_s)
        return cli_error(ctx, CLI_USAGE, "--to must be after --from");
    tally_ledger *l = NULL;
    if ((rc = cli_open_ledger(ctx, &l)))
        return rc;
    tally_buf out;
    tally_buf_init(&out, 0);
    tally_err e = tally_usage_report(l, pos[0], from_s, to_s, by, &out);
    if (e == TALLY_OK)
        printf("%s\n", out.data);
    else if (e == TALLY_NOT_FOUND)
        rc = cli_error_for(ctx, e, "unknown account '%s'", pos[0]);
    else if (e == TALLY_INVAL)
        rc = cli_error_for(ctx, e, "range too long for --by day (at most %d days)",
                           TALLY_USAGE_MAX_DAYS);
    else
        rc = cli_error_for(ctx, e, "%s: %s", tally_err_str(e), tally_ledger_errmsg(l));
    tally_buf_release(&out);
    tally_ledger_close(l);
    return rc;
}
