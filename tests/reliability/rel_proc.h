/* Processes for the reliability tests: children that are always reaped,
 * the embedded broker driven through its stdin, and an in-process producer
 * that writes each message to the partition the test chose (idempotent, so
 * a partition's order is the order of the calls). Header-only: each test is
 * one executable. */
#ifndef TALLY_REL_PROC_H
#define TALLY_REL_PROC_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "testutil.h"

#include "proc.h"

/* Child processes and the broker come from tests/util/proc.h; these are
 * their names in the reliability tests. */
#define REL_MAX_CHILDREN TU_MAX_CHILDREN
#define rel_ms           tu_ms
#define rel_sleep_ms     tu_sleep_ms
#define rel_env          tu_env
#define rel_rand         tu_rand
#define rel_track        tu_track
#define rel_wait         tu_wait
#define rel_stop         tu_stop
#define rel_teardown     tu_proc_teardown
#define rel_spawn        tu_spawn
#define rel_read_line    tu_read_line
#define rel_broker_start tu_broker_start
#define rel_broker_ctl   tu_broker_ctl
#define rel_broker_stop  tu_broker_stop
typedef tu_broker rel_broker;

static long rel_dr_failed;

static inline void rel_dr(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    (void)opaque;
    if (m->err)
        rel_dr_failed++;
    else if (m->_private)
        *(int64_t *)m->_private = m->offset;
}

static inline rd_kafka_t *rel_producer(const rel_broker *b)
{
    char err[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set_dr_msg_cb(conf, rel_dr);
    const char *kv[][2] = {{"bootstrap.servers", b->bootstrap},
                           {"enable.idempotence", "true"},
                           {"linger.ms", "5"},
                           {"log.connection.close", "false"}};
    for (size_t i = 0; i < sizeof kv / sizeof *kv; i++)
        if (rd_kafka_conf_set(conf, kv[i][0], kv[i][1], err, sizeof err) != RD_KAFKA_CONF_OK)
            fail_msg("%s: %s", kv[i][0], err);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk)
        fail_msg("producer: %s", err);
    return rk;
}

/* Queues val for partition; *offset_out (if not NULL) gets its offset on
 * delivery (read it after rel_flush). */
static inline void rel_produce(rd_kafka_t *rk, int partition, const char *key, const char *val,
                               int64_t *offset_out)
{
    for (int tries = 0;; tries++) {
        rd_kafka_resp_err_t e = rd_kafka_producev(
            rk, RD_KAFKA_V_TOPIC("usage"), RD_KAFKA_V_PARTITION(partition),
            RD_KAFKA_V_KEY(key, strlen(key)), RD_KAFKA_V_VALUE((void *)val, strlen(val)),
            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_OPAQUE(offset_out),
            RD_KAFKA_V_END);
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
            return;
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL || tries > 1000)
            fail_msg("produce: %s", rd_kafka_err2str(e));
        rd_kafka_poll(rk, 10);
    }
}

static inline void rel_flush(rd_kafka_t *rk)
{
    if (rd_kafka_flush(rk, 30000) != RD_KAFKA_RESP_ERR_NO_ERROR)
        fail_msg("the producer could not deliver everything in 30 s");
    if (rel_dr_failed)
        fail_msg("%ld messages were not delivered", rel_dr_failed);
}

/* Starts `tally meter` on db in group with extra arguments (NULL-ended). */
static inline pid_t rel_meter(const char *db, const rel_broker *b, const char *group,
                              const char *log, const char *const *extra)
{
    const char *argv[40] = {TALLY_BINARY,           "--db",    db,      "meter",   "--brokers",
                            b->bootstrap,           "--topic", "usage", "--group", group,
                            "--session-timeout-ms", "3000"};
    int n = 12;
    for (int i = 0; extra && extra[i] && n < 39; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    return rel_spawn(argv, log, NULL, NULL);
}

#endif
