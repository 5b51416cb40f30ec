/* libFuzzer target for a dedupe window's content (ledger/run_codec.c), as an
 * edited ledger file could hold it: any bytes either decode, record by
 * record and never past their end, or are refused; what decodes codes back
 * to the same records, in no more bytes; and coding is a function of the
 * records (so a window's row follows from its ids alone). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../ledger/run_codec_int.h"

#define RECS_MAX 480

/* Decodes whole records from p until max are decoded (recs has room for
 * RC_GROUP_MAX more) or a header is refused; returns how many, and the
 * bytes they took in *used. */
static size_t decode(const uint8_t *p, size_t size, size_t max, rc_rec *recs, size_t *used)
{
    rc_state st;
    rc_init(&st);
    size_t at = 0, n = 0;
    while (at < size && n < max) {
        rc_rec g[RC_GROUP_MAX];
        size_t k, len = rc_decode(&st, p + at, size - at, g, &k);
        if (len == 0)
            break;
        if (len > size - at || k < 1 || k > RC_GROUP_MAX)
            abort();
        for (size_t i = 0; i < k; i++)
            if (g[i].hash > RC_HASH_MASK)
                abort();
        memcpy(recs + n, g, k * sizeof g[0]);
        at += len;
        n += k;
    }
    *used = at;
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static rc_rec recs[RECS_MAX + RC_GROUP_MAX], back[RECS_MAX + RC_GROUP_MAX];
    static uint8_t again[(RECS_MAX + RC_GROUP_MAX) * RC_REC_MAX];
    static uint8_t twice[(RECS_MAX + RC_GROUP_MAX) * RC_REC_MAX];
    size_t used, used2, used3;
    size_t n = decode(data, size, RECS_MAX, recs, &used);
    size_t len = rc_encode(recs, n, again);
    if (len > used)
        abort(); /* the coder's grouping is never longer than another one */
    if (decode(again, len, SIZE_MAX, back, &used2) != n || used2 != len ||
        memcmp(back, recs, n * sizeof recs[0]) != 0)
        abort(); /* what was decoded codes back to the same records */
    if (rc_encode(back, n, twice) != len || memcmp(twice, again, len) != 0 ||
        decode(twice, len, SIZE_MAX, back, &used3) != n)
        abort(); /* and the coding is a function of the records */
    return 0;
}
