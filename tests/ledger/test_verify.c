/* Tests for ledger/verify.c on hand-made ledgers: a grant, two signed
 * invoices and a credit note written row by row, then tampered with in one
 * way per test. Each failure must name the first bad record. */
#include <stdio.h>
#include <string.h>

#include "../../ledger/ledger_int.h"
#include "testutil.h"
#include "tally/sign.h"
#include "tally/ledger_sql.h"

static char dir[512], key[600], other_key[600], pub[600];

/* How a fixture deviates from a correct ledger. */
enum variant { V_GOOD = 0, V_BAD_PREV, V_BAD_SUM };

typedef struct tdoc {
    const char *id, *type;
    int number;
    const char *period, *start, *end;
    const char *lines; /* the JSON array's contents */
    const char *subtotal, *applied, *total_credits, *amount_due, *refers_to;
} tdoc;

#define LINE_H100                                                                                  \
    "{\"line\":1,\"kind\":\"usage\",\"meter\":\"accelerator\",\"sku\":\"h100\",\"dim2\":\"\","     \
    "\"pricing\":\"on_demand\",\"migration\":false,\"quantity\":\"75456\",\"unit\":"               \
    "\"card-second\",\"unit_price\":\"1.90\",\"price_unit\":\"card-hour\",\"amount\":\"39.82\","   \
    "\"credits\":[{\"grant_id\":1,\"amount\":\"20.00\"}]}"
#define LINE_A100                                                                                  \
    "{\"line\":2,\"kind\":\"usage\",\"meter\":\"accelerator\",\"sku\":\"a100-40g\",\"dim2\":\"\"," \
    "\"pricing\":\"spot\",\"migration\":false,\"quantity\":\"19289\",\"unit\":\"card-second\","    \
    "\"unit_price\":\"1.90\",\"price_unit\":\"card-hour\",\"amount\":\"10.18\",\"credits\":[]}"
#define LINE_STORAGE(amt, q)                                                                       \
    "{\"line\":1,\"kind\":\"usage\",\"meter\":\"storage\",\"sku\":\"ssd\",\"dim2\":\"\","          \
    "\"pricing\":\"on_demand\",\"migration\":false,\"quantity\":\"" q "\",\"unit\":"               \
    "\"byte-second\",\"unit_price\":\"0.50\",\"price_unit\":\"GB-day\",\"amount\":\"" amt          \
    "\",\"credits\":[]}"

static const tdoc docs[] = {
    {"INV-2026-000001", "invoice", 1, "2026-03", "2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z",
     LINE_H100 "," LINE_A100, "50.00", "{\"grant_id\":1,\"kind\":\"trial\",\"amount\":\"20.00\"}",
     "20.00", "30.00", NULL},
    {"INV-2026-000002", "invoice", 2, "2026-04", "2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z",
     LINE_STORAGE("5.00", "864000000000000"), "5.00", "", "0.00", "5.00", NULL},
    {"CN-2026-000001", "credit_note", 1, "2026-04", "2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z",
     LINE_STORAGE("-5.00", "-864000000000000"), "-5.00", "", "0.00", "-5.00", "INV-2026-000002"},
};

/* Rows that are not documents: account, grant, entries, postings. */
static const char fixture_sql[] =
    "INSERT INTO accounts(id, currency, timezone, name, created_at) "
    "VALUES ('acme', 'CNY', 'UTC', 'Acme', 0);"
    "INSERT INTO grants(id, account, kind, amount_minor, currency, priority, effective_s, "
    "expires_s, scope, created_at) VALUES (1, 'acme', 'trial', 10000, 'CNY', 50, 0, NULL, '', 0);"
    "INSERT INTO entries(id, kind, ref, created_at) VALUES (1, 'grant', '1', 0), "
    "(2, 'invoice', 'INV-2026-000001', 0), (3, 'invoice', 'INV-2026-000002', 0), "
    "(4, 'void', 'CN-2026-000001', 0);"
    "INSERT INTO postings(entry_id, ledger_acct, currency, debit_minor, credit_minor) VALUES "
    "(1, 'promotions:trial', 'CNY', 10000, 0), (1, 'grant:1', 'CNY', 0, 10000), "
    "(2, 'receivable:acme', 'CNY', 3000, 0), (2, 'grant:1', 'CNY', 2000, 0), "
    "(2, 'revenue:accelerator', 'CNY', 0, 5000), "
    "(3, 'receivable:acme', 'CNY', 500, 0), (3, 'revenue:storage', 'CNY', 0, 500), "
    "(4, 'revenue:storage', 'CNY', 500, 0), (4, 'receivable:acme', 'CNY', 0, 500);";

/* The documents' line and credit rows, written after the documents. */
static const char rows_sql[] =
    "INSERT INTO invoice_lines(invoice_seq, line_no, kind, meter, pricing, migration, sku, dim2, "
    "quantity, unit_price_nano, amount_minor) VALUES "
    "(1, 1, 'usage', 0, 0, 0, 'h100', '', '75456', 1900000000, 3982), "
    "(1, 2, 'usage', 0, 1, 0, 'a100-40g', '', '19289', 1900000000, 1018), "
    "(2, 1, 'usage', 1, 0, 0, 'ssd', '', '864000000000000', 500000000, 500), "
    "(3, 1, 'usage', 1, 0, 0, 'ssd', '', '-864000000000000', 500000000, -500);"
    "INSERT INTO invoice_credits(invoice_seq, grant_id, line_no, amount_minor) "
    "VALUES (1, 1, 1, 2000);";

static int64_t minor_of(const char *s)
{
    int64_t v = 0;
    const char *why = NULL;
    assert_int_equal(tally_amount_parse(s, strlen(s), 2, true, &v, &why), TALLY_OK);
    return v;
}

/* The signed document of d chained to prev; writes its hash. */
static void make_doc(const tdoc *d, const char *prev, const char *subtotal, tally_buf *out,
                     char hash[65], char sig[129])
{
    tally_buf_reset(out);
    assert_int_equal(
        tally_buf_printf(out,
                         "{\"invoice_id\":\"%s\",\"type\":\"%s\",\"number\":%d,\"account\":"
                         "\"acme\",\"currency\":\"CNY\",\"status\":\"finalized\",\"period\":{"
                         "\"label\":\"%s\",\"start\":\"%s\",\"end\":\"%s\",\"timezone\":\"UTC\"},"
                         "\"issued_at\":\"%s\",\"lines\":[%s],\"subtotal\":\"%s\","
                         "\"credits_applied\":[%s],\"total_credits\":\"%s\",\"amount_due\":\"%s\"",
                         d->id, d->type, d->number, d->period, d->start, d->end, d->end, d->lines,
                         subtotal, d->applied, d->total_credits, d->amount_due),
        TALLY_OK);
    if (d->refers_to)
        assert_int_equal(tally_buf_printf(out, ",\"refers_to\":\"%s\",\"reason\":\"billing error\"",
                                          d->refers_to),
                         TALLY_OK);
    assert_int_equal(tally_buf_printf(out, ",\"prev_hash\":\"%s\"}", prev), TALLY_OK);
    tally_sha256_hex(out->data, out->len, hash);
    assert_int_equal(tally_sign_hash(key, hash, sig), TALLY_OK);
    out->len--;
    assert_int_equal(tally_buf_printf(out, ",\"hash\":\"%s\",\"signature\":\"%s\"}", hash, sig),
                     TALLY_OK);
}

static void insert_doc(tally_ledger *l, int seq, const tdoc *d, const char *doc, const char *hash,
                       const char *prev, const char *sig, const char *subtotal)
{
    tally_buf sql;
    tally_buf_init(&sql, 0);
    int64_t sub = minor_of(subtotal), cred = minor_of(d->total_credits);
    assert_int_equal(
        tally_buf_printf(
            &sql,
            "INSERT INTO invoices(seq, id, doc_type, year, number, account, period, currency, "
            "subtotal_minor, credits_minor, amount_due_minor, refers_to, reason, usage_seq, doc, "
            "hash, prev_hash, signature, finalized_at) VALUES (%d, '%s', '%s', 2026, %d, 'acme', "
            "'%s', 'CNY', %lld, %lld, %lld, %s%s%s, %s, 0, CAST('%s' AS BLOB), '%s', '%s', '%s', "
            "0)",
            seq, d->id, d->type, d->number, d->period, (long long)sub, (long long)cred,
            (long long)(sub - cred), d->refers_to ? "'" : "", d->refers_to ? d->refers_to : "NULL",
            d->refers_to ? "'" : "", d->refers_to ? "'billing error'" : "NULL", doc, hash, prev,
            sig),
        TALLY_OK);
    if (tally_ledger_exec(l, sql.data) != TALLY_OK)
        fail_msg("insert %s: %s", d->id, tally_ledger_errmsg(l));
    tally_buf_release(&sql);
}

/* Chains the fixture's entries, postings, documents, lines and credits a
 * row each, as the triggers of migration 9 did before migration 17. */
static const char legacy_chain_sql[] =
    "SELECT tally_chain_add('entries', rowid, tally_canon('entries', " CHAIN_COLS_ENTRIES
    ")) FROM entries;"
    "SELECT tally_chain_add('postings', rowid, tally_canon('postings', " CHAIN_COLS_POSTINGS
    ")) FROM postings;"
    "SELECT tally_chain_add('invoices', rowid, tally_canon('invoices', " CHAIN_COLS_INVOICES
    ")) FROM invoices;"
    "SELECT tally_chain_add('invoice_lines', rowid, "
    "tally_canon('invoice_lines', " CHAIN_COLS_INVOICE_LINES ")) FROM invoice_lines;"
    "SELECT tally_chain_add('invoice_credits', rowid, "
    "tally_canon('invoice_credits', " CHAIN_COLS_INVOICE_CREDITS ")) FROM invoice_credits;";

static tally_ledger *build_as(enum variant v, bool legacy)
{
    static int n;
    char path[700];
    snprintf(path, sizeof path, "%s/ledger-%d.db", dir, n++);
    tally_ledger *l = NULL;
    char why[256];
    if (tally_ledger_open(path, &l, why, sizeof why) != TALLY_OK)
        fail_msg("open: %s", why);
    if (tally_ledger_exec(l, fixture_sql) != TALLY_OK)
        fail_msg("fixture: %s", tally_ledger_errmsg(l));
    char prev[65] = "0000000000000000000000000000000000000000000000000000000000000000";
    tally_buf doc;
    tally_buf_init(&doc, 0);
    for (int i = 0; i < 3; i++) {
        const tdoc *d = &docs[i];
        const char *link = v == V_BAD_PREV && i == 1 ? docs[0].id : prev; /* not a hash */
        char fake[65];
        if (link != prev) {
            tally_sha256_hex(link, strlen(link), fake);
            link = fake;
        }
        /* V_BAD_SUM: the first invoice's subtotal (everywhere) is one fen off its lines */
        const char *subtotal = v == V_BAD_SUM && i == 0 ? "50.01" : d->subtotal;
        char hash[65], sig[129];
        make_doc(d, link, subtotal, &doc, hash, sig);
        insert_doc(l, i + 1, d, doc.data, hash, link, sig, subtotal);
        memcpy(prev, hash, sizeof prev);
    }
    tally_buf_release(&doc);
    if (tally_ledger_exec(l, rows_sql) != TALLY_OK)
        fail_msg("rows: %s", tally_ledger_errmsg(l));
    if (legacy) {
        if (tally_ledger_exec(l, legacy_chain_sql) != TALLY_OK)
            fail_msg("legacy chain: %s", tally_ledger_errmsg(l));
        return l;
    }
    /* chained as Tally's writers chain them (schemas/017_chain_groups.sql) */
    for (int64_t e = 1; e <= 4; e++)
        assert_int_equal(ledger_chain_group_add(l, LEDGER_GROUP_ENTRY, e, 0), TALLY_OK);
    for (int64_t seq = 1; seq <= 3; seq++)
        assert_int_equal(ledger_chain_group_add(l, LEDGER_GROUP_INVOICE, seq, 0), TALLY_OK);
    return l;
}

static tally_ledger *build(enum variant v)
{
    return build_as(v, false);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "%s", tu_tmpdir("verify"));
    snprintf(key, sizeof key, "%s/sign.key", dir);
    snprintf(other_key, sizeof other_key, "%s/other.key", dir);
    snprintf(pub, sizeof pub, "%s/pub.pem", dir);
    if (tally_keygen(key, 0) != TALLY_OK || tally_keygen(other_key, 0) != TALLY_OK)
        return -1;
    tally_buf pem;
    tally_buf_init(&pem, 0);
    if (tally_pubkey_pem(key, &pem) != TALLY_OK)
        return -1;
    write_text(pub, pem.data);
    tally_buf_release(&pem);
    return 0;
}

/* Runs verify and checks the outcome and that why holds want. */
static void expect(tally_ledger *l, const char *k, tally_err err, const char *want)
{
    char why[512] = "";
    tally_err got = tally_ledger_verify(l, k, why, sizeof why);
    if (got != err || !strstr(why, want))
        fail_msg("verify: %s (%s), wanted %s with \"%s\"", tally_err_name(got), why,
                 tally_err_name(err), want);
    tally_ledger_close(l);
}

static void exec_ok(tally_ledger *l, const char *sql)
{
    if (tally_ledger_exec(l, sql) != TALLY_OK)
        fail_msg("%s: %s", sql, tally_ledger_errmsg(l));
}

#define RESTORE_INVOICE_TRIGGERS                                                                   \
    "CREATE TRIGGER invoices_no_update BEFORE UPDATE ON invoices\n"                                \
    "BEGIN SELECT RAISE(ABORT, 'finalized invoices are immutable'); END;"                          \
    "CREATE TRIGGER invoices_no_delete BEFORE DELETE ON invoices\n"                                \
    "BEGIN SELECT RAISE(ABORT, 'finalized invoices are immutable'); END;"
#define DROP_INVOICE_TRIGGERS "DROP TRIGGER invoices_no_update; DROP TRIGGER invoices_no_delete;"

static void test_empty_ledger(void **state)
{
    (void)state;
    char path[700], why[512] = "";
    snprintf(path, sizeof path, "%s/empty.db", dir);
    tally_ledger *l = NULL;
    assert_int_equal(tally_ledger_open(path, &l, why, sizeof why), TALLY_OK);
    /* no documents: no key needed */
    assert_int_equal(tally_ledger_verify(l, "/nonexistent/key", why, sizeof why), TALLY_OK);
    assert_non_null(strstr(why, "0 documents"));
    tally_ledger_close(l);
}

static void test_good_ledger(void **state)
{
    (void)state;
    tally_ledger *l = build(V_GOOD);
    tu_assert_conservation(l);
    expect(l, key, TALLY_OK, "3 documents chained and signed");
    expect(build(V_GOOD), pub, TALLY_OK, "4 entries (9 postings) balanced in 1 currencies");
}

static void test_key_problems(void **state)
{
    (void)state;
    char missing[700];
    snprintf(missing, sizeof missing, "%s/missing.key", dir);
    expect(build(V_GOOD), missing, TALLY_NOT_FOUND, "needs the public key");
    expect(build(V_GOOD), other_key, TALLY_TAMPERED,
           "invoice INV-2026-000001: signature does not verify");
    char junk[700];
    snprintf(junk, sizeof junk, "%s/junk.pem", dir);
    write_text(junk, "junk\n");
    expect(build(V_GOOD), junk, TALLY_CRYPTO, "not an Ed25519");
}

static void test_triggers(void **state)
{
    (void)state;
    tally_ledger *l = build(V_GOOD);
    exec_ok(l, "DROP TRIGGER postings_no_delete");
    expect(l, key, TALLY_TAMPERED, "trigger postings_no_delete: missing");

    l = build(V_GOOD);
    exec_ok(l, "DROP TRIGGER entries_no_update; CREATE TRIGGER entries_no_update BEFORE UPDATE "
               "ON entries BEGIN SELECT 1; END;");
    expect(l, key, TALLY_TAMPERED, "trigger entries_no_update: definition differs");

    l = build(V_GOOD);
    exec_ok(l, "DROP TRIGGER postings_balance");
    expect(l, key, TALLY_TAMPERED, "trigger postings_balance: missing");

    /* a trigger that is not Tally's could rewrite rows as they land */
    l = build(V_GOOD);
    exec_ok(l, "CREATE TRIGGER sneaky AFTER INSERT ON postings BEGIN SELECT 1; END;");
    expect(l, key, TALLY_TAMPERED, "trigger sneaky: not part of Tally's schema");

    l = build(V_GOOD);
    exec_ok(l, "DROP TRIGGER grants_no_update");
    expect(l, key, TALLY_TAMPERED, "trigger grants_no_update: missing");

    /* the same SQL restored is accepted */
    l = build(V_GOOD);
    exec_ok(l, DROP_INVOICE_TRIGGERS RESTORE_INVOICE_TRIGGERS);
    expect(l, key, TALLY_OK, "3 documents");
}

static void test_double_entry(void **state)
{
    (void)state;
    tally_ledger *l = build(V_GOOD);
    exec_ok(l, "INSERT INTO postings(entry_id, ledger_acct, currency, debit_minor, credit_minor) "
               "VALUES (2, 'revenue:accelerator', 'CNY', 0, 1)");
    expect(l, key, TALLY_TAMPERED,
           "entry 2 (invoice INV-2026-000001): debits 5000 != credits 5001");

    l = build(V_GOOD);
    exec_ok(l, "PRAGMA foreign_keys = OFF; INSERT INTO postings(entry_id, ledger_acct, currency, "
               "debit_minor, credit_minor) VALUES (99, 'revenue:accelerator', 'CNY', 0, 1)");
    expect(l, key, TALLY_TAMPERED, "posting 10: entry 99 does not exist");

    l = build(V_GOOD);
    exec_ok(l, "UPDATE balances SET debit_minor = debit_minor + 100 WHERE ledger_acct = "
               "'receivable:acme'");
    expect(l, key, TALLY_TAMPERED, "balance receivable:acme CNY: stored debit 3600");

    l = build(V_GOOD);
    exec_ok(l, "DELETE FROM balances WHERE ledger_acct = 'grant:1'");
    expect(l, key, TALLY_TAMPERED, "balance grant:1 CNY: missing");

    /* a balanced entry for a document that does not exist */
    l = build(V_GOOD);
    exec_ok(l, "INSERT INTO entries(id, kind, ref, created_at) VALUES (5, 'invoice', "
               "'INV-2026-000009', 0); INSERT INTO postings(entry_id, ledger_acct, currency, "
               "debit_minor, credit_minor) VALUES (5, 'receivable:acme', 'CNY', 7, 0), "
               "(5, 'revenue:storage', 'CNY', 0, 7)");
    expect(l, key, TALLY_TAMPERED, "entry 5 (invoice INV-2026-000009): no such document");
}

static void test_documents(void **state)
{
    (void)state;
    /* one byte of a stored document changed, triggers put back */
    tally_ledger *l = build(V_GOOD);
    exec_ok(l, DROP_INVOICE_TRIGGERS
            "UPDATE invoices SET doc = CAST(replace(CAST(doc AS TEXT), '\"39.82\"', '\"39.32\"') "
            "AS BLOB) WHERE seq = 1;" RESTORE_INVOICE_TRIGGERS);
    expect(l, key, TALLY_TAMPERED,
           "invoice INV-2026-000001: stored document does not match its hash");

    /* the row's amount changed but not the document */
    l = build(V_GOOD);
    exec_ok(l, DROP_INVOICE_TRIGGERS
            "UPDATE invoices SET amount_due_minor = 1 WHERE seq = 2;" RESTORE_INVOICE_TRIGGERS);
    expect(l, key, TALLY_TAMPERED,
           "invoice INV-2026-000002: totals in its row differ from the signed document");

    /* the stored hash column replaced by the hash of something else */
    l = build(V_GOOD);
    exec_ok(l, DROP_INVOICE_TRIGGERS
            "UPDATE invoices SET hash = prev_hash WHERE seq = 3;" RESTORE_INVOICE_TRIGGERS);
    expect(l, key, TALLY_TAMPERED, "credit note CN-2026-000001: stored document does not match");

    /* the stored signature replaced */
    l = build(V_GOOD);
    exec_ok(l, DROP_INVOICE_TRIGGERS
            "UPDATE invoices SET signature = (SELECT signature FROM invoices WHERE seq = 1) "
            "WHERE seq = 2;" RESTORE_INVOICE_TRIGGERS);
    expect(l, key, TALLY_TAMPERED,
           "invoice INV-2026-000002: signature inside the document differs");

    /* the document cut short */
    l = build(V_GOOD);
    exec_ok(l, DROP_INVOICE_TRIGGERS
            "UPDATE invoices SET doc = CAST(substr(CAST(doc AS TEXT), 1, 100) AS BLOB) "
            "WHERE seq = 2;" RESTORE_INVOICE_TRIGGERS);
    expect(l, key, TALLY_TAMPERED,
           "invoice INV-2026-000002: stored document is not in signed form");
}

/* Doc seq 1 carries the signature of doc seq 2, in its row and in the
 * document: well formed, its hash intact, but not its signature. */
#define SWAP_SIGNATURE_1                                                                           \
    "UPDATE invoices SET doc = CAST(replace(CAST(doc AS TEXT), signature, (SELECT signature "      \
    "FROM invoices WHERE seq = 2)) AS BLOB), signature = (SELECT signature FROM invoices "         \
    "WHERE seq = 2) WHERE seq = 1;"

/* Signatures are verified in batches on every core (ledger/verify_sigs.c)
 * while the rest of each document is checked in order: the failure named
 * is still the first in ledger order, and for one document a bad
 * signature comes before a bad total, in batches of 1, 2 and the default. */
/* An invoice line of invoice 2 that its totals do not include. */
#define EXTRA_LINE_2                                                                               \
    "INSERT INTO invoice_lines(invoice_seq, line_no, kind, meter, pricing, migration, sku, dim2, " \
    "quantity, unit_price_nano, amount_minor) VALUES (2, 2, 'usage', 1, 0, 0, 'ssd', '', '1', 1, " \
    "3);"

static void test_failure_order(void **state)
{
    (void)state;
    /* Batches of 1, 2 and the default, on worker threads and (threads 1)
     * on the calling thread alone. */
    static const char *const batches[] = {"1", "2", NULL, "1", NULL};
    for (int b = 0; b < 5; b++) {
        if (batches[b])
            setenv("TALLY_VERIFY_SIG_BATCH", batches[b], 1);
        else
            unsetenv("TALLY_VERIFY_SIG_BATCH");
        if (b >= 3)
            setenv("TALLY_VERIFY_SIG_THREADS", "1", 1);
        else
            unsetenv("TALLY_VERIFY_SIG_THREADS");
        expect(build(V_GOOD), key, TALLY_OK, "3 documents chained and signed");

        tally_ledger *l = build(V_GOOD); /* signature of 1 bad, total of 2 bad */
        exec_ok(l, DROP_INVOICE_TRIGGERS SWAP_SIGNATURE_1
                "UPDATE invoices SET amount_due_minor = 1 WHERE seq = 2;" RESTORE_INVOICE_TRIGGERS);
        expect(l, key, TALLY_TAMPERED, "invoice INV-2026-000001: signature does not verify");

        l = build(V_GOOD); /* total of 1 bad, signature of 2 bad */
        exec_ok(l, DROP_INVOICE_TRIGGERS
                "UPDATE invoices SET amount_due_minor = 1 WHERE seq = 1;"
                "UPDATE invoices SET doc = CAST(replace(CAST(doc AS TEXT), signature, (SELECT "
                "signature FROM invoices WHERE seq = 3)) AS BLOB), signature = (SELECT signature "
                "FROM invoices WHERE seq = 3) WHERE seq = 2;" RESTORE_INVOICE_TRIGGERS);
        expect(l, key, TALLY_TAMPERED,
               "invoice INV-2026-000001: totals in its row differ from the signed document");

        l = build(V_GOOD); /* both wrong in 1: the signature is named */
        exec_ok(l, DROP_INVOICE_TRIGGERS SWAP_SIGNATURE_1
                "UPDATE invoices SET amount_due_minor = 1 WHERE seq = 1;" RESTORE_INVOICE_TRIGGERS);
        expect(l, key, TALLY_TAMPERED, "invoice INV-2026-000001: signature does not verify");

        l = build(V_GOOD); /* only the last one's signature: found at the end */
        exec_ok(l, DROP_INVOICE_TRIGGERS
                "UPDATE invoices SET doc = CAST(replace(CAST(doc AS TEXT), signature, (SELECT "
                "signature FROM invoices WHERE seq = 1)) AS BLOB), signature = (SELECT signature "
                "FROM invoices WHERE seq = 1) WHERE seq = 3;" RESTORE_INVOICE_TRIGGERS);
        expect(l, key, TALLY_TAMPERED, "credit note CN-2026-000001: signature does not verify");

        /* A bad signature and line rows that do not add up (a later check,
         * run while the signatures are verified): the signature. */
        l = build(V_GOOD);
        exec_ok(l, DROP_INVOICE_TRIGGERS SWAP_SIGNATURE_1 RESTORE_INVOICE_TRIGGERS EXTRA_LINE_2);
        expect(l, key, TALLY_TAMPERED, "invoice INV-2026-000001: signature does not verify");
        l = build(V_GOOD); /* the rows alone */
        exec_ok(l, EXTRA_LINE_2);
        expect(l, key, TALLY_TAMPERED, "invoice INV-2026-000002: its line rows sum to 503");
    }
    /* A full queue: one document a batch, two batches queued at most, so
     * the third document waits for the first. The first two signatures are
     * bad: the first is named, never the second still queued. */
    setenv("TALLY_VERIFY_SIG_BATCH", "1", 1);
    setenv("TALLY_VERIFY_SIG_RING", "2", 1);
    unsetenv("TALLY_VERIFY_SIG_THREADS");
    tally_ledger *l = build(V_GOOD);
    exec_ok(
        l, DROP_INVOICE_TRIGGERS
        "UPDATE invoices SET doc = CAST(replace(CAST(doc AS TEXT), signature, (SELECT "
        "signature FROM invoices WHERE seq = 3)) AS BLOB), signature = (SELECT signature "
        "FROM invoices WHERE seq = 3) WHERE seq = 2;" SWAP_SIGNATURE_1 RESTORE_INVOICE_TRIGGERS);
    expect(l, key, TALLY_TAMPERED, "invoice INV-2026-000001: signature does not verify");
    unsetenv("TALLY_VERIFY_SIG_RING");
    unsetenv("TALLY_VERIFY_SIG_BATCH");
    unsetenv("TALLY_VERIFY_SIG_THREADS");
}

/* A chained row edited with its guard put back: the chain's check (run on
 * the second connection) names it. */
#define EDIT_GRANT                                                                                 \
    "DROP TRIGGER grants_no_update; UPDATE grants SET priority = 7 WHERE id = 1;"                  \
    "CREATE TRIGGER grants_no_update BEFORE UPDATE ON grants\n"                                    \
    "BEGIN SELECT RAISE(ABORT, 'grants are immutable'); END;"
/* A row that breaks a CHECK constraint, which integrity_check (the first
 * check, also on the second connection) reports. */
#define BREAK_CHECK                                                                                \
    "PRAGMA ignore_check_constraints = ON; INSERT INTO dedupe_windows(src, prefix, width, lo, "    \
    "bits_at, bits, n, content) VALUES (1, x'68', 99, 0, 0, zeroblob(60), 1, zeroblob(8)); "       \
    "PRAGMA ignore_check_constraints = OFF;"

/* On a ledger file the integrity and chain checks run on a second
 * connection at the same snapshot while the others run on the first: the
 * failure named is the same as with one connection, the first in the
 * checks' order whichever connection found it. */
static void test_two_connections(void **state)
{
    (void)state;
    static const struct {
        const char *sql, *want;
    } cases[] = {
        {EDIT_GRANT, "grant 1: changed since chain entry"},
        {EDIT_GRANT EXTRA_LINE_2, "invoice INV-2026-000002: its line rows sum to 503"},
        {EDIT_GRANT DROP_INVOICE_TRIGGERS SWAP_SIGNATURE_1 RESTORE_INVOICE_TRIGGERS,
         "invoice INV-2026-000001: signature does not verify"},
        {BREAK_CHECK, "integrity_check"},
        {BREAK_CHECK "DROP TRIGGER grants_no_delete;", "integrity_check"},
        {"DROP TRIGGER grants_no_delete;" EDIT_GRANT, "trigger grants_no_delete: missing"},
    };
    for (int one = 0; one < 2; one++) {
        setenv("TALLY_VERIFY_CONNECTIONS", one ? "1" : "2", 1);
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            tally_ledger *l = build(V_GOOD);
            exec_ok(l, cases[i].sql);
            expect(l, key, TALLY_TAMPERED, cases[i].want);
        }
    }
    unsetenv("TALLY_VERIFY_CONNECTIONS");
}

/* A writer that holds the write lock while verify starts: verify waits a
 * moment for it, then reads on one connection alone, with the same answer. */
static tally_err file_col(void *ctx, int ncols, const char *const *cols)
{
    if (ncols >= 3 && cols[1] && !strcmp(cols[1], "main"))
        snprintf(ctx, 700, "%s", cols[2] ? cols[2] : "");
    return TALLY_OK;
}

static void test_writer_holds_the_lock(void **state)
{
    (void)state;
    for (int bad = 0; bad < 2; bad++) {
        tally_ledger *l = build(V_GOOD), *w = NULL;
        if (bad)
            exec_ok(l, EDIT_GRANT);
        char path[700] = "", why[256];
        assert_int_equal(tally_ledger_query(l, "PRAGMA database_list", NULL, 0, file_col, path),
                         TALLY_OK);
        assert_int_equal(tally_ledger_open(path, &w, why, sizeof why), TALLY_OK);
        assert_int_equal(tally_ledger_exec(w, "BEGIN IMMEDIATE"), TALLY_OK);
        /* two connections cannot start at one snapshot now */
        setenv("TALLY_VERIFY_CONNECTIONS", "2", 1);
        char msg[512] = "";
        assert_int_equal(tally_ledger_verify(l, key, msg, sizeof msg), TALLY_BUSY);
        assert_non_null(strstr(msg, "no second connection at the same snapshot"));
        unsetenv("TALLY_VERIFY_CONNECTIONS");
        if (bad)
            expect(l, key, TALLY_TAMPERED, "grant 1: changed since chain entry");
        else
            expect(l, key, TALLY_OK, "3 documents chained and signed");
        assert_int_equal(tally_ledger_exec(w, "ROLLBACK"), TALLY_OK);
        tally_ledger_close(w);
    }
}

static void test_chain_and_sums(void **state)
{
    (void)state;
    expect(build(V_BAD_PREV), key, TALLY_TAMPERED,
           "invoice INV-2026-000002: prev_hash does not link to the hash of INV-2026-000001");
    expect(build(V_BAD_SUM), key, TALLY_TAMPERED,
           "invoice INV-2026-000001: lines do not sum to the subtotal");

    tally_ledger *l = build(V_GOOD);
    exec_ok(l, "INSERT INTO invoice_lines(invoice_seq, line_no, kind, meter, pricing, migration, "
               "sku, dim2, quantity, unit_price_nano, amount_minor) VALUES (2, 2, 'usage', 1, 0, "
               "0, 'ssd', '', '1', 1, 3)");
    expect(l, key, TALLY_TAMPERED, "invoice INV-2026-000002: its line rows sum to 503");

    l = build(V_GOOD);
    exec_ok(l, "INSERT INTO invoice_credits(invoice_seq, grant_id, line_no, amount_minor) "
               "VALUES (2, 1, 1, 5)");
    expect(l, key, TALLY_TAMPERED, "invoice INV-2026-000002: its credit rows sum to 5");
}

/* A document's rows are chained as two groups (the document with its lines
 * and credits; its entry with its postings): an edit of any of them that
 * no other check sees changes its group's hash. Rows chained one by one
 * before migration 17 are checked one by one, and a row covered neither
 * way was written around Tally. */
#define LINES_GUARD                                                                                \
    "CREATE TRIGGER invoice_lines_no_update BEFORE UPDATE ON invoice_lines\n"                      \
    "BEGIN SELECT RAISE(ABORT, 'finalized invoice lines are immutable'); END;"
#define POSTINGS_GUARD                                                                             \
    "CREATE TRIGGER postings_no_update BEFORE UPDATE ON postings\n"                                \
    "BEGIN SELECT RAISE(ABORT, 'postings are append-only'); END;"
#define ENTRIES_GUARD                                                                              \
    "CREATE TRIGGER entries_no_update BEFORE UPDATE ON entries\n"                                  \
    "BEGIN SELECT RAISE(ABORT, 'entries are append-only'); END;"
#define EDIT_LINE_PERIOD                                                                           \
    "DROP TRIGGER invoice_lines_no_update; UPDATE invoice_lines SET original_period = '2026-01' "  \
    "WHERE invoice_seq = 1 AND line_no = 2;" LINES_GUARD
#define ZERO_LINE_ADDED                                                                            \
    "INSERT INTO invoice_lines(invoice_seq, line_no, kind, meter, pricing, migration, sku, dim2, " \
    "quantity, unit_price_nano, amount_minor) VALUES (2, 2, 'usage', 1, 0, 0, 'ssd', '', '0', "    \
    "500000000, 0);"

#define PLANTED_PAIR                                                                               \
    "INSERT INTO postings(id, entry_id, ledger_acct, currency, debit_minor, credit_minor) "        \
    "VALUES (-5, 3, 'revenue:accelerator', 'CNY', 100, 0), (1000, 3, 'revenue:storage', 'CNY', "   \
    "0, 100);"

static void test_chain_groups(void **state)
{
    (void)state;
    static const struct {
        bool legacy;
        const char *sql, *want;
    } cases[] = {
        /* a line's original period: the sums and the document checks pass */
        {false, EDIT_LINE_PERIOD,
         "invoice INV-2026-000001: changed since chain entry 7 recorded it (the row, its lines "
         "or its credits)"},
        {true, EDIT_LINE_PERIOD, "invoice line 1/2: changed since chain entry"},
        {false, ZERO_LINE_ADDED, "invoice INV-2026-000002: changed since chain entry 8 recorded"},
        {true, ZERO_LINE_ADDED, "invoice line 2/2: not in the ledger chain (written around Tally)"},
        {false,
         "INSERT INTO invoice_credits(invoice_seq, grant_id, line_no, amount_minor) "
         "VALUES (3, 1, 1, 0);",
         "credit note CN-2026-000001: changed since chain entry 9 recorded it"},
        {false,
         "DROP TRIGGER entries_no_update; UPDATE entries SET created_at = 5 WHERE id = "
         "3;" ENTRIES_GUARD,
         "entry 3 (invoice INV-2026-000002): changed since chain entry 5 recorded it (the row or "
         "its postings)"},
        /* a posting renumbered: the sums and the balances still agree */
        {false,
         "DROP TRIGGER postings_no_update; UPDATE postings SET id = 99 WHERE id = "
         "9;" POSTINGS_GUARD,
         "entry 4 (void CN-2026-000001): changed since chain entry 6 recorded it"},
        {true,
         "DROP TRIGGER postings_no_update; UPDATE postings SET id = 99 WHERE id = "
         "9;" POSTINGS_GUARD,
         "posting 9: deleted (chain entry"},
        /* a balanced pair planted under a chained entry, one below its first
         * posting's rowid, moving revenue between meters: the entry still
         * sums to zero, the document checks pass and the balances
         * trigger keeps the balances in step */
        {false, PLANTED_PAIR, "entry 3 (invoice INV-2026-000002): changed since chain entry"},
        {true, PLANTED_PAIR, "not in the ledger chain (written around Tally)"},
    };
    expect(build_as(V_GOOD, true), key, TALLY_OK, "3 documents chained and signed");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tally_ledger *l = build_as(V_GOOD, cases[i].legacy);
        exec_ok(l, cases[i].sql);
        expect(l, key, TALLY_TAMPERED, cases[i].want);
    }
}

static void test_numbering(void **state)
{
    (void)state;
    tally_ledger *l = build(V_GOOD);
    exec_ok(l, "PRAGMA foreign_keys = OFF;" DROP_INVOICE_TRIGGERS
               "DELETE FROM invoices WHERE seq = 1;" RESTORE_INVOICE_TRIGGERS);
    expect(l, key, TALLY_TAMPERED, "invoice INV-2026-000002: number 2 where 1 was due");

    /* the last document removed leaves no gap, but its entry has no document */
    l = build(V_GOOD);
    exec_ok(l, "PRAGMA foreign_keys = OFF;" DROP_INVOICE_TRIGGERS
               "DELETE FROM invoices WHERE seq = 3;" RESTORE_INVOICE_TRIGGERS);
    expect(l, key, TALLY_TAMPERED, "entry 4 (void CN-2026-000001): no such document");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_ledger),          cmocka_unit_test(test_good_ledger),
        cmocka_unit_test(test_key_problems),          cmocka_unit_test(test_triggers),
        cmocka_unit_test(test_double_entry),          cmocka_unit_test(test_documents),
        cmocka_unit_test(test_chain_and_sums),        cmocka_unit_test(test_numbering),
        cmocka_unit_test(test_failure_order),         cmocka_unit_test(test_two_connections),
        cmocka_unit_test(test_writer_holds_the_lock), cmocka_unit_test(test_chain_groups),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
