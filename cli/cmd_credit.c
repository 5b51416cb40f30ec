/* tally credit grant ACCOUNT AMOUNT --kind K [--currency C] [--priority N]
 *                    [--effective T] [--expires T] [--scope EXPR]
 *                    [--idempotency-key KEY]
 *
 * With --idempotency-key, running the same grant again (a retried top-up)
 * prints the first run's grant id and exits 0 without granting twice; the
 * same key with a different grant exits 2 and stores nothing
 * (tally_ledger_grant_add). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tally/money.h"
#include "tally/rating.h"

typedef struct grant_args {
    const char *kind, *currency, *priority, *effective, *expires, *scope, *key;
} grant_args;

/* Validates what can be checked before the ledger is opened. */
static int check_args(cli_ctx *ctx, const grant_args *a, tally_grant_spec *g)
{
    int rc;
    int64_t prio = 50;
    if (!a->kind)
        return cli_error(ctx, CLI_USAGE,
                         "--kind is required (trial, coupon, prepaid, "
                         "insurance, goodwill, adjustment)");
    if (tally_grant_kind_from_name(a->kind, &g->kind) != TALLY_OK)
        return cli_error(ctx, CLI_USAGE, "unknown credit kind '%s'", a->kind);
    if (a->priority && (rc = cli_parse_int(ctx, "--priority", a->priority, 0, 1000000, &prio)))
        return rc;
    g->priority = (int)prio;
    if (a->key && !tally_idempotency_key_ok(a->key))
        return cli_error(ctx, CLI_USAGE,
                         "--idempotency-key must be 1 to %d printable ASCII characters without "
                         "spaces",
                         TALLY_IDEMPOTENCY_KEY_MAX);
    g->idempotency_key = a->key;
    /* "now" is not part of the request: a retry later is the same grant. */
    g->effective_defaulted = !a->effective;
    g->effective_s = tally_now_s();
    g->expires_s = TALLY_TIME_MAX;
    if (a->effective && (rc = cli_parse_time(ctx, "--effective", a->effective, &g->effective_s)))
        return rc;
    if (a->expires && (rc = cli_parse_time(ctx, "--expires", a->expires, &g->expires_s)))
        return rc;
    if (g->expires_s <= g->effective_s)
        return cli_error(ctx, CLI_USAGE, "--expires must be after --effective");
    tally_scope scope;
    const char *why = NULL;
    g->scope = a->scope ? a->scope : "";
    if (tally_scope_parse(g->scope, &scope, &why) != TALLY_OK)
        return cli_error(ctx, CLI_USAGE, "--scope '%s': %s", g->scope, why ? why : "malformed");
    if (a->currency && !tally_currency_find(a->currency))
        return cli_error(ctx, CLI_USAGE, "unknown currency '%s'", a->currency);
    return CLI_OK;
}

/* The currency the grant is in: --currency, else the account's, else the one
 * a new account would get (the newest rate card's). Writes nothing: a grant
 * that fails validation leaves the ledger unchanged. */
static int grant_currency(cli_ctx *ctx, tally_ledger *l, const char *account, const char *wanted,
                          char out[4])
{
    tally_err e = tally_ledger_currency_for(l, account, wanted, out);
    if (e == TALLY_UNKNOWN_CURRENCY)
        return cli_error(ctx, CLI_USAGE, "no rate card loaded: give --currency or run tally init");
    if (e)
        return cli_error_for(ctx, e, "account %s: %s", account, tally_err_str(e));
    if (!out[0])
        return cli_error(ctx, CLI_USAGE, "no rate card loaded: give --currency or run tally init");
    return CLI_OK;
}

int cmd_credit(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv))
        return CLI_OK;
    grant_args a = {0};
    const cli_opt opts[] = {
        {"kind", &a.kind, NULL},           {"currency", &a.currency, NULL},
        {"priority", &a.priority, NULL},   {"effective", &a.effective, NULL},
        {"expires", &a.expires, NULL},     {"scope", &a.scope, NULL},
        {"idempotency-key", &a.key, NULL}, {0},
    };
    char *pos[3];
    int npos = 0;
    int rc = cli_parse(ctx, argc, argv, opts, pos, 3, &npos);
    if (rc)
        return rc;
    if (npos != 3 || strcmp(pos[0], "grant") != 0) {
        cli_usage(ctx, true);
        return CLI_USAGE;
    }
    tally_grant_spec g = {.account = pos[1], .currency = a.currency};
    if ((rc = check_args(ctx, &a, &g)))
        return rc;
    tally_ledger *l = NULL;
    if ((rc = cli_open_ledger(ctx, &l)))
        return rc;
    char code[4];
    if ((rc = grant_currency(ctx, l, pos[1], a.currency, code)))
        goto out;
    const tally_currency *cur = tally_currency_find(code);
    const char *why = NULL;
    if (!cur ||
        tally_amount_parse(pos[2], strlen(pos[2]), cur->minor_digits, false, &g.amount_minor,
                           &why) != TALLY_OK ||
        g.amount_minor <= 0) {
        rc = cli_error(ctx, CLI_USAGE, "amount '%s': %s", pos[2],
                       why ? why : "must be greater than zero");
        goto out;
    }
    char msg[256] = "";
    int64_t id = 0;
    tally_err e = tally_ledger_grant_add(l, &g, &id, msg, sizeof msg);
    if (e == TALLY_EXISTS && g.idempotency_key)
        e = TALLY_OK; /* a replay: the first run's grant, printed as it was */
    if (e == TALLY_OK && ctx->describe)
        printf("credit grant %lld: %s %s %s for %s%s%s\n", (long long)id, a.kind, code, pos[2],
               pos[1], a.expires ? ", expires " : "", a.expires ? a.expires : "");
    else if (e == TALLY_OK)
        printf("%lld\n", (long long)id);
    else
        rc = cli_error_for(ctx, e, "%s", msg[0] ? msg : tally_err_str(e));
out:
    tally_ledger_close(l);
    return rc;
}
