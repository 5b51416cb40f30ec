/* tally apikey create (--account ID | --admin) | revoke ID | list
 *
 * create prints the new key on stdout once; only its SHA-256 is stored, so
 * it cannot be shown again. list never shows keys. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tally/event.h"
#include "tally/server.h"

static int create(cli_ctx *ctx, tally_ledger *l, const char *account, bool admin)
{
    if (admin == (account != NULL))
        return cli_error(ctx, CLI_USAGE, "create needs exactly one of --account ID and --admin");
    if (account && account[0] && strlen(account) < TALLY_NAME_MAX) {
        /* A key for an account that does not exist would be a typo waiting
         * to see nothing; refuse it before anything is stored. */
        tally_account a;
        tally_err ge = tally_ledger_account_get(l, account, &a);
        if (ge == TALLY_NOT_FOUND)
            return cli_error(ctx, CLI_USAGE,
                             "account '%s' does not exist (create it first: tally account set %s)",
                             account, account);
        if (ge != TALLY_OK)
            return cli_error_for(ctx, ge, "%s: %s", tally_err_str(ge), tally_ledger_errmsg(l));
    }
    char key[TALLY_APIKEY_LEN + 1];
    int64_t id = 0;
    tally_err e = tally_apikey_create(l, account, admin, key, sizeof key, &id);
    if (e == TALLY_INVAL)
        return cli_error_for(ctx, e, "account id must be 1-%d bytes without control characters",
                             TALLY_NAME_MAX - 1);
    if (e != TALLY_OK)
        return cli_error_for(ctx, e, "%s: %s", tally_err_str(e), tally_ledger_errmsg(l));
    printf("%s\n", key);
    fprintf(stderr, "tally apikey: created key %lld (%s%s); it is shown only this once\n",
            (long long)id, admin ? "admin" : "account ", admin ? "" : account);
    return CLI_OK;
}

static int revoke(cli_ctx *ctx, tally_ledger *l, const char *id_text)
{
    int64_t id = 0;
    int rc = cli_parse_int(ctx, "key id", id_text, 1, INT64_MAX, &id);
    if (rc)
        return rc;
    tally_err e = tally_apikey_revoke(l, id);
    if (e == TALLY_NOT_FOUND)
        return cli_error_for(ctx, e, "no key %lld", (long long)id);
    if (e == TALLY_EXISTS)
        return cli_error_for(ctx, e, "key %lld is already revoked", (long long)id);
    if (e != TALLY_OK)
        return cli_error_for(ctx, e, "%s: %s", tally_err_str(e), tally_ledger_errmsg(l));
    printf("revoked key %lld\n", (long long)id);
    return CLI_OK;
}

static tally_err print_key(void *ctx, const tally_apikey_info *k)
{
    char created[32] = "?", revoked[32] = "-";
    if (tally_time_format(k->created_s, created, sizeof created) != TALLY_OK)
        snprintf(created, sizeof created, "%lld", (long long)k->created_s);
    if (k->revoked_s && tally_time_format(k->revoked_s, revoked, sizeof revoked) != TALLY_OK)
        snprintf(revoked, sizeof revoked, "%lld", (long long)k->revoked_s);
    printf("%-6lld %-7s %-24s %-21s %s\n", (long long)k->id, k->admin ? "admin" : "account",
           k->admin ? "*" : k->account, created, revoked);
    return TALLY_OK;
}

static int list(cli_ctx *ctx, tally_ledger *l)
{
    printf("%-6s %-7s %-24s %-21s %s\n", "ID", "ROLE", "ACCOUNT", "CREATED", "REVOKED");
    tally_err e = tally_apikey_list(l, print_key, NULL);
    if (e != TALLY_OK)
        return cli_error_for(ctx, e, "%s: %s", tally_err_str(e), tally_ledger_errmsg(l));
    return CLI_OK;
}

int cmd_apikey(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv))
        return CLI_OK;
    const char *account = NULL;
    bool admin = false;
    const cli_opt opts[] = {{"account", &account, NULL}, {"admin", NULL, &admin}, {0}};
    char *pos[2];
    int npos = 0;
    int rc = cli_parse(ctx, argc, argv, opts, pos, 2, &npos);
    if (rc)
        return rc;
    const char *sub = npos > 0 ? pos[0] : "";
    bool ok = (strcmp(sub, "create") == 0 && npos == 1) ||
              (strcmp(sub, "revoke") == 0 && npos == 2 && !account && !admin) ||
              (strcmp(sub, "list") == 0 && npos == 1 && !account && !admin);
    if (!ok) {
        cli_usage(ctx, true);
        return CLI_USAGE;
    }
    tally_ledger *l = NULL;
    if ((rc = cli_open_ledger(ctx, &l)))
        return rc;
    if (sub[0] == 'c')
        rc = create(ctx, l, account, admin);
    else if (sub[0] == 'r')
        rc = revoke(ctx, l, pos[1]);
    else
        rc = list(ctx, l);
    tally_ledger_close(l);
    return rc;
}
