/* tally ingest FILE|-: NDJSON usage events into the ledger.
 *
 * Reads in bounded chunks (memory does not grow with the file), puts each
 * line through the ingest pipeline (include/tally/pipeline.h), the same one
 * the Kafka meter and POST /v1/events use, and commits every INGEST_BATCH
 * lines in one transaction. A line that is not a good event is quarantined
 * with its reason and the file goes on. A line longer than an event may be
 * is quarantined as too_large with its first bytes kept. Each message's
 * origin is "file:<name>:<line>:<content hash>", so ingesting the same file
 * twice stores its quarantined lines once and counts its events as
 * duplicates. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tally/event.h"
#include "tally/pipeline.h"

#define INGEST_BATCH  20000
#define READ_CHUNK    ((size_t)1 << 20)
#define LINE_MAX_KEPT (TALLY_EVENT_MAX_BYTES + 1) /* one more, so decode says too_large */

typedef struct ingest_state {
    cli_ctx *ctx;
    tally_ledger *l;
    tally_pipeline *p;
    const char *name;
    int64_t now_s;
    int64_t line_no;
} ingest_state;

static int commit(ingest_state *s)
{
    tally_err e = tally_pipeline_commit(s->p, NULL);
    if (e)
        return cli_error(s->ctx, CLI_FAIL, "commit failed at line %lld: %s (%s)",
                         (long long)s->line_no, tally_err_str(e), tally_ledger_errmsg(s->l));
    return CLI_OK;
}

static int one_line(ingest_state *s, const char *line, size_t len)
{
    s->line_no++;
    if (len && line[len - 1] == '\r')
        len--;
    if (len == 0)
        return CLI_OK;
    uint64_t h[2];
    tally_hash128(line, len, 0, h);
    char origin[TALLY_ID_MAX + 96];
    snprintf(origin, sizeof origin, "file:%s:%lld:%016llx", s->name, (long long)s->line_no,
             (unsigned long long)h[0]);
    tally_err e = tally_pipeline_add(s->p, line, len, origin, s->now_s, NULL);
    if (e)
        return cli_error(s->ctx, CLI_FAIL, "line %lld: %s", (long long)s->line_no,
                         tally_err_str(e));
    if (tally_pipeline_full(s->p))
        return commit(s);
    return CLI_OK;
}

/* Splits the stream into lines; an over-long line is cut to LINE_MAX_KEPT
 * bytes and the rest of it skipped. */
static int read_lines(ingest_state *s, FILE *f)
{
    size_t cap = READ_CHUNK + LINE_MAX_KEPT;
    char *buf = malloc(cap);
    if (!buf)
        return cli_error(s->ctx, CLI_FAIL, "out of memory");
    size_t have = 0;
    bool skipping = false;
    int rc = CLI_OK;
    for (;;) {
        size_t n = fread(buf + have, 1, cap - have, f);
        have += n;
        size_t start = 0;
        for (size_t i = 0; i < have && !rc; i++) {
            if (buf[i] != '\n')
                continue;
            if (!skipping)
                rc = one_line(s, buf + start, i - start);
            skipping = false;
            start = i + 1;
        }
        if (rc)
            break;
        memmove(buf, buf + start, have - start);
        have -= start;
        if (have >= LINE_MAX_KEPT && !skipping) {
            rc = one_line(s, buf, LINE_MAX_KEPT);
            skipping = true;
        }
        if (skipping)
            have = 0;
        if (n == 0)
            break;
    }
    if (!rc && ferror(f))
        rc = cli_error(s->ctx, CLI_FAIL, "read error on %s", s->name);
    if (!rc && have && !skipping)
        rc = one_line(s, buf, have);
    free(buf);
    return rc;
}

int cmd_ingest(cli_ctx *ctx, int argc, char **argv)
{
    if (cli_wants_help(ctx, argc, argv))
        return CLI_OK;
    char *pos[1];
    int npos = 0;
    int rc = cli_parse(ctx, argc, argv, NULL, pos, 1, &npos);
    if (rc)
        return rc;
    if (npos != 1) {
        cli_usage(ctx, true);
        return CLI_USAGE;
    }
    bool is_stdin = strcmp(pos[0], "-") == 0;
    FILE *f = is_stdin ? stdin : fopen(pos[0], "rb");
    if (!f)
        return cli_error(ctx, CLI_USAGE, "cannot open %s: %s", pos[0], strerror(errno));
    ingest_state s = {.ctx = ctx, .name = is_stdin ? "stdin" : pos[0], .now_s = tally_now_s()};
    if ((rc = cli_open_ledger(ctx, &s.l)))
        goto out_file;
    if (tally_pipeline_create(s.l, INGEST_BATCH, &s.p) != TALLY_OK) {
        rc = cli_error(ctx, CLI_FAIL, "out of memory");
        goto out_ledger;
    }
    rc = read_lines(&s, f);
    if (!rc && tally_pipeline_pending(s.p))
        rc = commit(&s);
    if (!rc) {
        tally_batch_stats total;
        tally_pipeline_totals(s.p, &total);
        printf("accepted=%lld duplicate=%lld conflict=%lld quarantined=%lld\n",
               (long long)total.accepted, (long long)total.duplicates, (long long)total.conflicts,
               (long long)total.quarantined);
    }
    tally_pipeline_destroy(s.p);
out_ledger:
    tally_ledger_close(s.l);
out_file:
    if (!is_stdin)
        fclose(f);
    return rc;
}
