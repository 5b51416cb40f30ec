/* tally serve --listen ADDR [--brokers B --topic T] [--timeout S]
 *             [--header-timeout S] [--ingest-rate N] [--ingest-burst N]
 *
 * Serves the HTTP API until SIGINT or SIGTERM. The first line on stdout is
 * the bound address ("127.0.0.1:41234"), so that scripts and tests can start
 * it on port 0 and read where it listens. */
#include <stdio.h>

#include "cli.h"
#include "tally/server.h"

static void print_help(void)
{
    printf("\nOptions:\n"
           "  --listen ADDR     HOST:PORT, :PORT or PORT (host 127.0.0.1); port 0 picks a free\n"
           "                    one. The bound address is the first line on stdout.\n"
           "  --brokers B       produce posted events to Kafka instead of ingesting them\n"
           "  --topic T         the usage topic (with --brokers)\n"
           "  --timeout S       close connections idle or stalled for S seconds (default 30)\n"
           "  --header-timeout S  answer 408 and close when a request's headers take longer\n"
           "                    than S seconds in all (default 10)\n"
           "  --ingest-rate N   events a second each API key may send to POST /v1/events\n"
           "                    (default 1000; 0: no limit); past it, 429 with Retry-After\n"
           "  --ingest-burst N  events a key may send at once on a full bucket (default the\n"
           "                    larger of 2000 and the rate)\n\n"
           "Keys: tally apikey create (--account ID | --ingest --source PREFIX... | --admin).\n"
           "The endpoints are listed in server/include/tally/server.h.\n");
}

int cmd_serve(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv)) {
        print_help();
        return CLI_OK;
    }
    const char *listen = NULL, *brokers = NULL, *topic = NULL, *timeout = NULL,
               *header_timeout = NULL, *rate = NULL, *burst = NULL;
    const cli_opt opts[] = {{"listen", &listen, NULL},
                            {"brokers", &brokers, NULL},
                            {"topic", &topic, NULL},
                            {"timeout", &timeout, NULL},
                            {"header-timeout", &header_timeout, NULL},
                            {"ingest-rate", &rate, NULL},
                            {"ingest-burst", &burst, NULL},
                            {0}};
    int npos = 0;
    int rc = cli_parse(ctx, argc, argv, opts, NULL, 0, &npos);
    if (rc)
        return rc;
    if (!listen || (brokers == NULL) != (topic == NULL)) {
        cli_usage(ctx, true);
        return CLI_USAGE;
    }
    if (!tally_server_addr_ok(listen))
        return cli_error(ctx, CLI_USAGE, "--listen: '%s' is not HOST:PORT, :PORT or PORT", listen);
    int64_t timeout_s = 0;
    if (timeout && (rc = cli_parse_int(ctx, "--timeout", timeout, 1, 3600, &timeout_s)))
        return rc;
    int64_t header_timeout_s = 0;
    if (header_timeout &&
        (rc = cli_parse_int(ctx, "--header-timeout", header_timeout, 1, 3600, &header_timeout_s)))
        return rc;
    int64_t rate_n = 0, burst_n = 0;
    if (rate && (rc = cli_parse_int(ctx, "--ingest-rate", rate, 0, 1000000, &rate_n)))
        return rc;
    if (burst && (rc = cli_parse_int(ctx, "--ingest-burst", burst, 1, 1000000, &burst_n)))
        return rc;
    if ((rc = cli_ledger_exists(ctx)))
        return rc;
    tally_server_opts o = {.ingest_rate = rate && rate_n == 0 ? -1 : rate_n,
                           .ingest_burst = burst_n,
                           .db_path = ctx->db_path,
                           .brokers = brokers,
                           .topic = topic,
                           .timeout_s = (int)timeout_s,
                           .header_timeout_s = (int)header_timeout_s};
    tally_server *s = NULL;
    char why[256] = "", bound[128];
    tally_err e = tally_server_create(&o, &s, why, sizeof why);
    if (e == TALLY_OK)
        e = tally_server_listen(s, listen, bound, sizeof bound, why, sizeof why);
    if (e != TALLY_OK) {
        rc = cli_error_for(ctx, e, "%s", why[0] ? why : tally_err_str(e));
        goto out;
    }
    printf("%s\n", bound);
    fflush(stdout);
    fprintf(stderr, "tally serve: listening on http://%s (%s)\n", bound,
            brokers ? "events produced to Kafka" : "events ingested directly");
    if (tally_server_run(s) != TALLY_OK)
        rc = cli_error(ctx, CLI_FAIL, "event loop failed");
out:
    tally_server_destroy(s);
    return rc;
}
