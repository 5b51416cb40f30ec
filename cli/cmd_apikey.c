/* tally apikey create (--account ID | --ingest --source PREFIX... | --admin)
 *              | revoke ID | list
 *
 * create prints the new key on stdout once; only its SHA-256 is stored, so
 * it cannot be shown again. list never shows keys; it shows each key's role
 * and, for ingest keys, the source prefixes it may send under. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tally/event.h"
#include "tally/server.h"

typedef struct create_args {
    const char *account;
    bool admin, ingest;
    const char *sources[TALLY_KEY_SOURCES_MAX];
    size_t n_sources;
} create_args;

static tally_err create_key(tally_ledger *l, const create_args *a, char *key, size_t cap,
                            int64_t *id)
{
    if (a->ingest)
        return tally_apikey_create_ingest(l, a->sources, a->n_sources, key, cap, id);
    return tally_apikey_create(l, a->account, a->admin, key, cap, id);
}

static int create(cli_ctx *ctx, tally_ledger *l, const create_args *a)
{
    int roles = (a->account != NULL) + a->admin + a->ingest;
    if (roles != 1)
        return cli_error(ctx, CLI_USAGE,
                         "create needs exactly one of --account ID, --ingest and --admin");
    if (a->ingest != (a->n_sources > 0))
        return cli_error(ctx, CLI_USAGE, "--source PREFIX goes with --ingest (at least one)");
    if (a->account && a->account[0] && strlen(a->account) < TALLY_NAME_MAX) {
        /* A key for an account that does not exist would be a typo waiting
         * to see nothing; refuse it before anything is stored. */
        tally_account acct;
        tally_err ge = tally_ledger_account_get(l, a->account, &acct);
        if (ge == TALLY_NOT_FOUND)
            return cli_error(ctx, CLI_USAGE,
                             "account '%s' does not exist (create it first: tally account set %s)",
                             a->account, a->account);
        if (ge != TALLY_OK)
            return cli_error_for(ctx, ge, "%s: %s", tally_err_str(ge), tally_ledger_errmsg(l));
    }
    char key[TALLY_APIKEY_LEN + 1];
    int64_t id = 0;
    tally_err e = create_key(l, a, key, sizeof key, &id);
    if (e == TALLY_INVAL && a->ingest)
        return cli_error_for(ctx, e,
                             "a source prefix must be 1-%d bytes without control "
                             "characters",
                             TALLY_ID_MAX - 1);
    if (e == TALLY_INVAL)
        return cli_error_for(ctx, e, "account id must be 1-%d bytes without control characters",
                             TALLY_NAME_MAX - 1);
    if (e != TALLY_OK)
        return cli_error_for(ctx, e, "%s: %s", tally_err_str(e), tally_ledger_errmsg(l));
    printf("%s\n", key);
    fprintf(stderr, "tally apikey: created key %lld (%s%s); it is shown only this once\n",
            (long long)id,
            a->admin    ? "admin"
            : a->ingest ? "ingest"
                        : "account ",
            a->account ? a->account : "");
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

static const char *role_name(tally_key_role r)
{
    return r == TALLY_KEY_ADMIN ? "admin" : r == TALLY_KEY_INGEST ? "ingest" : "account";
}

/* ACCOUNT is the account of an account key, "*" for admins, "-" for ingest
 * keys; SOURCES lists an ingest key's prefixes, comma-separated. */
static tally_err print_key(void *ctx, const tally_apikey_info *k)
{
    (void)ctx;
    char created[32] = "?", revoked[32] = "-";
    if (tally_time_format(k->created_s, created, sizeof created) != TALLY_OK)
        snprintf(created, sizeof created, "%lld", (long long)k->created_s);
    if (k->revoked_s && tally_time_format(k->revoked_s, revoked, sizeof revoked) != TALLY_OK)
        snprintf(revoked, sizeof revoked, "%lld", (long long)k->revoked_s);
    const char *account = k->role == TALLY_KEY_ACCOUNT ? k->account
                          : k->role == TALLY_KEY_ADMIN ? "*"
                                                       : "-";
    printf("%-6lld %-7s %-24s %-21s %-21s ", (long long)k->id, role_name(k->role), account, created,
           revoked);
    for (size_t i = 0; i < k->n_sources; i++)
        printf("%s%s", i ? "," : "", k->sources[i]);
    printf("%s\n", k->n_sources ? "" : "-");
    return TALLY_OK;
}

static int list(cli_ctx *ctx, tally_ledger *l)
{
    printf("%-6s %-7s %-24s %-21s %-21s %s\n", "ID", "ROLE", "ACCOUNT", "CREATED", "REVOKED",
           "SOURCES");
    tally_err e = tally_apikey_list(l, print_key, NULL);
    if (e != TALLY_OK)
        return cli_error_for(ctx, e, "%s: %s", tally_err_str(e), tally_ledger_errmsg(l));
    return CLI_OK;
}

/* Takes the repeatable --source PREFIX (or --source=PREFIX) out of argv
 * (before "--") into a->sources; the rest goes to rest for cli_parse. */
static int take_sources(cli_ctx *ctx, int argc, char **argv, create_args *a, char **rest,
                        int *nrest)
{
    static const char opt[] = "--source";
    bool only_pos = false;
    *nrest = 0;
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        only_pos |= strcmp(argv[i], "--") == 0;
        if (!only_pos && i > 0 && strcmp(argv[i], opt) == 0) {
            if (i + 1 == argc)
                return cli_error(ctx, CLI_USAGE, "option --source needs a value");
            v = argv[++i];
        } else if (!only_pos && i > 0 && strncmp(argv[i], opt, strlen(opt)) == 0 &&
                   argv[i][strlen(opt)] == '=') {
            v = argv[i] + strlen(opt) + 1;
        }
        if (!v) {
            rest[(*nrest)++] = argv[i];
            continue;
        }
        if (a->n_sources == TALLY_KEY_SOURCES_MAX)
            return cli_error(ctx, CLI_USAGE, "at most %d --source prefixes", TALLY_KEY_SOURCES_MAX);
        a->sources[a->n_sources++] = v;
    }
    rest[*nrest] = NULL;
    return CLI_OK;
}

int cmd_apikey(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv))
        return CLI_OK;
    create_args a = {0};
    const cli_opt opts[] = {
        {"account", &a.account, NULL}, {"admin", NULL, &a.admin}, {"ingest", NULL, &a.ingest}, {0}};
    char *pos[2];
    int npos = 0, nrest = 0;
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest)
        return cli_error(ctx, CLI_FAIL, "out of memory");
    int rc = take_sources(ctx, argc, argv, &a, rest, &nrest);
    if (!rc)
        rc = cli_parse(ctx, nrest, rest, opts, pos, 2, &npos);
    free(rest);
    if (rc)
        return rc;
    const char *sub = npos > 0 ? pos[0] : "";
    bool none = !a.account && !a.admin && !a.ingest && a.n_sources == 0;
    bool ok = (strcmp(sub, "create") == 0 && npos == 1) ||
              (strcmp(sub, "revoke") == 0 && npos == 2 && none) ||
              (strcmp(sub, "list") == 0 && npos == 1 && none);
    if (!ok) {
        cli_usage(ctx, true);
        return CLI_USAGE;
    }
    tally_ledger *l = NULL;
    if ((rc = cli_open_ledger(ctx, &l)))
        return rc;
    if (sub[0] == 'c')
        rc = create(ctx, l, &a);
    else if (sub[0] == 'r')
        rc = revoke(ctx, l, pos[1]);
    else
        rc = list(ctx, l);
    tally_ledger_close(l);
    return rc;
}
