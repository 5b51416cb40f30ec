/* tally partition_of: placeholder until implemented. */
#include "cli.h"

int cmd_partition_of(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv))
        return CLI_OK;
    return cli_error(ctx, CLI_FAIL, "not implemented yet");
}
