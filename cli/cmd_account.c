/* tally account set ACCOUNT [--currency C] [--timezone TZ] [--name TEXT]
 *                   [--low-balance AMOUNT|none] [--stop-at AMOUNT]
 *                   [--release-after DURATION] */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tally/balance.h"
#include "tally/money.h"

typedef struct limit_args {
    const char *low, *stop, *release;
} limit_args;

/* An amount of the account's currency, negative allowed, within the grant
 * bound (SPEC section 4). */
static int parse_amount(cli_ctx *ctx, const char *what, const char *s, const tally_currency *c,
                        int64_t *out)
{
    const char *why = NULL;
    int64_t max = tally_grant_max_minor(c);
    if (tally_amount_parse(s, strlen(s), c->minor_digits, true, out, &why) != TALLY_OK)
        return cli_error(ctx, CLI_USAGE, "%s '%s': %s", what, s, why ? why : "malformed");
    if (*out > max || *out < -max)
        return cli_error(ctx, CLI_USAGE, "%s '%s': more than %lld in major units", what, s,
                         (long long)TALLY_GRANT_MAX_MAJOR);
    return CLI_OK;
}

typedef struct limit_vals {
    int64_t low, stop, release;
    tally_limits_change ch;
} limit_vals;

/* Parses the limits in the currency the account has, or would get. */
static int parse_limits(cli_ctx *ctx, const char *code, const limit_args *x, limit_vals *v)
{
    const tally_currency *c = tally_currency_find(code);
    int rc = CLI_OK;
    memset(v, 0, sizeof *v);
    if (!c)
        return cli_error(ctx, CLI_USAGE, "unknown currency '%s'", code);
    if (x->low && strcmp(x->low, "none") == 0)
        v->ch.clear_low = true;
    else if (x->low && !(rc = parse_amount(ctx, "--low-balance", x->low, c, &v->low)))
        v->ch.low_minor = &v->low;
    if (!rc && x->stop && !(rc = parse_amount(ctx, "--stop-at", x->stop, c, &v->stop)))
        v->ch.stop_at_minor = &v->stop;
    if (!rc && x->release &&
        !(rc = cli_parse_duration(ctx, "--release-after", x->release, TALLY_BALANCE_RELEASE_MAX,
                                  &v->release)))
        v->ch.release_after_s = &v->release;
    return rc;
}

/* The limits as they will be, checked before anything is written (the
 * account's other settings are written first), so a refusal stores nothing.
 * cur: the stored limits, or the defaults of a new account. */
static int check_merged(cli_ctx *ctx, const limit_vals *v, const tally_limits *cur)
{
    bool has_low = v->ch.low_minor ? true : v->ch.clear_low ? false : cur->has_low;
    int64_t low = v->ch.low_minor ? v->low : cur->low_minor;
    int64_t stop = v->ch.stop_at_minor ? v->stop : cur->stop_at_minor;
    if (has_low && low <= stop)
        return cli_error(ctx, CLI_USAGE, "the low-balance mark must be above the stop mark");
    return CLI_OK;
}

static int set_limits(cli_ctx *ctx, tally_ledger *l, const tally_account *a, limit_vals *v)
{
    char why[256] = "";
    tally_err e = tally_limits_set(l, a->id, &v->ch, why, sizeof why);
    if (e)
        return cli_error_for(ctx, e, "%s", why[0] ? why : tally_ledger_errmsg(l));
    return CLI_OK;
}

static void print_account(tally_ledger *l, const tally_account *a)
{
    tally_balance b;
    printf("account %s: currency %s, time zone %s%s%s", a->id, a->currency, a->timezone,
           a->name[0] ? ", name " : "", a->name);
    if (tally_balance_get(l, a->id, &b) == TALLY_OK) {
        char low[48] = "none", stop[48] = "", bal[48] = "";
        if (b.limits.has_low &&
            tally_amount_format(b.limits.low_minor, b.minor_digits, low, sizeof low) != TALLY_OK)
            low[0] = '\0';
        if (tally_amount_format(b.limits.stop_at_minor, b.minor_digits, stop, sizeof stop) ||
            tally_amount_format(b.balance_minor, b.minor_digits, bal, sizeof bal))
            stop[0] = bal[0] = '\0';
        printf("; low balance %s, stop at %s, release after %llds; balance %s (%s)", low, stop,
               (long long)b.limits.release_after_s, bal, tally_balance_state_name(b.state));
    }
    printf("\n");
}

int cmd_account(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv))
        return CLI_OK;
    const char *currency = NULL, *tz = NULL, *name = NULL;
    limit_args x = {0};
    const cli_opt opts[] = {{"currency", &currency, NULL},
                            {"timezone", &tz, NULL},
                            {"name", &name, NULL},
                            {"low-balance", &x.low, NULL},
                            {"stop-at", &x.stop, NULL},
                            {"release-after", &x.release, NULL},
                            {0}};
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
    bool limits = x.low || x.stop || x.release;
    tally_account a;
    limit_vals v;
    char code[4] = "";
    bool is_new = tally_ledger_account_get(l, pos[1], &a) == TALLY_NOT_FOUND;
    tally_err e = limits ? tally_ledger_currency_for(l, pos[1], currency, code) : TALLY_OK;
    tally_balance cur = {.limits = {.release_after_s = TALLY_BALANCE_RELEASE_DEFAULT}};
    if (e == TALLY_OK && limits && !is_new)
        e = tally_balance_get(l, pos[1], &cur);
    if (e == TALLY_OK && limits && (rc = parse_limits(ctx, code, &x, &v)) == CLI_OK)
        rc = check_merged(ctx, &v, &cur.limits);
    if (rc) {
        tally_ledger_close(l);
        return rc;
    }
    if (e == TALLY_OK && (currency || tz || name || !limits || is_new))
        e = tally_ledger_account_set(l, pos[1], currency, tz, name);
    if (e == TALLY_OK)
        e = tally_ledger_account_get(l, pos[1], &a);
    if (e == TALLY_OK && limits)
        rc = set_limits(ctx, l, &a, &v);
    if (e == TALLY_OK && rc == CLI_OK)
        print_account(l, &a);
    else if (e == TALLY_NOT_FOUND)
        rc = cli_error_for(ctx, e, "unknown account '%s'", pos[1]);
    else if (e == TALLY_UNKNOWN_CURRENCY)
        rc = cli_error_for(ctx, e, "unknown currency '%s'", currency ? currency : "");
    else if (e == TALLY_INVAL)
        rc = cli_error_for(ctx, e, "unknown time zone '%s'", tz ? tz : "");
    else if (e == TALLY_FINALIZED)
        rc = cli_error_for(ctx, e, "%s", tally_ledger_errmsg(l));
    else if (e != TALLY_OK)
        rc = cli_error_for(ctx, e, "%s: %s", tally_err_str(e), tally_ledger_errmsg(l));
    tally_ledger_close(l);
    return rc;
}
