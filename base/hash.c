/* Tally's 128-bit non-cryptographic hash (dedupe keys and fingerprints).
 *
 * The input is read as 16-byte blocks of two little-endian 64-bit words, so
 * the value is the same on every machine. Each block goes into its own lane
 * of a 128-bit state by xor, an odd multiply and an xorshift (each a
 * bijection of the lane), then the lanes are crossed by an add and a
 * rotate-xor (also a bijection). A final block holds the zero-padded tail;
 * the length, the seed and two rounds of a 64-bit finaliser close it. Because
 * every step is a bijection of the state, two inputs of the same length that
 * fit in one block never collide.
 *
 * It is fast and well mixed, not collision-resistant against an adversary who
 * chooses inputs: event sources are trusted hosts. The constants and the
 * algorithm are part of the ledger format and must never change. */
#include "tally/event.h"

#define LANE_A_MUL  0x9e3779b97f4a7c15ull
#define LANE_B_MUL  0xd1b54a32d192ed03ull
#define SEED_A      0x8bb84b93962eacc9ull
#define SEED_B      0x4b33a62ed433d4a3ull
#define LEN_MUL     0xa0761d6478bd642full
#define FINAL_MUL_1 0xbf58476d1ce4e5b9ull
#define FINAL_MUL_2 0x94d049bb133111ebull

static inline uint64_t rotl64(uint64_t x, unsigned r)
{
    return (x << r) | (x >> (64 - r));
}

/* Explicit little-endian load; compilers turn it into one move on x86-64. */
static inline uint64_t load_le64(const unsigned char *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 |
           (uint64_t)p[7] << 56;
}

/* Loads n (0..8) bytes little-endian, zero-padded. */
static inline uint64_t load_le_partial(const unsigned char *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static inline uint64_t finalise64(uint64_t x)
{
    x ^= x >> 31;
    x *= FINAL_MUL_1;
    x ^= x >> 27;
    x *= FINAL_MUL_2;
    x ^= x >> 33;
    return x;
}

/* Absorbs one block (x, y) into the state (a, b). */
static inline void absorb(uint64_t *a, uint64_t *b, uint64_t x, uint64_t y)
{
    uint64_t la = (*a ^ x) * LANE_A_MUL;
    uint64_t lb = (*b ^ y) * LANE_B_MUL;
    la ^= la >> 32;
    lb ^= lb >> 29;
    la += lb;
    lb ^= rotl64(la, 21);
    *a = la;
    *b = lb;
}

void tally_hash128(const void *data, size_t len, uint64_t seed, uint64_t out[2])
{
    const unsigned char *p = data;
    uint64_t a = seed ^ SEED_A;
    uint64_t b = rotl64(seed, 32) ^ SEED_B;
    size_t n = len;

    for (; n >= 16; n -= 16, p += 16)
        absorb(&a, &b, load_le64(p), load_le64(p + 8));
    if (n > 0) {
        uint64_t x = load_le_partial(p, n < 8 ? n : 8);
        uint64_t y = n > 8 ? load_le_partial(p + 8, n - 8) : 0;
        absorb(&a, &b, x, y);
    }

    a ^= (uint64_t)len * LEN_MUL;
    b ^= seed;
    a += b;
    b += a;
    a = finalise64(a);
    b = finalise64(b ^ LANE_A_MUL);
    a += b;
    b += a;
    out[0] = a;
    out[1] = b;
}
