/* The prepaid part of `tally demo` (demo_balance.h): the balance of
 * lotus-startup at the demo's moments, its March draft around the top-up,
 * and its balance events as a Kafka consumer reads them. */
#include "demo_balance.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "demo_stream.h"
#include "tally/money.h"
#include "tally/outbox.h"
#include "tally/publish.h"

static int open_demo_ledger(cli_ctx *ctx, const char *db, tally_ledger **l)
{
    cli_ctx sub = {.db_path = db, .cmd = ctx->cmd};
    return cli_create_ledger(&sub, l);
}

int demo_balance_read(cli_ctx *ctx, const char *db, demo_balance_point *out)
{
    tally_ledger *l = NULL;
    int rc = open_demo_ledger(ctx, db, &l);
    if (rc)
        return rc;
    tally_balance b;
    tally_err e = tally_balance_get(l, DEMO_PREPAID_ACCOUNT, &b);
    tally_ledger_close(l);
    if (e)
        return cli_error_for(ctx, e, "the balance of %s: %s", DEMO_PREPAID_ACCOUNT,
                             tally_err_str(e));
    *out = (demo_balance_point){.known = true,
                                .balance_minor = b.balance_minor,
                                .running_minor = b.running_minor,
                                .credits_minor = b.credits_minor,
                                .minor_digits = b.minor_digits,
                                .state = b.state};
    return CLI_OK;
}

static const char *money(int64_t minor, int digits, char *buf, size_t cap)
{
    return tally_amount_format(minor, digits, buf, cap) == TALLY_OK ? buf : "?";
}

void demo_balance_print(const char *label, const demo_balance_point *p, bool details)
{
    char bal[48], run[48], cred[48];
    if (!p->known) {
        printf("%s unknown", label);
        return;
    }
    printf("%s %s (%s)", label, money(p->balance_minor, p->minor_digits, bal, sizeof bal),
           tally_balance_state_name(p->state));
    if (details)
        printf(", running charges %s, credits available %s",
               money(p->running_minor, p->minor_digits, run, sizeof run),
               money(p->credits_minor, p->minor_digits, cred, sizeof cred));
}

static bool is_balance_type(const char *type)
{
    static const char *const types[] = {
        TALLY_EVENT_BALANCE_LOW,     TALLY_EVENT_BALANCE_EXHAUSTED, TALLY_EVENT_BALANCE_RECOVERED,
        TALLY_EVENT_ACCOUNT_SUSPEND, TALLY_EVENT_ACCOUNT_RESUME,    TALLY_EVENT_VOLUME_RELEASE,
    };
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (strcmp(type, types[i]) == 0)
            return true;
    return false;
}

static tally_err count_event(void *ctx, const tally_outbox_event *ev)
{
    if (strcmp(ev->subject, DEMO_PREPAID_ACCOUNT) == 0 && is_balance_type(ev->type))
        (*(int *)ctx)++;
    return TALLY_OK;
}

int demo_balance_outbox_count(cli_ctx *ctx, const char *db, int *n)
{
    tally_ledger *l = NULL;
    int rc = open_demo_ledger(ctx, db, &l);
    if (rc)
        return rc;
    *n = 0;
    tally_err e = tally_outbox_list(l, count_event, n);
    tally_ledger_close(l);
    return e ? cli_error_for(ctx, e, "reading the outbox: %s", tally_err_str(e)) : CLI_OK;
}

static void keep_summary(void *ctx, const tally_invoice_summary *s)
{
    *(tally_invoice_summary *)ctx = *s;
}

int demo_balance_draft(cli_ctx *ctx, const char *db, tally_invoice_summary *out)
{
    tally_ledger *l = NULL;
    int rc = open_demo_ledger(ctx, db, &l);
    if (rc)
        return rc;
    memset(out, 0, sizeof *out);
    char why[256] = "";
    tally_invoice_run_opts o = {.period = DEMO_PERIOD,
                                .account = DEMO_PREPAID_ACCOUNT,
                                .on_invoice = keep_summary,
                                .ctx = out};
    tally_err e = tally_invoice_run(l, &o, why, sizeof why);
    tally_ledger_close(l);
    if (e)
        return cli_error_for(ctx, e, "the %s draft of %s: %s", DEMO_PERIOD, DEMO_PREPAID_ACCOUNT,
                             why[0] ? why : tally_err_str(e));
    return CLI_OK;
}

void demo_balance_draft_change(const tally_invoice_summary *b, const tally_invoice_summary *a)
{
    char sub[48], cred[48], due[48], cred2[48], due2[48], paid[48];
    int d = b->minor_digits;
    printf("   its %s draft before the top-up: subtotal %s, credits %s, due %s; ", DEMO_PERIOD,
           money(b->subtotal_minor, d, sub, sizeof sub),
           money(b->credits_minor, d, cred, sizeof cred),
           money(b->amount_due_minor, d, due, sizeof due));
    if (a->credits_minor == b->credits_minor && a->amount_due_minor == b->amount_due_minor) {
        printf("after it, the same:\n   the top-up is in force from now, after that usage, so it "
               "pays nothing of the %s invoice\n",
               DEMO_PERIOD);
        return;
    }
    printf("after it: credits %s, due %s:\n   the top-up pays %s of the %s draft\n",
           money(a->credits_minor, d, cred2, sizeof cred2),
           money(a->amount_due_minor, d, due2, sizeof due2),
           money(a->credits_minor - b->credits_minor, d, paid, sizeof paid), DEMO_PERIOD);
}

static const char *str_at(json_object *o, const char *key)
{
    json_object *v = NULL;
    return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string)
               ? json_object_get_string(v)
               : "";
}

/* The instances an account.suspend asks to stop, "a (sku), b (sku)". */
static void print_instances(json_object *data)
{
    json_object *list = NULL;
    if (!json_object_object_get_ex(data, "instances", &list) ||
        !json_object_is_type(list, json_type_array))
        return;
    size_t n = json_object_array_length(list);
    printf("  stop:");
    for (size_t i = 0; i < n; i++) {
        json_object *it = json_object_array_get_idx(list, i);
        printf("%s %s (%s)", i ? "," : "", str_at(it, "instance"), str_at(it, "sku"));
    }
    if (n == 0)
        printf(" none reported in the last 10 minutes");
}

/* One kcat line "key\tCloudEvent": printed when it is one of the account's
 * balance events. */
static void print_event(char *line, int *n)
{
    char *tab = strchr(line, '\t');
    if (!tab)
        return;
    *tab = '\0';
    if (strcmp(line, DEMO_PREPAID_ACCOUNT) != 0)
        return;
    json_object *ev = json_tokener_parse(tab + 1), *data = NULL;
    if (!ev)
        return;
    const char *type = str_at(ev, "type");
    if (is_balance_type(type) && json_object_object_get_ex(ev, "data", &data)) {
        char state[40];
        snprintf(state, sizeof state, "%s -> %s", str_at(data, "previous_state"),
                 str_at(data, "state"));
        printf("    %d. %-36s %-17s balance %7s  cause %s", ++*n, str_at(ev, "id"), state,
               str_at(data, "balance"), str_at(data, "cause"));
        if (strcmp(type, TALLY_EVENT_ACCOUNT_SUSPEND) == 0)
            print_instances(data);
        printf("\n");
    }
    json_object_put(ev);
}

void demo_balance_events(const char *bootstrap, const demo_balance_point *before_stream,
                         const demo_balance_point *after_stream,
                         const demo_balance_point *after_topup)
{
    char cmd[1024];
    printf("\n  %s's balance events, as a consumer of topic %s reads them (kcat), in order:\n",
           DEMO_PREPAID_ACCOUNT, TALLY_PUBLISH_TOPIC);
    demo_balance_print("    balance before the stream", before_stream, false);
    demo_balance_print(", after it", after_stream, false);
    demo_balance_print(", after the top-up", after_topup, false);
    printf("\n");
    snprintf(cmd, sizeof cmd,
             "kcat -C -b '%s' -t %s -o beginning -e -q -f '%%k\\t%%s\\n' 2>/dev/null", bootstrap,
             TALLY_PUBLISH_TOPIC);
    fflush(stdout);
    FILE *f = popen(cmd, "r");
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int n = 0;
    while (f && (len = getline(&line, &cap, f)) > 0) {
        if (line[len - 1] == '\n')
            line[len - 1] = '\0';
        print_event(line, &n);
    }
    free(line);
    int st = f ? pclose(f) : -1;
    if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 127)
        printf("    (kcat is not installed; run scripts/deps)\n");
    else if (st != 0)
        printf("    (kcat failed: status %d)\n", st);
    else if (n == 0)
        printf("    (kcat read no balance events of %s)\n", DEMO_PREPAID_ACCOUNT);
}
