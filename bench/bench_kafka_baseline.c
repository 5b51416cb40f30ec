/* bench_kafka_baseline: the cheapest possible group consumer, to compare
 * `tally meter` with. It joins a group, counts the messages of a topic and
 * does nothing else, with the same fetch settings as the meter.
 *
 *   bench_kafka_baseline --brokers B --topic T --group G --expect N
 *                        [--idle-ms MS]
 *
 * Stops after N messages (or MS without any; default 10000). Prints
 * "messages=N join_ms=J consume_ms=C rate=R": J is the time to the first
 * message (joining the group, fetching offsets), C from the first message
 * to the last, R = N / C per second. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <librdkafka/rdkafka.h>

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static rd_kafka_t *make_consumer(const char *brokers, const char *group)
{
    const char *kv[][2] = {
        {"bootstrap.servers", brokers},     {"group.id", group},
        {"enable.auto.commit", "false"},    {"enable.auto.offset.store", "false"},
        {"auto.offset.reset", "earliest"},  {"fetch.wait.max.ms", "100"},
        {"fetch.max.bytes", "16777216"},    {"queued.max.messages.kbytes", "65536"},
        {"queued.min.messages", "1000000"}, {"log.connection.close", "false"}};
    char err[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    for (size_t i = 0; i < sizeof kv / sizeof *kv; i++)
        if (rd_kafka_conf_set(conf, kv[i][0], kv[i][1], err, sizeof err) != RD_KAFKA_CONF_OK) {
            fprintf(stderr, "bench_kafka_baseline: %s\n", err);
            rd_kafka_conf_destroy(conf);
            return NULL;
        }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!rk) {
        fprintf(stderr, "bench_kafka_baseline: %s\n", err);
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_poll_set_consumer(rk);
    return rk;
}

int main(int argc, char **argv)
{
    const char *brokers = NULL, *topic = "usage", *group = "bench-baseline";
    long long expect = 0, idle_ms = 10000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--brokers"))
            brokers = argv[i + 1];
        else if (!strcmp(argv[i], "--topic"))
            topic = argv[i + 1];
        else if (!strcmp(argv[i], "--group"))
            group = argv[i + 1];
        else if (!strcmp(argv[i], "--expect"))
            expect = strtoll(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--idle-ms"))
            idle_ms = strtoll(argv[i + 1], NULL, 10);
    }
    if (!brokers || expect <= 0) {
        fprintf(stderr, "usage: bench_kafka_baseline --brokers B --topic T --group G "
                        "--expect N [--idle-ms MS]\n");
        return 2;
    }
    rd_kafka_t *rk = make_consumer(brokers, group);
    if (!rk)
        return 1;
    rd_kafka_topic_partition_list_t *sub = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(sub, topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_subscribe(rk, sub);
    rd_kafka_topic_partition_list_destroy(sub);
    rd_kafka_queue_t *q = rd_kafka_queue_get_consumer(rk);

    enum { MAX = 2000 };
    static rd_kafka_message_t *msgs[MAX];
    long long count = 0, bytes = 0;
    int64_t start = now_ms(), first = 0, last = start;
    while (count < expect && now_ms() - last < idle_ms) {
        ssize_t n = rd_kafka_consume_batch_queue(q, 100, msgs, MAX);
        for (ssize_t i = 0; i < n; i++) {
            if (!msgs[i]->err) {
                count++;
                bytes += (long long)msgs[i]->len;
            }
            rd_kafka_message_destroy(msgs[i]);
        }
        if (n > 0) {
            last = now_ms();
            if (!first)
                first = last;
        }
    }
    /* to the last message: a topic that lost messages (retention) must not
     * count the idle wait for them */
    long long consume_ms = first ? last - first : 0;
    printf("messages=%lld bytes=%lld join_ms=%lld consume_ms=%lld rate=%lld\n", count, bytes,
           (long long)(first ? first - start : -1), consume_ms,
           consume_ms > 0 ? count * 1000 / consume_ms : 0);
    rd_kafka_queue_destroy(q);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return count >= expect ? 0 : 1;
}
