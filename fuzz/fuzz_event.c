/* libFuzzer target for event decoding (meter/event.c, meter/json_scan.c).
 *
 * Each input is decoded as an event; the result must be an event whose
 * strings are bounded and whose values are in range, or a rejection with a
 * known reason. The same bytes go through the differential check of the JSON
 * scanner against json-c. Build: see bench/RESULTS.md (fuzzing section). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json_differential.h"
#include "tally/event.h"

#define NOW_S 1775001600 /* 2026-04-01T00:00:00Z */

static bool bounded(const char *s, size_t cap)
{
    return strnlen(s, cap) < cap;
}

static void check_event(const tally_event *ev)
{
    if ((unsigned)ev->meter >= TALLY_METER_COUNT || ev->weight < 0 || ev->seconds < 0 ||
        ev->seconds > 86400 || ev->time_s > NOW_S + TALLY_FUTURE_SKEW_S ||
        ev->time_s < TALLY_TIME_MIN_S)
        abort();
    if (!bounded(ev->id, sizeof ev->id) || !bounded(ev->source, sizeof ev->source) ||
        !bounded(ev->account, sizeof ev->account) || !bounded(ev->resource, sizeof ev->resource) ||
        !bounded(ev->dim, sizeof ev->dim) || !bounded(ev->dim2, sizeof ev->dim2))
        abort();
    if (!ev->id[0] || !ev->source[0] || !ev->account[0] || !ev->resource[0] || !ev->dim[0])
        abort();
}

static void check_reject(const tally_reject *rej)
{
    static const char *const exact[] = {"bad_json",     "too_large", "bad_specversion",
                                        "unknown_type", "bad_time",  "out_of_range"};
    if (strnlen(rej->reason, sizeof rej->reason) == sizeof rej->reason || !rej->detail[0])
        abort();
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (strcmp(rej->reason, exact[i]) == 0)
            return;
    if ((strncmp(rej->reason, "missing:", 8) != 0 || !rej->reason[8]) &&
        (strncmp(rej->reason, "bad_field:", 10) != 0 || !rej->reason[10]))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tally_event ev;
    tally_reject rej;
    memset(&rej, 0, sizeof rej);
    tally_err err = tally_event_decode((const char *)data, size, NOW_S, &ev, &rej);
    if (err == TALLY_OK)
        check_event(&ev);
    else if (err == TALLY_PARSE || err == TALLY_TOO_LARGE)
        check_reject(&rej);
    else
        abort();
    /* an event that decodes, or fails on its values only, is valid JSON */
    json_scan s;
    bool valid = json_scan_document(&s, (const char *)data, size);
    if (err != TALLY_TOO_LARGE && strcmp(rej.reason, "bad_json") != 0 && !valid)
        abort();
    if (size <= TALLY_EVENT_MAX_BYTES && jd_compare((const char *)data, size) != NULL)
        abort();
    return 0;
}
