/* End to end, through the tally binary: signing keys, `tally verify` on a
 * real ledger and on copies tampered with from outside (the sqlite3 tool),
 * and the invoice page's verification commands run against real output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

static char dir[512];

/* A few accelerator events for March 2026, three accounts. */
static const char usage[] =
    "{\"specversion\":\"1.0\",\"id\":\"e1\",\"source\":\"host-1\",\"type\":\"accelerator.usage\","
    "\"subject\":\"acme\",\"time\":\"2026-03-02T10:00:00Z\",\"data\":{\"instance\":\"vm-1\","
    "\"sku\":\"h100\",\"pricing\":\"on_demand\",\"cards\":2,\"seconds\":3600}}\n"
    "{\"specversion\":\"1.0\",\"id\":\"e2\",\"source\":\"host-1\",\"type\":\"accelerator.usage\","
    "\"subject\":\"acme\",\"time\":\"2026-03-03T10:00:00Z\",\"data\":{\"instance\":\"vm-1\","
    "\"sku\":\"h100\",\"pricing\":\"on_demand\",\"cards\":2,\"seconds\":1800}}\n"
    "{\"specversion\":\"1.0\",\"id\":\"e3\",\"source\":\"host-2\",\"type\":\"accelerator.usage\","
    "\"subject\":\"beta\",\"time\":\"2026-03-05T08:00:00Z\",\"data\":{\"instance\":\"vm-9\","
    "\"sku\":\"a100-40g\",\"pricing\":\"on_demand\",\"cards\":1,\"seconds\":3600}}\n"
    "{\"specversion\":\"1.0\",\"id\":\"e4\",\"source\":\"host-3\",\"type\":\"accelerator.usage\","
    "\"subject\":\"gamma\",\"time\":\"2026-03-07T08:00:00Z\",\"data\":{\"instance\":\"vm-5\","
    "\"sku\":\"rtx4090\",\"pricing\":\"spot\",\"cards\":4,\"seconds\":600}}\n";

#define RESTORE_UPDATE                                                                             \
    "CREATE TRIGGER invoices_no_update BEFORE UPDATE ON invoices\n"                                \
    "BEGIN SELECT RAISE(ABORT, 'finalized invoices are immutable'); END;"
#define RESTORE_DELETE                                                                             \
    "CREATE TRIGGER invoices_no_delete BEFORE DELETE ON invoices\n"                                \
    "BEGIN SELECT RAISE(ABORT, 'finalized invoices are immutable'); END;"

/* Runs tally in dir on a ledger and key there; stdout and stderr into out. */
static int tally(tally_buf *out, const char *db, const char *key, const char *args)
{
    if (out)
        tally_buf_reset(out);
    return tu_sh(out, "cd '%s' && '%s' --db '%s' --key '%s' %s 2>&1", dir, TALLY_BINARY, db, key,
                 args);
}

static void write_file(const char *name, const char *text)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static int setup(void **state)
{
    (void)state;
    setenv("TALLY_NOW", "2026-04-02T00:00:00Z", 1);
    unsetenv("TALLY_KEY");
    unsetenv("TALLY_DB");
    snprintf(dir, sizeof dir, "%s", tu_tmpdir("trust"));
    write_file("usage.ndjson", usage);
    tally_buf out;
    tally_buf_init(&out, 0);
    int rc = tally(&out, "tally.db", "tally.key", "init");
    rc = rc ? rc : tally(&out, "tally.db", "tally.key", "ingest usage.ndjson");
    if (rc == 0)
        rc = tu_sh(NULL, "cd '%s' && '%s' --db tally.db ingest usage.ndjson >/dev/null", dir,
                   TALLY_BINARY); /* the same file again: duplicates only */
    rc = rc ? rc : tally(&out, "tally.db", "tally.key", "keygen");
    rc = rc ? rc
            : tally(&out, "tally.db", "tally.key",
                    "invoice run --period 2026-03 --finalize --out out");
    rc = rc ? rc : tally(&out, "tally.db", "tally.key", "invoice void INV-2026-000003 --reason x");
    if (rc)
        fprintf(stderr, "setup failed: %s\n", out.data ? out.data : "");
    tally_buf_release(&out);
    return rc;
}

static void test_keygen_and_pubkey(void **state)
{
    (void)state;
    tally_buf out, a, b;
    tally_buf_init(&out, 0);
    tally_buf_init(&a, 0);
    tally_buf_init(&b, 0);
    assert_int_equal(tally(&out, "none.db", "k2.key", "keygen"), 0);
    char path[700];
    snprintf(path, sizeof path, "%s/k2.key", dir);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(tu_read_file(path, &a), 0);

    /* EXISTS is bad input (cli_exit_code): 2, the key is left as it was */
    assert_int_equal(tally(&out, "none.db", "k2.key", "keygen"), 2);
    assert_non_null(strstr(out.data, "already exists"));
    assert_non_null(strstr(out.data, "--force"));
    assert_int_equal(tu_read_file(path, &b), 0);
    assert_string_equal(a.data, b.data);

    assert_int_equal(tally(&out, "none.db", "k2.key", "keygen --force"), 0);
    tally_buf_reset(&b);
    assert_int_equal(tu_read_file(path, &b), 0);
    assert_string_not_equal(a.data, b.data);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(tally(&out, "none.db", "k2.key", "keygen --bogus"), 2);

    /* pubkey: SubjectPublicKeyInfo PEM that openssl reads */
    assert_int_equal(tally(&out, "none.db", "k2.key", "pubkey"), 0);
    assert_true(strncmp(out.data, "-----BEGIN PUBLIC KEY-----\n", 27) == 0);
    write_file("k2.pub.pem", out.data);
    assert_int_equal(tu_sh(NULL, "openssl pkey -pubin -in '%s/k2.pub.pem' -noout", dir), 0);
    assert_int_equal(tally(&out, "none.db", "missing.key", "pubkey"), 2); /* NOT_FOUND: input */
    assert_non_null(strstr(out.data, "tally keygen"));
    tally_buf_release(&out);
    tally_buf_release(&a);
    tally_buf_release(&b);
}

static void test_verify_real_ledger(void **state)
{
    (void)state;
    tally_buf out;
    tally_buf_init(&out, 0);
    assert_int_equal(tally(&out, "tally.db", "tally.key", "verify"), 0);
    assert_non_null(strstr(out.data, "4 documents chained and signed"));
    char db[700];
    snprintf(db, sizeof db, "%s/tally.db", dir);
    tu_assert_conservation_path(db);

    /* the public key alone is enough */
    assert_int_equal(
        tu_sh(NULL, "cd '%s' && '%s' --key tally.key pubkey > pub.pem", dir, TALLY_BINARY), 0);
    assert_int_equal(tally(&out, "tally.db", "pub.pem", "verify"), 0);
    /* no ledger: not created, not "verified" */
    assert_int_equal(tally(&out, "typo.db", "tally.key", "verify"), 1);
    assert_non_null(strstr(out.data, "no ledger at typo.db"));
    char typo[700];
    snprintf(typo, sizeof typo, "%s/typo.db", dir);
    assert_int_equal(access(typo, F_OK), -1);
    /* no key: says what is needed */
    assert_int_equal(tally(&out, "tally.db", "nokey.pem", "verify"), 1);
    assert_non_null(strstr(out.data, "needs the public key"));
    /* another key: the first document is named */
    assert_int_equal(tally(&out, "tally.db", "k3.key", "keygen"), 0);
    assert_int_equal(tally(&out, "tally.db", "k3.key", "verify"), 1);
    assert_non_null(strstr(out.data, "invoice INV-2026-000001: signed with key "));
    assert_non_null(strstr(out.data, "which is not among the keys of k3.key"));
    tally_buf_release(&out);
}

/* Item 7 of issue 14: `keygen --force` used to make every old invoice fail
 * verification. Now the old public key is kept; old documents verify with
 * it, new ones are signed with the new key and name it. */
static void test_key_rotation_keeps_old_documents_valid(void **state)
{
    (void)state;
    tally_buf out, ids;
    tally_buf_init(&out, 0);
    tally_buf_init(&ids, 0);
    assert_int_equal(tu_sh(NULL,
                           "cd '%s' && rm -f rot.db* rot.key* && cp tally.db rot.db && "
                           "cp tally.key rot.key && cp tally.key.pubkeys rot.key.pubkeys",
                           dir),
                     0);
    assert_int_equal(tally(&out, "rot.db", "rot.key", "pubkey --all"), 0);
    const char *old_id = strstr(out.data, "key id ");
    assert_non_null(old_id);
    char old[17];
    snprintf(old, sizeof old, "%s", old_id + 7);
    assert_non_null(strstr(strstr(out.data, "-----BEGIN"), "-----END PUBLIC KEY-----"));
    assert_int_equal(tally(&out, "rot.db", "rot.key", "keygen --force"), 0);
    assert_int_equal(tally(&out, "rot.db", "rot.key", "verify"), 0);
    assert_non_null(strstr(out.data, "4 documents chained and signed"));
    /* both keys listed, the new one first; the list alone verifies */
    assert_int_equal(tally(&ids, "rot.db", "rot.key", "pubkey --all > rot.all.pem"), 0);
    tally_buf_reset(&ids);
    assert_int_equal(tu_sh(&ids, "cd '%s' && grep -c '^key id ' rot.all.pem", dir), 0);
    assert_string_equal(ids.data, "2\n");
    tally_buf_reset(&ids);
    assert_int_equal(tu_sh(&ids, "cd '%s' && sed -n 1p rot.all.pem", dir), 0);
    assert_true(strncmp(ids.data, "key id ", 7) == 0);
    assert_null(strstr(ids.data, old));
    assert_int_equal(tally(&out, "rot.db", "rot.all.pem", "verify"), 0);
    /* a new document names the new key */
    assert_int_equal(
        tally(&out, "rot.db", "rot.key", "invoice void INV-2026-000002 --reason rotated"), 0);
    assert_int_equal(tally(&out, "rot.db", "rot.key", "invoice show CN-2026-000002 --format json"),
                     0);
    char want[40];
    snprintf(want, sizeof want, "\"key_id\":\"%.16s\"", ids.data + 7);
    assert_non_null(strstr(out.data, want));
    assert_int_equal(tally(&out, "rot.db", "rot.key", "invoice show INV-2026-000001 --format json"),
                     0);
    snprintf(want, sizeof want, "\"key_id\":\"%s\"", old);
    assert_non_null(strstr(out.data, want));
    assert_int_equal(tally(&out, "rot.db", "rot.key", "verify"), 0);
    assert_non_null(strstr(out.data, "5 documents chained and signed"));
    /* without the kept keys the old documents cannot be checked, and say so */
    assert_int_equal(tu_sh(NULL, "cd '%s' && rm rot.key.pubkeys", dir), 0);
    assert_int_equal(tally(&out, "rot.db", "rot.key", "verify"), 1);
    snprintf(want, sizeof want, "signed with key %s", old);
    assert_non_null(strstr(out.data, want));
    tally_buf_release(&out);
    tally_buf_release(&ids);
}

/* Copies the ledger, applies sql with the sqlite3 tool, runs tally verify:
 * it must exit 1 naming want. */
static void tampered(const char *name, const char *sql, const char *want)
{
    char db[64];
    snprintf(db, sizeof db, "%s.db", name);
    assert_int_equal(tu_sh(NULL,
                           "cd '%s' && rm -f %s %s-wal %s-shm && cp tally.db %s && "
                           "sqlite3 %s \"%s\"",
                           dir, db, db, db, db, db, sql),
                     0);
    tally_buf out;
    tally_buf_init(&out, 0);
    int rc = tally(&out, db, "tally.key", "verify");
    if (rc != 1 || !strstr(out.data, want))
        fail_msg("%s: exit %d, output: %s (wanted \"%s\")", name, rc, out.data, want);
    tally_buf_release(&out);
}

static void test_tampering_is_caught(void **state)
{
    (void)state;
    tampered("a_drop_trigger", "DROP TRIGGER invoices_no_update;",
             "FAILED: trigger invoices_no_update: missing");
    tampered("b_update_amount",
             "DROP TRIGGER invoices_no_update; UPDATE invoices SET amount_due_minor = 1 "
             "WHERE id = 'INV-2026-000001';",
             "FAILED: trigger invoices_no_update: missing");
    tampered("b2_update_amount_hidden",
             "DROP TRIGGER invoices_no_update; UPDATE invoices SET amount_due_minor = 1 "
             "WHERE id = 'INV-2026-000001';" RESTORE_UPDATE,
             "FAILED: invoice INV-2026-000001: totals in its row differ from the signed document");
    tampered("c_flip_doc_byte",
             "DROP TRIGGER invoices_no_update; UPDATE invoices SET doc = CAST(substr(CAST(doc AS "
             "TEXT), 1, 29) || CASE substr(CAST(doc AS TEXT), 30, 1) WHEN 'a' THEN 'b' ELSE 'a' "
             "END || substr(CAST(doc AS TEXT), 31) AS BLOB) WHERE id = 'INV-2026-000002';",
             "FAILED: trigger invoices_no_update: missing");
    tampered("c2_flip_doc_byte_hidden",
             "DROP TRIGGER invoices_no_update; UPDATE invoices SET doc = CAST(substr(CAST(doc AS "
             "TEXT), 1, 29) || CASE substr(CAST(doc AS TEXT), 30, 1) WHEN 'a' THEN 'b' ELSE 'a' "
             "END || substr(CAST(doc AS TEXT), 31) AS BLOB) WHERE id = "
             "'INV-2026-000002';" RESTORE_UPDATE,
             "FAILED: invoice INV-2026-000002: stored document does not match its hash");
    tampered("d_unbalanced_posting",
             "INSERT INTO postings(entry_id, ledger_acct, currency, debit_minor, credit_minor) "
             "VALUES (1, 'receivable:acme', 'CNY', 100, 0);",
             "FAILED: entry 1 (invoice INV-2026-000001): debits");
    tampered("e_delete_invoice",
             "DROP TRIGGER invoices_no_delete; DELETE FROM invoices WHERE id = 'INV-2026-000001';",
             "FAILED: trigger invoices_no_delete: missing");
    tampered("e2_delete_invoice_hidden",
             "DROP TRIGGER invoices_no_delete; DELETE FROM invoices WHERE id = "
             "'INV-2026-000001';" RESTORE_DELETE,
             "FAILED: invoice INV-2026-000002: number 2 where 1 was due");
    tampered("f_balance_edited", "UPDATE balances SET credit_minor = credit_minor + 1;",
             "FAILED: balance ");
    tampered("g_credit_note_removed",
             "DROP TRIGGER invoices_no_delete; DELETE FROM invoices WHERE doc_type = "
             "'credit_note';" RESTORE_DELETE,
             "FAILED: entry 4 (void CN-2026-000001): no such document");
    /* the untouched ledger still verifies */
    tally_buf out;
    tally_buf_init(&out, 0);
    assert_int_equal(tally(&out, "tally.db", "tally.key", "verify"), 0);
    tally_buf_release(&out);
}

/* The text of trigger name as a migration in schemas/ creates it, so a test
 * can drop and recreate it around an edit, as an attacker would. */
static void trigger_text(const char *name, tally_buf *out)
{
    static const char *const files[] = {"001_init.sql", "003_outbox.sql", "009_chain.sql"};
    char want[128];
    snprintf(want, sizeof want, "CREATE TRIGGER %s ", name);
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char path[700];
        tally_buf f;
        tally_buf_init(&f, 0);
        snprintf(path, sizeof path, "%s/schemas/%s", TALLY_SOURCE_DIR, files[i]);
        assert_int_equal(tu_read_file(path, &f), 0);
        const char *s = strstr(f.data, want);
        const char *e = s ? strstr(s, "END;") : NULL;
        if (e)
            assert_int_equal(tally_buf_append(out, s, (size_t)(e + 4 - s)), TALLY_OK);
        tally_buf_release(&f);
        if (e)
            return;
    }
    fail_msg("no trigger %s in schemas/", name);
}

/* Copies base.db to name.db, drops the triggers (comma-separated), runs sql,
 * recreates them, and runs `tally verify ARGS`: it must exit 1 naming want. */
static void tamper(const char *name, const char *triggers, const char *sql, const char *args,
                   const char *want)
{
    tally_buf q, out;
    tally_buf_init(&q, 0);
    tally_buf_init(&out, 0);
    char t[96], path[700];
    for (const char *p = triggers; *p;) {
        size_t n = strcspn(p, ",");
        snprintf(t, sizeof t, "%.*s", (int)n, p);
        assert_int_equal(tally_buf_printf(&q, "DROP TRIGGER %s;\n", t), TALLY_OK);
        p += n + (p[n] == ',');
    }
    assert_int_equal(tally_buf_printf(&q, "%s\n", sql), TALLY_OK);
    for (const char *p = triggers; *p;) {
        size_t n = strcspn(p, ",");
        snprintf(t, sizeof t, "%.*s", (int)n, p);
        trigger_text(t, &q);
        assert_int_equal(tally_buf_puts(&q, "\n"), TALLY_OK);
        p += n + (p[n] == ',');
    }
    snprintf(path, sizeof path, "%s/%s.sql", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(q.data, f);
    assert_int_equal(fclose(f), 0);
    if (tu_sh(&out,
              "cd '%s' && rm -f %s.db* && cp base.db %s.db && sqlite3 -bail %s.db < %s.sql 2>&1",
              dir, name, name, name, name) != 0)
        fail_msg("%s: sqlite3 failed: %s", name, out.data);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "verify %s", args);
    snprintf(t, sizeof t, "%s.db", name);
    int rc = tally(&out, t, "tally.key", cmd);
    if (rc != 1 || !strstr(out.data, want))
        fail_msg("%s: exit %d, output: %s (wanted \"%s\")", name, rc, out.data, want);
    tally_buf_release(&q);
    tally_buf_release(&out);
}

/* Item 6 of issue 14: each edit used to pass `tally verify` once the
 * append-only triggers were dropped and recreated around it. */
static void test_chain_catches_hidden_edits(void **state)
{
    (void)state;
    tally_buf out;
    tally_buf_init(&out, 0);
    assert_int_equal(tu_sh(NULL, "cd '%s' && rm -f base.db* && cp tally.db base.db", dir), 0);
    assert_int_equal(tally(&out, "base.db", "tally.key", "credit grant acme 1.00 --kind coupon"),
                     0);
    assert_int_equal(tally(&out, "base.db", "tally.key", "verify"), 0);
    /* receivable and revenue of INV-2026-000001 both lowered by 1.00, balances too */
    tamper("h_balanced_postings", "postings_no_update",
           "UPDATE postings SET debit_minor = debit_minor - 100 WHERE ledger_acct = "
           "'receivable:acme' AND entry_id = (SELECT id FROM entries WHERE ref = "
           "'INV-2026-000001');\n"
           "UPDATE postings SET credit_minor = credit_minor - 100 WHERE ledger_acct LIKE "
           "'revenue:%' AND entry_id = (SELECT id FROM entries WHERE ref = 'INV-2026-000001');\n"
           "UPDATE balances SET debit_minor = debit_minor - 100 WHERE ledger_acct = "
           "'receivable:acme';\n"
           "UPDATE balances SET credit_minor = credit_minor - 100 WHERE ledger_acct LIKE "
           "'revenue:%';",
           "",
           "FAILED: invoice INV-2026-000001: entry 1 posts 674 to receivable:acme and 0 to its "
           "grants, but the signed document says amount due 774");
    /* the last document with its lines, entry, postings and outbox rows */
    tamper("i_last_document_deleted",
           "invoices_no_delete,invoice_lines_no_delete,entries_no_delete,postings_no_delete,"
           "outbox_no_delete",
           "DELETE FROM invoice_lines WHERE invoice_seq = (SELECT max(seq) FROM invoices);\n"
           "DELETE FROM postings WHERE entry_id IN (SELECT id FROM entries WHERE ref = "
           "'CN-2026-000001');\n"
           "DELETE FROM entries WHERE ref = 'CN-2026-000001';\n"
           "DELETE FROM outbox WHERE event_id LIKE '%CN-2026-000001%' OR type LIKE '%void%';\n"
           "DELETE FROM invoices WHERE id = 'CN-2026-000001';\n"
           "UPDATE balances SET debit_minor = 33, credit_minor = 0 WHERE ledger_acct = "
           "'receivable:gamma';\n"
           "UPDATE balances SET debit_minor = debit_minor - 33 WHERE ledger_acct = "
           "'revenue:accelerator';",
           "", ": deleted (chain entry ");
    tamper("j_grant_multiplied", "grants_no_update",
           "UPDATE grants SET amount_minor = amount_minor * 100;", "",
           "FAILED: grant 1: changed since chain entry ");
    tamper("k_grant_inserted", "chain_grants",
           "INSERT INTO grants(account, kind, amount_minor, currency, effective_s, created_at) "
           "VALUES ('beta', 'coupon', 50000, 'CNY', 0, 0);",
           "", "FAILED: grant 2: not in the ledger chain (written around Tally)");
    tally_buf_release(&out);
}

/* The same for outbox rows, prices, documents, usage and the chain itself
 * (on base.db from test_chain_catches_hidden_edits). */
static void test_chain_catches_hidden_edits_2(void **state)
{
    (void)state;
    tamper("l_outbox_payload_edited", "outbox_no_update",
           "UPDATE outbox SET payload = CAST(replace(CAST(payload AS TEXT), 'acme', 'acmf') AS "
           "BLOB) WHERE id = 1;",
           "", "FAILED: outbox event invoice.finalized:INV-2026-000001: changed since chain entry");
    tamper("m_outbox_row_deleted", "outbox_no_delete", "DELETE FROM outbox WHERE id = 2;", "",
           "FAILED: outbox row 2: deleted (chain entry ");
    tamper("n_ratecard_edited", "ratecards_no_update",
           "UPDATE ratecards SET body = replace(body, '\"h100\"', '\"h100 \"');", "",
           "FAILED: rate card ");
    tamper("o_spot_price_edited", "spot_prices_no_update",
           "UPDATE spot_prices SET price_nano = price_nano / 2 WHERE id = 1;", "",
           "FAILED: spot price 1 (");
    /* back-dating when a price was entered would let it re-price a
     * finalized month (SPEC section 2) */
    tamper("o2_spot_entered_at_edited", "spot_prices_no_update",
           "UPDATE spot_prices SET entered_at = 0 WHERE id = 1;", "", "FAILED: spot price 1 (");
    tamper("p_refers_to_set", "invoices_no_update",
           "UPDATE invoices SET refers_to = 'INV-2026-000001' WHERE id = 'INV-2026-000002';", "",
           "FAILED: invoice INV-2026-000002: changed since chain entry ");
    /* usage is chained by batch totals: an edited or inserted row shows */
    tamper("r_usage_edited", "", "UPDATE usage_intervals SET weight = 1 WHERE weight = 2;", "",
           "FAILED: usage of meter 0: the usage tables hold ");
    tamper("s_usage_inserted", "",
           "INSERT INTO usage_points(account, meter, dim, dim2, t_s, qty, seq) VALUES ('acme', 3, "
           "'x', 'in', 1772323200, 1000000, 1);",
           "", "FAILED: usage of meter 3: the usage tables hold 1000000");
    /* rewriting the chain after an edit breaks every later link */
    tamper("q_chain_rewritten", "grants_no_update,ledger_chain_no_update",
           "UPDATE grants SET amount_minor = 7;\n"
           "UPDATE ledger_chain SET row_hash = lower(hex(randomblob(32))) "
           "WHERE tbl = 'grants';",
           "", "its hash does not follow from the entry before");
    /* an entry deleted from the middle of the chain */
    tamper("q2_chain_entry_deleted", "ledger_chain_no_delete",
           "DELETE FROM ledger_chain WHERE seq = 3;", "",
           "FAILED: ledger chain entry 4: entries 3 to 3 are missing");
    /* a forged entry appended: its link is not the hash of the one before */
    tamper("q3_chain_entry_forged", "",
           "INSERT INTO ledger_chain(tbl, row_key, row_hash, hash) SELECT 'grants', 1, row_hash, "
           "hash FROM ledger_chain ORDER BY seq DESC LIMIT 1;",
           "", "(grants row 1): its hash does not follow from the entry before");
}

/* verify checks each covered table's rows in rowid order against its chain
 * entries sorted by row, a row's latest entry last: a row updated through
 * Tally holds to its latest entry, not an earlier one; a row moved to
 * another rowid is a deleted row (named before the unchained one it left);
 * an unchained row before the first chained one is named (on base.db from
 * test_chain_catches_hidden_edits, renamed twice here). */
static void test_chain_rows_against_latest_entries(void **state)
{
    (void)state;
    tally_buf out;
    tally_buf_init(&out, 0);
    assert_int_equal(tally(&out, "base.db", "tally.key", "account set acme --name 'Acme A'"), 0);
    assert_int_equal(tally(&out, "base.db", "tally.key", "account set acme --name 'Acme B'"), 0);
    assert_int_equal(tally(&out, "base.db", "tally.key", "verify"), 0);
    /* back to the name of its middle entry, which is not its latest */
    tamper("t_account_renamed_back", "chain_accounts_update",
           "UPDATE accounts SET name = 'Acme A' WHERE id = 'acme';", "",
           "FAILED: account acme: changed since chain entry ");
    tamper("u_outbox_row_moved", "outbox_no_update", "UPDATE outbox SET id = 0 WHERE id = 1;", "",
           "FAILED: outbox row 1: deleted (chain entry ");
    tamper("v_outbox_row_before_the_first", "chain_outbox",
           "INSERT INTO outbox(id, event_id, type, subject, payload, created_at) VALUES (0, "
           "'planted', 'invoice.finalized', 'acme', CAST('{}' AS BLOB), 0);",
           "", "FAILED: outbox event planted: not in the ledger chain (written around Tally)");
    tally_buf_release(&out);
}

/* `tally head` and `tally verify --head FILE`: a saved head catches what
 * leaves a consistent but shorter chain: a rollback of the file to an
 * older copy, and the last writes deleted with their chain entries. */
static void test_signed_head(void **state)
{
    (void)state;
    tally_buf out;
    tally_buf_init(&out, 0);
    assert_int_equal(tu_sh(NULL,
                           "cd '%s' && rm -f hd*.db* && cp tally.db hd.db && cp tally.db "
                           "hd_old.db",
                           dir),
                     0);
    assert_int_equal(tally(&out, "hd.db", "tally.key", "head > h1.json"), 0);
    assert_int_equal(tally(&out, "hd.db", "tally.key", "verify --head h1.json"), 0);
    assert_non_null(strstr(out.data, "signed head in h1.json still holds"));
    assert_int_equal(tally(&out, "hd.db", "tally.key", "credit grant acme 5.00 --kind coupon"), 0);
    assert_int_equal(tally(&out, "hd.db", "tally.key", "head > h2.json"), 0);
    assert_int_equal(tu_sh(&out, "cd '%s' && cat h2.json", dir), 0);
    assert_non_null(strstr(out.data, "{\"type\":\"ledger.head\",\"seq\":"));
    assert_non_null(strstr(out.data, "\"key_id\":\""));
    assert_int_equal(tally(&out, "hd.db", "tally.key", "verify --head h2.json"), 0);
    assert_int_equal(tally(&out, "hd.db", "tally.key", "verify --head h1.json"), 0);
    /* the file rolled back to the copy from before the grant */
    assert_int_equal(tally(&out, "hd_old.db", "tally.key", "verify"), 0);
    assert_int_equal(tally(&out, "hd_old.db", "tally.key", "verify --head h2.json"), 1);
    assert_non_null(strstr(out.data, "before the signed head (entries were removed or the file "
                                     "was rolled back)"));
    /* the grant deleted with its entry, postings, balances and chain entries */
    assert_int_equal(
        tu_sh(&out,
              "cd '%s' && cp hd.db hd_cut.db && sqlite3 -bail hd_cut.db \"DROP TRIGGER "
              "grants_no_delete; DROP TRIGGER entries_no_delete; DROP TRIGGER postings_no_delete; "
              "DROP TRIGGER ledger_chain_no_delete; DELETE FROM postings WHERE entry_id = (SELECT "
              "max(id) FROM entries); DELETE FROM entries WHERE id = (SELECT max(id) FROM "
              "entries); DELETE FROM grants; DELETE FROM balances WHERE ledger_acct LIKE "
              "'%%coupon' OR ledger_acct LIKE 'grant:%%'; DELETE FROM ledger_chain WHERE seq > "
              "(SELECT seq FROM ledger_chain WHERE tbl = 'outbox' ORDER BY seq DESC LIMIT 1);\" "
              "&& sqlite3 hd_cut.db .schema > /dev/null",
              dir),
        0);
    /* put the triggers back as they were */
    tally_buf fix;
    tally_buf_init(&fix, 0);
    trigger_text("grants_no_delete", &fix);
    trigger_text("entries_no_delete", &fix);
    trigger_text("postings_no_delete", &fix);
    trigger_text("ledger_chain_no_delete", &fix);
    write_file("fix.sql", fix.data);
    assert_int_equal(tu_sh(&out, "cd '%s' && sqlite3 -bail hd_cut.db < fix.sql", dir), 0);
    /* acme's prepaid balance still counts the grant: recomputed, it differs */
    assert_int_equal(tally(&out, "hd_cut.db", "tally.key", "verify"), 1);
    assert_non_null(strstr(out.data, "FAILED: balance of account acme: credits_minor"));
    /* the derived balance removed too (a read would derive it again) */
    assert_int_equal(tu_sh(&out,
                           "cd '%s' && sqlite3 -bail hd_cut.db \"DELETE FROM account_balances "
                           "WHERE account = 'acme'; DELETE FROM running_periods WHERE account = "
                           "'acme';\"",
                           dir),
                     0);
    assert_int_equal(tally(&out, "hd_cut.db", "tally.key", "verify"), 0); /* consistent... */
    assert_int_equal(tally(&out, "hd_cut.db", "tally.key", "verify --head h2.json"), 1);
    assert_non_null(strstr(out.data, "before the signed head"));
    /* a forged head */
    assert_int_equal(tu_sh(NULL, "cd '%s' && sed 's/\"seq\":/\"seq\":1/' h1.json > h3.json", dir),
                     0);
    assert_int_equal(tally(&out, "hd.db", "tally.key", "verify --head h3.json"), 1);
    assert_non_null(strstr(out.data, "its signature does not verify"));
    assert_int_equal(tally(&out, "hd.db", "tally.key", "verify --head nothere.json"), 1);
    tally_buf_release(&fix);
    tally_buf_release(&out);
}

/* The invoice page written by `invoice run --out`: its printed commands,
 * run with standard tools on the document from `tally invoice show`. */
static void test_page_commands_verify_real_invoice(void **state)
{
    (void)state;
    tally_buf h, out;
    tally_buf_init(&h, 0);
    tally_buf_init(&out, 0);
    char path[700];
    snprintf(path, sizeof path, "%s/out/acme-2026-03.html", dir);
    assert_int_equal(tu_read_file(path, &h), 0);
    assert_null(strstr(h.data, "http"));
    assert_non_null(strstr(h.data, "INV-2026-000001"));
    assert_non_null(strstr(h.data, "CNY 7.74"));
    const char *s = strstr(h.data, "<pre id=\"verify-commands\">");
    assert_non_null(s);
    s = strchr(s, '>') + 1;
    const char *e = strstr(s, "</pre>");
    assert_non_null(e);
    snprintf(path, sizeof path, "%s/check.sh", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    static const char *const ent[][2] = {
        {"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&#39;", "'"}};
    for (const char *c = s; c < e; c++) {
        size_t k = 0;
        while (k < 5 && strncmp(c, ent[k][0], strlen(ent[k][0])) != 0)
            k++;
        fputs(k < 5 ? ent[k][1] : (char[2]){*c, 0}, f);
        c += k < 5 ? strlen(ent[k][0]) - 1 : 0;
    }
    fclose(f);
    assert_int_equal(tu_sh(NULL,
                           "cd '%s' && '%s' --db tally.db invoice show INV-2026-000001 --format "
                           "json > acme-2026-03.json",
                           dir, TALLY_BINARY),
                     0);
    assert_int_equal(tu_sh(&out, "cd '%s' && sh check.sh 2>&1", dir), 0);
    assert_non_null(strstr(out.data, "hash matches"));
    assert_non_null(strstr(out.data, "Signature Verified Successfully"));
    /* the file `invoice run --out` wrote, as the page names it, checks the same way */
    tally_buf_reset(&out);
    assert_int_equal(tu_sh(&out, "cd '%s/out' && cp ../pub.pem . && sh ../check.sh 2>&1", dir), 0);
    assert_non_null(strstr(out.data, "Signature Verified Successfully"));

    /* the credit note renders as one */
    tally_buf_reset(&out);
    assert_int_equal(tu_sh(&out,
                           "'%s' --db '%s/tally.db' invoice show CN-2026-000001 --format html",
                           TALLY_BINARY, dir),
                     0);
    assert_non_null(strstr(out.data, "CREDIT NOTE"));
    assert_non_null(strstr(out.data, "INV-2026-000003"));
    tally_buf_release(&h);
    tally_buf_release(&out);
}

static void test_page_renders_in_chromium(void **state)
{
    (void)state;
    TU_REQUIRE_TOOL(access("/usr/bin/chromium", X_OK) == 0, "chromium");
    tally_buf dom;
    tally_buf_init(&dom, 0);
    assert_int_equal(tu_sh(NULL,
                           "cd '%s' && timeout 120 chromium --headless --no-sandbox --disable-gpu "
                           "--disable-quic --no-first-run --disable-background-networking "
                           "--disable-component-update --disable-sync --user-data-dir=\"$PWD/ch1\" "
                           "--screenshot=\"$PWD/acme.png\" --window-size=1000,1400 "
                           "\"file://$PWD/out/acme-2026-03.html\" >/dev/null 2>&1",
                           dir),
                     0);
    char png[700];
    snprintf(png, sizeof png, "%s/acme.png", dir);
    struct stat st;
    assert_int_equal(stat(png, &st), 0);
    assert_true(st.st_size > 20000);
    assert_int_equal(tu_sh(&dom,
                           "cd '%s' && timeout 120 chromium --headless --no-sandbox --disable-gpu "
                           "--disable-quic --no-first-run --disable-background-networking "
                           "--disable-component-update --disable-sync --user-data-dir=\"$PWD/ch2\" "
                           "--dump-dom \"file://$PWD/out/acme-2026-03.html\" 2>/dev/null",
                           dir),
                     0);
    assert_non_null(strstr(dom.data, "CNY 7.74"));
    assert_non_null(strstr(dom.data, "Signature (Ed25519 over the hash)"));
    tally_buf_release(&dom);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keygen_and_pubkey),
        cmocka_unit_test(test_verify_real_ledger),
        cmocka_unit_test(test_key_rotation_keeps_old_documents_valid),
        cmocka_unit_test(test_tampering_is_caught),
        cmocka_unit_test(test_chain_catches_hidden_edits),
        cmocka_unit_test(test_chain_catches_hidden_edits_2),
        cmocka_unit_test(test_chain_rows_against_latest_entries),
        cmocka_unit_test(test_signed_head),
        cmocka_unit_test(test_page_commands_verify_real_invoice),
        cmocka_unit_test(test_page_renders_in_chromium),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
