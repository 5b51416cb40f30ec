/* tally broker: the embedded Kafka-protocol broker in the foreground.
 *
 * Prints the bootstrap address as the first line of stdout, then serves
 * until SIGINT or SIGTERM (exit 0). Each line read from stdin is a
 * fault-injection command (tally_broker_control in kafka/include/tally/broker.h),
 * answered on stdout with "ok" or "error: <why>"; end of input only stops
 * the reading. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "tally/broker.h"

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static void print_help(void)
{
    printf("\nOptions:\n"
           "  --port P         also accept bootstrap connections on 127.0.0.1:P (relayed;\n"
           "                   metadata still names the brokers' own ports)\n"
           "  --topic T        usage topic (default usage); usage-dlq and invoices are\n"
           "                   created too\n"
           "  --partitions N   partitions of the usage topic and its DLQ (default 8)\n"
           "  --brokers N      mock brokers (default 3, at most 16)\n\n"
           "Messages live in memory only; each partition keeps about its newest 5 MB.\n"
           "Topics that clients auto-create get 4 partitions (librdkafka's mock fixes\n"
           "that); create them ahead with 'topic NAME N' on stdin instead.\n"
           "Commands on stdin (answered 'ok' or 'error: ...'):\n"
           "  error API COUNT ERR   e.g. 'error Fetch 5 NOT_LEADER_FOR_PARTITION'\n"
           "  clear API | down ID | up ID | rtt ID MS | topic NAME N\n");
}

/* Reads what stdin has, runs each complete line; false at end of input. */
static bool serve_stdin(tally_broker *b, char *line, size_t cap, size_t *have)
{
    ssize_t n = read(STDIN_FILENO, line + *have, cap - 1 - *have);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
        return false;
    if (n < 0)
        return true;
    *have += (size_t)n;
    line[*have] = '\0';
    char *nl;
    while ((nl = memchr(line, '\n', *have)) != NULL) {
        *nl = '\0';
        char why[256] = "";
        if (line[0] && tally_broker_control(b, line, why, sizeof why) == TALLY_OK)
            printf("ok\n");
        else if (line[0])
            printf("error: %s\n", why);
        fflush(stdout);
        size_t used = (size_t)(nl + 1 - line);
        memmove(line, nl + 1, *have - used);
        *have -= used;
    }
    if (*have == cap - 1) /* an over-long line: drop it */
        *have = 0;
    return true;
}

static int parse_opts(cli_ctx *ctx, int argc, char **argv, tally_broker_opts *o)
{
    const char *port = NULL, *parts = NULL, *brokers = NULL;
    const cli_opt opts[] = {{"port", &port, NULL},
                            {"topic", &o->topic, NULL},
                            {"partitions", &parts, NULL},
                            {"brokers", &brokers, NULL},
                            {NULL, NULL, NULL}};
    int npos = 0;
    int rc = cli_parse(ctx, argc, argv, opts, NULL, 0, &npos);
    int64_t v;
    if (!rc && port && !(rc = cli_parse_int(ctx, "--port", port, 1, 65535, &v)))
        o->port = (int)v;
    if (!rc && parts && !(rc = cli_parse_int(ctx, "--partitions", parts, 1, 100000, &v)))
        o->partitions = (int)v;
    if (!rc && brokers && !(rc = cli_parse_int(ctx, "--brokers", brokers, 1, 16, &v)))
        o->brokers = (int)v;
    if (!rc && o->topic && !*o->topic)
        rc = cli_error(ctx, CLI_USAGE, "--topic must not be empty");
    return rc;
}

int cmd_broker(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv)) {
        print_help();
        return CLI_OK;
    }
    tally_broker_opts o = {0};
    int rc = parse_opts(ctx, argc, argv, &o);
    if (rc)
        return rc;
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    tally_broker *b = NULL;
    char why[256] = "";
    tally_err e = tally_broker_create(&o, &b, why, sizeof why);
    if (e)
        return cli_error_for(ctx, e, "%s", why[0] ? why : tally_err_str(e));
    printf("%s\n", tally_broker_bootstrap(b));
    fflush(stdout);

    char line[512];
    size_t have = 0;
    bool reading = true;
    while (!stop_flag) {
        struct pollfd p = {.fd = reading ? STDIN_FILENO : -1, .events = POLLIN};
        int n = poll(&p, 1, 200);
        if (n > 0 && (p.revents & (POLLIN | POLLHUP)))
            reading = serve_stdin(b, line, sizeof line, &have);
        else if (n > 0 && (p.revents & (POLLERR | POLLNVAL)))
            reading = false;
    }
    tally_broker_destroy(b);
    return CLI_OK;
}
