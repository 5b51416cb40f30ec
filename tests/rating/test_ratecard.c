/* Rate card lookups and the ingest-time price check (rating/ratecard.c). */
#include "testutil.h"

#include "rating_fixture.h"

static tally_event ev_accel(const char *sku, tally_pricing pricing, int64_t t_s, int64_t secs)
{
    tally_event ev = {.meter = TALLY_METER_ACCELERATOR,
                      .pricing = pricing,
                      .time_s = t_s,
                      .seconds = secs,
                      .weight = 1};
    snprintf(ev.dim, sizeof ev.dim, "%s", sku);
    snprintf(ev.resource, sizeof ev.resource, "i-1");
    return ev;
}

static tally_event ev_dim(tally_meter m, const char *dim, const char *dim2, int64_t t_s)
{
    tally_event ev = {
        .meter = m, .time_s = t_s, .seconds = m == TALLY_METER_STORAGE ? 60 : 0, .weight = 100};
    snprintf(ev.dim, sizeof ev.dim, "%s", dim);
    snprintf(ev.dim2, sizeof ev.dim2, "%s", dim2);
    return ev;
}

static void card_in_force(void **state)
{
    tally_ratecard a = pb_card(), b = pb_card(), c = pb_card();
    b.effective_from_s = T_2026_03;
    c.effective_from_s = T_2026_04;
    const tally_ratecard *cards[] = {&a, &b, &c};

    assert_null(tally_ratecard_at(cards, 3, T_2026_01 - 1));
    assert_ptr_equal(tally_ratecard_at(cards, 3, T_2026_01), &a);
    assert_ptr_equal(tally_ratecard_at(cards, 3, T_2026_03 - 1), &a);
    assert_ptr_equal(tally_ratecard_at(cards, 3, T_2026_03), &b);
    assert_ptr_equal(tally_ratecard_at(cards, 3, T_2026_04 - 1), &b);
    assert_ptr_equal(tally_ratecard_at(cards, 3, INT64_MAX), &c);
    assert_ptr_equal(tally_ratecard_at(cards, 1, INT64_MAX), &a);
    assert_null(tally_ratecard_at(cards, 0, T_2026_03));
    assert_null(tally_ratecard_at(NULL, 0, T_2026_03));
}

static void sku_lookup(void **state)
{
    tally_ratecard card = pb_card();
    const tally_sku_price *p = tally_ratecard_sku(&card, "h100");

    assert_non_null(p);
    assert_int_equal(p->on_demand_nano, NANO(2, 58));
    assert_int_equal(p->reserved_nano, NANO(1, 55));
    assert_int_equal(p->min_billable_s, 60);
    assert_null(tally_ratecard_sku(&card, "H100"));
    assert_null(tally_ratecard_sku(&card, ""));
    assert_null(tally_ratecard_sku(NULL, "h100"));
}

static void dim_prices(void **state)
{
    tally_ratecard card = pb_card();
    static const tally_dim_price toks[] = {
        {"*", "input", NANO(4, 0)}, {"llama", "input", NANO(1, 0)}, {"*", "output", NANO(8, 0)}};
    int64_t p = -1;

    assert_int_equal(tally_ratecard_dim_price(&card, TALLY_METER_STORAGE, "ssd", "", &p), TALLY_OK);
    assert_int_equal(p, 600000);
    assert_int_equal(tally_ratecard_dim_price(&card, TALLY_METER_STORAGE, "hdd", NULL, &p),
                     TALLY_OK);
    assert_int_equal(p, 200000);
    assert_int_equal(tally_ratecard_dim_price(&card, TALLY_METER_STORAGE, "nvme", "", &p),
                     TALLY_NO_PRICE);
    assert_int_equal(tally_ratecard_dim_price(&card, TALLY_METER_TRAFFIC, "internet", "egress", &p),
                     TALLY_OK);
    assert_int_equal(p, NANO(0, 50));
    assert_int_equal(tally_ratecard_dim_price(&card, TALLY_METER_TRAFFIC, "internal", "egress", &p),
                     TALLY_OK);
    assert_int_equal(p, 0);
    assert_int_equal(
        tally_ratecard_dim_price(&card, TALLY_METER_TRAFFIC, "internet", "sideways", &p),
        TALLY_NO_PRICE);
    assert_int_equal(tally_ratecard_dim_price(&card, TALLY_METER_TRAFFIC, "space", "egress", &p),
                     TALLY_NO_PRICE);
    assert_int_equal(tally_ratecard_dim_price(&card, TALLY_METER_TOKENS, "any", "output", &p),
                     TALLY_OK);
    assert_int_equal(p, NANO(8, 0));
    card.tokens = toks;
    card.n_tokens = 3;
    assert_int_equal(tally_ratecard_dim_price(&card, TALLY_METER_TOKENS, "llama", "input", &p),
                     TALLY_OK);
    assert_int_equal(p, NANO(1, 0)); /* the model's own price wins */
    assert_int_equal(tally_ratecard_dim_price(&card, TALLY_METER_TOKENS, "llama", "output", &p),
                     TALLY_OK);
    assert_int_equal(p, NANO(8, 0)); /* falls back to "*" */
    assert_int_equal(tally_ratecard_dim_price(&card, TALLY_METER_TOKENS, "gpt", "cached", &p),
                     TALLY_NO_PRICE);
    assert_int_equal(tally_ratecard_dim_price(&card, TALLY_METER_ACCELERATOR, "h100", "", &p),
                     TALLY_NO_PRICE);
    assert_int_equal(tally_ratecard_dim_price(NULL, TALLY_METER_STORAGE, "ssd", "", &p),
                     TALLY_NO_PRICE);
}

static void check_events(void **state)
{
    tally_ratecard card = pb_card();
    const tally_ratecard *cards[] = {&card};
    char reason[16];
    tally_event ev;

#define CHECK(e, want, why)                                                                        \
    do {                                                                                           \
        tally_event ev_ = (e);                                                                     \
        memset(reason, 0, sizeof reason);                                                          \
        assert_int_equal(tally_ratecard_check_event(cards, 1, &ev_, reason, sizeof reason), want); \
        assert_string_equal(reason, why);                                                          \
    } while (0)

    CHECK(ev_accel("a100-40g", TALLY_PRICING_ON_DEMAND, T_2026_03, 60), TALLY_OK, "");
    CHECK(ev_accel("a100-40g", TALLY_PRICING_RESERVED, T_2026_03, 60), TALLY_OK, "");
    CHECK(ev_accel("rtx4090", TALLY_PRICING_SPOT, T_2026_03, 60), TALLY_OK, "");
    CHECK(ev_accel("b200", TALLY_PRICING_ON_DEMAND, T_2026_03, 60), TALLY_NOT_FOUND, "unknown_sku");
    CHECK(ev_accel("tpu-v4-64", TALLY_PRICING_RESERVED, T_2026_03, 60), TALLY_NO_PRICE, "no_price");
    CHECK(ev_accel("a100-40g", TALLY_PRICING_SPOT, T_2026_03, 60), TALLY_NO_PRICE, "no_price");
    CHECK(ev_accel("a100-40g", TALLY_PRICING_ON_DEMAND, T_2026_01 - 1, 1), TALLY_NO_PRICE,
          "no_price"); /* before any card */
    CHECK(ev_dim(TALLY_METER_STORAGE, "ssd", "", T_2026_03), TALLY_OK, "");
    CHECK(ev_dim(TALLY_METER_STORAGE, "tape", "", T_2026_03), TALLY_NO_PRICE, "no_price");
    CHECK(ev_dim(TALLY_METER_TRAFFIC, "internet", "ingress", T_2026_03), TALLY_OK, "");
    CHECK(ev_dim(TALLY_METER_TRAFFIC, "orbit", "egress", T_2026_03), TALLY_NO_PRICE, "no_price");
    CHECK(ev_dim(TALLY_METER_TRAFFIC, "internet", "up", T_2026_03), TALLY_NO_PRICE, "no_price");
    CHECK(ev_dim(TALLY_METER_TOKENS, "any-model", "input", T_2026_03), TALLY_OK, "");
    CHECK(ev_dim(TALLY_METER_TOKENS, "any-model", "reasoning", T_2026_03), TALLY_NO_PRICE,
          "no_price");

    /* reason is optional and bounded */
    ev = ev_accel("b200", TALLY_PRICING_ON_DEMAND, T_2026_03, 1);
    assert_int_equal(tally_ratecard_check_event(cards, 1, &ev, NULL, 0), TALLY_NOT_FOUND);
    char tiny[4];
    assert_int_equal(tally_ratecard_check_event(cards, 1, &ev, tiny, sizeof tiny), TALLY_NOT_FOUND);
    assert_string_equal(tiny, "unk");
    assert_int_equal(tally_ratecard_check_event(cards, 1, NULL, reason, sizeof reason),
                     TALLY_INVAL);
}

/* An event that runs into a card lacking its SKU cannot be priced whole. */
static void check_event_spanning_cards(void **state)
{
    static const tally_sku_price few[] = {{"h100", true, false, false, NANO(3, 0), 0, 60}};
    tally_ratecard a = pb_card(), b = pb_card();
    b.effective_from_s = T_2026_03;
    b.skus = few;
    b.n_skus = 1;
    const tally_ratecard *cards[] = {&a, &b};
    char reason[16];
    tally_event ev = ev_accel("a100-40g", TALLY_PRICING_ON_DEMAND, T_2026_03 - 30, 30);

    assert_int_equal(tally_ratecard_check_event(cards, 2, &ev, reason, sizeof reason), TALLY_OK);
    ev.seconds = 31;
    assert_int_equal(tally_ratecard_check_event(cards, 2, &ev, reason, sizeof reason),
                     TALLY_NOT_FOUND);
    assert_string_equal(reason, "unknown_sku");
    ev = ev_accel("h100", TALLY_PRICING_RESERVED, T_2026_03 - 30, 60);
    assert_int_equal(tally_ratecard_check_event(cards, 2, &ev, reason, sizeof reason),
                     TALLY_NO_PRICE);
    assert_string_equal(reason, "no_price");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(card_in_force),
        cmocka_unit_test(sku_lookup),
        cmocka_unit_test(dim_prices),
        cmocka_unit_test(check_events),
        cmocka_unit_test(check_event_spanning_cards),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
