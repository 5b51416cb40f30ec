/* bench_balance: what keeping a prepaid balance costs a batch, by the size
 * of the account (include/tally/balance.h, ledger/balance.c).
 *
 *   bench_balance [INSTANCES] [HOURS] [DIR]   (default 500 instances, 240
 *                                             hours, a fresh folder under /tmp)
 *
 * Account "big" (a prepaid grant, so under spend control) runs INSTANCES
 * h100 instances that each report 3000 s of usage every hour for HOURS
 * hours of March 2026, one batch per hour; the 600 s gap keeps every report
 * a usage row of its own, so the account's open period ends with
 * INSTANCES x HOURS rows. Account "small" has one row. Then 20 batches of
 * one event each alternate between the two. Prints the load (total and per
 * batch) and the mean time of a one-event batch of each account: the
 * refresh in the batch's transaction re-rates the account's open periods,
 * so it grows with the account's rows. Put DIR on tmpfs (/dev/shm) to
 * measure the engine rather than the disk's fsync. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tally/embed.h"
#include "tally/ingest.h"
#include "tally/ledger.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void check(tally_err e, const char *what, tally_ledger *l)
{
    if (e == TALLY_OK)
        return;
    fprintf(stderr, "bench_balance: %s: %s (%s)\n", what, tally_err_str(e),
            l ? tally_ledger_errmsg(l) : "");
    exit(1);
}

static int64_t next_id;

static void queue(tally_ledger *l, tally_batch *b, const char *account, int instance, int64_t t,
                  int seconds)
{
    char ts[40], ev[512], origin[40];
    tally_reject rej;
    check(tally_time_format(t, ts, sizeof ts), "time", l);
    next_id++;
    snprintf(ev, sizeof ev,
             "{\"specversion\":\"1.0\",\"id\":\"e%" PRId64 "\",\"source\":\"bench\",\"type\":"
             "\"accelerator.usage\",\"subject\":\"%s\",\"time\":\"%s\",\"data\":{\"instance\":"
             "\"i%d\",\"sku\":\"h100\",\"pricing\":\"on_demand\",\"seconds\":%d}}",
             next_id, account, ts, instance, seconds);
    snprintf(origin, sizeof origin, "bench:%" PRId64, next_id);
    check(tally_ingest_message(b, ev, strlen(ev), origin, tally_now_s(), &rej), "queue", l);
}

/* One batch: n instances of account from t, seconds each. */
static void batch(tally_ledger *l, const char *account, int n, int64_t t, int seconds)
{
    tally_batch *b = NULL;
    check(tally_batch_create(l, &b), "batch", l);
    for (int i = 0; i < n; i++)
        queue(l, b, account, i, t, seconds);
    check(tally_batch_commit(b, NULL, NULL), "commit", l);
    tally_batch_destroy(b);
}

int main(int argc, char **argv)
{
    int instances = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 500;
    int hours = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 240;
    char dir[512], db[600], why[256] = "";
    if (argc > 3)
        snprintf(dir, sizeof dir, "%s", argv[3]);
    else
        snprintf(dir, sizeof dir, "/tmp/bench_balance-%ld", (long)time(NULL));
    snprintf(db, sizeof db, "%s/bench.db", dir);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && rm -f '%s' '%s-wal' '%s-shm'", dir, db, db, db);
    if (instances < 1 || hours < 1 || hours > 600 || system(cmd) != 0) {
        fprintf(stderr, "usage: bench_balance [INSTANCES] [HOURS (1..600)] [DIR]\n");
        return 2;
    }
    setenv("TALLY_NOW", "2026-03-28T00:00:00Z", 1);
    tally_ledger *l = NULL;
    if (tally_ledger_open(db, &l, why, sizeof why) != TALLY_OK) {
        fprintf(stderr, "bench_balance: %s\n", why);
        return 1;
    }
    const tally_embedded *card = tally_embedded_find("fixtures/pricebook/ratecard.json");
    check(card ? tally_ledger_ratecard_load(l, card->data, card->len, why, sizeof why)
               : TALLY_NOT_FOUND,
          "rate card", l);
    int64_t t0 = 0, id;
    check(tally_time_parse("2026-03-01T00:00:00Z", 20, &t0), "time", l);
    tally_grant_spec g = {.kind = TALLY_GRANT_PREPAID,
                          .amount_minor = 100000000,
                          .priority = 50,
                          .effective_s = t0,
                          .expires_s = TALLY_TIME_MAX,
                          .scope = ""};
    const char *accounts[] = {"big", "small"};
    for (int i = 0; i < 2; i++) {
        g.account = accounts[i];
        check(tally_ledger_grant_add(l, &g, &id, why, sizeof why), "grant", l);
    }
    double a = now_ms();
    for (int h = 0; h < hours; h++)
        batch(l, "big", instances, t0 + h * 3600LL, 3000);
    double load = now_ms() - a;
    tally_ledger_counts c;
    check(tally_ledger_counts_get(l, &c), "counts", l);
    double big = 0, small = 0;
    const int n = 20;
    for (int k = 0; k < n; k++) {
        a = now_ms();
        batch(l, "big", 1, t0 + (hours + k) * 3600LL, 60);
        double m = now_ms();
        batch(l, "small", 1, t0 + k * 3600LL, 60);
        big += m - a;
        small += now_ms() - m;
    }
    printf("%d instances x %d hours: %" PRId64 " usage rows; load %.0f ms (%.1f ms per batch of "
           "%d events); one-event batch: big %.2f ms, small %.2f ms\n",
           instances, hours, c.intervals, load, load / hours, instances, big / n, small / n);
    tally_ledger_close(l);
    return 0;
}
