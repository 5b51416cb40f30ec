/* Issue 14 item 3: a month of maximal in-range usage on every meter cannot
 * overflow a line, a subtotal or a balance (SPEC sections 1 and 3).
 *
 * The usage is what the ledger hands the rating for one event a second, for
 * all 31 days of March, on each meter, every quantity at its decode-time
 * bound (tally/event.h):
 *   - accelerator: 65,536 cards for 3,600 s every second. Events that chain
 *     end to start coalesce, so the ledger holds 3,600 intervals of 65,536
 *     cards, [start + k, end + k), k = 0..3599 (about 2.36e8 cards at once);
 *   - storage: 10^18 bytes for 86,400 s every second: 86,400 intervals of
 *     10^18 bytes (8.64e22 bytes at once: summed only in __int128);
 *   - traffic: 10^18 bytes every second, as 297,600 per-second sums of
 *     9 x 10^18 (the same total, which rating sums into one line);
 *   - tokens: 10^12 tokens every second, as 31 daily sums.
 * Rated with the fixture's highest prices the result is exact; with the
 * highest price tally_price_parse accepts (INT64_MAX nano) it is a clean
 * TALLY_OVERFLOW; with the highest prices a rate card may carry
 * (tally_price_max_nano) every accelerator, traffic and token line and the
 * subtotal fit, exactly, while storage fits only up to 0.0074 per GB-day
 * and is a clean TALLY_OVERFLOW above (see test_highest_card_prices_fit). */
#include <stdlib.h>

#include "rating_fixture.h"
#include "testutil.h"

#define MONTH_S    (31 * DAY)
#define N_TRAFFIC  (MONTH_S / 9)
#define N_TOKENS   31
#define N_ACCEL    3600
#define N_STORAGE  86400
#define BYTES_MAX  TALLY_BYTES_MAX
#define TOKENS_MAX TALLY_TOKENS_MAX

typedef struct month {
    tally_interval *iv;
    size_t n_iv;
    tally_point *pt;
    size_t n_pt;
} month;

static month month_build(void)
{
    month m = {calloc(N_ACCEL + N_STORAGE, sizeof *m.iv), 0,
               calloc(N_TRAFFIC + N_TOKENS, sizeof *m.pt), 0};
    assert_non_null(m.iv);
    assert_non_null(m.pt);
    for (int64_t k = 0; k < N_ACCEL; k++)
        m.iv[m.n_iv++] = accel("i-max", "tpu-v4-256", TALLY_PRICING_ON_DEMAND, TALLY_CARDS_MAX,
                               T_2026_03 + k, T_2026_04 + k);
    for (int64_t k = 0; k < N_STORAGE; k++)
        m.iv[m.n_iv++] = storage("v-max", "ssd", BYTES_MAX, T_2026_03 + k, T_2026_04 + k);
    for (int64_t i = 0; i < N_TRAFFIC; i++)
        m.pt[m.n_pt++] =
            point(TALLY_METER_TRAFFIC, "internet", "egress", T_2026_03 + 9 * i, 9 * BYTES_MAX);
    for (int64_t d = 0; d < N_TOKENS; d++)
        m.pt[m.n_pt++] =
            point(TALLY_METER_TOKENS, "m", "output", T_2026_03 + d * DAY, DAY * TOKENS_MAX);
    return m;
}

static void month_free(month *m)
{
    free(m->iv);
    free(m->pt);
}

/* The month's base quantity of a meter, summed independently of rating. */
static __int128 month_qty(tally_meter meter)
{
    __int128 q = 0;
    if (meter == TALLY_METER_ACCELERATOR)
        for (int64_t k = 0; k < N_ACCEL; k++)
            q += (__int128)TALLY_CARDS_MAX * (MONTH_S - k);
    if (meter == TALLY_METER_STORAGE)
        for (int64_t k = 0; k < N_STORAGE; k++)
            q += (__int128)BYTES_MAX * (MONTH_S - k);
    if (meter == TALLY_METER_TRAFFIC)
        q = (__int128)MONTH_S * BYTES_MAX;
    if (meter == TALLY_METER_TOKENS)
        q = (__int128)MONTH_S * TOKENS_MAX;
    return q;
}

/* round_half_up(q x price / (divisor x 10^9)) in CNY fen, or -1 if it does
 * not fit in int64; computed without the rating's code, and without ever
 * forming q x price (which may not fit in __int128). */
static int64_t expect_minor(__int128 q, int64_t price_nano, int64_t divisor)
{
    const __int128 scale = 10000000; /* 10^9 nano / 10^2 fen */
    __int128 qd = q / divisor, qr = q % divisor;
    __int128 a = qd * price_nano; /* over scale */
    __int128 b = qr * price_nano; /* over divisor x scale */
    __int128 den = (__int128)divisor * scale;
    __int128 r = a / scale + ((a % scale) * divisor + b + den / 2) / den;
    return r > INT64_MAX ? -1 : (int64_t)r;
}

static tally_err rate(const tally_ratecard *card, const month *m, tally_rating_result *out)
{
    const tally_ratecard *cards[] = {card};
    tally_rating_input in = {.account = "whale",
                             .minor_digits = 2,
                             .period_start_s = T_2026_03,
                             .period_end_s = T_2026_04,
                             .cards = cards,
                             .n_cards = 1,
                             .intervals = m->iv,
                             .n_intervals = m->n_iv,
                             .points = m->pt,
                             .n_points = m->n_pt};
    char why[256] = "";
    memset(out, 0, sizeof *out);
    return tally_rate_period(&in, out, why, sizeof why);
}

static const tally_line *line_of(const tally_rating_result *r, tally_meter meter)
{
    for (size_t i = 0; i < r->n_lines; i++)
        if (r->lines[i].meter == meter && r->lines[i].kind == TALLY_LINE_USAGE &&
            r->lines[i].amount_minor != 0)
            return &r->lines[i];
    fail_msg("no %s line", tally_meter_name(meter));
    return NULL;
}

/* Every line is exact and the subtotal is their sum. */
static void assert_exact(const tally_rating_result *r, const int64_t price_nano[4])
{
    static const tally_meter meters[] = {TALLY_METER_ACCELERATOR, TALLY_METER_STORAGE,
                                         TALLY_METER_TRAFFIC, TALLY_METER_TOKENS};
    __int128 sum = 0;
    for (size_t i = 0; i < 4; i++) {
        const tally_line *l = line_of(r, meters[i]);
        __int128 q = month_qty(meters[i]);
        int64_t want = expect_minor(q, price_nano[i], tally_meter_unit_divisor(meters[i]));
        assert_true(want > 0);
        assert_true(l->quantity == q);
        assert_int_equal(l->unit_price_nano, price_nano[i]);
        assert_int_equal(l->amount_minor, want);
        sum += want;
    }
    assert_true(sum <= INT64_MAX);
    assert_int_equal(r->subtotal_minor, (int64_t)sum);
    assert_int_equal(r->amount_due_minor, (int64_t)sum);
}

static void test_fixture_prices_exact(void **state)
{
    (void)state;
    month m = month_build();
    tally_ratecard card = pb_card();
    tally_rating_result r;
    assert_int_equal(rate(&card, &m, &r), TALLY_OK);
    /* tpu-v4-256 7.20, ssd 0.0006, internet egress 0.50, output tokens 8.00:
     * the fixture's highest price on each meter. */
    const int64_t prices[4] = {NANO(7, 20), 600000, NANO(0, 50), NANO(8, 0)};
    assert_exact(&r, prices);
    tally_rating_result_release(&r);
    month_free(&m);
}

/* A card whose every price is price_nano[meter]. */
typedef struct uniform_card {
    tally_sku_price sku;
    tally_dim_price storage, traffic, tokens;
    tally_ratecard card;
} uniform_card;

static void uniform_card_init(uniform_card *u, const int64_t prices[4])
{
    memset(u, 0, sizeof *u);
    u->sku = (tally_sku_price){"tpu-v4-256", true, false, false, prices[0], 0, 60};
    u->storage = (tally_dim_price){"ssd", "", prices[1]};
    u->traffic = (tally_dim_price){"internet", "egress", prices[2]};
    u->tokens = (tally_dim_price){"*", "output", prices[3]};
    u->card = (tally_ratecard){.id = "max",
                               .currency = "CNY",
                               .effective_from_s = T_2026_01,
                               .skus = &u->sku,
                               .n_skus = 1,
                               .storage = &u->storage,
                               .n_storage = 1,
                               .traffic = &u->traffic,
                               .n_traffic = 1,
                               .tokens = &u->tokens,
                               .n_tokens = 1};
}

static void test_highest_parsable_price_overflows_cleanly(void **state)
{
    (void)state;
    month full = month_build();
    /* Each meter on its own at INT64_MAX nano: an error, never a wrap. */
    for (int meter = 0; meter < 4; meter++) {
        int64_t prices[4] = {0, 0, 0, 0};
        prices[meter] = INT64_MAX;
        uniform_card u;
        uniform_card_init(&u, prices);
        tally_rating_result r;
        tally_err e = rate(&u.card, &full, &r);
        if (e != TALLY_OVERFLOW)
            fail_msg("meter %d at INT64_MAX nano: %s", meter, tally_err_name(e));
        assert_null(r.lines);
        assert_int_equal(r.n_lines, 0);
    }
    month_free(&full);
}

/* The highest price a card may carry (tally_price_max_nano): every line
 * and the subtotal fit, exactly, for accelerators, traffic and tokens. */
static void test_highest_card_prices_fit(void **state)
{
    (void)state;
    month m = month_build();
    int64_t prices[4];
    static const tally_meter meters[] = {TALLY_METER_ACCELERATOR, TALLY_METER_STORAGE,
                                         TALLY_METER_TRAFFIC, TALLY_METER_TOKENS};
    for (int i = 0; i < 4; i++)
        prices[i] = tally_price_max_nano(meters[i], 2);
    /* 100,000.00 per card-hour, 10.00 per GB-day and per GB, 1,000.00 per
     * million tokens. */
    assert_int_equal(prices[0], 100000 * 1000000000LL);
    assert_int_equal(prices[1], 10 * 1000000000LL);
    assert_int_equal(prices[2], 10 * 1000000000LL);
    assert_int_equal(prices[3], 1000 * 1000000000LL);
    /* In minor units the bound is the same for every currency. */
    assert_int_equal(tally_price_max_nano(TALLY_METER_ACCELERATOR, 0), 10000000 * 1000000000LL);
    assert_int_equal(tally_price_max_nano(TALLY_METER_STORAGE, 3), 1000000000LL);
    /* Storage at its cap: the line (2.68e18 fen) would fit, but the
     * rating's exact numerator, byte-seconds x nano price x 10^2, is 2.3e41
     * and passes __int128: a clean TALLY_OVERFLOW, never a wrap. The
     * largest storage price whose maximal month rates exactly today is
     * 0.0074 per GB-day (7,400,000 nano). */
    const int64_t storage_fits = 7400000;
    int64_t at_cap[4] = {prices[0], prices[1], prices[2], prices[3]};
    uniform_card u;
    uniform_card_init(&u, at_cap);
    tally_rating_result r;
    assert_int_equal(rate(&u.card, &m, &r), TALLY_OVERFLOW);
    assert_null(r.lines);
    at_cap[1] = storage_fits;
    uniform_card_init(&u, at_cap);
    assert_int_equal(rate(&u.card, &m, &r), TALLY_OK);
    assert_exact(&r, at_cap);
    /* Together the four lines are 4.7e18 fen: under INT64_MAX (9.2e18). */
    assert_true(r.subtotal_minor > 4700000000000000000LL);
    tally_rating_result_release(&r);
    month_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_prices_exact),
        cmocka_unit_test(test_highest_parsable_price_overflows_cleanly),
        cmocka_unit_test(test_highest_card_prices_fit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
