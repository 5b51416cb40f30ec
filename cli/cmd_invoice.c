/* tally invoice run|show|void|list: rate periods, finalize, show and void
 * invoices. Subcommands are a table; each has its own --help. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "tally/invoice.h"
#include "tally/money.h"

typedef struct invoice_sub {
    const char *name;
    const char *usage;
    const char *help; /* what it does and its options, several lines */
    int (*run)(cli_ctx *ctx, int argc, char **argv);
} invoice_sub;

static int sub_run(cli_ctx *ctx, int argc, char **argv);
static int sub_show(cli_ctx *ctx, int argc, char **argv);
static int sub_void(cli_ctx *ctx, int argc, char **argv);
static int sub_list(cli_ctx *ctx, int argc, char **argv);

static const invoice_sub subs[] = {
    {"run", "--period YYYY-MM [--finalize] [--out DIR] [--account A]",
     "Rates the period (a calendar month in each account's time zone) for every account\n"
     "with usage, commitments, credits or pending adjustments, and prints one line per\n"
     "invoice: account, invoice id, subtotal, credits, amount due.\n\n"
     "  --period YYYY-MM  the billing period\n"
     "  --finalize        number, hash, sign and post the invoices (needs the key);\n"
     "                    a period already finalized is left as it is\n"
     "  --out DIR         write DIR/<account>-<period>.{json,csv,html}\n"
     "  --account A       only this account\n",
     sub_run},
    {"show", "ID [--format json|csv|html]",
     "Prints an invoice or credit note (INV-YYYY-NNNNNN, CN-YYYY-NNNNNN) or the last draft\n"
     "(draft:ACCOUNT:YYYY-MM). The JSON of a finalized document is printed byte for byte\n"
     "as it was hashed and signed.\n",
     sub_show},
    {"void", "ID --reason TEXT",
     "Voids a finalized invoice through a numbered credit note that reverses its postings\n"
     "and restores the credits it used; prints the credit note id.\n",
     sub_void},
    {"list", "ACCOUNT", "Prints the account's finalized invoices and credit notes as JSON.\n",
     sub_list},
};
#define N_SUBS (sizeof subs / sizeof *subs)

static const invoice_sub *current;

static bool sub_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: tally invoice %s %s\n\n%s", current->name, current->usage,
                   current->help);
            return true;
        }
    return false;
}

static int sub_usage(const cli_ctx *ctx)
{
    fprintf(stderr, "usage: tally invoice %s %s\n", current->name, current->usage);
    return CLI_USAGE;
}

/* ---- run: summary lines and the progress bar --------------------------------- */

typedef struct run_view {
    bool tty;
    bool drawn;
    int64_t started_ms, drawn_ms;
    size_t count, finalized, already;
} run_view;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void clear_bar(run_view *v)
{
    if (v->drawn)
        fputs("\r\033[K", stderr);
    v->drawn = false;
}

static void on_invoice(void *ctx, const tally_invoice_summary *s)
{
    run_view *v = ctx;
    char sub[48], cr[48], due[48], issued[96] = "";
    if (tally_amount_format(s->subtotal_minor, s->minor_digits, sub, sizeof sub) ||
        tally_amount_format(s->credits_minor, s->minor_digits, cr, sizeof cr) ||
        tally_amount_format(s->amount_due_minor, s->minor_digits, due, sizeof due))
        snprintf(sub, sizeof sub, "?");
    if (s->credit_issued_minor > 0) {
        char amt[48];
        if (tally_amount_format(s->credit_issued_minor, s->minor_digits, amt, sizeof amt))
            snprintf(amt, sizeof amt, "?");
        snprintf(issued, sizeof issued, "  (adjustment credit %s issued)", amt);
    }
    clear_bar(v);
    printf("%-16s %-18s subtotal %10s  credits %10s  due %10s %s%s%s\n", s->account, s->invoice_id,
           sub, cr, due, s->currency, s->already_finalized ? "  (already finalized)" : "", issued);
    v->count++;
    v->finalized += s->finalized && !s->already_finalized;
    v->already += s->already_finalized;
}

/* accounts done/total, a bar, the rate and the time left; integers only. */
static void on_progress(void *ctx, size_t done, size_t total)
{
    run_view *v = ctx;
    int64_t t = now_ms();
    if (!v->tty || (done < total && t - v->drawn_ms < 100))
        return;
    v->drawn_ms = t;
    int64_t ms = t - v->started_ms > 0 ? t - v->started_ms : 1;
    int64_t rate = (int64_t)done * 1000 / ms;
    int64_t eta = done ? (int64_t)(total - done) * ms / (int64_t)done / 1000 : 0;
    char bar[31];
    size_t fill = total ? done * 30 / total : 30;
    for (size_t i = 0; i < 30; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[30] = '\0';
    fprintf(stderr, "\r\033[K[%s] %zu/%zu accounts  %lld/s  ETA %lld:%02lld", bar, done, total,
            (long long)rate, (long long)(eta / 60), (long long)(eta % 60));
    fflush(stderr);
    v->drawn = true;
}

static int sub_run(cli_ctx *ctx, int argc, char **argv)
{
    const char *period = NULL, *out = NULL, *account = NULL;
    bool finalize = false;
    const cli_opt opts[] = {{"period", &period, NULL},
                            {"out", &out, NULL},
                            {"account", &account, NULL},
                            {"finalize", NULL, &finalize},
                            {0}};
    int npos = 0;
    int rc = cli_parse(ctx, argc, argv, opts, NULL, 0, &npos);
    if (rc)
        return rc;
    if (!period)
        return sub_usage(ctx);
    int64_t s, e_s;
    if (tally_period_bounds(period, "UTC", &s, &e_s) != TALLY_OK)
        return cli_error(ctx, CLI_USAGE, "bad period '%s': expected YYYY-MM", period);
    tally_ledger *l = NULL;
    if ((rc = cli_open_ledger(ctx, &l)))
        return rc;
    run_view v = {.tty = isatty(STDERR_FILENO) == 1, .started_ms = now_ms()};
    tally_invoice_run_opts o = {.period = period,
                                .finalize = finalize,
                                .out_dir = out,
                                .account = account,
                                .key_path = ctx->key_path,
                                .on_invoice = on_invoice,
                                .on_progress = on_progress,
                                .ctx = &v};
    char why[512] = "";
    tally_err e = tally_invoice_run(l, &o, why, sizeof why);
    clear_bar(&v);
    if (e)
        rc = cli_error_for(ctx, e, "%s", why[0] ? why : tally_err_str(e));
    else if (v.count == 0)
        fprintf(stderr, "tally invoice: nothing to invoice for %s\n", period);
    tally_ledger_close(l);
    return rc;
}

/* ---- show, void, list ---------------------------------------------------------- */

/* Bad input (an unknown id, format or account, voiding twice) exits 2, the
 * rest 1 (cli_exit_code). */
static int lib_error(const cli_ctx *ctx, tally_ledger *l, tally_err e, const char *id)
{
    switch (e) {
    case TALLY_NOT_FOUND:
        return cli_error_for(ctx, e, "no invoice, credit note or draft '%s'", id);
    case TALLY_INVAL:
        return cli_error_for(ctx, e, "invalid request for '%s'", id);
    case TALLY_FINALIZED: /* the ledger says why when it is not the usual reason */
        if (l && tally_ledger_errmsg(l)[0])
            return cli_error_for(ctx, e, "%s", tally_ledger_errmsg(l));
        return cli_error_for(ctx, e, "%s is already void or is a credit note", id);
    case TALLY_CRYPTO:
        return cli_error_for(ctx, e, "signing key %s is missing or unusable", ctx->key_path);
    default:
        return cli_error_for(ctx, e, "%s: %s", tally_err_str(e), tally_ledger_errmsg(l));
    }
}

static int sub_show(cli_ctx *ctx, int argc, char **argv)
{
    const char *format = "json";
    const cli_opt opts[] = {{"format", &format, NULL}, {0}};
    char *pos[1];
    int npos = 0;
    int rc = cli_parse(ctx, argc, argv, opts, pos, 1, &npos);
    if (rc)
        return rc;
    if (npos != 1)
        return sub_usage(ctx);
    tally_doc_format f;
    if (tally_doc_format_from_name(format, &f) != TALLY_OK)
        return cli_error(ctx, CLI_USAGE, "unknown format '%s' (json, csv or html)", format);
    tally_ledger *l = NULL;
    if ((rc = cli_open_ledger(ctx, &l)))
        return rc;
    tally_buf out;
    tally_buf_init(&out, 0);
    tally_err e = tally_invoice_show(l, pos[0], f, &out);
    if (e)
        rc = lib_error(ctx, l, e, pos[0]);
    else if (out.len && fwrite(out.data, 1, out.len, stdout) != out.len)
        rc = cli_error(ctx, CLI_FAIL, "cannot write to stdout");
    tally_buf_release(&out);
    tally_ledger_close(l);
    return rc;
}

static int sub_void(cli_ctx *ctx, int argc, char **argv)
{
    const char *reason = NULL;
    const cli_opt opts[] = {{"reason", &reason, NULL}, {0}};
    char *pos[1];
    int npos = 0;
    int rc = cli_parse(ctx, argc, argv, opts, pos, 1, &npos);
    if (rc)
        return rc;
    if (npos != 1 || !reason)
        return sub_usage(ctx);
    if (!*reason)
        return cli_error(ctx, CLI_USAGE, "--reason must not be empty");
    tally_ledger *l = NULL;
    if ((rc = cli_open_ledger(ctx, &l)))
        return rc;
    char cn[64];
    tally_err e = tally_invoice_void(l, pos[0], reason, ctx->key_path, cn, sizeof cn);
    if (e)
        rc = lib_error(ctx, l, e, pos[0]);
    else
        printf("%s\n", cn);
    tally_ledger_close(l);
    return rc;
}

static int sub_list(cli_ctx *ctx, int argc, char **argv)
{
    char *pos[1];
    int npos = 0;
    int rc = cli_parse(ctx, argc, argv, (const cli_opt[]){{0}}, pos, 1, &npos);
    if (rc)
        return rc;
    if (npos != 1)
        return sub_usage(ctx);
    tally_ledger *l = NULL;
    if ((rc = cli_open_ledger(ctx, &l)))
        return rc;
    tally_buf out;
    tally_buf_init(&out, 0);
    tally_err e = tally_invoice_list(l, pos[0], &out);
    if (e)
        rc = lib_error(ctx, l, e, pos[0]);
    else
        printf("%s\n", out.data);
    tally_buf_release(&out);
    tally_ledger_close(l);
    return rc;
}

int cmd_invoice(cli_ctx *ctx, int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        cli_usage(ctx, argc < 2);
        if (argc >= 2) {
            printf("\nSubcommands ('tally invoice SUBCOMMAND --help' for details):\n");
            for (size_t i = 0; i < N_SUBS; i++)
                printf("  tally invoice %s %s\n", subs[i].name, subs[i].usage);
        }
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    for (size_t i = 0; i < N_SUBS; i++)
        if (strcmp(argv[1], subs[i].name) == 0) {
            current = &subs[i];
            if (sub_help(argc - 1, argv + 1))
                return CLI_OK;
            return subs[i].run(ctx, argc - 1, argv + 1);
        }
    cli_usage(ctx, true);
    return cli_error(ctx, CLI_USAGE, "unknown subcommand '%s' (run, show, void, list)", argv[1]);
}
