/* Traffic and tokens read by the hour (schemas/013_points_hourly.sql,
 * ledger/invoice_gather.c) rate exactly as their seconds do:
 *   - a property test: random traffic and token usage (several events in one
 *     second, odd seconds), grants whose windows open and close inside
 *     hours, a rate card taking over inside an hour, an account in a time
 *     zone whose periods do not start on a UTC hour; every draft and every
 *     finalized invoice is byte-identical to the one rated second by second
 *     (TALLY_RAW_POINTS=1). TALLY_PROPERTY_SEED=<n> reproduces a run;
 *   - an hour whose sum would pass 64 bits is kept NULL and read by the
 *     second;
 *   - `tally verify` names an hourly sum edited to disagree with its seconds. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"
#include "tally/embed.h"
#include "tally/ingest.h"
#include "tally/invoice.h"
#include "tally/ledger_sql.h"
#include "tally/sign.h"

typedef struct fx {
    tally_ledger *l;
    char dir[512], db[600], key[600];
    int next_id;
    uint64_t rng;
} fx;

static uint64_t rnd(fx *f, uint64_t n)
{
    f->rng = f->rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (f->rng >> 33) % n;
}

static int64_t at(const char *s)
{
    int64_t t;
    assert_int_equal(tally_time_parse(s, strlen(s), &t), TALLY_OK);
    return t;
}

static void fx_open(fx *f, const char *tag)
{
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "%s", tu_tmpdir(tag));
    snprintf(f->db, sizeof f->db, "%s/t.db", f->dir);
    snprintf(f->key, sizeof f->key, "%s/t.key", f->dir);
    setenv("TALLY_NOW", "2026-01-01T00:00:00Z", 1);
    f->l = tu_open_priced(f->db);
    assert_int_equal(tally_keygen(f->key, 0), TALLY_OK);
    setenv("TALLY_NOW", "2026-04-10T00:00:00Z", 1);
}

/* A second card from 2026-03-14T10:17:23Z (inside an hour), other prices. */
static void second_card(fx *f)
{
    static const char card[] =
        "{\"id\":\"pricebook-2026-03b\",\"currency\":\"CNY\","
        "\"effective_from\":\"2026-03-14T10:17:23Z\",\"accelerators\":{\"a100-40g\":"
        "{\"on_demand\":\"1.90\",\"min_billable_seconds\":60}},\"storage\":{\"ssd\":\"0.0006\"},"
        "\"traffic\":{\"internet\":{\"egress\":\"0.70\",\"ingress\":\"0.01\"}},"
        "\"tokens\":{\"*\":{\"input\":\"3.30\",\"output\":\"9.10\"}}}";
    char why[256] = "";
    if (tally_ledger_ratecard_load(f->l, card, strlen(card), why, sizeof why) != TALLY_OK)
        fail_msg("second card: %s", why);
}

static void point(fx *f, tally_batch *b, const char *account, int64_t t, bool tokens, int64_t qty)
{
    char ev[1024], ts[40], origin[64];
    assert_int_equal(tally_time_format(t, ts, sizeof ts), TALLY_OK);
    if (tokens)
        snprintf(ev, sizeof ev,
                 "{\"specversion\":\"1.0\",\"id\":\"p-%d\",\"source\":\"test\",\"type\":"
                 "\"tokens.usage\",\"subject\":\"%s\",\"time\":\"%s\",\"data\":{\"model\":"
                 "\"qwen-72b\",\"kind\":\"%s\",\"tokens\":%" PRId64 "}}",
                 ++f->next_id, account, ts, qty % 2 ? "input" : "output", qty);
    else
        snprintf(ev, sizeof ev,
                 "{\"specversion\":\"1.0\",\"id\":\"p-%d\",\"source\":\"test\",\"type\":"
                 "\"traffic.usage\",\"subject\":\"%s\",\"time\":\"%s\",\"data\":{\"resource\":"
                 "\"eip-1\",\"direction\":\"%s\",\"scope\":\"internet\",\"bytes\":%" PRId64 "}}",
                 ++f->next_id, account, ts, qty % 3 ? "egress" : "ingress", qty);
    tally_reject rej;
    snprintf(origin, sizeof origin, "test:%d", f->next_id);
    assert_int_equal(tally_ingest_message(b, ev, strlen(ev), origin, tally_now_s(), &rej),
                     TALLY_OK);
    if (rej.reason[0])
        fail_msg("rejected: %s %s", rej.reason, rej.detail);
}

static void grant(fx *f, const char *account, int64_t amount, int64_t from, int64_t to,
                  const char *scope)
{
    tally_grant_spec g = {.account = account,
                          .kind = TALLY_GRANT_COUPON,
                          .amount_minor = amount,
                          .priority = (int)rnd(f, 100),
                          .effective_s = from,
                          .expires_s = to,
                          .scope = scope};
    char why[256] = "";
    int64_t id;
    if (tally_ledger_grant_add(f->l, &g, &id, why, sizeof why) != TALLY_OK)
        fail_msg("grant: %s", why);
}

/* Every account's document for period, as the run rates it now. */
static void docs(fx *f, const char *period, bool finalize, tally_buf *out)
{
    static const char *const accounts[] = {"acct-a", "acct-b", "acct-k"};
    char why[512] = "";
    tally_invoice_run_opts o = {.period = period, .finalize = finalize, .key_path = f->key};
    if (tally_invoice_run(f->l, &o, why, sizeof why) != TALLY_OK)
        fail_msg("run %s: %s", period, why);
    tally_buf_reset(out);
    for (size_t i = 0; i < 3; i++) {
        char id[96];
        snprintf(id, sizeof id, "draft:%s:%s", accounts[i], period);
        tally_err e = tally_invoice_show(f->l, id, TALLY_FORMAT_JSON, out);
        assert_true(e == TALLY_OK || e == TALLY_NOT_FOUND);
    }
}

static void assert_same_both_ways(fx *f, const char *period)
{
    tally_buf hourly, raw;
    tally_buf_init(&hourly, 0);
    tally_buf_init(&raw, 0);
    unsetenv("TALLY_RAW_POINTS");
    docs(f, period, false, &hourly);
    setenv("TALLY_RAW_POINTS", "1", 1);
    docs(f, period, false, &raw);
    unsetenv("TALLY_RAW_POINTS");
    const char *h = hourly.data ? hourly.data : "", *r = raw.data ? raw.data : "";
    if (strcmp(h, r) != 0)
        fail_msg("%s: by the hour\n%s\nby the second\n%s", period, h, r);
    tally_buf_release(&hourly);
    tally_buf_release(&raw);
}

static void test_hourly_rates_like_seconds(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "points-hourly");
    const char *seed_env = getenv("TALLY_PROPERTY_SEED");
    f.rng = seed_env ? strtoull(seed_env, NULL, 10) : (uint64_t)time(NULL) ^ 0x9e3779b9;
    uint64_t seed = f.rng;
    print_message("points-hourly seed %" PRIu64 "\n", seed);
    assert_int_equal(tally_ledger_account_set(f.l, "acct-k", NULL, "Asia/Kolkata", NULL), TALLY_OK);
    second_card(&f);
    int64_t start = at("2026-02-27T00:00:00Z"), span = at("2026-04-03T00:00:00Z") - start;
    grant(&f, "acct-a", 100000000, at("2026-03-03T07:41:13Z"), at("2026-03-20T19:00:01Z"),
          "meter=tokens");
    grant(&f, "acct-b", 100000000, at("2026-03-10T00:30:00Z"), TALLY_TIME_MAX, "");
    grant(&f, "acct-k", 100000000, at("2026-02-28T18:29:59Z"), at("2026-03-31T18:30:01Z"),
          "meter=traffic");
    static const char *const accounts[] = {"acct-a", "acct-b", "acct-k"};
    for (int round = 0; round < 6; round++) {
        tally_batch *b = NULL;
        assert_int_equal(tally_batch_create(f.l, &b), TALLY_OK);
        for (int i = 0; i < 1500; i++) {
            int64_t t = start + (int64_t)rnd(&f, (uint64_t)span);
            int n = 1 + (int)rnd(&f, 3); /* several events in one second */
            const char *acct = accounts[rnd(&f, 3)];
            bool tok = rnd(&f, 2) == 0;
            for (int k = 0; k < n; k++)
                point(&f, b, acct, t, tok, 1 + (int64_t)rnd(&f, tok ? 5000000 : 3000000000ULL));
        }
        tally_batch_stats st;
        assert_int_equal(tally_batch_commit(b, &st, NULL), TALLY_OK);
        tally_batch_destroy(b);
        assert_same_both_ways(&f, "2026-03");
        assert_same_both_ways(&f, "2026-02");
        if (round == 3) { /* finalized by the hour; late usage then adjusts it */
            tally_buf out;
            tally_buf_init(&out, 0);
            docs(&f, "2026-02", true, &out);
            tally_buf_release(&out);
        }
    }
    char why[512] = "";
    if (tally_ledger_verify(f.l, f.key, why, sizeof why) != TALLY_OK)
        fail_msg("verify: %s (seed %" PRIu64 ")", why, seed);
    tally_ledger_close(f.l);
}

static tally_err first_int(void *ctx, int ncols, const char *const *cols)
{
    *(int64_t *)ctx = ncols > 0 && cols[0] ? strtoll(cols[0], NULL, 10) : -1;
    return TALLY_OK;
}

static void test_overflowing_hour_and_tamper(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, "points-hourly-overflow");
    tally_batch *b = NULL;
    int64_t t = at("2026-03-05T10:00:00Z");
    for (int i = 0; i < 12; i++) { /* 12 x 10^18 bytes in one hour: more than 2^63 */
        assert_int_equal(tally_batch_create(f.l, &b), TALLY_OK);
        point(&f, b, "acct-a", t + i, false, 1000000000000000000LL);
        assert_int_equal(tally_batch_commit(b, NULL, NULL), TALLY_OK);
        tally_batch_destroy(b);
    }
    int64_t n_null = -1;
    assert_int_equal(tally_ledger_query(f.l,
                                        "SELECT count(*) FROM usage_points_hourly "
                                        "WHERE qty IS NULL",
                                        NULL, 0, first_int, &n_null),
                     TALLY_OK);
    assert_int_equal(n_null, 1);
    assert_same_both_ways(&f, "2026-03");
    assert_int_equal(tally_batch_create(f.l, &b), TALLY_OK);
    point(&f, b, "acct-a", at("2026-03-06T10:00:07Z"), false, 12345);
    assert_int_equal(tally_batch_commit(b, NULL, NULL), TALLY_OK);
    tally_batch_destroy(b);
    char why[512] = "";
    assert_int_equal(tally_ledger_verify(f.l, f.key, why, sizeof why), TALLY_OK);
    assert_int_equal(tally_ledger_exec(f.l, "UPDATE usage_points_hourly SET qty = qty + 1 "
                                            "WHERE qty IS NOT NULL"),
                     TALLY_OK);
    assert_int_equal(tally_ledger_verify(f.l, f.key, why, sizeof why), TALLY_TAMPERED);
    assert_non_null(strstr(why, "usage_points_hourly: acct-a"));
    assert_int_equal(tally_ledger_exec(f.l, "DELETE FROM usage_points_hourly"), TALLY_OK);
    assert_int_equal(tally_ledger_verify(f.l, f.key, why, sizeof why), TALLY_TAMPERED);
    assert_non_null(strstr(why, "has no hourly sum"));
    tally_ledger_close(f.l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hourly_rates_like_seconds),
        cmocka_unit_test(test_overflowing_hour_and_tamper),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
