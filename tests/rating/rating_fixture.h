/* The PRICEBOOK rate card (shared/PRICEBOOK.md, fixtures/pricebook) built
 * as C values, and small builders for rating inputs. Header-only: each
 * rating test is its own executable. */
#ifndef TALLY_TEST_RATING_FIXTURE_H
#define TALLY_TEST_RATING_FIXTURE_H

#include <stdio.h>
#include <string.h>

#include "tally/rating.h"

#define T_2026_01               1767225600LL /* 2026-01-01T00:00:00Z */
#define T_2026_02               1769904000LL
#define T_2026_03               1772323200LL
#define T_2026_04               1775001600LL
#define T_2026_05               1777593600LL
#define DAY                     86400LL
#define HOUR                    3600LL
#define NANO(units, hundredths) ((units)*1000000000LL + (hundredths)*10000000LL)

static const tally_sku_price pb_skus[] = {
    {"a100-40g", true, true, false, NANO(1, 90), NANO(1, 14), 60},
    {"a100-80g", true, true, false, NANO(2, 30), NANO(1, 38), 60},
    {"h100", true, true, false, NANO(2, 58), NANO(1, 55), 60},
    {"rtx4090", true, true, true, NANO(1, 98), NANO(1, 19), 60},
    {"tpu-v4-64", true, false, false, NANO(1, 90), 0, 60},
    {"tpu-v4-256", true, false, false, NANO(7, 20), 0, 60},
    {"tpu-v5e", true, false, true, NANO(2, 80), 0, 60},
    {"ascend-910b", true, false, true, NANO(1, 50), 0, 60},
    {"cpu-container", true, false, false, NANO(0, 10), 0, 60},
};

static const tally_dim_price pb_storage[] = {
    {"ssd", "", 600000}, /* 0.0006 per GB-day */
    {"hdd", "", 200000},
};

static const tally_dim_price pb_traffic[] = {
    {"internal", "egress", 0},
    {"internal", "ingress", 0},
    {"internet", "egress", NANO(0, 50)},
    {"internet", "ingress", 0},
};

static const tally_dim_price pb_tokens[] = {
    {"*", "input", NANO(4, 0)},
    {"*", "output", NANO(8, 0)},
};

static const tally_spot_point pb_spot[] = {
    {"rtx4090", T_2026_01, NANO(0, 50)},
    {"tpu-v5e", T_2026_01, NANO(0, 80)},
    {"ascend-910b", T_2026_01, NANO(0, 60)},
};

static inline tally_ratecard pb_card(void)
{
    tally_ratecard c = {
        .id = "pricebook-2026-01",
        .currency = "CNY",
        .effective_from_s = T_2026_01,
        .skus = pb_skus,
        .n_skus = sizeof pb_skus / sizeof pb_skus[0],
        .storage = pb_storage,
        .n_storage = sizeof pb_storage / sizeof pb_storage[0],
        .traffic = pb_traffic,
        .n_traffic = sizeof pb_traffic / sizeof pb_traffic[0],
        .tokens = pb_tokens,
        .n_tokens = sizeof pb_tokens / sizeof pb_tokens[0],
    };
    return c;
}

static inline tally_interval accel(const char *instance, const char *sku, tally_pricing pricing,
                                   int64_t cards, int64_t start_s, int64_t end_s)
{
    tally_interval iv = {.meter = TALLY_METER_ACCELERATOR,
                         .pricing = pricing,
                         .weight = cards,
                         .start_s = start_s,
                         .end_s = end_s};
    snprintf(iv.resource, sizeof iv.resource, "%s", instance);
    snprintf(iv.dim, sizeof iv.dim, "%s", sku);
    return iv;
}

static inline tally_interval storage(const char *volume, const char *cls, int64_t bytes,
                                     int64_t start_s, int64_t end_s)
{
    tally_interval iv = {
        .meter = TALLY_METER_STORAGE, .weight = bytes, .start_s = start_s, .end_s = end_s};
    snprintf(iv.resource, sizeof iv.resource, "%s", volume);
    snprintf(iv.dim, sizeof iv.dim, "%s", cls);
    return iv;
}

static inline tally_point point(tally_meter m, const char *dim, const char *dim2, int64_t t_s,
                                int64_t qty)
{
    tally_point p = {.meter = m, .t_s = t_s, .qty = qty};
    snprintf(p.dim, sizeof p.dim, "%s", dim);
    snprintf(p.dim2, sizeof p.dim2, "%s", dim2);
    return p;
}

static inline tally_grant grant(int64_t id, tally_grant_kind kind, int priority,
                                int64_t effective_s, int64_t expires_s, int64_t amount_minor)
{
    tally_grant g = {.id = id,
                     .kind = kind,
                     .priority = priority,
                     .effective_s = effective_s,
                     .expires_s = expires_s,
                     .remaining_minor = amount_minor};
    return g;
}

static inline tally_commitment commitment(int64_t id, const char *sku, int64_t cards,
                                          int64_t from_s, int64_t to_s)
{
    tally_commitment c = {.id = id, .cards = cards, .from_s = from_s, .to_s = to_s};
    snprintf(c.sku, sizeof c.sku, "%s", sku);
    return c;
}

#endif
