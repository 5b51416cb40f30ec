/* libFuzzer target for a dedupe window's content (ledger/run_codec.c), as an
 * edited ledger file could hold it: any bytes either decode, record by
 * record and never past their end, or are refused; and what decodes codes
 * back to the same bytes (the coding is canonical, so a window's row
 * follows from its ids alone). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../ledger/run_codec_int.h"

#define RECS_MAX 480

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static rc_rec recs[RECS_MAX];
    static uint8_t again[RECS_MAX * RC_REC_MAX];
    rc_state st;
    rc_init(&st);
    size_t at = 0, n = 0;
    while (at < size && n < RECS_MAX) {
        size_t k = rc_decode(&st, data + at, size - at, &recs[n]);
        if (k == 0)
            break;
        if (k > RC_REC_MAX || k > size - at || recs[n].hash > RC_HASH_MASK)
            abort();
        at += k;
        n++;
    }
    rc_state enc;
    rc_init(&enc);
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += rc_encode(&enc, &recs[i], again + len);
    if (len != at || memcmp(again, data, at) != 0)
        abort(); /* decoded, but not as a coder writes it */
    return 0;
}
