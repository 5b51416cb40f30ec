/* libFuzzer target for the credit scope parser: any bytes must either parse
 * into a scope whose every key and value is a bounded, non-empty,
 * NUL-terminated string, or be refused with a reason; matching a parsed
 * scope must never crash. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tally/rating.h"

#define FUZZ_MAX 4096

static void check_scope(const tally_scope *s)
{
    if (s->n_terms > TALLY_SCOPE_MAX_TERMS)
        abort();
    for (size_t t = 0; t < s->n_terms; t++) {
        if (s->terms[t].key[0] == '\0' ||
            memchr(s->terms[t].key, '\0', sizeof s->terms[t].key) == NULL)
            abort();
        if (s->terms[t].n_values == 0 || s->terms[t].n_values > TALLY_SCOPE_MAX_VALUES)
            abort();
        for (size_t v = 0; v < s->terms[t].n_values; v++)
            if (s->terms[t].values[v][0] == '\0' ||
                memchr(s->terms[t].values[v], '\0', TALLY_NAME_MAX) == NULL)
                abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char expr[FUZZ_MAX + 1];
    const char *why = NULL;
    tally_scope s;

    if (size > FUZZ_MAX)
        size = FUZZ_MAX;
    memcpy(expr, data, size);
    expr[size] = '\0'; /* the parser takes a C string: stop at the first NUL */
    if (tally_scope_parse(expr, &s, &why) != TALLY_OK) {
        if (why == NULL || why[0] == '\0' || s.n_terms != 0)
            abort();
        return 0;
    }
    check_scope(&s);
    for (int m = 0; m < TALLY_METER_COUNT; m++)
        for (int p = TALLY_PRICING_NONE; p <= TALLY_PRICING_RESERVED; p++)
            (void)tally_scope_matches(&s, (tally_meter)m, s.n_terms ? s.terms[0].values[0] : "h100",
                                      (tally_pricing)p);
    return 0;
}
