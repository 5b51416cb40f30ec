/* tally ingest FILE|-: NDJSON usage events into the ledger.
 *
 * Puts each line through the ingest pipeline (include/tally/pipeline.h),
 * the same one the Kafka meter and POST /v1/events use, and commits every
 * INGEST_BATCH lines (or 64 MiB of them) in one transaction. A line that is
 * not a good event is quarantined with its reason and the file goes on. A
 * line longer than an event may be is quarantined as too_large with its
 * first bytes kept. Each message's origin is "file:<name>:<line>:<content
 * hash>", so ingesting the same file twice stores its quarantined lines
 * once and counts its events as duplicates.
 *
 * A regular file is mapped, and its lines are queued where they lie
 * (tally_pipeline_add_line_ref): the batch holds no copy of them, and once
 * a batch has committed its lines' pages are dropped, so memory holds the
 * lines of one batch at most. The mapping covers the size the file had
 * when it was opened; what was appended since, and a last line that size
 * cut, are read as a stream. A file that shrinks while it is mapped ends
 * the process with a message (SIGBUS): what committed stays, the batch in
 * flight is rolled back. Standard input, a pipe or a file that cannot be
 * mapped is read as a stream in bounded chunks, copying each line into the
 * batch. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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
    /* A mapped file (NULL: none): its lines before kept_from are committed
     * and their pages may go; it is unmapped after the last commit. */
    char *map;
    size_t map_len, kept_from;
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

/* The mapped pages before the line at upto hold only committed lines. */
static void drop_committed(ingest_state *s, size_t upto)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t end = page > 0 ? upto - upto % (size_t)page : 0;
    if (!s->map || end <= s->kept_from)
        return;
    (void)madvise(s->map + s->kept_from, end - s->kept_from, MADV_DONTNEED);
    s->kept_from = end;
}

/* Commits the batch; line, when in the mapped file, is the next line's
 * first byte. */
static int commit_at(ingest_state *s, const char *line)
{
    tally_err e = tally_pipeline_commit(s->p, NULL);
    if (e)
        return cli_error(s->ctx, CLI_FAIL, "commit failed at line %lld: %s (%s)",
                         (long long)s->line_no, tally_err_str(e), tally_ledger_errmsg(s->l));
    if (s->map && line >= s->map && line <= s->map + s->map_len)
        drop_committed(s, (size_t)(line - s->map));
    return CLI_OK;
}

static int commit(ingest_state *s)
{
    return commit_at(s, NULL);
}

/* Queues one line, in place when it lies in the mapped file (it stays there
 * until the commit), else copied. */
static int one_line(ingest_state *s, const char *line, size_t len)
{
    s->line_no++;
    const char *next = line + len + 1;
    if (len && line[len - 1] == '\r')
        len--;
    if (len == 0)
        return CLI_OK;
    char origin[ORIGIN_CAP];
    (void)origin_head(s, origin);
    bool mapped = s->map && line >= s->map && line < s->map + s->map_len;
    tally_err e = mapped ? tally_pipeline_add_line_ref(s->p, line, len, origin, s->now_s)
                         : tally_pipeline_add_line(s->p, line, len, origin, s->now_s);
    if (e)
        return cli_error(s->ctx, CLI_FAIL, "line %lld: %s", (long long)s->line_no,
                         tally_err_str(e));
    if (tally_pipeline_full(s->p))
        return commit_at(s, mapped ? next : NULL);
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

/* ---- A mapped file ---------------------------------------------------- */

static char bus_msg[160];
static size_t bus_len;

/* The mapped file shrank under us: every commit so far is durable, the
 * open transaction dies with the process and is rolled back. */
static void on_sigbus(int sig)
{
    (void)sig;
    (void)!write(STDERR_FILENO, bus_msg, bus_len);
    _exit(CLI_FAIL);
}

/* Maps f when it is a regular file that is not empty; false when it is to
 * be read as a stream. */
static bool map_file(ingest_state *s, FILE *f)
{
    struct stat st;
    int fd = fileno(f);
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        (uintmax_t)st.st_size > SIZE_MAX)
        return false;
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED)
        return false;
    (void)madvise(p, (size_t)st.st_size, MADV_SEQUENTIAL);
    s->map = p;
    s->map_len = (size_t)st.st_size;
    s->kept_from = 0;
    int n = snprintf(bus_msg, sizeof bus_msg,
                     "tally: %.80s shrank while it was being ingested; the lines committed "
                     "so far are stored\n",
                     s->name);
    bus_len = n > 0 ? ((size_t)n < sizeof bus_msg ? (size_t)n : sizeof bus_msg - 1) : 0;
    struct sigaction sa = {.sa_handler = on_sigbus};
    sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGBUS, &sa, NULL);
    return true;
}

/* Queues the mapped file's lines in place. *rest is where the stream
 * reading takes over: the end of the mapping, or the start of a last line
 * without its newline when the file has grown since it was mapped. */
static int map_lines(ingest_state *s, FILE *f, size_t *rest)
{
    const char *p = s->map, *end = s->map + s->map_len;
    int rc = CLI_OK;
    for (const char *nl; !rc && p < end && (nl = memchr(p, '\n', (size_t)(end - p)));) {
        rc = one_line(s, p, (size_t)(nl - p));
        p = nl + 1;
    }
    *rest = (size_t)(p - s->map);
    if (rc || p == end)
        return rc;
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && (uintmax_t)st.st_size == s->map_len) {
        *rest = s->map_len; /* the file's last line, with no newline */
        return one_line(s, p, (size_t)(end - p));
    }
    return CLI_OK;
}

static void unmap_file(ingest_state *s)
{
    if (!s->map)
        return;
    (void)munmap(s->map, s->map_len);
    s->map = NULL;
    signal(SIGBUS, SIG_DFL);
}

/* The file's lines: mapped where it can be, then as a stream from where
 * the mapping ends. */
static int ingest_lines(ingest_state *s, FILE *f)
{
    size_t rest = 0;
    if (map_file(s, f)) {
        int rc = map_lines(s, f, &rest);
        if (rc)
            return rc;
        if (fseeko(f, (off_t)rest, SEEK_SET) != 0)
            return cli_error(s->ctx, CLI_FAIL, "cannot seek in %s: %s", s->name, strerror(errno));
    }
    return read_lines(s, f);
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
    rc = ingest_lines(&s, f);
    if (!rc && tally_pipeline_pending(s.p))
        rc = commit(&s);
    if (!rc) {
        tally_batch_stats total;
        tally_pipeline_totals(s.p, &total);
        printf("accepted=%lld duplicate=%lld conflict=%lld quarantined=%lld\n",
               (long long)total.accepted, (long long)total.duplicates, (long long)total.conflicts,
               (long long)total.quarantined);
    }
    tally_pipeline_destroy(s.p); /* before the lines it may point into go */
    unmap_file(&s);
out_ledger:
    tally_ledger_close(s.l);
out_file:
    if (!is_stdin)
        fclose(f);
    return rc;
}
