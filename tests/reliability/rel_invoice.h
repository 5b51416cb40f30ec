/* The end of every reliability scenario: the faulted ledger must bill
 * exactly what a clean `tally ingest` of the same events bills. Both get the
 * same grants and a finalized March 2026 run; their invoice documents must
 * be equal once what differs by construction (ids, numbers, hashes,
 * signatures, timestamps) is taken out. */
#ifndef TALLY_REL_INVOICE_H
#define TALLY_REL_INVOICE_H

#include <dirent.h>

#include <json-c/json.h>

#include "rel_model.h"

/* Keys whose values name or seal a document rather than bill anything. */
static const char *const rel_volatile_keys[] = {
    "invoice_id", "number",    "key_id",       "hash", "prev_hash",
    "signature",  "issued_at", "finalized_at", NULL,
};

static inline void rel_strip(json_object *o)
{
    if (json_object_is_type(o, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(o); i++)
            rel_strip(json_object_array_get_idx(o, i));
        return;
    }
    if (!json_object_is_type(o, json_type_object))
        return;
    for (const char *const *k = rel_volatile_keys; *k; k++)
        json_object_object_del(o, *k);
    json_object_object_foreach(o, key, val)
    {
        (void)key;
        rel_strip(val);
    }
}

/* The stripped canonical form of a JSON file, malloc'd. */
static inline char *rel_doc(const char *path)
{
    json_object *o = json_object_from_file(path);
    if (!o)
        fail_msg("%s is not JSON", path);
    rel_strip(o);
    char *s = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    json_object_put(o);
    assert_non_null(s);
    return s;
}

/* Grants, a signing key and a finalized March run into outdir. */
static inline void rel_bill(const char *db, const char *outdir)
{
    static const char *const grants[] = {
        "credit grant acct-01 10.00 --kind trial --effective 2026-03-01T00:00:00Z "
        "--expires 2026-03-31T00:00:00Z",
        "credit grant acct-02 500.00 --kind coupon --priority 20 --effective "
        "2026-03-01T00:00:00Z --scope 'sku=a100-40g|h100'",
        "credit grant acct-03 3.00 --kind goodwill --effective 2026-03-01T00:00:00Z",
    };
    char key[1100];
    snprintf(key, sizeof key, "%s/sign.key", outdir);
    assert_int_equal(tu_sh(NULL, "mkdir -p '%s'", outdir), 0);
    assert_int_equal(tu_tally(NULL, "--db '%s' --key '%s' keygen >/dev/null", db, key), 0);
    for (size_t i = 0; i < sizeof grants / sizeof *grants; i++)
        assert_int_equal(tu_tally(NULL, "--db '%s' %s >/dev/null", db, grants[i]), 0);
    assert_int_equal(tu_tally(NULL,
                              "--db '%s' --key '%s' invoice run --period 2026-03 --finalize "
                              "--out '%s' >/dev/null",
                              db, key, outdir),
                     0);
}

/* Bills both ledgers and compares every invoice document; returns the
 * number of invoices and their amount due in fen (for the record). */
static inline long rel_assert_same_invoices(const char *db, const char *ref, const char *dir,
                                            int64_t *due_minor)
{
    char a[1024], b[1024], fa[1400], fb[1400];
    snprintf(a, sizeof a, "%s/inv-faulted", dir);
    snprintf(b, sizeof b, "%s/inv-reference", dir);
    rel_bill(db, a);
    rel_bill(ref, b);
    DIR *d = opendir(b);
    assert_non_null(d);
    long n = 0;
    *due_minor = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0)
            continue;
        snprintf(fa, sizeof fa, "%s/%s", a, e->d_name);
        snprintf(fb, sizeof fb, "%s/%s", b, e->d_name);
        char *x = rel_doc(fa), *y = rel_doc(fb);
        if (strcmp(x, y) != 0)
            fail_msg("invoice %s differs from the reference:\n%s\n%s", e->d_name, x, y);
        json_object *o = json_tokener_parse(x), *due;
        if (o && json_object_object_get_ex(o, "amount_due", &due)) {
            const char *s = json_object_get_string(due), *dot = strchr(s, '.');
            *due_minor += strtoll(s, NULL, 10) * 100 + (dot ? strtoll(dot + 1, NULL, 10) : 0);
        }
        json_object_put(o);
        free(x);
        free(y);
        n++;
    }
    closedir(d);
    assert_true(n > 0);
    /* and nothing billed on one side only */
    assert_int_equal(tu_sh(NULL,
                           "cd '%s' && ls *.json | sort > ../a.lst && cd '%s' && ls *.json "
                           "| sort > ../b.lst && cmp -s ../a.lst ../b.lst",
                           a, b),
                     0);
    return n;
}

#endif
