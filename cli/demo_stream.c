#include "demo_stream.h"

#include <stdio.h>
#include <string.h>

#include "tally/event.h"

const demo_step demo_setup[] = {
    /* Trusted customers: billed in arrears with a credit line, so their vouchers and
     * coupons running out suspends nothing (a stop mark of -100,000.00). */
    {{"account", "set", "acme-ai", "--name", "Acme AI Ltd", "--stop-at", "-100000.00", NULL}},
    {{"account", "set", "nebula-labs", "--name", "Nebula Labs", NULL}},
    {{"account", "set", "orbit-research", "--name", "Orbit Research Institute", "--stop-at",
      "-100000.00", NULL}},
    /* Under spend control before its first usage (cli/demo_balance.c): its trial ended on
     * 2026-03-31, so its usage after that is owed; low once it owes anything, suspended at
     * 1.00 owed. Set before the grant, so the grant itself crosses nothing. */
    {{"account", "set", "lotus-startup", "--name", "Lotus Startup", "--timezone", "Asia/Shanghai",
      "--low-balance", "0.00", "--stop-at", "-1.00", NULL}},
    {{"account", "set", "pixel-storage", "--name", "Pixel Storage Co", NULL}},
    {{"spot", "set", "rtx4090", "0.80", "--from", "2026-03-10T12:00:00Z", NULL}},
    {{"commit", "add", "orbit-research", "--sku", "h100", "--cards", "4", "--from",
      "2026-03-01T00:00:00Z", "--to", "2026-04-01T00:00:00Z", NULL}},
    {{"credit", "grant", "orbit-research", "500.00", "--kind", "coupon", "--priority", "20",
      "--effective", "2026-03-01T00:00:00Z", "--scope",
      "sku=a100-40g|a100-80g|h100,pricing=reserved", NULL}},
    {{"credit", "grant", "lotus-startup", "10.00", "--kind", "trial", "--priority", "10",
      "--effective", "2026-03-01T00:00:00Z", "--expires", "2026-03-31T00:00:00Z", NULL}},
    {{"credit", "grant", "acme-ai", "10.00", "--kind", "trial", "--priority", "10", "--effective",
      "2026-03-01T00:00:00Z", "--expires", "2026-03-31T00:00:00Z", NULL}},
    {{NULL}},
};

typedef struct gen {
    demo_emit_fn emit;
    void *ctx;
    long seq;
    char msg[1024];
} gen;

static tally_err send(gen *g, const char *account, int len)
{
    if (len < 0 || (size_t)len >= sizeof g->msg)
        return TALLY_TOO_LARGE;
    return g->emit(g->ctx, account, g->msg, (size_t)len);
}

static tally_err accel(gen *g, const char *account, const char *host, const char *instance,
                       const char *sku, const char *pricing, int cards, int64_t t, int seconds,
                       int migration)
{
    char ts[32];
    if (tally_time_format(t, ts, sizeof ts))
        return TALLY_RANGE;
    int n = snprintf(g->msg, sizeof g->msg,
                     "{\"specversion\":\"1.0\",\"id\":\"%s-%08ld\",\"source\":\"//hosts/%s\","
                     "\"type\":\"accelerator.usage\",\"subject\":\"%s\",\"time\":\"%s\","
                     "\"datacontenttype\":\"application/json\",\"data\":{\"instance\":\"%s\","
                     "\"sku\":\"%s\",\"pricing\":\"%s\",\"cards\":%d,\"seconds\":%d%s}}",
                     host, ++g->seq, host, account, ts, instance, sku, pricing, cards, seconds,
                     migration ? ",\"migration\":true" : "");
    return send(g, account, n);
}

/* count events of `seconds` each, back to back from t. */
static tally_err run(gen *g, const char *account, const char *host, const char *instance,
                     const char *sku, const char *pricing, int cards, int64_t t, int count,
                     int seconds, int migration)
{
    tally_err e = TALLY_OK;
    for (int i = 0; i < count && !e; i++)
        e = accel(g, account, host, instance, sku, pricing, cards, t + (int64_t)i * seconds,
                  seconds, migration);
    return e;
}

static tally_err other(gen *g, const char *account, const char *host, const char *type, int64_t t,
                       const char *data)
{
    char ts[32];
    if (tally_time_format(t, ts, sizeof ts))
        return TALLY_RANGE;
    int n = snprintf(g->msg, sizeof g->msg,
                     "{\"specversion\":\"1.0\",\"id\":\"%s-%08ld\",\"source\":\"//hosts/%s\","
                     "\"type\":\"%s\",\"subject\":\"%s\",\"time\":\"%s\",\"data\":%s}",
                     host, ++g->seq, host, type, account, ts, data);
    return send(g, account, n);
}

#define T(s) demo_time(s)
static int64_t demo_time(const char *s)
{
    int64_t t = 0;
    return tally_time_parse(s, strlen(s), &t) == TALLY_OK ? t : 0;
}

static tally_err acme(gen *g)
{
    /* PRICEBOOK: 8 x a100-40g on demand for 2 h 37 min 12 s -> 39.82, per-second events. */
    tally_err e = run(g, "acme-ai", "gpu-node-07", "i-acme-train-1", "a100-40g", "on_demand", 8,
                      T("2026-03-03T09:00:00Z"), 9432, 1, 0);
    /* PRICEBOOK: one h100 for 20 s, billed as the 60 s minimum -> 0.04. */
    if (!e)
        e = run(g, "acme-ai", "gpu-node-11", "i-acme-probe", "h100", "on_demand", 1,
                T("2026-03-05T14:00:00Z"), 20, 1, 0);
    for (int d = 0; d < 20 && !e; d++) {
        char data[160];
        snprintf(data, sizeof data, "{\"model\":\"qwen-72b\",\"kind\":\"%s\",\"tokens\":\"%d\"}",
                 d % 2 ? "output" : "input", 250000 + d * 1000);
        e = other(g, "acme-ai", "api-gw-1", "tokens.usage", T("2026-03-06T00:00:00Z") + d * 3600,
                  data);
    }
    return e;
}

static tally_err nebula(gen *g)
{
    /* PRICEBOOK: one rtx4090 on spot 11:30-12:30, price 0.50 -> 0.80 at 12:00 -> 0.65. Sent as
     * 60-second events; the one spanning 12:00 is split by the rating. */
    tally_err e = accel(g, "nebula-labs", "gpu-node-21", "i-neb-spot-1", "rtx4090", "spot", 1,
                        T("2026-03-10T11:30:00Z"), 30, 0);
    if (!e)
        e = run(g, "nebula-labs", "gpu-node-21", "i-neb-spot-1", "rtx4090", "spot", 1,
                T("2026-03-10T11:30:30Z"), 59, 60, 0);
    if (!e)
        e = accel(g, "nebula-labs", "gpu-node-21", "i-neb-spot-1", "rtx4090", "spot", 1,
                  T("2026-03-10T12:29:30Z"), 30, 0);
    /* The spot node is reclaimed; the job hot-migrates: 10 insured minutes on demand. */
    if (!e)
        e = run(g, "nebula-labs", "gpu-node-03", "i-neb-mig-1", "a100-80g", "on_demand", 1,
                T("2026-03-10T12:30:00Z"), 600, 1, 1);
    for (int h = 0; h < 24 && !e; h++) {
        e = other(g, "nebula-labs", "gpu-node-21", "traffic.usage",
                  T("2026-03-10T00:00:00Z") + h * 3600,
                  "{\"resource\":\"eip-1\",\"direction\":\"egress\",\"scope\":\"internet\","
                  "\"bytes\":500000000}");
        if (!e)
            e = other(g, "nebula-labs", "gpu-node-21", "traffic.usage",
                      T("2026-03-10T00:00:00Z") + h * 3600,
                      "{\"resource\":\"rdma-0\",\"direction\":\"egress\",\"scope\":\"internal\","
                      "\"bytes\":\"40000000000\"}");
    }
    return e;
}

static tally_err orbit(gen *g)
{
    /* 4 committed h100 cards all month; used for 10 days in 5-minute events... */
    tally_err e = run(g, "orbit-research", "gpu-node-31", "i-orbit-pretrain", "h100", "reserved", 4,
                      T("2026-03-02T00:00:00Z"), 10 * 288, 300, 0);
    /* ...with a 2-hour burst of 2 more cards above the commitment (overage). */
    if (!e)
        e = run(g, "orbit-research", "gpu-node-32", "i-orbit-burst", "h100", "reserved", 2,
                T("2026-03-04T08:00:00Z"), 120, 60, 0);
    return e;
}

static tally_err lotus(gen *g)
{
    /* PRICEBOOK: tpu-v4-64 on demand for 5 h -> 9.50, paid by the 10.00 trial. The account
     * is in Asia/Shanghai: usage at 2026-03-31T17:00Z belongs to its April, not March. */
    tally_err e = run(g, "lotus-startup", "tpu-host-2", "tpu-lotus-1", "tpu-v4-64", "on_demand", 1,
                      T("2026-03-12T02:00:00Z"), 1800, 10, 0);
    if (!e)
        e = run(g, "lotus-startup", "tpu-host-2", "tpu-lotus-1", "tpu-v4-64", "on_demand", 1,
                T("2026-03-31T17:00:00Z"), 360, 10, 0);
    return e;
}

static tally_err pixel(gen *g)
{
    tally_err e = TALLY_OK;
    for (int h = 0; h < 31 * 24 && !e; h++) {
        e = other(g, "pixel-storage", "store-1", "storage.usage",
                  T("2026-03-01T00:00:00Z") + (int64_t)h * 3600,
                  "{\"volume\":\"vol-data\",\"class\":\"ssd\",\"bytes\":500000000000,"
                  "\"seconds\":3600}");
        if (!e)
            e = other(g, "pixel-storage", "store-1", "storage.usage",
                      T("2026-03-01T00:00:00Z") + (int64_t)h * 3600,
                      "{\"volume\":\"vol-archive\",\"class\":\"hdd\",\"bytes\":"
                      "\"4000000000000\",\"seconds\":3600}");
    }
    return e;
}

/* Redelivered copies (a producer retry) and poison messages. */
static tally_err faults(gen *g)
{
    long saved = g->seq;
    g->seq = 0;
    tally_err e = run(g, "acme-ai", "gpu-node-07", "i-acme-train-1", "a100-40g", "on_demand", 8,
                      T("2026-03-03T09:00:00Z"), 200, 1, 0);
    g->seq = saved;
    static const char *const poison[] = {
        "{\"specversion\":\"1.0\",\"id\":\"broken-1\"",
        "{\"specversion\":\"1.0\",\"id\":\"sku-1\",\"source\":\"//hosts/gpu-node-99\","
        "\"type\":\"accelerator.usage\",\"subject\":\"acme-ai\",\"time\":\"2026-03-07T00:00:00Z\","
        "\"data\":{\"instance\":\"i-x\",\"sku\":\"b200\",\"pricing\":\"on_demand\"}}",
        "{\"specversion\":\"1.0\",\"id\":\"neg-1\",\"source\":\"//hosts/gpu-node-99\","
        "\"type\":\"accelerator.usage\",\"subject\":\"acme-ai\",\"time\":\"2026-03-07T00:00:00Z\","
        "\"data\":{\"instance\":\"i-x\",\"sku\":\"h100\",\"pricing\":\"on_demand\",\"cards\":-2}}",
    };
    for (size_t i = 0; i < sizeof poison / sizeof *poison && !e; i++)
        e = g->emit(g->ctx, "acme-ai", poison[i], strlen(poison[i]));
    return e;
}

tally_err demo_stream(demo_emit_fn emit, void *ctx)
{
    gen g = {.emit = emit, .ctx = ctx};
    tally_err (*const parts[])(gen *) = {acme, nebula, orbit, lotus, pixel, faults};
    tally_err e = TALLY_OK;
    for (size_t i = 0; i < sizeof parts / sizeof *parts && !e; i++)
        e = parts[i](&g);
    return e;
}
