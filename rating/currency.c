/* The currencies Tally knows: ISO 4217 code and number of minor-unit digits.
 * Minor digits follow ISO 4217 (JPY and KRW have none, BHD and KWD have 3).
 * Add a row here to support another currency. */
#include "tally/money.h"

#include <string.h>

static const tally_currency currencies[] = {
    {"CNY", 2}, {"USD", 2}, {"EUR", 2}, {"GBP", 2}, {"JPY", 0}, {"KRW", 0}, {"HKD", 2}, {"SGD", 2},
    {"CHF", 2}, {"AUD", 2}, {"CAD", 2}, {"INR", 2}, {"TWD", 2}, {"NZD", 2}, {"SEK", 2}, {"NOK", 2},
    {"DKK", 2}, {"MYR", 2}, {"THB", 2}, {"IDR", 2}, {"VND", 0}, {"BHD", 3}, {"KWD", 3},
};

static bool is_iso_code(const char *code)
{
    for (int i = 0; i < 3; i++) {
        if (code[i] < 'A' || code[i] > 'Z')
            return false;
    }
    return code[3] == '\0';
}

const tally_currency *tally_currency_find(const char *code)
{
    if (!code || !is_iso_code(code))
        return NULL;
    for (size_t i = 0; i < sizeof currencies / sizeof currencies[0]; i++) {
        if (memcmp(currencies[i].code, code, 4) == 0)
            return &currencies[i];
    }
    return NULL;
}

int64_t tally_grant_max_minor(const tally_currency *c)
{
    int64_t max = TALLY_GRANT_MAX_MAJOR;
    for (int i = 0; i < c->minor_digits; i++)
        max *= 10; /* at most 10^12 for three digits */
    return max;
}
