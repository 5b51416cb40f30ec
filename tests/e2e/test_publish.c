/* End-to-end tests of `tally publish`: the real binary, the embedded broker
 * (`tally broker`) in its own process, and kcat as the downstream consumer.
 *
 *   - every finalized invoice, credit note and void is announced once, in
 *     outbox order, keyed by account, and the announced "data" is byte for
 *     byte `tally invoice show ID --format json`;
 *   - SIGKILL at many points of a 200-invoice drain, then a restart: every
 *     event arrives, and an id that arrives twice carries identical bytes;
 *   - with the broker down, or not yet listening, events stay pending and go
 *     out once it is back;
 *   - SIGTERM waits for what is in flight and exits 0. */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"
#include "testutil.h"
#include "tally/outbox.h"
#include "tally/publish.h"

#define DATA_MARK ",\"datacontenttype\":\"application/json\",\"data\":"

static char dir[512], db[600], key[600], logpath[600];

/* ---- Child processes, always reaped (tests/util/proc.h) ----------------------------- */

#define now_ms    tu_ms
#define sleep_ms  tu_sleep_ms
#define wait_pid  tu_wait
#define stop_pid  tu_stop
#define teardown  tu_proc_teardown
#define read_line tu_read_line

/* Starts argv with stdout and stderr appended to logpath; with in_fd/out_fd,
 * pipes to its stdin and from its stdout. */
static pid_t spawn(const char *const *argv, int *in_fd, int *out_fd)
{
    return tu_spawn(argv, logpath, in_fd, out_fd);
}

/* ---- The broker -------------------------------------------------------------------- */

typedef struct broker {
    pid_t pid;
    int in, out;
    char addr[512];
} broker;

/* `tally broker --brokers 1` (one broker: "down 1" takes the cluster down),
 * optionally also on a fixed port. */
static void broker_start(broker *b, const char *port)
{
    const char *argv[] = {TALLY_BINARY,           "broker", "--brokers", "1",
                          port ? "--port" : NULL, port,     NULL};
    b->pid = spawn(argv, &b->in, &b->out);
    if (!read_line(b->out, b->addr, sizeof b->addr, 20000))
        fail_msg("tally broker printed no address (see %s)", logpath);
}

static void broker_cmd(broker *b, const char *cmd)
{
    char line[256], answer[256];
    int n = snprintf(line, sizeof line, "%s\n", cmd);
    assert_int_equal(write(b->in, line, (size_t)n), n);
    if (!read_line(b->out, answer, sizeof answer, 10000) || strcmp(answer, "ok") != 0)
        fail_msg("broker command '%s': %s", cmd, answer);
}

static void broker_stop(broker *b)
{
    close(b->in);
    close(b->out);
    assert_int_equal(stop_pid(b->pid, SIGTERM, 10000), 0);
}

/* ---- The ledger ------------------------------------------------------------------- */

static void fresh(const char *tag)
{
    snprintf(dir, sizeof dir, "%s", tu_tmpdir(tag));
    snprintf(db, sizeof db, "%s/tally.db", dir);
    snprintf(key, sizeof key, "%s/tally.key", dir);
    snprintf(logpath, sizeof logpath, "%s/children.log", dir);
}

static void outbox_counts(int64_t *pending, int64_t *sent)
{
    tally_ledger *l = NULL;
    char why[256];
    if (tally_ledger_open(db, &l, why, sizeof why) != TALLY_OK)
        fail_msg("open %s: %s", db, why);
    assert_int_equal(tally_outbox_counts(l, pending, sent), TALLY_OK);
    tally_ledger_close(l);
}

/* n accounts acct-001.. with an hour of h100 each in March 2026, finalized. */
static void make_invoices(int n)
{
    char path[700];
    snprintf(path, sizeof path, "%s/usage.ndjson", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 1; i <= n; i++)
        fprintf(f,
                "{\"specversion\":\"1.0\",\"id\":\"u%d\",\"source\":\"host-1\","
                "\"type\":\"accelerator.usage\",\"subject\":\"acct-%03d\","
                "\"time\":\"2026-03-%02dT10:00:00Z\",\"data\":{\"instance\":\"i-%d\","
                "\"sku\":\"h100\",\"pricing\":\"on_demand\",\"cards\":%d,\"seconds\":3600}}\n",
                i, i, 1 + i % 28, i, 1 + i % 4);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(tu_tally(NULL, "--db '%s' init >/dev/null", db), 0);
    assert_int_equal(tu_tally(NULL, "--db '%s' --key '%s' keygen >/dev/null", db, key), 0);
    assert_int_equal(tu_tally(NULL, "--db '%s' ingest '%s' >/dev/null", db, path), 0);
    assert_int_equal(tu_tally(NULL,
                              "--db '%s' --key '%s' invoice run --period 2026-03 --finalize "
                              ">/dev/null",
                              db, key),
                     0);
    int64_t pending = 0, sent = 0;
    outbox_counts(&pending, &sent);
    if (pending != n || sent != 0)
        fail_msg("finalizing %d invoices left %lld pending and %lld sent outbox events "
                 "(ledger/invoice_run.c must call ledger_outbox_invoice_finalized in the "
                 "finalizing transaction)",
                 n, (long long)pending, (long long)sent);
}

/* ---- What consumers see ------------------------------------------------------------ */

typedef struct msg {
    const char *key, *payload, *id;
    size_t len;
} msg;

typedef struct msgs {
    tally_buf raw, ids;
    msg *m;
    size_t n;
} msgs;

static void msgs_release(msgs *s)
{
    tally_buf_release(&s->raw);
    tally_buf_release(&s->ids);
    free(s->m);
    memset(s, 0, sizeof *s);
}

/* One kcat line "key\tpayload": checks the envelope and records the id. */
static void parse_msg(msgs *s, char *line, size_t *id_offsets)
{
    char *tab = strchr(line, '\t');
    if (!tab)
        fail_msg("kcat line without a key: %s", line);
    *tab = '\0';
    msg *m = &s->m[s->n];
    m->key = line;
    m->payload = tab + 1;
    m->len = strlen(m->payload);
    json_object *root = json_tokener_parse(m->payload), *v;
    if (!root)
        fail_msg("payload is not JSON: %s", m->payload);
    const char *want[][2] = {{"specversion", "1.0"},
                             {"source", "tally"},
                             {"datacontenttype", "application/json"},
                             {"subject", m->key}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        assert_true(json_object_object_get_ex(root, want[i][0], &v));
        assert_string_equal(json_object_get_string(v), want[i][1]);
    }
    assert_true(json_object_object_get_ex(root, "id", &v));
    id_offsets[s->n] = s->ids.len;
    assert_int_equal(
        tally_buf_append(&s->ids, json_object_get_string(v), strlen(json_object_get_string(v)) + 1),
        TALLY_OK);
    json_object_put(root);
    s->n++;
}

/* Everything on the invoices topic, in partition order. */
static void consume(const char *addr, msgs *s)
{
    memset(s, 0, sizeof *s);
    tally_buf_init(&s->raw, 0);
    tally_buf_init(&s->ids, 0);
    int rc = tu_sh(&s->raw, "kcat -C -b '%s' -t invoices -e -q -f '%%k\\t%%s\\n' 2>>'%s'", addr,
                   logpath);
    assert_int_equal(rc, 0);
    size_t lines = 0;
    for (size_t i = 0; i < s->raw.len; i++)
        lines += s->raw.data[i] == '\n';
    s->m = calloc(lines + 1, sizeof *s->m);
    size_t *offsets = calloc(lines + 1, sizeof *offsets);
    assert_true(s->m && offsets);
    for (char *line = s->raw.data, *nl; line && (nl = strchr(line, '\n')); line = nl + 1) {
        *nl = '\0';
        parse_msg(s, line, offsets);
    }
    for (size_t i = 0; i < s->n; i++)
        s->m[i].id = s->ids.data + offsets[i];
    free(offsets);
}

static int by_id(const void *a, const void *b)
{
    return strcmp(((const msg *)a)->id, ((const msg *)b)->id);
}

/* Asserts that every id carries one content; returns the distinct ids and
 * (in *repeats) the messages that repeated an id. */
static size_t distinct_ids(const msgs *s, size_t *repeats)
{
    msg *sorted = calloc(s->n + 1, sizeof *sorted);
    assert_non_null(sorted);
    memcpy(sorted, s->m, s->n * sizeof *sorted);
    qsort(sorted, s->n, sizeof *sorted, by_id);
    size_t distinct = 0;
    *repeats = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (i > 0 && strcmp(sorted[i].id, sorted[i - 1].id) == 0) {
            (*repeats)++;
            if (sorted[i].len != sorted[i - 1].len ||
                memcmp(sorted[i].payload, sorted[i - 1].payload, sorted[i].len) != 0)
                fail_msg("id %s announced with different content", sorted[i].id);
            continue;
        }
        distinct++;
    }
    free(sorted);
    return distinct;
}

/* Reads the whole invoices topic: exactly n events, each id once. */
static void assert_announced_once(const char *addr, size_t n)
{
    msgs s;
    consume(addr, &s);
    size_t repeats;
    assert_int_equal(distinct_ids(&s, &repeats), n);
    assert_int_equal(repeats, 0);
    msgs_release(&s);
}

static const msg *find(const msgs *s, const char *id)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->m[i].id, id) == 0)
            return &s->m[i];
    fail_msg("event %s was not announced", id);
    return NULL;
}

/* The bytes of "data" inside a payload. */
static void data_of(const msg *m, const char **data, size_t *len)
{
    const char *p = strstr(m->payload, DATA_MARK);
    assert_non_null(p);
    assert_int_equal(m->payload[m->len - 1], '}');
    *data = p + strlen(DATA_MARK);
    *len = (size_t)(m->payload + m->len - 1 - *data);
}

/* The data of event_id is `tally invoice show doc_id --format json`. */
static void assert_data_is_show(const msgs *s, const char *event_id, const char *doc_id)
{
    tally_buf show;
    tally_buf_init(&show, 0);
    assert_int_equal(tu_tally(&show, "--db '%s' invoice show '%s' --format json", db, doc_id), 0);
    while (show.len && show.data[show.len - 1] == '\n')
        show.len--;
    const char *data;
    size_t len;
    data_of(find(s, event_id), &data, &len);
    if (len != show.len || memcmp(data, show.data, len) != 0)
        fail_msg("data of %s differs from 'invoice show %s'", event_id, doc_id);
    tally_buf_release(&show);
}

static int run_publish(tally_buf *out, const char *brokers, const char *extra)
{
    return tu_tally(out, "--db '%s' publish --brokers '%s' %s 2>>'%s'", db, brokers, extra,
                    logpath);
}

/* ---- Tests --------------------------------------------------------------------------- */

static void test_each_event_once_and_verbatim(void **state)
{
    (void)state;
    fresh("publish-once");
    make_invoices(20);
    assert_int_equal(tu_tally(NULL,
                              "--db '%s' --key '%s' invoice void INV-2026-000003 --reason "
                              "'billed twice' >/dev/null",
                              db, key),
                     0);
    broker b;
    broker_start(&b, NULL);
    tally_buf out;
    tally_buf_init(&out, 0);
    assert_int_equal(run_publish(&out, b.addr, "--until-idle 1"), 0);
    assert_non_null(strstr(out.data, "published=22 pending=0"));

    msgs s;
    consume(b.addr, &s);
    size_t repeats;
    assert_int_equal(s.n, 22);
    assert_int_equal(distinct_ids(&s, &repeats), 22);
    assert_int_equal(repeats, 0);
    char event[64], doc[32];
    for (int i = 1; i <= 20; i++) {
        snprintf(doc, sizeof doc, "INV-2026-%06d", i);
        snprintf(event, sizeof event, "invoice.finalized:%s", doc);
        assert_data_is_show(&s, event, doc);
        /* Outbox order: the invoices in the order they were finalized. */
        assert_string_equal(s.m[i - 1].id, event);
    }
    assert_string_equal(s.m[20].id, "creditnote.issued:CN-2026-000001");
    assert_string_equal(s.m[21].id, "invoice.voided:INV-2026-000003");
    assert_data_is_show(&s, "creditnote.issued:CN-2026-000001", "CN-2026-000001");
    assert_string_equal(s.m[21].key, find(&s, "invoice.finalized:INV-2026-000003")->key);

    /* invoice.voided names both documents and carries the credit note verbatim. */
    const char *data;
    size_t len;
    data_of(&s.m[21], &data, &len);
    const char *cn_data;
    size_t cn_len;
    data_of(&s.m[20], &cn_data, &cn_len);
    assert_true(len > cn_len + 16);
    assert_memory_equal(data + len - 1 - cn_len, cn_data, cn_len);
    assert_non_null(strstr(data, "{\"invoice_id\":\"INV-2026-000003\","
                                 "\"credit_note_id\":\"CN-2026-000001\",\"account\":\"acct-003\""));

    /* Nothing is pending: a second run announces nothing. */
    tally_buf_reset(&out);
    assert_int_equal(run_publish(&out, b.addr, "--until-idle 1"), 0);
    assert_non_null(strstr(out.data, "published=0 pending=0"));
    msgs again;
    consume(b.addr, &again);
    assert_int_equal(again.n, 22);
    msgs_release(&again);
    msgs_release(&s);
    tally_buf_release(&out);
    broker_stop(&b);
    tu_assert_conservation_path(db);
}

/* Starts `tally publish` and SIGKILLs it as soon as some events are stamped
 * sent and others are still pending; returns whether that state was seen. */
static bool kill_mid_drain(const char *const *argv)
{
    tally_ledger *l = NULL;
    char why[256];
    if (tally_ledger_open(db, &l, why, sizeof why) != TALLY_OK)
        fail_msg("open %s: %s", db, why);
    int64_t pending = 1, sent = 0, before = 0;
    assert_int_equal(tally_outbox_counts(l, NULL, &before), TALLY_OK);
    pid_t pid = spawn(argv, NULL, NULL);
    for (int64_t until = now_ms() + 30000; now_ms() < until; sleep_ms(5)) {
        assert_int_equal(tally_outbox_counts(l, &pending, &sent), TALLY_OK);
        if (sent > before || pending == 0)
            break;
    }
    assert_int_equal(stop_pid(pid, SIGKILL, 100), 128 + SIGKILL);
    tally_ledger_close(l);
    return sent > before && pending > 0;
}

static void test_kill9_mid_drain(void **state)
{
    (void)state;
    fresh("publish-kill");
    make_invoices(200);
    broker b;
    broker_start(&b, NULL);
    /* Slow acknowledgements, so that kills land while connecting, while
     * batches are in flight (stored by the broker, not yet acknowledged) and
     * between two stamps: the window (128 events) splits 200 into two. */
    broker_cmd(&b, "rtt 1 120");
    const char *argv[] = {TALLY_BINARY, "--db", db, "publish", "--brokers", b.addr, NULL};
    int64_t pending = 0, sent = 0;
    for (int64_t delay = 100; delay <= 450; delay += 70) {
        pid_t pid = spawn(argv, NULL, NULL);
        sleep_ms(delay);
        assert_int_equal(stop_pid(pid, SIGKILL, 100), 128 + SIGKILL);
    }
    outbox_counts(&pending, &sent);
    bool mid = pending > 0 && sent > 0;
    if (pending == 200)
        mid = kill_mid_drain(argv);
    broker_cmd(&b, "rtt 1 0");
    assert_int_equal(run_publish(NULL, b.addr, "--until-idle 1"), 0);
    outbox_counts(&pending, &sent);
    assert_int_equal(pending, 0);
    assert_int_equal(sent, 200);

    msgs s;
    consume(b.addr, &s);
    size_t repeats;
    assert_int_equal(distinct_ids(&s, &repeats), 200);
    print_message("%zu messages for 200 events: %zu byte-identical repeats\n", s.n, repeats);
    assert_true(mid);
    assert_data_is_show(&s, "invoice.finalized:INV-2026-000137", "INV-2026-000137");
    msgs_release(&s);
    broker_stop(&b);
}

static void test_broker_down_then_up(void **state)
{
    (void)state;
    fresh("publish-down");
    make_invoices(5);
    broker b;
    broker_start(&b, NULL);
    broker_cmd(&b, "down 1");
    const char *argv[] = {
        TALLY_BINARY,           "--db", db,  "publish", "--brokers", b.addr, "--until-idle", "1",
        "--message-timeout-ms", "1000", NULL};
    pid_t pid = spawn(argv, NULL, NULL);
    sleep_ms(3500); /* several attempts time out meanwhile */
    assert_int_equal(wait_pid(pid, 0), -1);
    int64_t pending = 0, sent = 0;
    outbox_counts(&pending, &sent);
    assert_int_equal(pending, 5);
    assert_int_equal(sent, 0);
    broker_cmd(&b, "up 1");
    assert_int_equal(wait_pid(pid, 60000), 0);
    outbox_counts(&pending, &sent);
    assert_int_equal(pending, 0);
    assert_int_equal(sent, 5);
    assert_announced_once(b.addr, 5);
    broker_stop(&b);
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof a;
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &n), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static void test_broker_not_listening_yet(void **state)
{
    (void)state;
    fresh("publish-late");
    make_invoices(5);
    char port[16], addr[64];
    snprintf(port, sizeof port, "%d", free_port());
    snprintf(addr, sizeof addr, "127.0.0.1:%s", port);
    const char *argv[] = {
        TALLY_BINARY,           "--db", db,  "publish", "--brokers", addr, "--until-idle", "1",
        "--message-timeout-ms", "1000", NULL};
    pid_t pid = spawn(argv, NULL, NULL);
    sleep_ms(2500);
    assert_int_equal(wait_pid(pid, 0), -1);
    int64_t pending = 0, sent = 0;
    outbox_counts(&pending, &sent);
    assert_int_equal(pending, 5);
    broker b;
    broker_start(&b, port);
    assert_int_equal(wait_pid(pid, 60000), 0);
    outbox_counts(&pending, &sent);
    assert_int_equal(pending, 0);
    assert_announced_once(b.addr, 5);
    broker_stop(&b);
}

static void test_sigterm(void **state)
{
    (void)state;
    fresh("publish-term");
    make_invoices(5);
    broker b;
    broker_start(&b, NULL);
    broker_cmd(&b, "down 1");
    const char *slow[] = {TALLY_BINARY,           "--db", db,  "publish", "--brokers", b.addr,
                          "--message-timeout-ms", "3000", NULL};
    pid_t pid = spawn(slow, NULL, NULL);
    sleep_ms(1000);
    /* In flight towards a broker that is down: waits, then exits 0 with the
     * events still pending. */
    assert_int_equal(stop_pid(pid, SIGTERM, 15000), 0);
    int64_t pending = 0, sent = 0;
    outbox_counts(&pending, &sent);
    assert_int_equal(pending, 5);

    broker_cmd(&b, "up 1");
    const char *argv[] = {TALLY_BINARY, "--db", db, "publish", "--brokers", b.addr, NULL};
    pid = spawn(argv, NULL, NULL);
    for (int64_t until = now_ms() + 30000; pending > 0 && now_ms() < until; sleep_ms(100))
        outbox_counts(&pending, &sent);
    assert_int_equal(pending, 0);
    /* One publisher per ledger. */
    tally_buf err;
    tally_buf_init(&err, 0);
    assert_int_equal(
        tu_tally(&err, "--db '%s' publish --brokers '%s' --until-idle 1 2>&1", db, b.addr), 1);
    assert_non_null(strstr(err.data, "another tally publish is running"));
    tally_buf_release(&err);
    assert_int_equal(stop_pid(pid, SIGTERM, 10000), 0);
    tally_buf log;
    tally_buf_init(&log, 0);
    assert_int_equal(tu_read_file(logpath, &log), 0);
    assert_non_null(strstr(log.data, "published=5 pending=0"));
    tally_buf_release(&log);
    assert_announced_once(b.addr, 5);
    broker_stop(&b);
}

/* The library entry `tally demo` uses: drains what is pending, or gives up
 * at the timeout with the events still pending. */
static void test_drain(void **state)
{
    (void)state;
    fresh("publish-drain");
    make_invoices(3);
    tally_ledger *l = NULL;
    char why[256], addr[64];
    assert_int_equal(tally_ledger_open(db, &l, why, sizeof why), TALLY_OK);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
    size_t n = 99;
    assert_int_equal(tally_publish_drain(l, addr, NULL, 1500, &n), TALLY_KAFKA);
    assert_int_equal(n, 0);
    int64_t pending = 0;
    assert_int_equal(tally_outbox_counts(l, &pending, NULL), TALLY_OK);
    assert_int_equal(pending, 3);

    broker b;
    broker_start(&b, NULL);
    assert_int_equal(tally_publish_drain(l, b.addr, TALLY_PUBLISH_TOPIC, 30000, &n), TALLY_OK);
    assert_int_equal(n, 3);
    assert_int_equal(tally_publish_drain(l, b.addr, NULL, 30000, &n), TALLY_OK);
    assert_int_equal(n, 0);
    assert_int_equal(tally_publish_drain(l, b.addr, NULL, 0, &n), TALLY_INVAL);
    assert_int_equal(tally_publish_drain(l, b.addr, "bad topic", 1000, &n), TALLY_INVAL);
    tally_ledger_close(l);
    assert_announced_once(b.addr, 3);
    broker_stop(&b);
}

static void test_usage_errors(void **state)
{
    (void)state;
    fresh("publish-usage");
    /* a ledger that exists: what is refused is the options, not the path */
    assert_int_equal(tu_tally(NULL, "--db '%s' init >/dev/null", db), 0);
    const char *bad[] = {
        "",
        "--brokers ''",
        "--brokers 127.0.0.1:1 --topic ''",
        "--brokers 127.0.0.1:1 --topic 'no spaces'",
        "--brokers 127.0.0.1:1 --until-idle 0",
        "--brokers 127.0.0.1:1 --message-timeout-ms 5",
        "--brokers 127.0.0.1:1 extra",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = tu_tally(NULL, "--db '%s' publish %s 2>/dev/null", db, bad[i]);
        if (rc != 2)
            fail_msg("'publish %s' exited %d, not 2", bad[i], rc);
    }
    assert_int_equal(tu_tally(NULL, "publish --help >/dev/null"), 0);
}

/* With the signing key, `tally publish` announces the ledger chain's signed
 * head as a ledger.head event (SPEC section 5), once per move of the head:
 * the copy outside the database verifies with `tally verify --head`. */
static void test_ledger_head_announced(void **state)
{
    (void)state;
    fresh("publish-head");
    make_invoices(3);
    broker b;
    broker_start(&b, NULL);
    tally_buf out;
    tally_buf_init(&out, 0);
    assert_int_equal(tu_tally(&out,
                              "--db '%s' --key '%s' publish --brokers '%s' --until-idle 1 "
                              "2>>'%s'",
                              db, key, b.addr, logpath),
                     0);
    assert_non_null(strstr(out.data, "published=4 pending=0"));
    msgs s;
    consume(b.addr, &s);
    assert_int_equal(s.n, 4);
    const msg *h = NULL;
    for (size_t i = 0; i < s.n; i++)
        if (strncmp(s.m[i].id, "ledger.head:", 12) == 0)
            h = &s.m[i];
    assert_non_null(h);
    assert_string_equal(h->key, "ledger");
    const char *data;
    size_t len;
    data_of(h, &data, &len);
    char path[700];
    snprintf(path, sizeof path, "%s/announced-head.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    tally_buf_reset(&out);
    assert_int_equal(tu_tally(&out, "--db '%s' --key '%s' verify --head '%s' 2>&1", db, key, path),
                     0);
    assert_non_null(strstr(out.data, "still holds"));
    /* the head moved only by its own announcement: nothing new to announce */
    tally_buf_reset(&out);
    assert_int_equal(tu_tally(&out,
                              "--db '%s' --key '%s' publish --brokers '%s' --until-idle 1 "
                              "2>>'%s'",
                              db, key, b.addr, logpath),
                     0);
    assert_non_null(strstr(out.data, "published=0 pending=0"));
    msgs_release(&s);
    tally_buf_release(&out);
    broker_stop(&b);
}

int main(void)
{
    setenv("TALLY_NOW", "2026-04-02T08:00:00Z", 1);
    unsetenv("TALLY_EVENT_SOURCE");
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_usage_errors, teardown),
        cmocka_unit_test_teardown(test_each_event_once_and_verbatim, teardown),
        cmocka_unit_test_teardown(test_ledger_head_announced, teardown),
        cmocka_unit_test_teardown(test_broker_down_then_up, teardown),
        cmocka_unit_test_teardown(test_broker_not_listening_yet, teardown),
        cmocka_unit_test_teardown(test_sigterm, teardown),
        cmocka_unit_test_teardown(test_drain, teardown),
        cmocka_unit_test_teardown(test_kill9_mid_drain, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
