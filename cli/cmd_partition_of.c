/* tally partition-of: the Kafka partition an account's usage goes to.
 *
 * Producers key usage events by account and set librdkafka's partitioner to
 * murmur2_random (Java clients' default), so an account's events all land in
 * partition (murmur2(account) & 0x7fffffff) % N (include/tally/shard.h).
 * Prints that number; with --topic also the shard file that holds them in a
 * ledger directory. The account id is taken as bytes, exactly as keyed. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tally/shard.h"

#define PARTITIONS_MAX 100000 /* well above any Kafka topic's */

static void print_help(void)
{
    printf("\nOptions:\n"
           "  --partitions N   partitions of the usage topic (1..%d)\n"
           "  --topic T        also print the shard file name (shard-<T>-<p>.db)\n"
           "\nThe partition is (murmur2(ACCOUNT) & 0x7fffffff) %% N, as librdkafka's\n"
           "partitioner=" TALLY_KAFKA_PARTITIONER " and Java producers compute it.\n",
           PARTITIONS_MAX);
}

int cmd_partition_of(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv)) {
        print_help();
        return CLI_OK;
    }
    const char *partitions = NULL, *topic = NULL;
    const cli_opt opts[] = {
        {"partitions", &partitions, NULL}, {"topic", &topic, NULL}, {NULL, NULL, NULL}};
    char *pos[1];
    int npos = 0;
    int rc = cli_parse(ctx, argc, argv, opts, pos, 1, &npos);
    if (rc)
        return rc;
    if (npos != 1 || !partitions) {
        cli_usage(ctx, true);
        return cli_error(ctx, CLI_USAGE, "an ACCOUNT and --partitions are required");
    }
    if (!pos[0][0])
        return cli_error(ctx, CLI_USAGE, "the account id is empty");
    int64_t n = 0;
    if ((rc = cli_parse_int(ctx, "--partitions", partitions, 1, PARTITIONS_MAX, &n)))
        return rc;
    int32_t p = tally_partition_of(pos[0], strlen(pos[0]), (int32_t)n);
    if (!topic) {
        printf("%d\n", (int)p);
        return CLI_OK;
    }
    char name[320];
    if (!tally_shard_name(topic, p, name, sizeof name))
        return cli_error(ctx, CLI_USAGE, "'%s' is not a Kafka topic name", topic);
    printf("%d %s.db\n", (int)p, name);
    return CLI_OK;
}
