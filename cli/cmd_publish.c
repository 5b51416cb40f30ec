/* tally publish: placeholder until implemented. */
#include "cli.h"

int cmd_publish(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv))
        return CLI_OK;
    return cli_error(ctx, CLI_FAIL, "not implemented yet");
}
