/* Golden invoices: end-to-end cases driving the real `tally` binary.
 *
 * Each case is a folder fixtures/golden/<case>/ with
 *   setup.args  the steps, one per line (no shell: words split on blanks,
 *               '...' quotes a word):
 *                 <tally arguments>    run `tally --db DB --key KEY <args>`,
 *                                      which must exit 0
 *                 ! <code> <arguments> run it; it must exit <code>
 *                 = <text>             the previous step's stdout holds text
 *                 @now <RFC 3339>      sets TALLY_NOW for the steps after it
 *                 # ...                a comment
 *               {case} stands for the case folder, {out} for the output
 *               folder (invoice files go there with --out {out}).
 *   usage.ndjson     the usage stream the steps ingest (optional)
 *   expected/        what must come out:
 *     <account>-<period>.json  the invoice file in {out}, compared byte for
 *                              byte with key_id, prev_hash, hash and signature
 *                              blanked (they depend on the signing key)
 *     <account>.balance.json   tally_balance_report() of the account
 *     quarantine.txt           the quarantine reasons, one per line, sorted
 * After every case the ledger's conservation holds and it verifies (the
 * checks of `tally verify`).
 * With TALLY_GOLDEN_UPDATE=1 the expected files are rewritten from the
 * actual output (review the diff before committing). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tally/invoice.h"
#include "tally/sign.h"
#include "tally/ledger_sql.h"

#define DEFAULT_NOW "2026-05-15T00:00:00Z"

static const char *const cases[] = {
    "pricebook-a100",
    "pricebook-tpu-trial",
    "pricebook-spot",
    "pricebook-h100-minimum",
    "ingest-quarantine",
    "spot-change-in-event",
    "commitment-overage",
    "minimum-two-runs",
    "insurance-waiver",
    "trial-expires-mid-month",
    "scoped-coupon",
    "storage-month",
    "traffic",
    "tokens",
    "shanghai-april",
    "lifecycle",
};
#define N_CASES (sizeof cases / sizeof *cases)

typedef struct golden {
    const char *name;
    char src[1024];
    char dir[512];
    char db[600], key[600], out[600];
    tally_buf last; /* stdout of the previous step */
} golden;

/* Appends word w to cmd as one single-quoted shell word. */
static void quote(tally_buf *cmd, const char *w, size_t n)
{
    assert_int_equal(tally_buf_puts(cmd, " '"), TALLY_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(w[i] == '\'' ? tally_buf_puts(cmd, "'\\''")
                                      : tally_buf_append(cmd, &w[i], 1),
                         TALLY_OK);
    assert_int_equal(tally_buf_puts(cmd, "'"), TALLY_OK);
}

/* Replaces {case} and {out} in one word. */
static void expand(golden *g, const char *w, size_t n, tally_buf *word)
{
    tally_buf_reset(word);
    for (size_t i = 0; i < n;) {
        if (n - i >= 6 && memcmp(w + i, "{case}", 6) == 0) {
            assert_int_equal(tally_buf_puts(word, g->src), TALLY_OK);
            i += 6;
        } else if (n - i >= 5 && memcmp(w + i, "{out}", 5) == 0) {
            assert_int_equal(tally_buf_puts(word, g->out), TALLY_OK);
            i += 5;
        } else {
            assert_int_equal(tally_buf_append(word, w + i, 1), TALLY_OK);
            i++;
        }
    }
    if (!word->data)
        assert_int_equal(tally_buf_puts(word, ""), TALLY_OK);
}

/* Splits a line into words and builds the quoted argument string. */
static void words(golden *g, const char *line, tally_buf *cmd)
{
    tally_buf word;
    tally_buf_init(&word, 0);
    const char *p = line;
    while (*p) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            break;
        const char *start = p;
        size_t n;
        if (*p == '\'') {
            const char *end = strchr(p + 1, '\'');
            if (!end)
                fail_msg("%s: unterminated quote in: %s", g->name, line);
            start = p + 1;
            n = (size_t)(end - start);
            p = end + 1;
        } else {
            while (*p && *p != ' ' && *p != '\t')
                p++;
            n = (size_t)(p - start);
        }
        expand(g, start, n, &word);
        quote(cmd, word.data, word.len);
    }
    tally_buf_release(&word);
}

static void step(golden *g, const char *line, int lineno)
{
    int want = 0;
    if (line[0] == '!') {
        char *end = NULL;
        want = (int)strtol(line + 1, &end, 10);
        line = end;
    }
    tally_buf cmd;
    tally_buf_init(&cmd, 0);
    assert_int_equal(tally_buf_printf(&cmd, "--db '%s' --key '%s'", g->db, g->key), TALLY_OK);
    words(g, line, &cmd);
    tally_buf_reset(&g->last);
    assert_int_equal(tally_buf_puts(&g->last, ""), TALLY_OK);
    int rc = tu_tally(&g->last, "%s", cmd.data);
    if (rc != want)
        fail_msg("%s/setup.args:%d: `tally%s` exited %d, want %d; stdout: %s", g->name, lineno,
                 cmd.data, rc, want, g->last.data);
    tally_buf_release(&cmd);
}

static void run_steps(golden *g)
{
    char path[1100];
    tally_buf file;
    tally_buf_init(&file, 0);
    snprintf(path, sizeof path, "%s/setup.args", g->src);
    if (tu_read_file(path, &file) != 0)
        fail_msg("cannot read %s", path);
    int lineno = 0;
    for (char *line = file.data, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        lineno++;
        if (!line[0] || line[0] == '#')
            continue;
        if (strncmp(line, "@now ", 5) == 0) {
            setenv("TALLY_NOW", line + 5, 1);
        } else if (strncmp(line, "= ", 2) == 0) {
            if (!strstr(g->last.data, line + 2))
                fail_msg("%s/setup.args:%d: output lacks '%s'; it was:\n%s", g->name, lineno,
                         line + 2, g->last.data);
        } else {
            step(g, line, lineno);
        }
    }
    tally_buf_release(&file);
}

/* Empties the values of key_id, prev_hash, hash and signature. */
static void blank(tally_buf *b)
{
    const char *keys[] = {"\"key_id\":\"", "\"prev_hash\":\"", "\"hash\":\"", "\"signature\":\""};
    for (size_t k = 0; k < 4; k++) {
        char *v = strstr(b->data, keys[k]);
        if (!v)
            continue;
        v += strlen(keys[k]);
        char *end = strchr(v, '"');
        assert_non_null(end);
        memmove(v, end, strlen(end) + 1);
        b->len = strlen(b->data);
    }
}

static tally_err add_reason(void *ctx, int ncols, const char *const *cols)
{
    (void)ncols;
    return tally_buf_printf(ctx, "%s\n", cols[0] ? cols[0] : "");
}

static void quarantine_reasons(golden *g, tally_buf *out)
{
    tally_ledger *l = NULL;
    char why[256];
    assert_int_equal(tally_ledger_open(g->db, &l, why, sizeof why), TALLY_OK);
    assert_int_equal(tally_ledger_query(l, "SELECT reason FROM quarantine ORDER BY reason", NULL, 0,
                                        add_reason, out),
                     TALLY_OK);
    tally_ledger_close(l);
}

/* The actual content for one expected file. */
static void actual(golden *g, const char *name, tally_buf *out)
{
    size_t n = strlen(name);
    const char *suffix = ".balance.json";
    tally_buf_reset(out);
    if (strcmp(name, "quarantine.txt") == 0) {
        quarantine_reasons(g, out);
        return;
    }
    if (n > strlen(suffix) && strcmp(name + n - strlen(suffix), suffix) == 0) {
        char account[128];
        snprintf(account, sizeof account, "%.*s", (int)(n - strlen(suffix)), name);
        tally_ledger *l = NULL;
        char why[256];
        assert_int_equal(tally_ledger_open(g->db, &l, why, sizeof why), TALLY_OK);
        assert_int_equal(tally_balance_report(l, account, out), TALLY_OK);
        tally_ledger_close(l);
        return;
    }
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", g->out, name);
    if (tu_read_file(path, out) != 0)
        fail_msg("%s: no output file %s", g->name, path);
    blank(out);
}

static void compare(golden *g, const char *name)
{
    char path[1200];
    tally_buf want, got;
    tally_buf_init(&want, 0);
    tally_buf_init(&got, 0);
    snprintf(path, sizeof path, "%s/expected/%s", g->src, name);
    actual(g, name, &got);
    assert_int_equal(tally_buf_puts(&got, ""), TALLY_OK);
    while (got.len && got.data[got.len - 1] == '\n')
        got.data[--got.len] = '\0';
    const char *update = getenv("TALLY_GOLDEN_UPDATE");
    if (update && strcmp(update, "1") == 0) {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        fprintf(f, "%s\n", got.data);
        fclose(f);
    }
    assert_int_equal(tu_read_file(path, &want), 0);
    assert_int_equal(tally_buf_puts(&want, ""), TALLY_OK);
    while (want.len && want.data[want.len - 1] == '\n')
        want.data[--want.len] = '\0';
    if (strcmp(want.data, got.data) != 0)
        fail_msg("%s: %s differs\nwant: %s\ngot:  %s", g->name, name, want.data, got.data);
    tally_buf_release(&want);
    tally_buf_release(&got);
}

static void check_outputs(golden *g)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/expected", g->src);
    struct dirent **names = NULL;
    int n = scandir(path, &names, NULL, alphasort);
    if (n < 0)
        fail_msg("%s: no expected/ folder", g->name);
    int checked = 0;
    for (int i = 0; i < n; i++) {
        if (names[i]->d_name[0] != '.') {
            compare(g, names[i]->d_name);
            checked++;
        }
        free(names[i]);
    }
    free(names);
    assert_true(checked > 0);
}

/* What `tally verify` checks, in process. */
static void verify(golden *g)
{
    tally_ledger *l = NULL;
    char why[512] = "";
    assert_int_equal(tally_ledger_open(g->db, &l, why, sizeof why), TALLY_OK);
    if (tally_ledger_verify(l, g->key, why, sizeof why) != TALLY_OK)
        fail_msg("%s: verify: %s", g->name, why);
    tally_ledger_close(l);
}

/* `tally init` and `tally keygen` run once; each case starts from a copy. */
static char template_db[600], template_key[600];

static void copy_file(const char *from, const char *to)
{
    tally_buf b;
    tally_buf_init(&b, 0);
    if (tu_read_file(from, &b) != 0)
        fail_msg("cannot read %s", from);
    FILE *f = fopen(to, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b.data, 1, b.len, f), b.len);
    assert_int_equal(fclose(f), 0);
    tally_buf_release(&b);
}

static int make_template(void **state)
{
    (void)state;
    const char *dir = tu_tmpdir("golden-template");
    snprintf(template_db, sizeof template_db, "%s/t.db", dir);
    snprintf(template_key, sizeof template_key, "%s/t.key", dir);
    /* The price book is entered when it takes effect: prices are bitemporal
     * (SPEC section 2), and a card entered "after" a case's @now would not
     * have been in force when that case finalized its periods. */
    setenv("TALLY_NOW", "2026-01-01T00:00:00Z", 1);
    if (tu_tally(NULL, "--db '%s' init >/dev/null", template_db) != 0 ||
        tu_tally(NULL, "--key '%s' keygen >/dev/null", template_key) != 0)
        return -1;
    return 0;
}

static void test_case(void **state)
{
    golden g = {.name = *state};
    tally_buf_init(&g.last, 0);
    snprintf(g.src, sizeof g.src, "%s", tu_src("fixtures/golden"));
    snprintf(g.src + strlen(g.src), sizeof g.src - strlen(g.src), "/%s", g.name);
    char tag[128];
    snprintf(tag, sizeof tag, "golden-%s", g.name);
    snprintf(g.dir, sizeof g.dir, "%s", tu_tmpdir(tag));
    snprintf(g.db, sizeof g.db, "%s/t.db", g.dir);
    snprintf(g.key, sizeof g.key, "%s/t.key", g.dir);
    snprintf(g.out, sizeof g.out, "%s/out", g.dir);
    setenv("TALLY_NOW", DEFAULT_NOW, 1);
    copy_file(template_db, g.db);
    copy_file(template_key, g.key);
    run_steps(&g);
    check_outputs(&g);
    tu_assert_conservation_path(g.db);
    verify(&g);
    tally_buf_release(&g.last);
}

/* Every case folder is in the list above, and every listed case exists. */
static void test_all_cases_listed(void **state)
{
    (void)state;
    struct dirent **names = NULL;
    int n = scandir(tu_src("fixtures/golden"), &names, NULL, alphasort);
    assert_true(n > 0);
    size_t found = 0;
    for (int i = 0; i < n; i++) {
        bool listed = names[i]->d_name[0] == '.';
        for (size_t c = 0; c < N_CASES && !listed; c++)
            listed = strcmp(cases[c], names[i]->d_name) == 0;
        if (!listed)
            fail_msg("fixtures/golden/%s is not listed in test_golden.c", names[i]->d_name);
        found += names[i]->d_name[0] != '.';
        free(names[i]);
    }
    free(names);
    assert_int_equal(found, N_CASES);
}

int main(void)
{
    struct CMUnitTest tests[N_CASES + 1];
    for (size_t i = 0; i < N_CASES; i++)
        tests[i] = (struct CMUnitTest){cases[i], test_case, NULL, NULL, (void *)cases[i]};
    tests[N_CASES] =
        (struct CMUnitTest){"all_cases_listed", test_all_cases_listed, NULL, NULL, NULL};
    return _cmocka_run_group_tests("golden", tests, N_CASES + 1, make_template, NULL);
}
