/* tally meter: consume usage from Kafka exactly once into the ledger.
 *
 * Runs one consumer-group member (include/tally/meter.h) until SIGINT or
 * SIGTERM, or with --until-idle until it has caught up and nothing arrived
 * for that long. Either way the open batch is committed and the member
 * leaves the group before exit 0. A progress line goes to stderr about once
 * a second; the totals go to stdout at the end. */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "tally/meter.h"
#include "tally/shard.h"

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

typedef struct progress_state {
    int64_t last_ms, last_msgs;
    const char *group;
} progress_state;

static void progress(void *ctx, const tally_consumer_stats *st, int64_t elapsed_ms)
{
    progress_state *ps = ctx;
    if (st->partitions == 0 && st->messages == 0) {
        /* the group's first rebalance takes a few seconds; say so instead of "0 events/s" */
        fprintf(stderr, "tally meter: joining consumer group %s (waiting for partitions)\n",
                ps->group);
        return;
    }
    int64_t dt = elapsed_ms - ps->last_ms;
    int64_t rate = dt > 0 ? (st->messages - ps->last_msgs) * 1000 / dt : 0;
    char lag[24];
    if (st->lag >= 0)
        snprintf(lag, sizeof lag, "%lld", (long long)st->lag);
    else
        snprintf(lag, sizeof lag, "?");
    fprintf(stderr,
            "tally meter: %lld events/s accepted=%lld duplicates=%lld quarantined=%lld "
            "lag=%s partitions=%lld\n",
            (long long)rate, (long long)st->accepted, (long long)st->duplicates,
            (long long)(st->quarantined + st->conflicts), lag, (long long)st->partitions);
    ps->last_ms = elapsed_ms;
    ps->last_msgs = st->messages;
}

static void print_help(void)
{
    printf("\nOptions:\n"
           "  --brokers B             bootstrap servers (loopback)\n"
           "  --topic T               usage topic\n"
           "  --group G               consumer group (default tally-meter)\n"
           "  --dlq-topic T           also copy rejected messages there, with the reason in\n"
           "                          header tally-reason and the origin in tally-origin\n"
           "  --until-idle SECONDS    exit once caught up and idle that long\n"
           "  --batch-events N        commit every N messages (default 10000)\n"
           "  --batch-ms MS           ... or MS after a batch's first message (default 100)\n"
           "  --session-timeout-ms MS group session timeout, 3000 or more (default 10000)\n"
           "  --no-pipeline           decode and commit on one thread\n"
           "  --ledger-dir DIR        write into the ledger directory DIR (as --db DIR):\n"
           "                          each partition into DIR/shard-<topic>-<partition>.db\n"
           "                          while this member holds its lock (docs/DEPLOYMENT.md)\n"
           "  --accept-gap T/P[,...]  a partition whose stored offset the broker no longer\n"
           "                          has stops the meter (exit 1); for these partitions,\n"
           "                          record the gap in the ledger and go on from the log start\n"
           "  --accept-gaps           the same for every partition\n");
}

typedef struct meter_args {
    const char *until_idle, *batch_events, *batch_ms, *session, *ledger_dir;
} meter_args;

static int parse_opts(cli_ctx *ctx, int argc, char **argv, tally_consumer_opts *o)
{
    meter_args a = {0};
    const cli_opt opts[] = {{"brokers", &o->brokers, NULL},
                            {"topic", &o->topic, NULL},
                            {"group", &o->group, NULL},
                            {"dlq-topic", &o->dlq_topic, NULL},
                            {"until-idle", &a.until_idle, NULL},
                            {"batch-events", &a.batch_events, NULL},
                            {"batch-ms", &a.batch_ms, NULL},
                            {"session-timeout-ms", &a.session, NULL},
                            {"no-pipeline", NULL, &o->no_pipeline},
                            {"ledger-dir", &a.ledger_dir, NULL},
                            {"accept-gap", &o->accept_gap, NULL},
                            {"accept-gaps", NULL, &o->accept_gaps},
                            {NULL, NULL, NULL}};
    int npos = 0;
    int rc = cli_parse(ctx, argc, argv, opts, NULL, 0, &npos);
    if (!rc && (!o->brokers || !o->topic)) {
        cli_usage(ctx, true);
        rc = cli_error(ctx, CLI_USAGE, "--brokers and --topic are required");
    }
    int64_t v = 0;
    if (!rc && a.until_idle &&
        !(rc = cli_parse_int(ctx, "--until-idle", a.until_idle, 1, 86400, &v)))
        o->until_idle_ms = v * 1000;
    if (!rc && a.batch_events &&
        !(rc = cli_parse_int(ctx, "--batch-events", a.batch_events, 1, 1000000, &v)))
        o->batch_events = v;
    if (!rc && a.batch_ms && !(rc = cli_parse_int(ctx, "--batch-ms", a.batch_ms, 1, 60000, &v)))
        o->batch_ms = v;
    if (!rc && a.session &&
        !(rc = cli_parse_int(ctx, "--session-timeout-ms", a.session, 3000, 3600000, &v)))
        o->session_timeout_ms = v;
    struct stat sb;
    if (!rc && a.ledger_dir && (stat(a.ledger_dir, &sb) != 0 || !S_ISDIR(sb.st_mode)))
        rc = cli_error(ctx, CLI_USAGE, "--ledger-dir %s: not a directory (mkdir it, then init)",
                       a.ledger_dir);
    if (!rc && a.ledger_dir)
        ctx->db_path = a.ledger_dir;
    return rc;
}

/* The totals on stdout, also after a failed run (an offset gap says where). */
static void print_stats(const tally_consumer_stats *st)
{
    printf("messages=%lld accepted=%lld duplicate=%lld conflict=%lld quarantined=%lld dlq=%lld "
           "batches=%lld stale=%lld rebalances=%lld first_ms=%lld last_ms=%lld gaps=%lld "
           "gaps_accepted=%lld",
           (long long)st->messages, (long long)st->accepted, (long long)st->duplicates,
           (long long)st->conflicts, (long long)st->quarantined, (long long)st->dlq,
           (long long)st->batches, (long long)st->stale, (long long)st->rebalances,
           (long long)st->first_ms, (long long)st->last_ms, (long long)st->gaps,
           (long long)st->gaps_accepted);
    if (st->gaps > 0)
        printf(" gap=%d:%lld..%lld", (int)st->gap_partition, (long long)st->gap_from,
               (long long)st->gap_to - 1);
    printf("\n");
}

/* In a ledger directory, the shards the member writes. */
static int open_shards(cli_ctx *ctx, tally_ledger *l, tally_shard_set **out)
{
    *out = NULL;
    if (!tally_ledger_is_dir(l))
        return CLI_OK;
    if (tally_shard_set_create(l, NULL, out) != TALLY_OK)
        return cli_error(ctx, CLI_FAIL, "out of memory");
    return CLI_OK;
}

int cmd_meter(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv)) {
        print_help();
        return CLI_OK;
    }
    tally_consumer_opts o = {0};
    int rc = parse_opts(ctx, argc, argv, &o);
    if (rc)
        return rc;
    /* Before any thread starts: glibc gives each new thread an arena of its
     * own (up to 8 per core), and the fetch buffers librdkafka's threads
     * allocate and the commit thread frees stay behind in theirs, so a
     * meter's resident memory kept growing for millions of events. Two
     * arenas hold it near its level at the first million (bench/RESULTS.md,
     * "Memory over 5M events"). MALLOC_ARENA_MAX in the environment wins. */
    if (!getenv("MALLOC_ARENA_MAX"))
        (void)mallopt(M_ARENA_MAX, 2);
    tally_ledger *l = NULL;
    tally_shard_set *shards = NULL;
    if ((rc = cli_open_ledger(ctx, &l)))
        return rc;
    if ((rc = open_shards(ctx, l, &shards)))
        goto out_ledger;
    o.shards = shards;
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    tally_consumer *c = NULL;
    char why[512] = "";
    tally_err e = tally_consumer_create(l, &o, &c, why, sizeof why);
    if (e) {
        rc = cli_error_for(ctx, e, "%s", why[0] ? why : tally_err_str(e));
        goto out_ledger;
    }
    progress_state ps = {.group = o.group ? o.group : "tally-meter"};
    e = tally_consumer_run(c, &stop_flag, progress, &ps);
    tally_consumer_stats st;
    tally_consumer_stats_get(c, &st);
    tally_consumer_destroy(c);
    print_stats(&st);
    if (e) { /* a run that started and stopped failed, whatever the cause */
        rc = cli_error(ctx, CLI_FAIL, "stopped: %s", tally_err_str(e));
        goto out_ledger;
    }
    rc = CLI_OK;
out_ledger:
    tally_shard_set_destroy(shards);
    tally_ledger_close(l);
    return rc;
}
