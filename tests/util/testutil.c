#include "testutil.h"
#include "tally/embed.h"
#include "tally/ledger_sql.h"
#include "tally/utf8.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

const char *tu_tmpdir(const char *tag)
{
    static char path[512];
    const char *base = getenv("TALLY_TEST_TMP");
    if (!base || !*base)
        base = "/tmp/tally-tests";
    char cmd[1200];
    snprintf(path, sizeof path, "%s/%s-%d", base, tag, (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", path, path);
    if (system(cmd) != 0)
        fail_msg("cannot create %s", path);
    return path;
}

bool tu_in_ci(void)
{
    const char *ci = getenv("CI");
    return ci && *ci && strcmp(ci, "0") != 0 && strcmp(ci, "false") != 0;
}

const char *tu_src(const char *rel)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", TALLY_SOURCE_DIR, rel);
    return path;
}

static int run(tally_buf *out, const char *cmd)
{
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, p)) > 0)
        if (out && tally_buf_append(out, chunk, n) != TALLY_OK)
            break;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int tu_sh(tally_buf *out, const char *fmt, ...)
{
    tally_buf cmd;
    tally_buf_init(&cmd, 0);
    va_list ap;
    va_start(ap, fmt);
    tally_err e = tally_buf_vprintf(&cmd, fmt, ap);
    va_end(ap);
    int rc = e ? -1 : run(out, cmd.data);
    tally_buf_release(&cmd);
    return rc;
}

int tu_tally(tally_buf *out, const char *fmt, ...)
{
    tally_buf cmd;
    tally_buf_init(&cmd, 0);
    tally_err e = tally_buf_printf(&cmd, "'%s' ", TALLY_BINARY);
    va_list ap;
    va_start(ap, fmt);
    if (!e)
        e = tally_buf_vprintf(&cmd, fmt, ap);
    va_end(ap);
    int rc = e ? -1 : run(out, cmd.data);
    tally_buf_release(&cmd);
    return rc;
}

int tu_read_file(const char *path, tally_buf *out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    char chunk[8192];
    size_t n;
    int rc = 0;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (tally_buf_append(out, chunk, n) != TALLY_OK)
            rc = -1;
    fclose(f);
    return rc;
}

static tally_err count_row(void *ctx, int ncols, const char *const *cols)
{
    (void)ncols;
    char *msg = ctx;
    if (!msg[0])
        snprintf(msg, 512, "%s", cols[0] ? cols[0] : "(null)");
    return TALLY_OK;
}

/* Each query returns a row per violation, first column describing it. */
static const char *const conservation_checks[] = {
    "SELECT 'currency ' || currency || ': debits ' || sum(debit_minor) || ' != credits ' || "
    "sum(credit_minor) FROM postings GROUP BY currency HAVING sum(debit_minor) != "
    "sum(credit_minor)",
    "SELECT 'entry ' || entry_id || ' unbalanced' FROM postings GROUP BY entry_id, currency "
    "HAVING sum(debit_minor) != sum(credit_minor)",
    "SELECT 'balance ' || b.ledger_acct || ' differs from its postings' FROM balances b "
    "LEFT JOIN (SELECT ledger_acct, currency, sum(debit_minor) d, sum(credit_minor) c FROM "
    "postings GROUP BY 1, 2) p USING (ledger_acct, currency) "
    "WHERE b.debit_minor != coalesce(p.d, 0) OR b.credit_minor != coalesce(p.c, 0)",
    "SELECT 'invoice ' || i.id || ' lines do not sum to subtotal' FROM invoices i "
    "WHERE i.subtotal_minor != (SELECT coalesce(sum(amount_minor), 0) FROM invoice_lines l "
    "WHERE l.invoice_seq = i.seq)",
    "SELECT 'invoice ' || i.id || ' credits do not sum to total_credits' FROM invoices i "
    "WHERE i.credits_minor != (SELECT coalesce(sum(amount_minor), 0) FROM invoice_credits c "
    "WHERE c.invoice_seq = i.seq)",
    "SELECT 'invoice ' || id || ' does not add up' FROM invoices WHERE doc_type = 'invoice' "
    "AND (max(subtotal_minor - credits_minor, 0) != amount_due_minor OR amount_due_minor < 0)",
};

void tu_assert_conservation(tally_ledger *l)
{
    for (size_t i = 0; i < sizeof conservation_checks / sizeof *conservation_checks; i++) {
        char msg[512] = "";
        tally_err e = tally_ledger_query(l, conservation_checks[i], NULL, 0, count_row, msg);
        if (e != TALLY_OK)
            fail_msg("conservation query failed: %s", tally_ledger_errmsg(l));
        if (msg[0])
            fail_msg("conservation broken: %s", msg);
    }
}

void tu_assert_conservation_path(const char *db_path)
{
    tally_ledger *l = NULL;
    char why[256];
    if (tally_ledger_open(db_path, &l, why, sizeof why) != TALLY_OK)
        fail_msg("cannot open %s: %s", db_path, why);
    tu_assert_conservation(l);
    tally_ledger_close(l);
}

static tally_err first_int(void *ctx, int ncols, const char *const *cols)
{
    int64_t *v = ctx;
    if (*v == -1 && ncols > 0) /* the first row only */
        *v = cols[0] ? strtoll(cols[0], NULL, 10) : INT64_MIN;
    return TALLY_OK;
}

int64_t tu_query_int(tally_ledger *l, const char *sql, const char *param)
{
    int64_t v = -1;
    const char *params[] = {param};
    if (tally_ledger_query(l, sql, params, param ? 1 : 0, first_int, &v) != TALLY_OK)
        fail_msg("%s: %s", sql, tally_ledger_errmsg(l));
    return v;
}

tally_shard *tu_shard_take(tally_shard_set *s, const char *topic, int32_t p)
{
    tally_shard *sh = NULL;
    char why[512] = "";
    tally_err e = tally_shard_acquire(s, topic, p, 0, &sh, why, sizeof why);
    if (e)
        fail_msg("acquire %d: %s: %s", (int)p, tally_err_name(e), why);
    return sh;
}

tally_ledger *tu_open_priced(const char *path)
{
    tally_ledger *l = NULL;
    char why[256] = "";
    if (tally_ledger_open(path, &l, why, sizeof why) != TALLY_OK)
        fail_msg("open %s: %s", path, why);
    const tally_embedded *card = tally_embedded_find("fixtures/pricebook/ratecard.json");
    assert_non_null(card);
    if (tally_ledger_ratecard_load(l, card->data, card->len, why, sizeof why) != TALLY_OK)
        fail_msg("ratecard: %s", why);
    return l;
}

void tu_copy_db(const char *base, const char *work)
{
    static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};
    char path[1100];
    for (size_t i = 0; i < sizeof sfx / sizeof *sfx; i++) {
        snprintf(path, sizeof path, "%s%s", work, sfx[i]);
        assert_true(unlink(path) == 0 || errno == ENOENT);
    }
    tally_buf b;
    tally_buf_init(&b, 0);
    assert_int_equal(tu_read_file(base, &b), 0);
    FILE *f = fopen(work, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b.data, 1, b.len, f), b.len);
    assert_int_equal(fclose(f), 0);
    tally_buf_release(&b);
}

bool tu_valid_utf8(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    while (p < end) {
        size_t k = *p < 0x80 ? 1 : tally_utf8_len(p, end);
        if (!k)
            return false;
        p += k;
    }
    return true;
}
