/* Tests for the outbox (ledger/outbox.c, schemas/003_outbox.sql): events
 * written inside the caller's transaction as complete CloudEvents, listing
 * pending events, stamping them sent, the invoice engine's helpers, and the
 * triggers that keep announced events as they were. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "../../ledger/ledger_int.h"
#include "tally/outbox.h"
#include "tally/ledger_sql.h"

static tally_ledger *open_fresh(const char *tag)
{
    char path[600], why[256] = "";
    tally_ledger *l = NULL;
    snprintf(path, sizeof path, "%s/t.db", tu_tmpdir(tag));
    if (tally_ledger_open(path, &l, why, sizeof why) != TALLY_OK)
        fail_msg("open: %s", why);
    return l;
}

/* A minimal finalized document of the given type. */
static const char *doc_of(char *buf, size_t cap, const char *type, const char *id,
                          const char *account, const char *refers_to)
{
    char extra[128] = "";
    tally_buf acct;
    tally_buf_init(&acct, 0);
    assert_int_equal(tally_buf_json_str(&acct, account), TALLY_OK);
    if (refers_to)
        snprintf(extra, sizeof extra, ",\"refers_to\":\"%s\",\"reason\":\"typo\"", refers_to);
    snprintf(buf, cap,
             "{\"invoice_id\":\"%s\",\"type\":\"%s\",\"number\":1,\"account\":%s,"
             "\"status\":\"finalized\",\"issued_at\":\"2026-04-01T00:00:05Z\",\"lines\":[],"
             "\"amount_due\":\"1.00\"%s}",
             id, type, acct.data, extra);
    tally_buf_release(&acct);
    return buf;
}

typedef struct collected {
    size_t n;
    int64_t ids[16];
    char event_ids[16][64];
    char payloads[16][2048];
    int64_t sent[16];
} collected;

static tally_err collect(void *ctx, const tally_outbox_event *ev)
{
    collected *c = ctx;
    if (c->n == 16)
        return TALLY_TOO_LARGE;
    c->ids[c->n] = ev->id;
    snprintf(c->event_ids[c->n], sizeof c->event_ids[0], "%s", ev->event_id);
    snprintf(c->payloads[c->n], sizeof c->payloads[0], "%.*s", (int)ev->len, ev->payload);
    c->sent[c->n] = ev->sent_at_s;
    c->n++;
    return TALLY_OK;
}

static void pending(tally_ledger *l, int64_t after, size_t max, collected *c)
{
    memset(c, 0, sizeof *c);
    assert_int_equal(tally_outbox_pending(l, after, max, collect, c), TALLY_OK);
}

static tally_err add_one(tally_ledger *l, const char *event_id, const char *doc)
{
    assert_int_equal(ledger_begin(l), TALLY_OK);
    tally_err e = ledger_outbox_add(l, "invoice.finalized", "acct-1", event_id, doc, strlen(doc));
    if (e == TALLY_OK)
        assert_int_equal(ledger_commit(l), TALLY_OK);
    else
        ledger_rollback(l);
    return e;
}

static void test_add_builds_cloudevent(void **state)
{
    (void)state;
    tally_ledger *l = open_fresh("outbox-add");
    char doc[512];
    doc_of(doc, sizeof doc, "invoice", "INV-2026-000001", "acct-1", NULL);
    assert_int_equal(add_one(l, "invoice.finalized:INV-2026-000001", doc), TALLY_OK);
    collected c;
    pending(l, 0, 0, &c);
    assert_int_equal(c.n, 1);
    char want[1024];
    snprintf(want, sizeof want,
             "{\"specversion\":\"1.0\",\"id\":\"invoice.finalized:INV-2026-000001\","
             "\"source\":\"tally\",\"type\":\"invoice.finalized\",\"subject\":\"acct-1\","
             "\"time\":\"2026-04-01T00:00:05Z\",\"datacontenttype\":\"application/json\","
             "\"data\":%s}",
             doc);
    assert_string_equal(c.payloads[0], want);
    assert_int_equal(c.sent[0], 0);

    /* The same event again: EXISTS; other content under the id: refused. */
    assert_int_equal(add_one(l, "invoice.finalized:INV-2026-000001", doc), TALLY_EXISTS);
    doc_of(doc, sizeof doc, "invoice", "INV-2026-000001", "acct-2", NULL);
    assert_int_equal(add_one(l, "invoice.finalized:INV-2026-000001", doc), TALLY_EXISTS_DIFFERENT);
    pending(l, 0, 0, &c);
    assert_int_equal(c.n, 1);
    tally_ledger_close(l);
}

static void test_add_needs_transaction_and_json(void **state)
{
    (void)state;
    tally_ledger *l = open_fresh("outbox-bad");
    const char *ok = "{\"a\":1}";
    /* Outside a transaction the event could outlive a rolled-back change. */
    assert_int_equal(ledger_outbox_add(l, "t", "s", "t:1", ok, strlen(ok)), TALLY_INVAL);
    const char *bad[] = {"",
                         "{",
                         "{\"a\":1} x",
                         "[1,2]",
                         "\"str\"",
                         "{'a':1}",
                         "{\"a\":01}",
                         "{\"a\":1}{}",
                         "{\"\xff\":1}",
                         "nul",
                         "{\"a\":1,}",
                         "{\"a\":NaN}",
                         "{\"a\":Infinity}",
                         "{\"a\":\"\t\"}",
                         "{\"a\":1.}",
                         "{\"a\":-}",
                         "{\"a\":\"\\x\"}",
                         "{\"a\":\"\\u12\"}",
                         "{\"a\":[1,]}",
                         "{\"a\":\"\xc0\xaf\"}",
                         "{\"a\":\"\xed\xa0\x80\"}",
                         "{\"a\":\"\xf4\x90\x80\x80\"}",
                         "{\"a\":+1}",
                         "{a:1}",
                         "{\"a\" 1}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char id[32];
        snprintf(id, sizeof id, "t:%zu", i);
        assert_int_equal(ledger_begin(l), TALLY_OK);
        tally_err e = ledger_outbox_add(l, "t", "s", id, bad[i], strlen(bad[i]));
        ledger_rollback(l);
        if (e != TALLY_PARSE)
            fail_msg("doc %zu (%s): %s", i, bad[i], tally_err_name(e));
    }
    /* Nesting is capped at 64 levels: the object and 63 arrays pass, 64 do not. */
    for (int arrays = 63; arrays <= 64; arrays++) {
        char deep[160];
        int n = snprintf(deep, sizeof deep, "{\"a\":");
        for (int k = 0; k < arrays; k++)
            deep[n++] = '[';
        for (int k = 0; k < arrays; k++)
            deep[n++] = ']';
        deep[n++] = '}';
        assert_int_equal(ledger_begin(l), TALLY_OK);
        assert_int_equal(ledger_outbox_add(l, "t", "s", "t:deep", deep, (size_t)n),
                         arrays == 63 ? TALLY_OK : TALLY_PARSE);
        ledger_rollback(l);
    }
    /* RFC 8259 in full: escapes, numbers, UTF-8, nesting, whitespace. */
    const char *good = " {\"a\" : [1, -0, 0.5, -12.25e+3, 1E-2, true, false, null, {}, []],"
                       "\"s\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\xc3\xa9\xe4\xb8\xad"
                       "\xf0\x9f\x92\xb0\",\"\":{\"b\":[[[\"x\"]]]}}\r\n";
    assert_int_equal(ledger_begin(l), TALLY_OK);
    assert_int_equal(ledger_outbox_add(l, "t", "s", "t:good", good, strlen(good)), TALLY_OK);
    ledger_rollback(l);
    assert_int_equal(ledger_begin(l), TALLY_OK);
    assert_int_equal(ledger_outbox_add(l, "", "s", "t:x", ok, strlen(ok)), TALLY_INVAL);
    assert_int_equal(ledger_outbox_add(l, "t", "", "t:x", ok, strlen(ok)), TALLY_INVAL);
    assert_int_equal(ledger_outbox_add(l, "t", "s", "", ok, strlen(ok)), TALLY_INVAL);
    assert_int_equal(ledger_outbox_add(l, "t", "s", NULL, ok, strlen(ok)), TALLY_INVAL);
    /* Trailing whitespace is still one JSON object. */
    assert_int_equal(ledger_outbox_add(l, "t", "s", "t:ws", "{\"a\":1}\n", 8), TALLY_OK);
    ledger_rollback(l);
    int64_t p = -1, s = -1;
    assert_int_equal(tally_outbox_counts(l, &p, &s), TALLY_OK);
    assert_int_equal(p, 0);
    assert_int_equal(s, 0);
    tally_ledger_close(l);
}

static void test_rollback_drops_event(void **state)
{
    (void)state;
    tally_ledger *l = open_fresh("outbox-rollback");
    char doc[512];
    doc_of(doc, sizeof doc, "invoice", "INV-2026-000001", "acct-1", NULL);
    assert_int_equal(ledger_begin(l), TALLY_OK);
    assert_int_equal(
        ledger_outbox_invoice_finalized(l, "INV-2026-000001", "acct-1", doc, strlen(doc)),
        TALLY_OK);
    ledger_rollback(l);
    int64_t p = -1;
    assert_int_equal(tally_outbox_counts(l, &p, NULL), TALLY_OK);
    assert_int_equal(p, 0);
    tally_ledger_close(l);
}

static void test_helpers(void **state)
{
    (void)state;
    tally_ledger *l = open_fresh("outbox-helpers");
    char inv[512], cn[512];
    doc_of(inv, sizeof inv, "invoice", "INV-2026-000007", "acct \"q\"", NULL);
    doc_of(cn, sizeof cn, "credit_note", "CN-2026-000001", "acct \"q\"", "INV-2026-000007");
    assert_int_equal(ledger_begin(l), TALLY_OK);
    /* Wiring checks: the document must be the one named. */
    assert_int_equal(
        ledger_outbox_invoice_finalized(l, "INV-2026-000008", "acct \"q\"", inv, strlen(inv)),
        TALLY_INVAL);
    assert_int_equal(ledger_outbox_invoice_finalized(l, "INV-2026-000007", "b", inv, strlen(inv)),
                     TALLY_INVAL);
    assert_int_equal(
        ledger_outbox_invoice_finalized(l, "CN-2026-000001", "acct \"q\"", cn, strlen(cn)),
        TALLY_INVAL);
    assert_int_equal(ledger_outbox_invoice_voided(l, "INV-2026-000009", "CN-2026-000001",
                                                  "acct \"q\"", cn, strlen(cn)),
                     TALLY_INVAL);
    assert_int_equal(
        ledger_outbox_invoice_finalized(l, "INV-2026-000007", "acct \"q\"", inv, strlen(inv)),
        TALLY_OK);
    assert_int_equal(ledger_outbox_invoice_voided(l, "INV-2026-000007", "CN-2026-000001",
                                                  "acct \"q\"", cn, strlen(cn)),
                     TALLY_OK);
    assert_int_equal(ledger_commit(l), TALLY_OK);

    collected c;
    pending(l, 0, 0, &c);
    assert_int_equal(c.n, 3);
    assert_string_equal(c.event_ids[0], "invoice.finalized:INV-2026-000007");
    assert_string_equal(c.event_ids[1], "creditnote.issued:CN-2026-000001");
    assert_string_equal(c.event_ids[2], "invoice.voided:INV-2026-000007");
    assert_true(c.ids[0] < c.ids[1] && c.ids[1] < c.ids[2]);
    char want[2048];
    snprintf(want, sizeof want,
             "{\"specversion\":\"1.0\",\"id\":\"invoice.voided:INV-2026-000007\","
             "\"source\":\"tally\",\"type\":\"invoice.voided\",\"subject\":\"acct \\\"q\\\"\","
             "\"time\":\"2026-04-01T00:00:05Z\",\"datacontenttype\":\"application/json\","
             "\"data\":{\"invoice_id\":\"INV-2026-000007\",\"credit_note_id\":\"CN-2026-000001\","
             "\"account\":\"acct \\\"q\\\"\",\"voided_at\":\"2026-04-01T00:00:05Z\","
             "\"credit_note\":%s}}",
             cn);
    assert_string_equal(c.payloads[2], want);
    assert_non_null(strstr(c.payloads[1], cn));
    assert_non_null(strstr(c.payloads[0], inv));

    /* after_id and max page through the pending events. */
    pending(l, c.ids[0], 1, &c);
    assert_int_equal(c.n, 1);
    assert_string_equal(c.event_ids[0], "creditnote.issued:CN-2026-000001");
    tally_ledger_close(l);
}

/* The wiring check reads the document's top-level members without a json-c
 * tree when none of them is escaped: it must decide as json-c would. */
static tally_err finalized(tally_ledger *l, const char *id, const char *account, const char *doc)
{
    return ledger_outbox_invoice_finalized(l, id, account, doc, strlen(doc));
}

static void test_helpers_scan(void **state)
{
    (void)state;
    tally_ledger *l = open_fresh("outbox-scan");
    char inv[512];
    doc_of(inv, sizeof inv, "invoice", "INV-2026-000010", "plain", NULL);
    assert_int_equal(ledger_begin(l), TALLY_OK);
    assert_int_equal(finalized(l, "INV-2026-000010", "plainx", inv), TALLY_INVAL);
    assert_int_equal(finalized(l, "INV-2026-000010", "plai", inv), TALLY_INVAL);
    assert_int_equal(finalized(l, "INV-2026-00001", "plain", inv), TALLY_INVAL);
    /* The last of duplicate keys counts (as json-c keeps it); members of
     * nested objects do not; a member that is not a string is absent. */
    const char *dup = " { \"invoice_id\" : \"INV-1\" , \"type\":\"invoice\",\"account\":\"a\","
                      "\"x\":{\"account\":\"c\",\"status\":1},\"account\":\"b\",\"status\":"
                      "\"finalized\",\"issued_at\":\"2026-04-01T00:00:07Z\"} ";
    assert_int_equal(finalized(l, "INV-1", "a", dup), TALLY_INVAL);
    assert_int_equal(finalized(l, "INV-1", "c", dup), TALLY_INVAL);
    const char *num = "{\"invoice_id\":\"INV-2\",\"type\":\"invoice\",\"account\":\"b\","
                      "\"status\":true}";
    assert_int_equal(finalized(l, "INV-2", "b", num), TALLY_INVAL);
    /* An escape in a member the check does not read keeps the scan. */
    const char *esc = "{\"invoice_id\":\"INV-3\",\"type\":\"invoice\",\"account\":\"b\","
                      "\"note\":\"\\u0041\",\"status\":\"finalized\"}";
    assert_int_equal(finalized(l, "INV-1", "b", dup), TALLY_OK);
    assert_int_equal(finalized(l, "INV-3", "b", esc), TALLY_OK);
    /* An escaped value the check reads is decoded (json-c): \u0062 is b. */
    const char *dec = "{\"invoice_id\":\"INV-4\",\"type\":\"invoice\",\"account\":\"\\u0062\","
                      "\"status\":\"finalized\"}";
    assert_int_equal(finalized(l, "INV-4", "b", dec), TALLY_OK);
    assert_int_equal(finalized(l, "INV-2026-000010", "plain", inv), TALLY_OK);
    assert_int_equal(ledger_commit(l), TALLY_OK);
    collected c;
    pending(l, 0, 0, &c);
    assert_int_equal(c.n, 4);
    assert_non_null(strstr(c.payloads[0], "\"time\":\"2026-04-01T00:00:07Z\""));
    assert_non_null(strstr(c.payloads[1], "\"time\":\"2026-04-02T00:00:00Z\"")); /* none: now */
    assert_non_null(strstr(c.payloads[3], "\"time\":\"2026-04-01T00:00:05Z\""));
    tally_ledger_close(l);
}

static void test_mark_sent(void **state)
{
    (void)state;
    tally_ledger *l = open_fresh("outbox-mark");
    const char *doc = "{\"x\":true}";
    char id[32];
    for (int i = 0; i < 4; i++) {
        snprintf(id, sizeof id, "t:%d", i);
        assert_int_equal(add_one(l, id, doc), TALLY_OK);
    }
    collected c;
    pending(l, 0, 0, &c);
    assert_int_equal(c.n, 4);
    int64_t first = c.ids[0];
    assert_int_equal(tally_outbox_mark_sent(l, first, 100), TALLY_OK);
    /* Again, later: OK, and the first stamp stays. */
    assert_int_equal(tally_outbox_mark_sent(l, first, 200), TALLY_OK);
    assert_int_equal(tally_outbox_mark_sent(l, 999, 100), TALLY_NOT_FOUND);
    assert_int_equal(tally_outbox_mark_sent(l, first, 0), TALLY_INVAL);
    /* A batch naming an unknown event stamps nothing. */
    int64_t batch[] = {c.ids[1], 999};
    assert_int_equal(tally_outbox_mark_sent_batch(l, batch, 2, 300), TALLY_NOT_FOUND);
    pending(l, 0, 0, &c);
    assert_int_equal(c.n, 3);
    int64_t batch2[] = {c.ids[0], c.ids[1]};
    assert_int_equal(tally_outbox_mark_sent_batch(l, batch2, 2, 300), TALLY_OK);
    assert_int_equal(tally_outbox_mark_sent_batch(l, NULL, 0, 300), TALLY_OK);
    pending(l, 0, 0, &c);
    assert_int_equal(c.n, 1);
    assert_string_equal(c.event_ids[0], "t:3");
    int64_t p = 0, s = 0;
    assert_int_equal(tally_outbox_counts(l, &p, &s), TALLY_OK);
    assert_int_equal(p, 1);
    assert_int_equal(s, 3);

    memset(&c, 0, sizeof c);
    assert_int_equal(tally_outbox_list(l, collect, &c), TALLY_OK);
    assert_int_equal(c.n, 4);
    assert_int_equal(c.sent[0], 100);
    assert_int_equal(c.sent[1], 300);
    assert_int_equal(c.sent[3], 0);
    tally_ledger_close(l);
}

static void test_triggers(void **state)
{
    (void)state;
    tally_ledger *l = open_fresh("outbox-triggers");
    const char *doc = "{\"x\":1}";
    assert_int_equal(add_one(l, "t:1", doc), TALLY_OK);
    assert_int_equal(add_one(l, "t:2", doc), TALLY_OK);
    assert_int_equal(tally_outbox_mark_sent(l, 1, 100), TALLY_OK);
    collected before;
    memset(&before, 0, sizeof before);
    assert_int_equal(tally_outbox_list(l, collect, &before), TALLY_OK);
    const char *refused[] = {
        "UPDATE outbox SET payload = x'00' WHERE id = 2",
        "UPDATE outbox SET event_id = 'other' WHERE id = 2",
        "UPDATE outbox SET type = 'other' WHERE id = 2",
        "UPDATE outbox SET subject = 'other' WHERE id = 2",
        "UPDATE outbox SET created_at = 1 WHERE id = 2",
        "UPDATE outbox SET id = 50 WHERE id = 2",
        "UPDATE outbox SET sent_at = NULL WHERE id = 1",
        "UPDATE outbox SET sent_at = 50 WHERE id = 1",
        "UPDATE outbox SET sent_at = 500 WHERE id = 1",
        "UPDATE outbox SET sent_at = NULL WHERE id = 2",
        "DELETE FROM outbox WHERE id = 1",
        "DELETE FROM outbox",
        "INSERT OR REPLACE INTO outbox(event_id, type, subject, payload, created_at) "
        "VALUES ('t:1', 't', 's', x'00', 1)",
        "INSERT OR REPLACE INTO outbox(id, event_id, type, subject, payload, created_at) "
        "VALUES (2, 't:9', 't', 's', x'00', 1)",
        "INSERT INTO outbox(event_id, type, subject, payload, created_at) "
        "VALUES ('', 't', 's', x'00', 1)",
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        if (tally_ledger_exec(l, refused[i]) == TALLY_OK)
            fail_msg("not refused: %s", refused[i]);
    collected c;
    memset(&c, 0, sizeof c);
    assert_int_equal(tally_outbox_list(l, collect, &c), TALLY_OK);
    assert_int_equal(c.n, 2);
    assert_int_equal(c.sent[0], 100);
    assert_int_equal(c.sent[1], 0);
    assert_string_equal(c.event_ids[1], "t:2");
    assert_memory_equal(&c, &before, sizeof c);
    /* The one change allowed: NULL -> a time. */
    assert_int_equal(tally_ledger_exec(l, "UPDATE outbox SET sent_at = 7 WHERE id = 2"), TALLY_OK);
    tally_ledger_close(l);
}

static void test_source_override(void **state)
{
    (void)state;
    tally_ledger *l = open_fresh("outbox-source");
    setenv("TALLY_EVENT_SOURCE", "//billing.example/tally", 1);
    assert_int_equal(add_one(l, "t:1", "{}"), TALLY_OK);
    setenv("TALLY_EVENT_SOURCE", "bad source", 1); /* not printable without spaces */
    assert_int_equal(add_one(l, "t:2", "{}"), TALLY_OK);
    unsetenv("TALLY_EVENT_SOURCE");
    collected c;
    pending(l, 0, 0, &c);
    assert_int_equal(c.n, 2);
    assert_non_null(strstr(c.payloads[0], "\"source\":\"//billing.example/tally\""));
    assert_non_null(strstr(c.payloads[1], "\"source\":\"tally\""));
    tally_ledger_close(l);
}

int main(void)
{
    setenv("TALLY_NOW", "2026-04-02T00:00:00Z", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_builds_cloudevent),
        cmocka_unit_test(test_add_needs_transaction_and_json),
        cmocka_unit_test(test_rollback_drops_event),
        cmocka_unit_test(test_helpers),
        cmocka_unit_test(test_helpers_scan),
        cmocka_unit_test(test_mark_sent),
        cmocka_unit_test(test_triggers),
        cmocka_unit_test(test_source_override),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
