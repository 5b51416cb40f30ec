#include "tally/err.h"

const char *tally_err_str(tally_err e)
{
    switch (e) {
#define TALLY_ERR_STR(name, value, cls, msg)                                                       \
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
#define TALLY_ERR_NAME(name, value, cls, msg)                                                      \
    case TALLY_##name:                                                                             \
        return #name;
        TALLY_ERRORS(TALLY_ERR_NAME)
#undef TALLY_ERR_NAME
    }
    return "UNKNOWN";
}

tally_err_class tally_err_class_of(tally_err e)
{
    switch (e) {
#define TALLY_ERR_CLASS(name, value, cls, msg)                                                     \
    case TALLY_##name:                                                                             \
        return TALLY_ERR_CLASS_##cls;
        TALLY_ERRORS(TALLY_ERR_CLASS)
#undef TALLY_ERR_CLASS
    }
    return TALLY_ERR_CLASS_FATAL; /* not a tally_err: a bug somewhere */
}

const char *tally_err_class_name(tally_err_class c)
{
    switch (c) {
    case TALLY_ERR_CLASS_NONE:
        return "none";
    case TALLY_ERR_CLASS_INPUT:
        return "input";
    case TALLY_ERR_CLASS_RETRIABLE:
        return "retriable";
    case TALLY_ERR_CLASS_FATAL:
        return "fatal";
    }
    return "fatal";
}

bool tally_err_is_input(tally_err e)
{
    return tally_err_class_of(e) == TALLY_ERR_CLASS_INPUT;
}

bool tally_err_is_retriable(tally_err e)
{
    return tally_err_class_of(e) == TALLY_ERR_CLASS_RETRIABLE;
}

bool tally_err_is_fatal(tally_err e)
{
    return tally_err_class_of(e) == TALLY_ERR_CLASS_FATAL;
}
