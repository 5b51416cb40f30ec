/* Names of meters and pricings, as they appear in events, rate cards,
 * invoices and the ledger. */
#include <string.h>

#include "tally/event.h"

static const char *const meter_names[TALLY_METER_COUNT] = {
    [TALLY_METER_ACCELERATOR] = "accelerator",
    [TALLY_METER_STORAGE] = "storage",
    [TALLY_METER_TRAFFIC] = "traffic",
    [TALLY_METER_TOKENS] = "tokens",
};

static const char *const pricing_names[] = {
    [TALLY_PRICING_NONE] = "",
    [TALLY_PRICING_ON_DEMAND] = "on_demand",
    [TALLY_PRICING_SPOT] = "spot",
    [TALLY_PRICING_RESERVED] = "reserved",
};

#define N_PRICINGS (sizeof pricing_names / sizeof pricing_names[0])

const char *tally_meter_name(tally_meter m)
{
    return (unsigned)m < TALLY_METER_COUNT ? meter_names[m] : "";
}

const char *tally_pricing_name(tally_pricing p)
{
    return (unsigned)p < N_PRICINGS ? pricing_names[p] : "";
}

tally_err tally_meter_from_name(const char *s, tally_meter *out)
{
    for (unsigned i = 0; s && i < TALLY_METER_COUNT; i++) {
        if (strcmp(s, meter_names[i]) == 0) {
            *out = (tally_meter)i;
            return TALLY_OK;
        }
    }
    return TALLY_NOT_FOUND;
}

/* The inverse of tally_pricing_name(), so "" gives TALLY_PRICING_NONE: a name
 * stored in the ledger reads back as the pricing it came from. Callers that
 * need a real pricing (an accelerator event) check for NONE themselves. */
tally_err tally_pricing_from_name(const char *s, tally_pricing *out)
{
    for (unsigned i = 0; s && i < N_PRICINGS; i++) {
        if (strcmp(s, pricing_names[i]) == 0) {
            *out = (tally_pricing)i;
            return TALLY_OK;
        }
    }
    return TALLY_NOT_FOUND;
}
