/* End-to-end tests of the balance events (SPEC section 9) through the real
 * `tally` binary: the embedded broker (`tally broker`) in its own process,
 * `tally meter` consuming a stream that exhausts trial accounts, `tally
 * publish`, and kcat reading the invoices topic as a downstream system
 * would. kcat is required: without it these tests fail, they never skip.
 *
 *   - in order and by id: each trial account announces balance.low,
 *     balance.exhausted and account.suspend (the instance to stop) while the
 *     meter consumes, then balance.recovered and account.resume after an
 *     idempotent top-up (sent twice, stored once);
 *   - SIGKILL of the meter mid-stream (right after the low crossings
 *     committed, right after the first exhaustion committed, and at random
 *     moments), restarts, and producer retries of the crossing messages:
 *     the outbox holds each crossing exactly once, with the ids a clean
 *     `tally ingest` of the same events gives;
 *   - SIGKILL of `tally publish` mid-drain and restarts: every expected id
 *     is read back, an id that arrives twice carries identical bytes, and
 *     the first arrivals keep each account's order;
 *   - a meter over a ledger directory (usage in shards, balances in
 *     main.db): the same crossings, once each.
 *
 * Each account has a 10.00 trial (live at TALLY_NOW), a low mark of 3.00 and
 * the default stop mark 0.00, and uses one h100 on demand in 60-second
 * events: 0.043 each, so message 163 takes it below 3.00 (charges 7.01) and
 * message 233 to -0.02 (charges 10.02); after 260 it stands at -1.18. */
#include <json-c/json.h>
#include <sys/stat.h>

#include "meter_e2e.h"
#include "tally/partition.h"

#define PER_ACCOUNT  260
#define LOW_AT       163
#define EXHAUSTED_AT 233
#define FINAL_BAL    "-1.18"
#define TOPUP        "5.00" /* 5.00 - 1.18 = 3.82: above the low mark again */

static char dir[512], db[600], logpath[600];

static const char *const balance_count_sql =
    "SELECT count(*) FROM outbox WHERE type IN ('balance.low', 'balance.exhausted', "
    "'balance.recovered', 'account.suspend', 'account.resume', 'volume.release')";

static void require_kcat(void)
{
    if (!e2e_have_kcat())
        fail_msg("kcat is not installed: these tests read the events back with the real tool "
                 "(scripts/deps installs it)");
}

static void fresh(const char *tag)
{
    snprintf(dir, sizeof dir, "%s", tu_tmpdir(tag));
    snprintf(db, sizeof db, "%s/tally.db", dir);
    snprintf(logpath, sizeof logpath, "%s/children.log", dir);
}

static void account_name(char *buf, size_t cap, int a)
{
    snprintf(buf, cap, "trial-%02d", a);
}

/* A fresh ledger with n trial accounts under spend control. The grant comes
 * first: limits set on an account with nothing to spend would exhaust it
 * (balance 0.00 at the stop mark 0.00) before its usage. */
static void make_accounts(int n)
{
    assert_int_equal(tu_tally(NULL, "--db '%s' init >/dev/null", db), 0);
    for (int a = 0; a < n; a++) {
        char acct[32];
        account_name(acct, sizeof acct, a);
        assert_int_equal(tu_tally(NULL,
                                  "--db '%s' credit grant %s 10.00 --kind trial --priority 10 "
                                  "--effective 2026-03-01T00:00:00Z --expires "
                                  "2026-04-01T00:00:00Z >/dev/null",
                                  db, acct),
                         0);
        assert_int_equal(
            tu_tally(NULL, "--db '%s' account set %s --low-balance 3.00 >/dev/null", db, acct), 0);
    }
    assert_int_equal(e2e_count(db, balance_count_sql), 0);
}

/* Messages [from, to) of every account, message-major, as "account:event"
 * lines (for kcat -K:) to kv and as NDJSON to nd (either may be NULL). */
static void write_stream(const char *kv, const char *nd, int accounts, int from, int to)
{
    FILE *k = kv ? fopen(kv, "w") : NULL, *d = nd ? fopen(nd, "w") : NULL;
    if ((kv && !k) || (nd && !d))
        fail_msg("cannot write the stream files in %s", dir);
    for (int j = from; j < to; j++)
        for (int a = 0; a < accounts; a++) {
            char acct[32], ts[32], msg[512];
            account_name(acct, sizeof acct, a);
            assert_int_equal(tally_time_format(1773100800 + (int64_t)j * 60, ts, sizeof ts), 0);
            snprintf(msg, sizeof msg,
                     "{\"specversion\":\"1.0\",\"id\":\"%s-%04d\",\"source\":\"//hosts/bal-e2e\","
                     "\"type\":\"accelerator.usage\",\"subject\":\"%s\",\"time\":\"%s\","
                     "\"data\":{\"instance\":\"ins-%s\",\"sku\":\"h100\",\"pricing\":"
                     "\"on_demand\",\"cards\":1,\"seconds\":60}}",
                     acct, j, acct, ts, acct);
            if (k)
                fprintf(k, "%s:%s\n", acct, msg);
            if (d)
                fprintf(d, "%s\n", msg);
        }
    if (k)
        assert_int_equal(fclose(k), 0);
    if (d)
        assert_int_equal(fclose(d), 0);
}

/* Produces messages [from, to) of every account to the usage topic. */
static void produce_slice(const e2e_broker *b, int accounts, int from, int to)
{
    char kv[700];
    snprintf(kv, sizeof kv, "%s/slice-%d-%d.kv", dir, from, to);
    write_stream(kv, NULL, accounts, from, to);
    e2e_produce(b, "usage", kv);
}

/* The balance events the ledger at path holds, "account|id" per line, by
 * account and then in outbox order. */
static const char *const balance_rows_sql =
    "SELECT subject, event_id FROM outbox WHERE type IN ('balance.low', 'balance.exhausted', "
    "'balance.recovered', 'account.suspend', 'account.resume', 'volume.release') "
    "ORDER BY subject, id";

/* What balance_rows_sql must give: `events` of the five per account. */
static void expected_rows(tally_buf *out, int accounts, int events)
{
    static const char *const types[] = {"balance.low", "balance.exhausted", "account.suspend",
                                        "balance.recovered", "account.resume"};
    tally_buf_reset(out);
    for (int a = 0; a < accounts; a++)
        for (int i = 0; i < events; i++) {
            char acct[32];
            account_name(acct, sizeof acct, a);
            assert_int_equal(tally_buf_printf(out, "%s|%s:%s:%d\n", acct, types[i], acct, i + 1),
                             TALLY_OK);
        }
}

/* The outbox holds each account's crossings exactly once: these ids, no
 * other, none twice. */
static void assert_outbox_crossings(const char *path, int accounts, int events)
{
    tally_buf got, want;
    tally_buf_init(&got, 0);
    tally_buf_init(&want, 0);
    e2e_query(path, balance_rows_sql, &got);
    expected_rows(&want, accounts, events);
    if (strcmp(got.data, want.data) != 0)
        fail_msg("balance events in %s:\n%s--- expected:\n%s", path, got.data, want.data);
    tally_buf_release(&got);
    tally_buf_release(&want);
}

static void assert_balance(int a, const char *balance, const char *state)
{
    char acct[32], want[96];
    account_name(acct, sizeof acct, a);
    tally_buf out;
    tally_buf_init(&out, 0);
    assert_int_equal(tu_tally(&out, "--db '%s' balance %s", db, acct), 0);
    snprintf(want, sizeof want, "\"balance\":\"%s\",\"state\":\"%s\"", balance, state);
    if (!strstr(out.data, want))
        fail_msg("%s: expected %s in %s", acct, want, out.data);
    tally_buf_release(&out);
}

static int run_publish(const char *brokers)
{
    return tu_tally(NULL, "--db '%s' publish --brokers '%s' --until-idle 1 >>'%s' 2>&1", db,
                    brokers, logpath);
}

/* ---- What a consumer reads -------------------------------------------------------- */

typedef struct seen {
    char key[32], id[96], type[32];
    char *payload;
    json_object *ev;
} seen;

typedef struct topic {
    seen *m;
    size_t n;
} topic;

static void topic_release(topic *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->m[i].payload);
        json_object_put(t->m[i].ev);
    }
    free(t->m);
    memset(t, 0, sizeof *t);
}

/* One kcat line "key\tCloudEvent": a CloudEvent whose subject is its key. */
static void parse_line(topic *t, char *line)
{
    char *tab = strchr(line, '\t');
    if (!tab)
        fail_msg("kcat line without a key: %s", line);
    *tab = '\0';
    seen *s = &t->m[t->n++];
    json_object *ev = json_tokener_parse(tab + 1), *v;
    if (!ev)
        fail_msg("not JSON: %s", tab + 1);
    s->ev = ev;
    s->payload = strdup(tab + 1);
    assert_non_null(s->payload);
    snprintf(s->key, sizeof s->key, "%s", line);
    assert_true(json_object_object_get_ex(ev, "id", &v));
    snprintf(s->id, sizeof s->id, "%s", json_object_get_string(v));
    assert_true(json_object_object_get_ex(ev, "type", &v));
    snprintf(s->type, sizeof s->type, "%s", json_object_get_string(v));
    assert_true(json_object_object_get_ex(ev, "subject", &v));
    assert_string_equal(json_object_get_string(v), s->key);
    assert_true(json_object_object_get_ex(ev, "specversion", &v));
    assert_string_equal(json_object_get_string(v), "1.0");
    assert_true(strncmp(s->id, s->type, strlen(s->type)) == 0 && s->id[strlen(s->type)] == ':');
}

/* Everything on the invoices topic, in the order kcat reads it. */
static void read_topic(const char *addr, topic *t)
{
    tally_buf raw;
    tally_buf_init(&raw, 0);
    memset(t, 0, sizeof *t);
    int rc = tu_sh(
        &raw, "timeout 60 kcat -C -b '%s' -t invoices -o beginning -e -q -f '%%k\\t%%s\\n'", addr);
    if (rc != 0)
        fail_msg("kcat exited %d reading the invoices topic", rc);
    size_t lines = 0;
    for (size_t i = 0; i < raw.len; i++)
        lines += raw.data[i] == '\n';
    t->m = calloc(lines + 1, sizeof *t->m);
    assert_non_null(t->m);
    for (char *line = raw.data, *nl; line && (nl = strchr(line, '\n')); line = nl + 1) {
        *nl = '\0';
        parse_line(t, line);
    }
    tally_buf_release(&raw);
}

static const char *data_str(const seen *s, const char *key)
{
    json_object *data, *v;
    if (!json_object_object_get_ex(s->ev, "data", &data) ||
        !json_object_object_get_ex(data, key, &v))
        fail_msg("%s: no data.%s", s->id, key);
    return json_object_get_string(v);
}

/* Every id carries one payload, byte for byte; returns the repeats. */
static size_t assert_one_payload_per_id(const topic *t)
{
    size_t repeats = 0;
    for (size_t i = 0; i < t->n; i++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(t->m[i].id, t->m[j].id) == 0) {
                if (strcmp(t->m[i].payload, t->m[j].payload) != 0)
                    fail_msg("id %s was announced with two different payloads", t->m[i].id);
                repeats++;
                break;
            }
    return repeats;
}

/* The balance events of one account in the order their ids first arrived,
 * "id\n" each. */
static void first_arrivals(const topic *t, const char *acct, tally_buf *out)
{
    tally_buf_reset(out);
    assert_int_equal(tally_buf_puts(out, ""), TALLY_OK);
    for (size_t i = 0; i < t->n; i++) {
        const seen *s = &t->m[i];
        if (strcmp(s->key, acct) != 0 || strncmp(s->type, "invoice.", 8) == 0)
            continue;
        bool before = false;
        for (size_t j = 0; j < i && !before; j++)
            before = strcmp(t->m[j].id, s->id) == 0;
        if (!before)
            assert_int_equal(tally_buf_printf(out, "%s\n", s->id), TALLY_OK);
    }
}

/* Every account's expected ids arrived, in its order, and nothing else. */
static void assert_topic_crossings(const topic *t, int accounts, int events)
{
    tally_buf got, want, all;
    tally_buf_init(&got, 0);
    tally_buf_init(&want, 0);
    tally_buf_init(&all, 0);
    expected_rows(&all, accounts, events);
    for (int a = 0; a < accounts; a++) {
        char acct[32], prefix[40];
        account_name(acct, sizeof acct, a);
        snprintf(prefix, sizeof prefix, "%s|", acct);
        tally_buf_reset(&want);
        assert_int_equal(tally_buf_puts(&want, ""), TALLY_OK);
        for (char *line = all.data, *nl; (nl = strchr(line, '\n')); line = nl + 1)
            if (strncmp(line, prefix, strlen(prefix)) == 0)
                assert_int_equal(tally_buf_append(&want, line + strlen(prefix),
                                                  (size_t)(nl + 1 - line) - strlen(prefix)),
                                 TALLY_OK);
        first_arrivals(t, acct, &got);
        if (strcmp(got.data, want.data) != 0)
            fail_msg("%s read back:\n%s--- expected:\n%s", acct, got.data, want.data);
    }
    tally_buf_release(&got);
    tally_buf_release(&want);
    tally_buf_release(&all);
}

/* ---- Tests --------------------------------------------------------------------------- */

static void top_up(int a, char *grant_id, size_t cap)
{
    char acct[32];
    account_name(acct, sizeof acct, a);
    tally_buf out;
    tally_buf_init(&out, 0);
    assert_int_equal(tu_tally(&out,
                              "--db '%s' credit grant %s " TOPUP
                              " --kind prepaid --idempotency-key topup-%s",
                              db, acct, acct),
                     0);
    snprintf(grant_id, cap, "%s", out.data);
    tally_buf_release(&out);
}

static void test_events_in_order_by_id(void **state)
{
    (void)state;
    require_kcat();
    fresh("balance-events");
    const int accounts = 3;
    make_accounts(accounts);
    e2e_broker b;
    e2e_broker_start(&b, 8, logpath);
    /* Batches of at most 40 events (without the pipeline a batch does not
     * grow while the previous one commits): the two crossings of an account,
     * 70 of its messages apart, commit in different batches. */
    const char *extra[] = {
        "--no-pipeline", "--batch-events", "40", "--batch-ms", "20", "--until-idle", "3", NULL};
    pid_t meter = e2e_meter(db, &b, "balance-e2e", logpath, extra);
    produce_slice(&b, accounts, 0, PER_ACCOUNT);
    assert_int_equal(e2e_wait(meter, 120000), 0);
    assert_int_equal(e2e_count(db, "SELECT count(*) FROM dedupe_keys"), accounts * PER_ACCOUNT);
    assert_outbox_crossings(db, accounts, 3);
    for (int a = 0; a < accounts; a++)
        assert_balance(a, FINAL_BAL, "exhausted");

    assert_int_equal(run_publish(b.bootstrap), 0);
    topic t;
    read_topic(b.bootstrap, &t);
    assert_int_equal(assert_one_payload_per_id(&t), 0);
    assert_topic_crossings(&t, accounts, 3);
    for (size_t i = 0; i < t.n; i++) {
        const seen *s = &t.m[i];
        if (strcmp(s->type, "balance.low") == 0) {
            assert_string_equal(data_str(s, "previous_state"), "ok");
            assert_string_equal(data_str(s, "state"), "low");
            assert_string_equal(data_str(s, "cause"), "usage");
            double bal = strtod(data_str(s, "balance"), NULL);
            assert_true(bal < 3.00 && bal > 0.00);
        } else if (strcmp(s->type, "balance.exhausted") == 0 ||
                   strcmp(s->type, "account.suspend") == 0) {
            assert_string_equal(data_str(s, "previous_state"), "low");
            assert_string_equal(data_str(s, "state"), "exhausted");
            assert_true(strtod(data_str(s, "balance"), NULL) <= 0.00);
        }
        if (strcmp(s->type, "account.suspend") == 0) {
            char want[128];
            json_object *data, *inst;
            assert_true(json_object_object_get_ex(s->ev, "data", &data));
            assert_true(json_object_object_get_ex(data, "instances", &inst));
            snprintf(want, sizeof want, "[ { \"instance\": \"ins-%s\", \"sku\": \"h100\" } ]",
                     s->key);
            assert_string_equal(json_object_to_json_string(inst), want);
        }
    }
    topic_release(&t);

    /* A top-up sent twice under one key: one grant, one recovery. */
    char first[64], again[64];
    top_up(0, first, sizeof first);
    top_up(0, again, sizeof again);
    assert_string_equal(first, again);
    assert_balance(0, "3.82", "ok");
    assert_int_equal(
        e2e_count(db,
                  "SELECT count(*) FROM grants WHERE account = 'trial-00' AND kind = 'prepaid'"),
        1);
    assert_int_equal(run_publish(b.bootstrap), 0);
    read_topic(b.bootstrap, &t);
    assert_int_equal(assert_one_payload_per_id(&t), 0);
    const seen *last = &t.m[t.n - 1], *prev = &t.m[t.n - 2];
    assert_string_equal(prev->id, "balance.recovered:trial-00:4");
    assert_string_equal(last->id, "account.resume:trial-00:5");
    assert_string_equal(data_str(prev, "previous_state"), "exhausted");
    assert_string_equal(data_str(prev, "state"), "ok");
    assert_string_equal(data_str(prev, "balance"), "3.82");
    assert_string_equal(data_str(prev, "cause"), "grant");
    topic_release(&t);
    assert_int_equal(tu_tally(NULL, "--db '%s' verify >>'%s' 2>&1", db, logpath), 0);
    e2e_broker_stop(&b);
}

/* A ledger directory: the meter writes the usage into shards, and refreshes
 * the balances in main.db after each chunk; the outbox holds the crossings
 * a plain ledger gives, exactly once, and verify accepts the directory. */
static void test_directory_meter_events(void **state)
{
    (void)state;
    require_kcat();
    fresh("balance-dir");
    snprintf(db, sizeof db, "%s/ledger", dir);
    assert_int_equal(mkdir(db, 0755), 0);
    const int accounts = 3;
    make_accounts(accounts);
    e2e_broker b;
    e2e_broker_start(&b, 8, logpath);
    const char *extra[] = {"--batch-events", "40", "--batch-ms", "20", "--until-idle", "3", NULL};
    pid_t meter = e2e_meter(db, &b, "balance-dir", logpath, extra);
    char kv[700]; /* keyed as producers of a directory's topic must: murmur2 */
    snprintf(kv, sizeof kv, "%s/dir.kv", dir);
    write_stream(kv, NULL, accounts, 0, PER_ACCOUNT);
    assert_int_equal(tu_sh(NULL,
                           "kcat -P -l -b '%s' -t usage -K: -X partitioner=" TALLY_KAFKA_PARTITIONER
                           " '%s' 2>&1",
                           b.bootstrap, kv),
                     0);
    assert_int_equal(e2e_wait(meter, 120000), 0);
    assert_outbox_crossings(db, accounts, 3);
    for (int a = 0; a < accounts; a++)
        assert_balance(a, FINAL_BAL, "exhausted");
    assert_int_equal(tu_tally(NULL, "--db '%s' verify >>'%s' 2>&1", db, logpath), 0);
    e2e_broker_stop(&b);
}

/* Starts a meter and SIGKILLs it once `sql` counts at least `at` (after a
 * delay of up to jitter_ms); returns that count after the kill. */
static long meter_kill_when(const e2e_broker *b, const char *sql, long at, int64_t jitter_ms,
                            uint64_t *rng)
{
    const char *extra[] = {"--batch-events", "20", "--batch-ms", "20", NULL};
    pid_t pid = e2e_meter(db, b, "balance-kill", logpath, extra);
    int64_t until = e2e_ms() + 60000;
    while (e2e_count(db, sql) < at) {
        if (e2e_wait(pid, 5) != -1)
            fail_msg("the meter exited before it was killed (see %s)", logpath);
        if (e2e_ms() > until)
            fail_msg("no %ld from '%s' in 60 s (see %s)", at, sql, logpath);
    }
    if (jitter_ms > 0)
        e2e_sleep_ms((int64_t)(e2e_rand(rng) % (uint64_t)jitter_ms));
    assert_int_equal(e2e_stop(pid, SIGKILL, 5000), 128 + SIGKILL);
    return e2e_count(db, sql);
}

static const char *const progress_sql = "SELECT coalesce(sum(next_offset), 0) FROM offsets";
static const char *const lows_sql = "SELECT count(*) FROM outbox WHERE type = 'balance.low'";
static const char *const exhausted_sql =
    "SELECT count(*) FROM outbox WHERE type = 'balance.exhausted'";

static void test_meter_kill9_crossings_once(void **state)
{
    (void)state;
    require_kcat();
    fresh("balance-meter-kill");
    const int accounts = 4;
    uint64_t rng = (uint64_t)tu_env("TALLY_KILL_SEED", 20260320);
    make_accounts(accounts);
    e2e_broker b;
    e2e_broker_start(&b, 8, logpath);

    /* Random kills while the first messages flow. */
    produce_slice(&b, accounts, 0, 120);
    long at = meter_kill_when(&b, progress_sql, 1, 300, &rng);
    print_message("kill 1 (random): %ld messages stored\n", at);
    /* Right after every account's low crossing committed, before any
     * exhaustion: the next run must not write them again. */
    produce_slice(&b, accounts, 120, 200);
    at = meter_kill_when(&b, lows_sql, accounts, 0, &rng);
    assert_int_equal(at, accounts);
    assert_int_equal(e2e_count(db, exhausted_sql), 0);
    print_message("kill 2 (after the low crossings): %ld stored\n", e2e_count(db, progress_sql));
    /* Right after the first exhaustion committed, likely with others still
     * to come. */
    produce_slice(&b, accounts, 200, 245);
    at = meter_kill_when(&b, exhausted_sql, 1, 0, &rng);
    print_message("kill 3 (after an exhaustion): %ld exhausted, %ld stored\n", at,
                  e2e_count(db, progress_sql));
    /* Producer retries: the crossing messages again, same ids, and a random
     * kill while they are re-consumed. */
    produce_slice(&b, accounts, 150, 245);
    at = meter_kill_when(&b, progress_sql, e2e_count(db, progress_sql) + 1, 200, &rng);
    print_message("kill 4 (random, among the retries): %ld stored\n", at);
    produce_slice(&b, accounts, 245, PER_ACCOUNT);
    const char *extra[] = {"--until-idle", "3", NULL};
    pid_t last = e2e_meter(db, &b, "balance-kill", logpath, extra);
    assert_int_equal(e2e_wait(last, 120000), 0);

    assert_int_equal(e2e_count(db, "SELECT count(*) FROM dedupe_keys"), accounts * PER_ACCOUNT);
    assert_int_equal(e2e_count(db, progress_sql), accounts * (PER_ACCOUNT + 95));
    assert_outbox_crossings(db, accounts, 3);
    for (int a = 0; a < accounts; a++)
        assert_balance(a, FINAL_BAL, "exhausted");
    /* The same crossings as a clean ingest of the same events. */
    char nd[700], clean[sizeof db];
    snprintf(nd, sizeof nd, "%s/stream.ndjson", dir);
    snprintf(clean, sizeof clean, "%.500s/clean.db", dir);
    write_stream(NULL, nd, accounts, 0, PER_ACCOUNT);
    snprintf(db, sizeof db, "%s", clean);
    make_accounts(accounts);
    assert_int_equal(tu_tally(NULL, "--db '%s' ingest '%s' >/dev/null", clean, nd), 0);
    assert_outbox_crossings(clean, accounts, 3);
    snprintf(db, sizeof db, "%s/tally.db", dir);

    assert_int_equal(run_publish(b.bootstrap), 0);
    topic t;
    read_topic(b.bootstrap, &t);
    assert_int_equal(assert_one_payload_per_id(&t), 0);
    assert_topic_crossings(&t, accounts, 3);
    topic_release(&t);
    assert_int_equal(tu_tally(NULL, "--db '%s' verify >>'%s' 2>&1", db, logpath), 0);
    e2e_broker_stop(&b);
}

static void outbox_counts(int64_t *pending, int64_t *sent)
{
    *pending = e2e_count(db, "SELECT count(*) FROM outbox WHERE sent_at IS NULL");
    *sent = e2e_count(db, "SELECT count(*) FROM outbox WHERE sent_at IS NOT NULL");
}

/* Starts `tally publish` and SIGKILLs it as soon as some events are stamped
 * sent and others are still pending; returns whether that state was seen. */
static bool publish_kill_mid_drain(const char *const *argv)
{
    int64_t pending = 1, sent = 0, before = 0;
    outbox_counts(&pending, &before);
    pid_t pid = e2e_spawn(argv, logpath, NULL, NULL);
    for (int64_t until = e2e_ms() + 30000; e2e_ms() < until; e2e_sleep_ms(5)) {
        outbox_counts(&pending, &sent);
        if (sent > before || pending == 0)
            break;
    }
    assert_int_equal(e2e_stop(pid, SIGKILL, 100), 128 + SIGKILL);
    return sent > before && pending > 0;
}

static void test_publish_kill9_announced_once(void **state)
{
    (void)state;
    require_kcat();
    fresh("balance-publish-kill");
    /* 40 accounts x 5 events: 200, more than the publisher's window of 128. */
    const int accounts = 40;
    make_accounts(accounts);
    char nd[700], grant[64];
    snprintf(nd, sizeof nd, "%s/stream.ndjson", dir);
    write_stream(NULL, nd, accounts, 0, PER_ACCOUNT);
    assert_int_equal(tu_tally(NULL, "--db '%s' ingest '%s' >/dev/null", db, nd), 0);
    for (int a = 0; a < accounts; a++)
        top_up(a, grant, sizeof grant);
    assert_outbox_crossings(db, accounts, 5);

    e2e_broker b;
    e2e_broker_start(&b, 8, logpath);
    /* Slow acknowledgements, so that kills land while connecting, with
     * batches in flight and between two stamps. */
    for (int i = 1; i <= 3; i++) {
        char cmd[32];
        snprintf(cmd, sizeof cmd, "rtt %d 120", i);
        e2e_broker_ctl(&b, cmd);
    }
    const char *argv[] = {TALLY_BINARY, "--db", db, "publish", "--brokers", b.bootstrap, NULL};
    int64_t pending = -1, sent = 0;
    bool mid = false;
    /* Blind kills while it connects and has the first window in flight
     * (the first acknowledgements take about 0.8 s here), then one as soon as
     * part of the outbox is stamped and the rest is not. */
    for (int64_t delay = 100; delay <= 600 && pending != 0; delay += 125) {
        pid_t pid = e2e_spawn(argv, logpath, NULL, NULL);
        e2e_sleep_ms(delay);
        assert_int_equal(e2e_stop(pid, SIGKILL, 100), 128 + SIGKILL);
        outbox_counts(&pending, &sent);
        print_message("publish killed after %lld ms: %lld sent, %lld pending\n", (long long)delay,
                      (long long)sent, (long long)pending);
        mid = mid || (pending > 0 && sent > 0);
    }
    if (pending > 0)
        mid = publish_kill_mid_drain(argv) || mid;
    outbox_counts(&pending, &sent);
    print_message("after the kills: %lld sent, %lld pending\n", (long long)sent,
                  (long long)pending);
    for (int i = 1; i <= 3; i++) {
        char cmd[32];
        snprintf(cmd, sizeof cmd, "rtt %d 0", i);
        e2e_broker_ctl(&b, cmd);
    }
    assert_int_equal(run_publish(b.bootstrap), 0);
    outbox_counts(&pending, &sent);
    assert_int_equal(pending, 0);
    assert_int_equal(sent, accounts * 5);

    topic t;
    read_topic(b.bootstrap, &t);
    size_t repeats = assert_one_payload_per_id(&t);
    print_message("%zu messages for %d events: %zu byte-identical repeats\n", t.n, accounts * 5,
                  repeats);
    assert_int_equal(t.n - repeats, (size_t)accounts * 5);
    assert_topic_crossings(&t, accounts, 5);
    assert_true(mid);
    topic_release(&t);
    assert_outbox_crossings(db, accounts, 5);
    e2e_broker_stop(&b);
}

int main(void)
{
    /* The trials are live (2026-03-01 to 2026-04-01); the usage is of 10 March. */
    setenv("TALLY_NOW", "2026-03-20T00:00:00Z", 1);
    unsetenv("TALLY_EVENT_SOURCE");
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_events_in_order_by_id, e2e_teardown),
        cmocka_unit_test_teardown(test_directory_meter_events, e2e_teardown),
        cmocka_unit_test_teardown(test_meter_kill9_crossings_once, e2e_teardown),
        cmocka_unit_test_teardown(test_publish_kill9_announced_once, e2e_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
