/* Routing by key, shared by every producer and by the ledger's shards: Kafka's
 * murmur2 partitioner and the names of per-partition shards. Pure (libc). */
#ifndef TALLY_PARTITION_H
#define TALLY_PARTITION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The librdkafka "partitioner" every Tally producer sets: murmur2 of the key,
 * as Java clients' default partitioner does (messages without a key go to a
 * random partition). */
#define TALLY_KAFKA_PARTITIONER "murmur2_random"

/* Kafka's murmur2 of len bytes (seed 0x9747b28c), as a 32-bit pattern. */
uint32_t tally_murmur2(const void *key, size_t len);

/* The partition (0..partitions-1) that a message with this key goes to under
 * TALLY_KAFKA_PARTITIONER: (murmur2(key) & 0x7fffffff) % partitions. key may
 * be empty (but not NULL). Returns -1 if partitions < 1. */
int32_t tally_partition_of(const void *key, size_t len, int32_t partitions);

/* "shard-<topic>-<partition>" into out; false if it does not fit or topic is
 * not a Kafka topic name. */
bool tally_shard_name(const char *topic, int32_t partition, char *out, size_t cap);

#endif
