/* tally_version() (include/tally/version.h). CMakeLists.txt defines the
 * parts from project(VERSION). */
#include "tally/version.h"

#if !defined(TALLY_VERSION_MAJOR) || !defined(TALLY_VERSION_MINOR) || !defined(TALLY_VERSION_PATCH)
#error "TALLY_VERSION_MAJOR/MINOR/PATCH come from CMakeLists.txt's project(VERSION)"
#endif

#define TALLY_STR_(x) #x
#define TALLY_STR(x)  TALLY_STR_(x)

int tally_version(void)
{
    return (TALLY_VERSION_MAJOR << 24) | (TALLY_VERSION_MINOR << 16) | (TALLY_VERSION_PATCH << 8);
}

const char *tally_version_str(void)
{
    return TALLY_STR(TALLY_VERSION_MAJOR) "." TALLY_STR(TALLY_VERSION_MINOR) "." TALLY_STR(
        TALLY_VERSION_PATCH);
}
