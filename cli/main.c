/* tally: the command table and global options (--db, --key). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tally/version.h"

const cli_command cli_commands[] = {
    {"demo", "[--out DIR] [--emit-ndjson]",
     "run the main job on embedded defaults: broker, fixture stream, meter, invoices", cmd_demo},
    {"init", "", "create the ledger and load the fixture rate card", cmd_init},
    {"account",
     "set ACCOUNT [--currency C] [--timezone TZ] [--name TEXT] [--low-balance AMOUNT|none] "
     "[--stop-at AMOUNT] [--release-after DURATION]",
     "create or update an account and its spend-control limits", cmd_account},
    {"ratecard", "load FILE", "load a rate card", cmd_ratecard},
    {"spot", "set SKU PRICE --from TIME", "add a spot price point", cmd_spot},
    {"commit", "add ACCOUNT --sku S --cards N --from T --to T", "add a long-term commitment",
     cmd_commit},
    {"credit",
     "grant ACCOUNT AMOUNT --kind K [--currency C] [--priority N] [--effective T] "
     "[--expires T] [--scope EXPR] [--idempotency-key KEY]",
     "grant a credit; prints its id", cmd_credit},
    {"balance", "ACCOUNT | --sweep | --rebuild",
     "an account's prepaid balance (JSON); --sweep: refresh the balances due; --rebuild: all",
     cmd_balance},
    {"admission", "ACCOUNT --sku S --cards N --hours H [--pricing P]",
     "whether the balance pays for that usage (exit 0) or not (exit 3)", cmd_admission},
    {"ingest", "FILE|-", "ingest NDJSON usage events", cmd_ingest},
    {"broker", "[--port P] [--topic T] [--partitions N]",
     "run the embedded Kafka-protocol broker in the foreground", cmd_broker},
    {"meter", "--brokers B --topic T [--group G] [--dlq-topic T] [--until-idle SECONDS]",
     "consume usage from Kafka exactly once into the ledger", cmd_meter},
    {"invoice",
     "run --period YYYY-MM [--finalize] [--out DIR] [--account A] | show ID "
     "[--format json|csv|html] | "
     "void ID --reason TEXT | list ACCOUNT",
     "rate, finalize, show and void invoices", cmd_invoice},
    {"usage", "ACCOUNT --from T --to T [--by sku|day|meter]", "usage and running charges",
     cmd_usage},
    {"keygen", "[--force]", "create the signing key (mode 0600); --force keeps the old public key",
     cmd_keygen},
    {"pubkey", "[--all]", "print the signing key's public key (PEM); --all: every kept key",
     cmd_pubkey},
    {"verify", "[--head FILE]",
     "check balances, hash chains, signatures and triggers; --head: a saved signed head",
     cmd_verify},
    {"head", "", "print the ledger chain's signed head as JSON (save it for verify --head)",
     cmd_head},
    {"serve", "--listen ADDR [--brokers B --topic T] [--timeout S]", "serve the HTTP API",
     cmd_serve},
    {"apikey", "create (--account ID | --ingest --source PREFIX... | --admin) | revoke ID | list",
     "manage HTTP API keys", cmd_apikey},
    {"publish", "--brokers B [--topic T] [--until-idle SECONDS]",
     "announce finalized invoices and credit notes on Kafka (outbox drain)", cmd_publish},
    {"partition-of", "ACCOUNT --partitions N",
     "print the Kafka partition an account's events are keyed to", cmd_partition_of},
    {NULL, NULL, NULL, NULL},
};

const cli_command *cli_find(const char *name)
{
    for (const cli_command *c = cli_commands; c->name; c++)
        if (strcmp(c->name, name) == 0)
            return c;
    return NULL;
}

static void print_help(FILE *f)
{
    fprintf(f, "usage: tally [--db PATH] [--key PATH] COMMAND [ARGS]\n"
               "       tally --version\n\n"
               "Metering and billing for GPU/TPU rental clouds.\n\n"
               "Global options:\n"
               "  --db PATH   ledger file (default $TALLY_DB or ./tally.db)\n"
               "  --key PATH  invoice signing key (default $TALLY_KEY or ./tally.key)\n\n"
               "Commands:\n");
    for (const cli_command *c = cli_commands; c->name; c++)
        fprintf(f, "  %-9s %s\n", c->name, c->summary);
    fprintf(f, "\nRun 'tally COMMAND --help' for a command's options.\n");
}

/* Removes global options from argv wherever they appear. */
static int take_globals(cli_ctx *ctx, int *argc, char **argv)
{
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        const char **slot = NULL;
        const char *val = NULL;
        if (strcmp(a, "--db") == 0 || strcmp(a, "--key") == 0) {
            slot = a[2] == 'd' ? &ctx->db_path : &ctx->key_path;
            if (i + 1 >= *argc) {
                fprintf(stderr, "tally: %s needs a value\n", a);
                return CLI_USAGE;
            }
            val = argv[++i];
        } else if (strncmp(a, "--db=", 5) == 0) {
            slot = &ctx->db_path;
            val = a + 5;
        } else if (strncmp(a, "--key=", 6) == 0) {
            slot = &ctx->key_path;
            val = a + 6;
        }
        if (slot)
            *slot = val;
        else
            argv[out++] = argv[i];
    }
    *argc = out;
    argv[out] = NULL;
    return CLI_OK;
}

int main(int argc, char **argv)
{
    tally_log_set_cb(cli_log, NULL);
    cli_ctx ctx = {0};
    ctx.db_path = getenv("TALLY_DB");
    ctx.key_path = getenv("TALLY_KEY");
    int rc = take_globals(&ctx, &argc, argv);
    if (rc)
        return rc;
    if (!ctx.db_path || !*ctx.db_path)
        ctx.db_path = "./tally.db";
    if (!ctx.key_path || !*ctx.key_path)
        ctx.key_path = "./tally.key";
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        print_help(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("tally %s\n", tally_version_str());
        return CLI_OK;
    }
    const cli_command *c = cli_find(argv[1]);
    if (!c) {
        fprintf(stderr, "tally: unknown command '%s' (see 'tally --help')\n", argv[1]);
        return CLI_USAGE;
    }
    ctx.cmd = c->name;
    return c->run(&ctx, argc - 1, argv + 1);
}
