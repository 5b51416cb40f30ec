/* tally publish: announce finalized invoices and credit notes on Kafka.
 *
 * Drains the ledger's outbox (include/tally/outbox.h) into a topic with an
 * idempotent producer (include/tally/publish.h) until SIGINT or SIGTERM, or
 * with --until-idle once nothing was pending for that long. On a signal it
 * waits for what is in flight, stamps what was acknowledged and exits 0;
 * anything else stays pending for the next run. While deliveries fail (the
 * broker is down), events stay pending and are retried with backoff; a line
 * on stderr says so about once a second. The totals go to stdout at the end.
 *
 * One publisher per ledger: a second one would send the same events again
 * (identical bytes and ids, but needless repeats), so it holds an exclusive
 * flock on "<db>.publish-lock" while it runs. A separate file, because
 * closing a descriptor of the ledger file itself would drop SQLite's locks. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "cli.h"
#include "tally/publish.h"

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

typedef struct progress_state {
    int64_t published, failures, pending;
} progress_state;

/* One line when something changed or deliveries are failing. */
static void progress(void *ctx, const tally_publish_stats *st, int64_t elapsed_ms)
{
    progress_state *ps = ctx;
    (void)elapsed_ms;
    bool failing = st->failures != ps->failures;
    if (!failing && st->published == ps->published && st->pending == ps->pending)
        return;
    fprintf(stderr, "tally publish: published=%lld pending=%lld in_flight=%lld failures=%lld%s%s\n",
            (long long)st->published, (long long)st->pending, (long long)st->in_flight,
            (long long)st->failures, failing && st->last_error[0] ? " last error: " : "",
            failing ? st->last_error : "");
    ps->published = st->published;
    ps->failures = st->failures;
    ps->pending = st->pending;
}

static void print_help(void)
{
    printf("\nOptions:\n"
           "  --brokers B             bootstrap servers (loopback)\n"
           "  --topic T               topic (default invoices)\n"
           "  --until-idle SECONDS    exit once nothing was pending for that long\n"
           "  --message-timeout-ms MS bound on one delivery attempt (default 10000); a\n"
           "                          failed event stays pending and is retried\n\n"
           "Events are CloudEvents (JSON) keyed by account: invoice.finalized,\n"
           "creditnote.issued and invoice.voided, each with a stable id; an event is\n"
           "marked sent only after the broker acknowledged it.\n");
}

static int parse_opts(cli_ctx *ctx, int argc, char **argv, tally_publish_opts *o)
{
    const char *until_idle = NULL, *timeout = NULL;
    const cli_opt opts[] = {{"brokers", &o->brokers, NULL},
                            {"topic", &o->topic, NULL},
                            {"until-idle", &until_idle, NULL},
                            {"message-timeout-ms", &timeout, NULL},
                            {NULL, NULL, NULL}};
    int npos = 0;
    int rc = cli_parse(ctx, argc, argv, opts, NULL, 0, &npos);
    if (!rc && (!o->brokers || !*o->brokers)) {
        cli_usage(ctx, true);
        rc = cli_error(ctx, CLI_USAGE, "--brokers is required");
    }
    if (!rc && o->topic && !*o->topic)
        rc = cli_error(ctx, CLI_USAGE, "--topic must not be empty");
    int64_t v = 0;
    if (!rc && until_idle && !(rc = cli_parse_int(ctx, "--until-idle", until_idle, 1, 86400, &v)))
        o->until_idle_ms = v * 1000;
    if (!rc && timeout &&
        !(rc = cli_parse_int(ctx, "--message-timeout-ms", timeout, 100, 3600000, &v)))
        o->message_timeout_ms = v;
    return rc;
}

static int lock_ledger(const cli_ctx *ctx, int *fd)
{
    char path[4096];
    int n = snprintf(path, sizeof path, "%s.publish-lock", ctx->db_path);
    if (n <= 0 || (size_t)n >= sizeof path)
        return cli_error(ctx, CLI_USAGE, "ledger path too long");
    *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (*fd < 0)
        return cli_error(ctx, CLI_FAIL, "%s: %s", path, strerror(errno));
    if (flock(*fd, LOCK_EX | LOCK_NB) == 0)
        return CLI_OK;
    int err = errno;
    close(*fd);
    *fd = -1;
    if (err == EWOULDBLOCK)
        return cli_error(ctx, CLI_FAIL, "another tally publish is running on %s", ctx->db_path);
    return cli_error(ctx, CLI_FAIL, "%s: %s", path, strerror(err));
}

/* Adds a ledger.head event for the chain's head if it moved, so it is
 * published with the rest; without a signing key there is nothing to sign. */
static void announce_head(const cli_ctx *ctx, tally_ledger *l)
{
    bool added = false;
    tally_err e = tally_ledger_head_announce(l, ctx->key_path, &added);
    if (e == TALLY_NOT_FOUND)
        fprintf(stderr, "tally publish: no signing key at %s; the ledger head is not announced\n",
                ctx->key_path);
    else if (e != TALLY_OK)
        fprintf(stderr, "tally publish: cannot announce the ledger head: %s\n", tally_err_str(e));
}

int cmd_publish(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv)) {
        print_help();
        return CLI_OK;
    }
    tally_publish_opts o = {0};
    int rc = parse_opts(ctx, argc, argv, &o);
    if (rc)
        return rc;
    int lock = -1; /* its file beside the ledger, which must exist */
    if ((rc = cli_ledger_exists(ctx)) || (rc = lock_ledger(ctx, &lock)))
        return rc;
    tally_ledger *l = NULL;
    if ((rc = cli_open_ledger(ctx, &l))) {
        close(lock);
        return rc;
    }
    announce_head(ctx, l);
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    tally_publisher *p = NULL;
    char why[512] = "";
    tally_err e = tally_publisher_create(l, &o, &p, why, sizeof why);
    if (e) {
        rc = cli_error_for(ctx, e, "%s", why[0] ? why : tally_err_str(e));
        goto out_ledger;
    }
    progress_state ps = {0, 0, -1};
    e = tally_publisher_run(p, &stop_flag, progress, &ps);
    tally_publish_stats st;
    tally_publisher_stats_get(p, &st);
    tally_publisher_destroy(p);
    if (e) { /* a run that started and stopped failed, whatever the cause */
        rc = cli_error(ctx, CLI_FAIL, "stopped: %s%s%s", tally_err_str(e),
                       e == TALLY_DB || e == TALLY_IO || e == TALLY_BUSY ? ": " : "",
                       e == TALLY_DB || e == TALLY_IO || e == TALLY_BUSY ? tally_ledger_errmsg(l)
                                                                         : "");
        goto out_ledger;
    }
    printf("published=%lld pending=%lld produced=%lld failures=%lld retries=%lld\n",
           (long long)st.published, (long long)st.pending, (long long)st.produced,
           (long long)st.failures, (long long)st.retries);
    rc = CLI_OK;
out_ledger:
    tally_ledger_close(l);
    close(lock);
    return rc;
}
