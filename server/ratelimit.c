/* Per-key rate limits on event ingest: one token bucket per API key id.
 *
 * A bucket holds up to burst events and refills at rate events a second;
 * a request costs its number of events (at most burst, so that a request
 * larger than the burst passes on a full bucket instead of never). Tokens
 * are kept in thousandths of an event, refilled from a monotonic clock in
 * integers. Buckets live in one array sorted by key id; there is one per
 * key that ever sent events to this process, which the api_keys table
 * bounds. */
#include <stdlib.h>
#include <string.h>

#include "server_int.h"

#define MILLI 1000

/* The bucket of key_id, made full on first use; NULL without memory. */
static srv_bucket *bucket_of(srv_ratelimit *rl, int64_t key_id, int64_t now_us)
{
    size_t lo = 0, hi = rl->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (rl->buckets[mid].key_id < key_id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < rl->n && rl->buckets[lo].key_id == key_id)
        return &rl->buckets[lo];
    if (rl->n == rl->alloc) {
        size_t alloc = rl->alloc ? 2 * rl->alloc : 16;
        srv_bucket *nb = realloc(rl->buckets, alloc * sizeof *nb);
        if (!nb)
            return NULL;
        rl->buckets = nb;
        rl->alloc = alloc;
    }
    memmove(&rl->buckets[lo + 1], &rl->buckets[lo], (rl->n - lo) * sizeof *rl->buckets);
    rl->n++;
    rl->buckets[lo] =
        (srv_bucket){.key_id = key_id, .tokens_milli = rl->burst * MILLI, .at_us = now_us};
    return &rl->buckets[lo];
}

int64_t srv_ratelimit_take(srv_ratelimit *rl, int64_t key_id, int64_t events, int64_t now_us)
{
    if (rl->rate <= 0 || events <= 0)
        return 0;
    srv_bucket *b = bucket_of(rl, key_id, now_us);
    if (!b)
        return 0; /* out of memory: the limit is not worth failing the request for */
    int64_t full = rl->burst * MILLI;
    int64_t elapsed_us = now_us - b->at_us;
    if (elapsed_us > 0) {
        /* rate <= SRV_RATE_MAX and elapsed capped at 1000 s: fits in int64 */
        int64_t add = (elapsed_us < 1000000000 ? elapsed_us : 1000000000) * rl->rate / 1000;
        b->tokens_milli = b->tokens_milli + add > full ? full : b->tokens_milli + add;
        b->at_us = now_us;
    }
    int64_t cost = (events < rl->burst ? events : rl->burst) * MILLI;
    if (b->tokens_milli >= cost) {
        b->tokens_milli -= cost;
        return 0;
    }
    int64_t deficit = cost - b->tokens_milli;
    int64_t per_s = rl->rate * MILLI;
    return (deficit + per_s - 1) / per_s; /* whole seconds until it fits */
}

void srv_ratelimit_release(srv_ratelimit *rl)
{
    free(rl->buckets);
    rl->buckets = NULL;
    rl->n = rl->alloc = 0;
}
