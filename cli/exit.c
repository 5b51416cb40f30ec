/* The one rule from a library error to the `tally` exit status (cli.h). */
#include "cli.h"

int cli_exit_code(tally_err e)
{
    switch (tally_err_class_of(e)) {
    case TALLY_ERR_CLASS_NONE:
        return CLI_OK;
    case TALLY_ERR_CLASS_INPUT: /* nothing was changed; the caller must change the request */
        return CLI_USAGE;
    case TALLY_ERR_CLASS_RETRIABLE:
    case TALLY_ERR_CLASS_FATAL:
        break;
    }
    return CLI_FAIL;
}
