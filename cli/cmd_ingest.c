/* tally ingest FILE|-: NDJSON usage events into the ledger.
 *
 * Reads in bounded chunks (memory does not grow with the file), puts each
 * line through the ingest pipeline (include/tally/pipeline.h), the same one
 * the Kafka meter and POST /v1/events use, and commits every INGEST_BATCH
 * lines (or 64 MiB of them) in one transaction. A line that is not a good event is quarantined
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
#include "tally/buf.h"
#include "tally/event.h"
#include "tally/pipeline.h"
#include "tally/sign.h"

/* Lines per transaction. Each commit refreshes the balance of every account
 * it touched and rewrites every open interval row, so larger ones cost less
 * per event: 1M lines of bench/ingest.sh took 8.8 s of CPU at 20,000 a
 * commit, 4.4 s at 50,000 and 3.3 s at 100,000 in an earlier build; in
 * this one 2.65 s at 100,000 (peak RSS 126 MiB) and 2.17 s at 200,000 (212
 * MiB); since the batch keeps events packed (ledger_int.h, batch_event),
 * 200,000 take 157 MiB. 400,000 (with 128 MiB of lines) cost 0.99 of the
 * CPU for 1M events of 1,000 hosts and 0.87 for 20,000 hosts, at 260 and
 * 356 MiB (bench/RESULTS.md, eleventh pass). A batch of large lines
 * commits sooner (TALLY_PIPELINE_FULL_BYTES: 64 MiB of lines and origins,
 * about 200,000 of bench/ingest.sh's). */
#define INGEST_BATCH  200000
#define READ_CHUNK    ((size_t)1 << 20)
#define LINE_MAX_KEPT (TALLY_EVENT_MAX_BYTES + 1) /* one more, so decode says too_large */
#define ORIGIN_NAME   (TALLY_ID_MAX + 48)         /* of the origin's prefix */
#define ORIGIN_CAP    (ORIGIN_NAME + 48)          /* prefix, line number, ':', hash */

typedef struct ingest_state {
    cli_ctx *ctx;
    tally_ledger *l;
    tally_pipeline *p;
    const char *name;
    int64_t now_s;
    int64_t line_no;
    char prefix[ORIGIN_NAME]; /* "file:<name>:", cut to fit */
    size_t prefix_len;
} ingest_state;

/* "file:<name>:"; a name too long for it is cut and followed by "~" and
 * the hash of all of it, so that two files never share origins. */
static void origin_prefix(ingest_state *s)
{
    size_t len = strlen(s->name);
    if (len + 7 <= ORIGIN_NAME) {
        snprintf(s->prefix, ORIGIN_NAME, "file:%s:", s->name);
    } else {
        uint64_t h[2];
        tally_hash128(s->name, len, 0, h);
        snprintf(s->prefix, ORIGIN_NAME, "file:%.*s~%016llx:", ORIGIN_NAME - 32, s->name,
                 (unsigned long long)h[0]);
    }
    s->prefix_len = strlen(s->prefix);
}

/* A line's origin up to its hash, "file:<name>:<line>:"; once per line, so
 * without printf (it was 5 % of ingest's CPU). The prefix is shorter than
 * ORIGIN_NAME, so all of it fits ORIGIN_CAP. */
static char *origin_head(const ingest_state *s, char out[ORIGIN_CAP])
{
    char *p = out;
    memcpy(p, s->prefix, s->prefix_len);
    p += s->prefix_len;
    p += tally_dec_i64(p, s->line_no);
    *p++ = ':';
    *p = '\0';
    return p;
}

/* The whole origin, "file:<name>:<line>:<16 hex digits of its hash>". A
 * line that fits an event is queued with its head alone and the batch adds
 * the hash if it quarantines the line (tally_pipeline_add_line): the same
 * origin, and only the lines kept in quarantine are hashed. */
static void origin_of(const ingest_state *s, const char *line, size_t len, char out[ORIGIN_CAP])
{
    uint64_t h[2];
    tally_hash128(line, len, 0, h);
    char *p = origin_head(s, out);
    p += tally_hex64(p, h[0]);
    *p = '\0';
}

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
    char origin[ORIGIN_CAP];
    (void)origin_head(s, origin);
    tally_err e = tally_pipeline_add_line(s->p, line, len, origin, s->now_s);
    if (e)
        return cli_error(s->ctx, CLI_FAIL, "line %lld: %s", (long long)s->line_no,
                         tally_err_str(e));
    if (tally_pipeline_full(s->p))
        return commit(s);
    return CLI_OK;
}

/* An over-long line while it is being skipped: its first LINE_MAX_KEPT
 * bytes, its length so far and the hash of all of it. */
typedef struct long_line {
    char *kept;
    size_t size;
    tally_sha256 *h;
} long_line;

/* Queues the line of which only the kept prefix is held, as too_large with
 * the whole line's size and hash. */
static int cut_line(ingest_state *s, long_line *ll)
{
    s->line_no++;
    char sha[65];
    tally_sha256_final(ll->h, sha);
    ll->h = NULL;
    char origin[ORIGIN_CAP];
    origin_of(s, ll->kept, LINE_MAX_KEPT, origin);
    tally_err e = tally_pipeline_add_cut(s->p, ll->kept, LINE_MAX_KEPT, ll->size, sha, origin);
    if (e)
        return cli_error(s->ctx, CLI_FAIL, "line %lld: %s", (long long)s->line_no,
                         tally_err_str(e));
    return tally_pipeline_full(s->p) ? commit(s) : CLI_OK;
}

static int start_long(ingest_state *s, long_line *ll, const char *buf)
{
    ll->h = tally_sha256_create();
    if (!ll->h)
        return cli_error(s->ctx, CLI_FAIL, "out of memory");
    memcpy(ll->kept, buf, LINE_MAX_KEPT);
    ll->size = LINE_MAX_KEPT;
    tally_sha256_update(ll->h, buf, LINE_MAX_KEPT);
    return CLI_OK;
}

static void more_long(long_line *ll, const char *p, size_t n)
{
    tally_sha256_update(ll->h, p, n);
    ll->size += n;
}

/* Splits the stream into lines. An over-long line is kept as its first
 * LINE_MAX_KEPT bytes; the rest is read, counted and hashed, not kept. */
static int read_lines(ingest_state *s, FILE *f)
{
    size_t cap = READ_CHUNK + LINE_MAX_KEPT;
    char *buf = malloc(cap);
    long_line ll = {.kept = malloc(LINE_MAX_KEPT)};
    if (!buf || !ll.kept) {
        free(buf);
        free(ll.kept);
        return cli_error(s->ctx, CLI_FAIL, "out of memory");
    }
    size_t have = 0;
    int rc = CLI_OK;
    for (;;) {
        size_t n = fread(buf + have, 1, cap - have, f);
        have += n;
        size_t start = 0;
        for (const char *nl; !rc && (nl = memchr(buf + start, '\n', have - start));) {
            size_t i = (size_t)(nl - buf);
            if (ll.h) {
                more_long(&ll, buf + start, i - start);
                rc = cut_line(s, &ll);
            } else {
                rc = one_line(s, buf + start, i - start);
            }
            start = i + 1;
        }
        if (rc)
            break;
        memmove(buf, buf + start, have - start);
        have -= start;
        if (have >= LINE_MAX_KEPT && !ll.h) {
            rc = start_long(s, &ll, buf);
            if (!rc)
                more_long(&ll, buf + LINE_MAX_KEPT, have - LINE_MAX_KEPT);
            have = 0;
        } else if (ll.h) {
            more_long(&ll, buf, have);
            have = 0;
        }
        if (rc || n == 0)
            break;
    }
    if (!rc && ferror(f))
        rc = cli_error(s->ctx, CLI_FAIL, "read error on %s", s->name);
    if (!rc && ll.h)
        rc = cut_line(s, &ll);
    else if (!rc && have)
        rc = one_line(s, buf, have);
    tally_sha256_destroy(ll.h);
    free(ll.kept);
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
    origin_prefix(&s);
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
