/* tally demo: the main job on embedded defaults.
 *
 *   1. starts the embedded broker (`tally broker`, its own process);
 *   2. produces the fixture stream (cli/demo_stream.c) to it, keyed by account;
 *   3. meters it exactly once into a fresh ledger (`tally meter --until-idle`),
 *      while lotus-startup's balance runs out (cli/demo_balance.h);
 *   4. tops lotus-startup up with a prepaid grant, sent twice under one
 *      idempotency key;
 *   5. finalizes, signs and writes the March 2026 invoices;
 *   6. announces them and the balance events on the invoices topic, and
 *      prints where the files are, and the balance events as a consumer
 *      reads them (the invoice run itself prints one line per invoice).
 * Everything lands in a fresh output folder. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "demo_balance.h"
#include "demo_stream.h"
#include "tally/buf.h"
#include "tally/producer.h"
#include "tally/publish.h"
#include "tally/shard.h"
#include "tally/sign.h"

typedef struct demo {
    cli_ctx *ctx;
    char out[512];
    char db[600];
    char key[600];
    char self[1024];
    char bootstrap[256];
    pid_t broker;
    pid_t meter;
    long produced;
    demo_balance_point before_stream, after_stream, after_topup;
} demo;

static int make_out_dir(demo *d, const char *wanted)
{
    if (wanted) {
        if (tally_fmt(d->out, sizeof d->out, "%s", wanted) != TALLY_OK)
            return cli_error(d->ctx, CLI_USAGE, "--out: path too long");
    } else {
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        char stamp[32];
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
        snprintf(d->out, sizeof d->out, "tally-demo-%s", stamp);
    }
    if (mkdir(d->out, 0755) != 0)
        return cli_error(d->ctx, CLI_USAGE, "cannot create a fresh output folder %s: %s", d->out,
                         errno == EEXIST ? "it already exists" : strerror(errno));
    if (tally_fmt(d->db, sizeof d->db, "%s/tally.db", d->out) != TALLY_OK ||
        tally_fmt(d->key, sizeof d->key, "%s/tally.key", d->out) != TALLY_OK)
        return cli_error(d->ctx, CLI_USAGE, "--out: path too long");
    return CLI_OK;
}

/* Runs one of our own subcommands in this process against the demo ledger. */
static int run_self(demo *d, const char *const *args)
{
    char *argv[20];
    int argc = 0;
    for (; args[argc] && argc < 19; argc++)
        argv[argc] = (char *)args[argc];
    argv[argc] = NULL;
    const cli_command *c = cli_find(argv[0]);
    if (!c)
        return cli_error(d->ctx, CLI_FAIL, "no command %s", argv[0]);
    cli_ctx sub = {.db_path = d->db, .key_path = d->key, .cmd = c->name, .describe = true};
    fflush(stdout);
    int rc = c->run(&sub, argc, argv);
    fflush(stdout);
    return rc;
}

/* Starts `tally broker` and reads its bootstrap address from the first line. */
static int start_broker(demo *d)
{
    int fds[2];
    if (pipe(fds) != 0)
        return cli_error(d->ctx, CLI_FAIL, "pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        return cli_error(d->ctx, CLI_FAIL, "fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execl(d->self, d->self, "broker", "--partitions", "8", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    d->broker = pid;
    FILE *f = fdopen(fds[0], "r");
    if (!f || !fgets(d->bootstrap, sizeof d->bootstrap, f)) {
        if (f)
            fclose(f);
        return cli_error(d->ctx, CLI_FAIL, "the broker did not start");
    }
    fclose(f);
    d->bootstrap[strcspn(d->bootstrap, "\r\n")] = '\0';
    return CLI_OK;
}

static void stop_broker(demo *d)
{
    if (d->broker <= 0)
        return;
    kill(d->broker, SIGTERM);
    waitpid(d->broker, NULL, 0);
    d->broker = 0;
}

static tally_err produce_one(void *ctx, const char *key, const char *msg, size_t len)
{
    tally_producer *p = ctx;
    for (;;) {
        tally_err e = tally_producer_send(p, "usage", key, strlen(key), msg, len, NULL);
        if (e != TALLY_BUSY)
            return e;
        tally_producer_serve(p, 50);
    }
}

static tally_err count_and_produce(void *ctx, const char *key, const char *msg, size_t len)
{
    void **pair = ctx;
    (*(long *)pair[1])++;
    return produce_one(pair[0], key, msg, len);
}

static int produce(demo *d)
{
    char why[256] = "";
    tally_producer *p = NULL;
    tally_producer_opts o = {.brokers = d->bootstrap, .client_id = "tally-demo"};
    if (tally_producer_create(&o, &p, why, sizeof why) != TALLY_OK)
        return cli_error(d->ctx, CLI_FAIL, "producer: %s", why);
    void *pair[2] = {p, &d->produced};
    tally_err e = demo_stream(count_and_produce, pair);
    tally_err fe = tally_producer_flush(p, 30000);
    tally_producer_destroy(p, 0);
    if (e || fe)
        return cli_error(d->ctx, CLI_FAIL, "producing the fixture stream failed: %s",
                         tally_err_str(e ? e : fe));
    return CLI_OK;
}

/* Starts the meter first, so it consumes while the stream is produced (the
 * embedded broker keeps only about 5 MB per partition; the fixture stream
 * stays well under that in every partition). */
static int start_meter(demo *d)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return cli_error(d->ctx, CLI_FAIL, "fork: %s", strerror(errno));
    if (pid == 0) {
        execl(d->self, d->self, "--db", d->db, "meter", "--brokers", d->bootstrap, "--topic",
              "usage", "--group", "tally-demo", "--dlq-topic", "usage-dlq", "--until-idle", "5",
              (char *)NULL);
        _exit(127);
    }
    d->meter = pid;
    return CLI_OK;
}

static int wait_meter(demo *d)
{
    int st = 0;
    if (d->meter <= 0)
        return CLI_FAIL;
    waitpid(d->meter, &st, 0);
    d->meter = 0;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return cli_error(d->ctx, CLI_FAIL, "the meter failed (status %d)", st);
    return CLI_OK;
}

/* Drains the outbox to the invoices topic and reads the topic back with
 * kcat, the way a downstream system would watch it. */
static int announce(demo *d)
{
    tally_ledger *l = NULL;
    cli_ctx sub = {.db_path = d->db, .cmd = "demo"};
    int rc = cli_create_ledger(&sub, &l);
    if (rc)
        return rc;
    size_t n = 0;
    tally_err e = tally_publish_drain(l, d->bootstrap, TALLY_PUBLISH_TOPIC, 30000, &n);
    tally_ledger_close(l);
    if (e)
        return cli_error(d->ctx, CLI_FAIL, "publishing the invoice events failed: %s",
                         tally_err_str(e));
    printf("   announced %zu events on topic %s; a consumer sees:\n", n, TALLY_PUBLISH_TOPIC);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "kcat -C -b '%s' -t %s -o beginning -e -q -f '%%k  %%s\\n' 2>/dev/null | "
             "cut -c1-100 | sed 's/^/     /'",
             d->bootstrap, TALLY_PUBLISH_TOPIC);
    printf("   $ kcat -C -b %s -t %s -o beginning -e\n", d->bootstrap, TALLY_PUBLISH_TOPIC);
    fflush(stdout);
    if (system(cmd) != 0)
        printf("     (kcat is not installed; run scripts/deps)\n");
    return CLI_OK;
}

/* The path to run this binary by from the current directory: relative when
 * it is below it ("build/tally"), else absolute. */
static const char *self_path(const demo *d, char *buf, size_t cap)
{
    char cwd[1024];
    size_t n = getcwd(cwd, sizeof cwd) ? strlen(cwd) : 0;
    if (n > 0 && strncmp(d->self, cwd, n) == 0 && d->self[n] == '/') {
        snprintf(buf, cap, "%s", d->self + n + 1);
        return buf;
    }
    return d->self;
}

/* After the stream: how far lotus-startup's balance fell while the meter
 * consumed, and how many balance events the meter's commits wrote. */
static int balance_after_stream(demo *d)
{
    int n = 0, rc = demo_balance_read(d->ctx, d->db, &d->after_stream);
    if (!rc)
        rc = demo_balance_outbox_count(d->ctx, d->db, &n);
    if (rc)
        return rc;
    printf("   %s%s:\n", DEMO_PREPAID_ACCOUNT,
           d->after_stream.state == TALLY_BALANCE_EXHAUSTED ? " ran out while the meter consumed"
                                                            : " while the meter consumed");
    demo_balance_print("     balance before the stream", &d->before_stream, false);
    demo_balance_print("\n     balance after it", &d->after_stream, true);
    printf("\n     the meter's commits wrote %d of its balance events to the outbox\n", n);
    return CLI_OK;
}

/* A prepaid top-up after the stream, sent twice with one idempotency key as
 * a client that timed out would: the retry stores nothing and prints the
 * first grant. Says whether it pays any of the account's March draft. */
static int top_up(demo *d)
{
    static const char *const grant[] = {
        "credit", "grant",   DEMO_PREPAID_ACCOUNT, DEMO_TOPUP_AMOUNT,
        "--kind", "prepaid", "--idempotency-key",  DEMO_TOPUP_KEY,
        NULL};
    tally_invoice_summary before, after;
    int rc = demo_balance_draft(d->ctx, d->db, &before);
    if (rc)
        return rc;
    printf("   $ tally credit grant %s %s --kind prepaid --idempotency-key %s\n",
           DEMO_PREPAID_ACCOUNT, DEMO_TOPUP_AMOUNT, DEMO_TOPUP_KEY);
    if ((rc = run_self(d, grant)))
        return rc;
    printf("   the same request again, as a client that timed out retries it:\n");
    if ((rc = run_self(d, grant)) || (rc = demo_balance_read(d->ctx, d->db, &d->after_topup)) ||
        (rc = demo_balance_draft(d->ctx, d->db, &after)))
        return rc;
    demo_balance_print("   balance", &d->after_stream, false);
    demo_balance_print(" ->", &d->after_topup, true);
    printf("\n");
    demo_balance_draft_change(&before, &after);
    return CLI_OK;
}

static void summary(const demo *d)
{
    char self[1024];
    demo_balance_events(d->bootstrap, &d->before_stream, &d->after_stream, &d->after_topup);
    printf("\n  messages produced: %ld (including redelivered duplicates and poison)\n",
           d->produced);
    printf("  invoices (JSON, CSV, HTML): %s/\n  ledger: %s\n  signing key: %s\n", d->out, d->db,
           d->key);
    printf("\n  check it: %s --db %s --key %s verify\n", self_path(d, self, sizeof self), d->db,
           d->key);
}

static int steps(demo *d)
{
    static const char *const keygen[] = {"keygen", NULL};
    static const char *const init[] = {"init", NULL};
    static const char *const inv[] = {"invoice",    "run",   "--period", DEMO_PERIOD,
                                      "--finalize", "--out", NULL,       NULL};
    int rc;
    printf("== 1. ledger, signing key and price book in %s\n", d->out);
    if ((rc = run_self(d, keygen)) || (rc = run_self(d, init)))
        return rc;
    for (const demo_step *s = demo_setup; s->argv[0]; s++)
        if ((rc = run_self(d, s->argv)))
            return rc;
    printf("== 2. embedded broker\n");
    if ((rc = start_broker(d)))
        return rc;
    printf("   bootstrap %s\n== 3. metering (exactly once, until idle) while producing the "
           "fixture stream\n",
           d->bootstrap);
    if ((rc = demo_balance_read(d->ctx, d->db, &d->before_stream)) || (rc = start_meter(d)))
        return rc;
    rc = produce(d);
    if (rc) {
        if (d->meter > 0) {
            kill(d->meter, SIGTERM);
            wait_meter(d);
        }
        return rc;
    }
    printf("   produced %ld messages; the meter stops once the stream has been idle for 5 s\n",
           d->produced);
    if ((rc = wait_meter(d)) || (rc = balance_after_stream(d)))
        return rc;
    printf("== 4. a prepaid top-up for %s, with an idempotency key\n", DEMO_PREPAID_ACCOUNT);
    if ((rc = top_up(d)))
        return rc;
    printf("== 5. invoices for %s\n", DEMO_PERIOD);
    const char *args[8];
    memcpy(args, inv, sizeof inv);
    args[6] = d->out;
    if ((rc = run_self(d, args)))
        return rc;
    printf("== 6. announcing the invoices and balance events (CloudEvents on Kafka, from the "
           "ledger's outbox)\n");
    if ((rc = announce(d)))
        return rc;
    summary(d);
    return CLI_OK;
}

static tally_err print_line(void *ctx, const char *key, const char *msg, size_t len)
{
    (void)ctx;
    (void)key;
    fwrite(msg, 1, len, stdout);
    fputc('\n', stdout);
    return TALLY_OK;
}

int cmd_demo(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv))
        return CLI_OK;
    const char *out = NULL;
    bool emit = false;
    const cli_opt opts[] = {{"out", &out, NULL}, {"emit-ndjson", NULL, &emit}, {0}};
    char *pos[1];
    int npos = 0;
    int rc = cli_parse(ctx, argc, argv, opts, pos, 0, &npos);
    if (rc)
        return rc;
    if (emit)
        return demo_stream(print_line, NULL) ? CLI_FAIL : CLI_OK;
    /* one line at a time, so this log and the meter's stderr interleave in order in a pipe */
    setvbuf(stdout, NULL, _IOLBF, 0);
    demo d = {.ctx = ctx};
    ssize_t n = readlink("/proc/self/exe", d.self, sizeof d.self - 1);
    if (n <= 0)
        return cli_error(ctx, CLI_FAIL, "cannot find the tally executable");
    d.self[n] = '\0';
    if ((rc = make_out_dir(&d, out)))
        return rc;
    rc = steps(&d);
    stop_broker(&d);
    return rc;
}
