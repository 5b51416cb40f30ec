#include "tally/embed.h"

#include <string.h>

const tally_embedded *tally_embedded_find(const char *name)
{
    for (const tally_embedded *e = tally_embedded_files; e->name; e++)
        if (strcmp(e->name, name) == 0)
            return e;
    return NULL;
}
