/* bench_invoice: an invoice run over many accounts.
 *
 *   bench_invoice [ACCOUNTS] [DIR]     (default 100000 accounts, a fresh
 *                                       folder under /tmp)
 *
 * Builds a ledger with the fixture rate card and, per account, one hour of
 * a100-40g on demand, 30 minutes of rtx4090 spot, a day of 100 GB ssd and
 * 200,000 input tokens in March 2026 (4 events), plus a trial voucher for
 * every 100th account. Then times:
 *   draft      tally_invoice_run --period 2026-03 (drafts, batched writes)
 *   finalize   the same with finalize (groups of 256 accounts per
 *              transaction, a savepoint per account: number, hash chain,
 *              Ed25519 signature, rows, postings)
 *   rerun      finalize again (every account already finalized)
 *   verify     tally_ledger_verify over the result (skipped when
 *              BENCH_SKIP_VERIFY is set)
 * and prints wall times and accounts per second. Integer arithmetic only.
 * BENCH_OUT=1 gives finalize and rerun the output directory DIR/out (JSON,
 * CSV and HTML per invoice, as `invoice run --out`); BENCH_SETUP_ONLY=1
 * stops after the setup, leaving DIR/bench.db and DIR/bench.key for the
 * CLI (`tally --db DIR/bench.db --key DIR/bench.key invoice run ...`, with
 * TALLY_NOW=2026-04-02T00:00:00Z).
 * Put DIR on tmpfs (/dev/shm) to measure the engine rather than the disk's
 * fsync: finalizing commits once per group of 256 accounts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tally/embed.h"
#include "tally/ingest.h"
#include "tally/invoice.h"
#include "tally/ledger.h"
#include "tally/sign.h"

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void die(const char *what, tally_err e, tally_ledger *l)
{
    fprintf(stderr, "bench_invoice: %s: %s (%s)\n", what, tally_err_str(e),
            l ? tally_ledger_errmsg(l) : "");
    exit(1);
}

/* One event of each kind per account: id suffix, type, time, data. */
static const struct event_shape {
    const char *suffix, *type, *time, *data;
} shapes[] = {
    {"a", "accelerator.usage", "2026-03-05T10:00:00Z",
     "{\"instance\":\"i-1\",\"sku\":\"a100-40g\",\"pricing\":\"on_demand\",\"cards\":1,"
     "\"seconds\":3600}"},
    {"s", "accelerator.usage", "2026-03-06T10:00:00Z",
     "{\"instance\":\"i-2\",\"sku\":\"rtx4090\",\"pricing\":\"spot\",\"cards\":1,"
     "\"seconds\":1800}"},
    {"v", "storage.usage", "2026-03-07T00:00:00Z",
     "{\"volume\":\"v-1\",\"class\":\"ssd\",\"bytes\":100000000000,\"seconds\":86400}"},
    {"t", "tokens.usage", "2026-03-08T00:00:00Z",
     "{\"model\":\"qwen-72b\",\"kind\":\"input\",\"tokens\":200000}"},
};

static void ingest(tally_ledger *l, long n)
{
    tally_batch *b = NULL;
    tally_err e = tally_batch_create(l, &b);
    if (e)
        die("batch", e, l);
    char acct[32], ev[512], origin[64];
    long count = 0;
    for (long a = 0; a < n; a++) {
        snprintf(acct, sizeof acct, "acct-%06ld", a);
        for (size_t t = 0; t < sizeof shapes / sizeof *shapes; t++) {
            int len = snprintf(ev, sizeof ev,
                               "{\"specversion\":\"1.0\",\"id\":\"%s-%s\",\"source\":\"bench\","
                               "\"type\":\"%s\",\"subject\":\"%s\",\"time\":\"%s\",\"data\":%s}",
                               acct, shapes[t].suffix, shapes[t].type, acct, shapes[t].time,
                               shapes[t].data);
            snprintf(origin, sizeof origin, "bench:%ld", count++);
            e = tally_ingest_message(b, ev, (size_t)len, origin, tally_now_s(), NULL);
            if (e)
                die("ingest", e, l);
        }
        if (tally_batch_count(b) >= 20000 || a + 1 == n) {
            tally_batch_stats st;
            if ((e = tally_batch_commit(b, &st, NULL)))
                die("commit", e, l);
            if (st.quarantined || st.conflicts)
                die("events quarantined", TALLY_PARSE, l);
        }
    }
    tally_batch_destroy(b);
    for (long a = 0; a < n; a += 100) {
        snprintf(acct, sizeof acct, "acct-%06ld", a);
        tally_grant_spec g = {.account = acct,
                              .kind = TALLY_GRANT_TRIAL,
                              .amount_minor = 1000,
                              .priority = 10,
                              .effective_s = 1772323200, /* 2026-03-01 */
                              .expires_s = TALLY_TIME_MAX};
        int64_t id;
        if ((e = tally_ledger_grant_add(l, &g, &id, NULL, 0)))
            die("grant", e, l);
    }
}

typedef struct totals {
    long invoices;
    int64_t due_minor;
} totals;

static void on_invoice(void *ctx, const tally_invoice_summary *s)
{
    totals *t = ctx;
    t->invoices++;
    t->due_minor += s->amount_due_minor;
}

static void timed_run(tally_ledger *l, const char *what, bool finalize, const char *key,
                      const char *out, long n)
{
    totals t = {0};
    tally_invoice_run_opts o = {.period = "2026-03",
                                .finalize = finalize,
                                .out_dir = out,
                                .key_path = key,
                                .on_invoice = on_invoice,
                                .ctx = &t};
    char why[512] = "";
    int64_t t0 = now_ms();
    tally_err e = tally_invoice_run(l, &o, why, sizeof why);
    int64_t ms = now_ms() - t0;
    if (e) {
        fprintf(stderr, "bench_invoice: %s: %s\n", what, why);
        exit(1);
    }
    printf("%-9s %7ld invoices  %8lld ms  %7lld accounts/s  due %lld.%02lld\n", what, t.invoices,
           (long long)ms, (long long)(ms ? (int64_t)n * 1000 / ms : 0),
           (long long)(t.due_minor / 100), (long long)(t.due_minor % 100));
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 100000;
    char dir[512], db[600], key[600];
    if (argc > 2)
        snprintf(dir, sizeof dir, "%s", argv[2]);
    else
        snprintf(dir, sizeof dir, "/tmp/bench-invoice-%d", (int)getpid());
    snprintf(db, sizeof db, "%s/bench.db", dir);
    snprintf(key, sizeof key, "%s/bench.key", dir);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    if (n <= 0 || system(cmd) != 0)
        return 2;
    setenv("TALLY_NOW", "2026-04-02T00:00:00Z", 1);
    tally_ledger *l = NULL;
    char why[256] = "";
    tally_err e = tally_ledger_open(db, &l, why, sizeof why);
    if (e)
        die(why, e, NULL);
    const tally_embedded *card = tally_embedded_find("fixtures/pricebook/ratecard.json");
    if (!card || (e = tally_ledger_ratecard_load(l, card->data, card->len, why, sizeof why)))
        die("rate card", e, l);
    if ((e = tally_keygen(key, 0)))
        die("keygen", e, NULL);
    int64_t t0 = now_ms();
    ingest(l, n);
    printf("setup     %7ld accounts  %8lld ms  (%ld events, %ld grants)\n", n,
           (long long)(now_ms() - t0), n * 4, (n + 99) / 100);
    if (getenv("BENCH_SETUP_ONLY")) {
        tally_ledger_close(l);
        return 0;
    }
    char out[620];
    snprintf(out, sizeof out, "%s/out", dir);
    const char *out_dir = getenv("BENCH_OUT") ? out : NULL;
    timed_run(l, "draft", false, key, NULL, n);
    timed_run(l, "finalize", true, key, out_dir, n);
    timed_run(l, "rerun", true, key, out_dir, n);
    t0 = now_ms();
    e = getenv("BENCH_SKIP_VERIFY") ? TALLY_OK : tally_ledger_verify(l, key, why, sizeof why);
    printf("verify    %-7s           %8lld ms\n", e ? why : "ok", (long long)(now_ms() - t0));
    tally_ledger_close(l);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (argc <= 2 && system(cmd) != 0)
        return 1;
    return e ? 1 : 0;
}
