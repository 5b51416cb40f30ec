/* The embedded broker: librdkafka's mock cluster on loopback, its topics,
 * and fault injection by one-line commands (include/tally/meter.h). */
#include <strings.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "kafka_int.h"
#include "tally/broker.h"

#define DEFAULT_BROKERS    3
#define DEFAULT_TOPIC      "usage"
#define DEFAULT_PARTITIONS 8
#define MAX_BROKERS        16
#define MAX_PARTITIONS     100000

struct tally_broker {
    rd_kafka_t *rk; /* owns the mock cluster's thread */
    rd_kafka_mock_cluster_t *mc;
    int nbrokers;
    fwd *fwd;
    char bootstrap[256];
};

/* Kafka protocol API keys by name (the Kafka protocol guide's numbering). */
static const struct {
    const char *name;
    int16_t key;
} api_keys[] = {
    {"Produce", 0},          {"Fetch", 1},
    {"ListOffsets", 2},      {"Metadata", 3},
    {"OffsetCommit", 8},     {"OffsetFetch", 9},
    {"FindCoordinator", 10}, {"JoinGroup", 11},
    {"Heartbeat", 12},       {"LeaveGroup", 13},
    {"SyncGroup", 14},       {"ApiVersion", 18},
    {"InitProducerId", 22},  {"AddPartitionsToTxn", 24},
    {"EndTxn", 26},
};

static tally_err parse_int(const char *s, long long min, long long max, long long *out)
{
    if (!s || !*s)
        return TALLY_PARSE;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return TALLY_PARSE;
    *out = v;
    return TALLY_OK;
}

static tally_err parse_api(const char *s, int16_t *out)
{
    for (size_t i = 0; i < sizeof api_keys / sizeof *api_keys; i++)
        if (strcasecmp(s, api_keys[i].name) == 0) {
            *out = api_keys[i].key;
            return TALLY_OK;
        }
    long long v;
    if (parse_int(s, 0, 100, &v))
        return TALLY_PARSE;
    *out = (int16_t)v;
    return TALLY_OK;
}

/* A Kafka error by name ("NOT_COORDINATOR", "RD_KAFKA_RESP_ERR_..."), or
 * by number. */
static tally_err parse_kafka_err(const char *s, rd_kafka_resp_err_t *out)
{
    const char *pfx = "RD_KAFKA_RESP_ERR_";
    if (strncmp(s, pfx, strlen(pfx)) == 0)
        s += strlen(pfx);
    const struct rd_kafka_err_desc *descs;
    size_t n;
    rd_kafka_get_err_descs(&descs, &n);
    for (size_t i = 0; i < n; i++)
        if (descs[i].name && strcasecmp(s, descs[i].name) == 0) {
            *out = descs[i].code;
            return TALLY_OK;
        }
    long long v;
    if (parse_int(s, -200, 1000, &v))
        return TALLY_PARSE;
    *out = (rd_kafka_resp_err_t)v;
    return TALLY_OK;
}

tally_err tally_broker_topic_create(tally_broker *b, const char *topic, int partitions)
{
    if (!b || !topic || !*topic || partitions < 1 || partitions > MAX_PARTITIONS)
        return TALLY_INVAL;
    int rf = b->nbrokers < 3 ? b->nbrokers : 3;
    if (rd_kafka_mock_topic_create(b->mc, topic, partitions, rf) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return TALLY_KAFKA;
    return TALLY_OK;
}

/* The brokers' ports, parsed from "127.0.0.1:p1,127.0.0.1:p2,...". */
static size_t broker_ports(const char *list, int *ports, size_t max)
{
    size_t n = 0;
    for (const char *p = list; p && *p && n < max;) {
        const char *colon = strchr(p, ':');
        if (!colon)
            break;
        ports[n++] = (int)strtol(colon + 1, NULL, 10);
        p = strchr(colon, ',');
        if (p)
            p++;
    }
    return n;
}

static tally_err start_forwarder(tally_broker *b, int port, char *why, size_t cap)
{
    int ports[MAX_BROKERS];
    size_t n = broker_ports(rd_kafka_mock_cluster_bootstraps(b->mc), ports, MAX_BROKERS);
    tally_err e = fwd_start(port, ports, n, &b->fwd, why, cap);
    if (e)
        return e;
    snprintf(b->bootstrap, sizeof b->bootstrap, "127.0.0.1:%d", port);
    return TALLY_OK;
}

static tally_err create_topics(tally_broker *b, const tally_broker_opts *o, char *why, size_t cap)
{
    const char *topic = o->topic && *o->topic ? o->topic : DEFAULT_TOPIC;
    int parts = o->partitions > 0 ? o->partitions : DEFAULT_PARTITIONS;
    const struct {
        const char *name;
        int partitions;
    } topics[] = {{topic, parts}, {"usage-dlq", parts}, {"invoices", 1}};
    for (size_t i = 0; i < sizeof topics / sizeof *topics; i++) {
        if (i > 0 && strcmp(topics[i].name, topic) == 0)
            continue;
        if (tally_broker_topic_create(b, topics[i].name, topics[i].partitions)) {
            snprintf(why, cap, "cannot create topic %s", topics[i].name);
            return TALLY_KAFKA;
        }
    }
    return TALLY_OK;
}

static tally_err check_opts(const tally_broker_opts *o, char *why, size_t cap)
{
    if (o->brokers < 0 || o->brokers > MAX_BROKERS) {
        snprintf(why, cap, "brokers must be 1..%d", MAX_BROKERS);
        return TALLY_INVAL;
    }
    if (o->partitions < 0 || o->partitions > MAX_PARTITIONS) {
        snprintf(why, cap, "partitions must be 1..%d", MAX_PARTITIONS);
        return TALLY_INVAL;
    }
    if (o->port < 0 || o->port > 65535) {
        snprintf(why, cap, "port must be 1..65535");
        return TALLY_INVAL;
    }
    return TALLY_OK;
}

/* librdkafka's own log lines (e.g. the mock's startup notice) are noise on
 * a command's stderr; errors reach callers through return values. */
static void quiet_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk, (void)level, (void)fac, (void)buf;
}

static tally_err start_cluster(tally_broker *b, char *why, size_t cap)
{
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set_log_cb(conf, quiet_log);
    /* The handle only hosts the mock cluster; it never connects anywhere. */
    if (rd_kafka_conf_set(conf, "client.id", "tally-broker", errstr, sizeof errstr) !=
        RD_KAFKA_CONF_OK) {
        rd_kafka_conf_destroy(conf);
        snprintf(why, cap, "%s", errstr);
        return TALLY_KAFKA;
    }
    b->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (!b->rk) {
        rd_kafka_conf_destroy(conf);
        snprintf(why, cap, "%s", errstr);
        return TALLY_KAFKA;
    }
    b->mc = rd_kafka_mock_cluster_new(b->rk, b->nbrokers);
    if (!b->mc) {
        snprintf(why, cap, "cannot start the mock cluster");
        return TALLY_KAFKA;
    }
    snprintf(b->bootstrap, sizeof b->bootstrap, "%s", rd_kafka_mock_cluster_bootstraps(b->mc));
    return TALLY_OK;
}

tally_err tally_broker_create(const tally_broker_opts *opts, tally_broker **out, char *why,
                              size_t cap)
{
    *out = NULL;
    tally_broker_opts none = {0};
    const tally_broker_opts *o = opts ? opts : &none;
    tally_err e = check_opts(o, why, cap);
    if (e)
        return e;
    tally_broker *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(why, cap, "out of memory");
        return TALLY_NOMEM;
    }
    b->nbrokers = o->brokers > 0 ? o->brokers : DEFAULT_BROKERS;
    e = start_cluster(b, why, cap);
    if (!e)
        e = create_topics(b, o, why, cap);
    if (!e && o->port > 0)
        e = start_forwarder(b, o->port, why, cap);
    if (e) {
        tally_broker_destroy(b);
        return e;
    }
    *out = b;
    return TALLY_OK;
}

void tally_broker_destroy(tally_broker *b)
{
    if (!b)
        return;
    fwd_stop(b->fwd);
    if (b->mc)
        rd_kafka_mock_cluster_destroy(b->mc);
    if (b->rk)
        rd_kafka_destroy(b->rk);
    free(b);
}

const char *tally_broker_bootstrap(const tally_broker *b)
{
    return b->bootstrap;
}

/* ---- Fault injection ------------------------------------------------------ */

#define CTL_MAX_WORDS 5

typedef tally_err (*ctl_fn)(tally_broker *b, char **w, char *why, size_t cap);

static tally_err ctl_error(tally_broker *b, char **w, char *why, size_t cap)
{
    int16_t api;
    long long cnt;
    rd_kafka_resp_err_t err;
    if (parse_api(w[1], &api) || parse_int(w[2], 1, 100000, &cnt) || parse_kafka_err(w[3], &err)) {
        snprintf(why, cap, "usage: error API COUNT ERR");
        return TALLY_PARSE;
    }
    /* One push of all of them: pushed one at a time, 100,000 took the ASan
     * build about 16 s, and over a minute on a busy machine. */
    rd_kafka_resp_err_t *errs = malloc((size_t)cnt * sizeof *errs);
    if (!errs) {
        snprintf(why, cap, "out of memory");
        return TALLY_NOMEM;
    }
    for (long long i = 0; i < cnt; i++)
        errs[i] = err;
    rd_kafka_mock_push_request_errors_array(b->mc, api, (size_t)cnt, errs);
    free(errs);
    return TALLY_OK;
}

static tally_err ctl_clear(tally_broker *b, char **w, char *why, size_t cap)
{
    int16_t api;
    if (parse_api(w[1], &api)) {
        snprintf(why, cap, "usage: clear API");
        return TALLY_PARSE;
    }
    rd_kafka_mock_clear_request_errors(b->mc, api);
    return TALLY_OK;
}

static tally_err broker_id(const tally_broker *b, const char *s, int32_t *id, char *why, size_t cap)
{
    long long v;
    if (parse_int(s, 1, b->nbrokers, &v)) {
        snprintf(why, cap, "broker id must be 1..%d", b->nbrokers);
        return TALLY_PARSE;
    }
    *id = (int32_t)v;
    return TALLY_OK;
}

static tally_err kafka_result(rd_kafka_resp_err_t err, char *why, size_t cap)
{
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
        return TALLY_OK;
    snprintf(why, cap, "%s", rd_kafka_err2str(err));
    return TALLY_KAFKA;
}

static tally_err ctl_updown(tally_broker *b, char **w, char *why, size_t cap)
{
    int32_t id;
    tally_err e = broker_id(b, w[1], &id, why, cap);
    if (e)
        return e;
    rd_kafka_resp_err_t err = w[0][0] == 'd' ? rd_kafka_mock_broker_set_down(b->mc, id)
                                             : rd_kafka_mock_broker_set_up(b->mc, id);
    return kafka_result(err, why, cap);
}

static tally_err ctl_rtt(tally_broker *b, char **w, char *why, size_t cap)
{
    int32_t id;
    long long ms;
    tally_err e = broker_id(b, w[1], &id, why, cap);
    if (e)
        return e;
    if (parse_int(w[2], 0, 600000, &ms)) {
        snprintf(why, cap, "usage: rtt ID MS");
        return TALLY_PARSE;
    }
    return kafka_result(rd_kafka_mock_broker_set_rtt(b->mc, id, (int)ms), why, cap);
}

static tally_err ctl_topic(tally_broker *b, char **w, char *why, size_t cap)
{
    long long n;
    if (parse_int(w[2], 1, MAX_PARTITIONS, &n)) {
        snprintf(why, cap, "usage: topic NAME PARTITIONS");
        return TALLY_PARSE;
    }
    tally_err e = tally_broker_topic_create(b, w[1], (int)n);
    if (e)
        snprintf(why, cap, "cannot create topic %s", w[1]);
    return e;
}

static const struct {
    const char *verb;
    int nargs;
    ctl_fn fn;
} ctl_table[] = {
    {"error", 3, ctl_error}, {"clear", 1, ctl_clear}, {"down", 1, ctl_updown},
    {"up", 1, ctl_updown},   {"rtt", 2, ctl_rtt},     {"topic", 2, ctl_topic},
};

tally_err tally_broker_control(tally_broker *b, const char *line, char *why, size_t cap)
{
    char copy[256];
    size_t len = strnlen(line, sizeof copy);
    if (len >= sizeof copy) {
        snprintf(why, cap, "command too long");
        return TALLY_PARSE;
    }
    memcpy(copy, line, len + 1);
    char *w[CTL_MAX_WORDS + 1] = {0};
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(copy, " \t\r\n", &save); t; t = strtok_r(NULL, " \t\r\n", &save)) {
        if (n == CTL_MAX_WORDS) {
            snprintf(why, cap, "too many words");
            return TALLY_PARSE;
        }
        w[n++] = t;
    }
    if (n == 0) {
        snprintf(why, cap, "empty command");
        return TALLY_PARSE;
    }
    for (size_t i = 0; i < sizeof ctl_table / sizeof *ctl_table; i++) {
        if (strcmp(w[0], ctl_table[i].verb) != 0)
            continue;
        if (n - 1 != ctl_table[i].nargs) {
            snprintf(why, cap, "%s takes %d arguments", w[0], ctl_table[i].nargs);
            return TALLY_PARSE;
        }
        return ctl_table[i].fn(b, w, why, cap);
    }
    snprintf(why, cap, "unknown command '%s' (error, clear, down, up, rtt, topic)", w[0]);
    return TALLY_PARSE;
}
