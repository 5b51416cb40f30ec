/* API keys through the library (server/auth.c): creation, the stored form,
 * revocation, listing, and checking Authorization headers, including a
 * revocation made by another connection while the keyring is cached. */
#include <stdio.h>
#include <string.h>

#include "../../server/server_int.h"
#include "testutil.h"
#include "tally/ledger_sql.h"

typedef struct keys_fixture {
    tally_ledger *l, *other;
    char db[600];
} keys_fixture;

static int setup(void **state)
{
    static keys_fixture f;
    char why[256];
    snprintf(f.db, sizeof f.db, "%s/keys.db", tu_tmpdir("http-keys"));
    if (tally_ledger_open(f.db, &f.l, why, sizeof why) != TALLY_OK ||
        tally_ledger_open(f.db, &f.other, why, sizeof why) != TALLY_OK)
        fail_msg("open: %s", why);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    keys_fixture *f = *state;
    tally_ledger_close(f->l);
    tally_ledger_close(f->other);
    return 0;
}

static tally_err count_row(void *ctx, int ncols, const char *const *cols)
{
    (void)ncols;
    snprintf(ctx, 80, "%s", cols[0] ? cols[0] : "");
    return TALLY_OK;
}

static void test_create_and_store(void **state)
{
    keys_fixture *f = *state;
    char key[TALLY_APIKEY_LEN + 1], key2[TALLY_APIKEY_LEN + 1], hex[80] = "";
    int64_t id = 0, id2 = 0;
    assert_int_equal(tally_apikey_create(f->l, "acme", false, key, sizeof key, &id), TALLY_OK);
    assert_int_equal(strlen(key), TALLY_APIKEY_LEN);
    assert_memory_equal(key, "tly_", 4);
    assert_int_equal(tally_apikey_create(f->l, NULL, true, key2, sizeof key2, &id2), TALLY_OK);
    assert_true(id2 > id);
    assert_string_not_equal(key, key2);
    /* Only the SHA-256 is stored: 32 bytes, equal to the hash of the key. */
    unsigned char h[32];
    char want[65];
    srv_key_hash(key, strlen(key), h);
    for (int i = 0; i < 32; i++)
        snprintf(want + 2 * i, 3, "%02X", h[i]);
    const char *params[] = {"acme"};
    assert_int_equal(tally_ledger_query(f->l,
                                        "SELECT hex(key_hash) FROM api_keys WHERE account = ?1",
                                        params, 1, count_row, hex),
                     TALLY_OK);
    assert_string_equal(hex, want);
    assert_int_equal(tally_ledger_query(f->l,
                                        "SELECT count(*) FROM api_keys WHERE instr(key_hash, ?1) "
                                        "OR instr(coalesce(account, ''), ?1)",
                                        (const char *const[]){key + 4}, 1, count_row, hex),
                     TALLY_OK);
    assert_string_equal(hex, "0");
    /* Bad combinations and account ids. */
    char long_id[TALLY_NAME_MAX + 1];
    memset(long_id, 'a', TALLY_NAME_MAX);
    long_id[TALLY_NAME_MAX] = '\0';
    assert_int_equal(tally_apikey_create(f->l, NULL, false, key, sizeof key, &id), TALLY_INVAL);
    assert_int_equal(tally_apikey_create(f->l, "acme", true, key, sizeof key, &id), TALLY_INVAL);
    assert_int_equal(tally_apikey_create(f->l, "", false, key, sizeof key, &id), TALLY_INVAL);
    assert_int_equal(tally_apikey_create(f->l, "a\nb", false, key, sizeof key, &id), TALLY_INVAL);
    assert_int_equal(tally_apikey_create(f->l, long_id, false, key, sizeof key, &id), TALLY_INVAL);
    assert_int_equal(tally_apikey_create(f->l, "acme", false, key, 10, &id), TALLY_INVAL);
    /* An account id full of SQL goes in as data. */
    assert_int_equal(
        tally_apikey_create(f->l, "x'); DROP TABLE api_keys; --", false, key, sizeof key, &id),
        TALLY_OK);
}

typedef struct listed {
    int n;
    bool saw_quote_account;
} listed;

static tally_err list_one(void *ctx, const tally_apikey_info *k)
{
    listed *l = ctx;
    l->n++;
    if (strcmp(k->account, "x'); DROP TABLE api_keys; --") == 0)
        l->saw_quote_account = true;
    if (k->admin && k->account[0])
        return TALLY_INTERNAL;
    return TALLY_OK;
}

static void test_revoke_and_list(void **state)
{
    keys_fixture *f = *state;
    char key[TALLY_APIKEY_LEN + 1];
    int64_t id = 0;
    assert_int_equal(tally_apikey_create(f->l, "globex", false, key, sizeof key, &id), TALLY_OK);
    assert_int_equal(tally_apikey_revoke(f->l, id), TALLY_OK);
    assert_int_equal(tally_apikey_revoke(f->l, id), TALLY_EXISTS);
    assert_int_equal(tally_apikey_revoke(f->l, 999999), TALLY_NOT_FOUND);
    listed l = {0, false};
    assert_int_equal(tally_apikey_list(f->l, list_one, &l), TALLY_OK);
    assert_int_equal(l.n, 4);
    assert_true(l.saw_quote_account);
}

static srv_auth_result check(tally_ledger *l, srv_keyring *k, const char *header,
                             srv_principal *who)
{
    return srv_authenticate(l, k, header, who);
}

static void test_authenticate(void **state)
{
    keys_fixture *f = *state;
    char key[TALLY_APIKEY_LEN + 1], admin[TALLY_APIKEY_LEN + 1], hdr[80];
    int64_t id = 0, admin_id = 0;
    assert_int_equal(tally_apikey_create(f->l, "initech", false, key, sizeof key, &id), TALLY_OK);
    assert_int_equal(tally_apikey_create(f->l, NULL, true, admin, sizeof admin, &admin_id),
                     TALLY_OK);
    srv_keyring ring = {0};
    srv_principal who;
    snprintf(hdr, sizeof hdr, "Bearer %s", key);
    assert_int_equal(check(f->l, &ring, hdr, &who), SRV_AUTH_OK);
    assert_false(who.admin);
    assert_int_equal(who.key_id, id);
    assert_string_equal(who.account, "initech");
    snprintf(hdr, sizeof hdr, "BEARER   %s  ", admin);
    assert_int_equal(check(f->l, &ring, hdr, &who), SRV_AUTH_OK);
    assert_true(who.admin);
    assert_string_equal(who.account, "");
    assert_int_equal(check(f->l, &ring, NULL, &who), SRV_AUTH_MISSING);
    static const char *const malformed[] = {"",          "Bearer",      "Bearer ",
                                            "Token abc", "Bearer tly_", "Basic dXNlcjpwYXNz"};
    for (size_t i = 0; i < sizeof malformed / sizeof *malformed; i++)
        assert_int_equal(check(f->l, &ring, malformed[i], &who), SRV_AUTH_MALFORMED);
    /* One character changed: a well-formed key that is not stored. */
    snprintf(hdr, sizeof hdr, "Bearer %s", key);
    hdr[strlen(hdr) - 1] = hdr[strlen(hdr) - 1] == 'A' ? 'B' : 'A';
    assert_int_equal(check(f->l, &ring, hdr, &who), SRV_AUTH_UNKNOWN);
    hdr[strlen(hdr) - 1] = '=';
    assert_int_equal(check(f->l, &ring, hdr, &who), SRV_AUTH_MALFORMED);
    /* Revoked through another connection: the cached keyring notices. */
    assert_int_equal(tally_apikey_revoke(f->other, id), TALLY_OK);
    snprintf(hdr, sizeof hdr, "Bearer %s", key);
    assert_int_equal(check(f->l, &ring, hdr, &who), SRV_AUTH_UNKNOWN);
    snprintf(hdr, sizeof hdr, "Bearer %s", admin);
    assert_int_equal(check(f->l, &ring, hdr, &who), SRV_AUTH_OK);
    srv_keyring_release(&ring);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_and_store),
        cmocka_unit_test(test_revoke_and_list),
        cmocka_unit_test(test_authenticate),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
