/* Tally's one producer configuration (tally/kafka_conf.h). */
#include <stdio.h>

#include "tally/kafka_conf.h"
#include "tally/partition.h"

typedef struct setting {
    const char *name, *value;
} setting;

/* What every producer sets: the partitioner every Tally producer agrees on,
 * and quiet reconnects (the meter and publisher outlive broker restarts). */
static const setting common[] = {
    {"partitioner", TALLY_KAFKA_PARTITIONER},
    {"reconnect.backoff.ms", "100"},
    {"reconnect.backoff.max.ms", "2000"},
    {"log.connection.close", "false"},
};

static const setting exact[] = {
    {"enable.idempotence", "true"},
    {"acks", "all"},
    {"linger.ms", "5"},
    {"message.timeout.ms", "15000"},
};

static const setting copies[] = {
    {"linger.ms", "2"},
    {"message.timeout.ms", "30000"},
};

static const setting bulk[] = {
    {"linger.ms", "500"},
    {"batch.size", "1000000"},
    {"batch.num.messages", "100000"},
    {"queue.buffering.max.messages", "2000000"},
    {"queue.buffering.max.kbytes", "1048576"},
    {"message.timeout.ms", "600000"},
};

static tally_err set(rd_kafka_conf_t *conf, const char *name, const char *value, char *why,
                     size_t cap)
{
    char err[256];
    if (rd_kafka_conf_set(conf, name, value, err, sizeof err) == RD_KAFKA_CONF_OK)
        return TALLY_OK;
    snprintf(why, cap, "kafka %s=%s: %s", name, value, err);
    return TALLY_INVAL;
}

static tally_err set_all(rd_kafka_conf_t *conf, const setting *s, size_t n, char *why, size_t cap)
{
    tally_err e = TALLY_OK;
    for (size_t i = 0; i < n && !e; i++)
        e = set(conf, s[i].name, s[i].value, why, cap);
    return e;
}

static tally_err set_kind(rd_kafka_conf_t *conf, tally_producer_kind kind, char *why, size_t cap)
{
    switch (kind) {
    case TALLY_PRODUCER_EXACT:
        return set_all(conf, exact, sizeof exact / sizeof *exact, why, cap);
    case TALLY_PRODUCER_COPIES:
        return set_all(conf, copies, sizeof copies / sizeof *copies, why, cap);
    case TALLY_PRODUCER_BULK:
        return set_all(conf, bulk, sizeof bulk / sizeof *bulk, why, cap);
    }
    snprintf(why, cap, "unknown producer kind %d", (int)kind);
    return TALLY_INVAL;
}

tally_err tally_kafka_producer_conf(const tally_producer_conf_opts *o, rd_kafka_conf_t **out,
                                    char *why, size_t cap)
{
    *out = NULL;
    if (!o || !o->brokers || !*o->brokers || !o->client_id || !*o->client_id) {
        snprintf(why, cap, "a producer needs brokers and a client id");
        return TALLY_INVAL;
    }
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (!conf)
        return TALLY_NOMEM;
    tally_err e = set(conf, "bootstrap.servers", o->brokers, why, cap);
    if (!e)
        e = set(conf, "client.id", o->client_id, why, cap);
    if (!e)
        e = set_all(conf, common, sizeof common / sizeof *common, why, cap);
    if (!e)
        e = set_kind(conf, o->kind, why, cap);
    if (!e && o->message_timeout_ms > 0) {
        char ms[24];
        snprintf(ms, sizeof ms, "%lld", (long long)o->message_timeout_ms);
        e = set(conf, "message.timeout.ms", ms, why, cap);
    }
    if (e) {
        rd_kafka_conf_destroy(conf);
        return e;
    }
    *out = conf;
    return TALLY_OK;
}
