#include "tally/err.h"

const char *tally_err_str(tally_err e)
{
    switch (e) {
#define TALLY_ERR_STR(name, value, msg)                                                            \
    case TALLY_##name:                                                                             \
        return msg;
        TALLY_ERRORS(TALLY_ERR_STR)
#undef TALLY_ERR_STR
    }
    return "unknown error";
}

const char *tally_err_name(tally_err e)
{
    switch (e) {
#define TALLY_ERR_NAME(name, value, msg)                                                           \
    case TALLY_##name:                                                                             \
        return #name;
        TALLY_ERRORS(TALLY_ERR_NAME)
#undef TALLY_ERR_NAME
    }
    return "UNKNOWN";
}
