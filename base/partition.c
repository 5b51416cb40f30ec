/* Routing: which partition a key goes to, and the names of shards.
 *
 * The hash is Kafka's murmur2 (the 32-bit MurmurHash2 variant of the Java
 * client: seed 0x9747b28c, little-endian 4-byte blocks, tail bytes folded in
 * from the highest), so that Tally agrees with Java producers and with
 * librdkafka's murmur2_random partitioner on every key. */
#include <stdio.h>
#include <string.h>

#include "tally/partition.h"

#define MURMUR2_SEED 0x9747b28cu
#define MURMUR2_M    0x5bd1e995u
#define MURMUR2_R    24
#define TOPIC_MAX    249

uint32_t tally_murmur2(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint32_t h = MURMUR2_SEED ^ (uint32_t)len;
    size_t blocks = len / 4;
    for (size_t i = 0; i < blocks; i++, p += 4) {
        uint32_t k =
            (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        k *= MURMUR2_M;
        k ^= k >> MURMUR2_R;
        k *= MURMUR2_M;
        h *= MURMUR2_M;
        h ^= k;
    }
    size_t tail = len & 3;
    if (tail) {
        /* The tail's bytes, highest first, as the reference's fall-through. */
        for (size_t i = tail; i > 0; i--)
            h ^= (uint32_t)p[i - 1] << (8 * (i - 1));
        h *= MURMUR2_M;
    }
    h ^= h >> 13;
    h *= MURMUR2_M;
    h ^= h >> 15;
    return h;
}

int32_t tally_partition_of(const void *key, size_t len, int32_t partitions)
{
    if (partitions < 1)
        return -1;
    return (int32_t)((tally_murmur2(key, len) & 0x7fffffffu) % (uint32_t)partitions);
}

/* Kafka's legal topic characters. */
static bool topic_ok(const char *topic)
{
    size_t n = topic ? strlen(topic) : 0;
    if (n == 0 || n > TOPIC_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = topic[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

bool tally_shard_name(const char *topic, int32_t partition, char *out, size_t cap)
{
    if (!topic_ok(topic) || partition < 0 || cap == 0)
        return false;
    int n = snprintf(out, cap, "shard-%s-%d", topic, (int)partition);
    return n > 0 && (size_t)n < cap;
}
