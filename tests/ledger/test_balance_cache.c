/* Tests for the rows the balance refresh keeps between commits
 * (ledger/balance_cache.c): over random writes, drops and gathers of five
 * periods (more than an account holds windows), each held window gives the
 * rows the ledger's query would, in its order; a row read by two windows is
 * held once; past BAL_CACHE_ROWS an account holds nothing rather than part
 * of a window. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "../../ledger/ledger_int.h"

#define DAY      86400LL
#define MAX_ROWS 400

/* The first days of January to June 2026, UTC. */
static const int64_t month[] = {1767225600, 1769904000, 1772323200,
                                1775001600, 1777593600, 1780272000};
#define N_PERIODS 5

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* What the ledger holds of one account: rows by id (id 0: none). */
typedef struct model {
    int64_t id[MAX_ROWS];
    tally_interval iv[MAX_ROWS];
    size_t n;
} model;

static int gather_order(const void *pa, const void *pb)
{
    const int64_t *a = pa, *b = pb; /* (start_s, id) pairs */
    if (a[0] != b[0])
        return a[0] < b[0] ? -1 : 1;
    return a[1] < b[1] ? -1 : a[1] > b[1];
}

/* The rows INV_Q_INTERVALS returns for [start, end), in its order. */
static size_t query(const model *m, int64_t start, int64_t end, tally_interval *rows, int64_t *ids)
{
    int64_t key[MAX_ROWS][2];
    size_t n = 0;
    for (size_t i = 0; i < m->n; i++)
        if (m->id[i] && m->iv[i].start_s > start - 2 * DAY && m->iv[i].start_s < end + DAY &&
            m->iv[i].end_s > start - DAY) {
            key[n][0] = m->iv[i].start_s;
            key[n][1] = (int64_t)i;
            n++;
        }
    qsort(key, n, sizeof key[0], gather_order);
    for (size_t k = 0; k < n; k++) {
        rows[k] = m->iv[key[k][1]];
        ids[k] = m->id[key[k][1]];
    }
    return n;
}

static tally_interval row_at(int64_t start, int64_t len, int i)
{
    tally_interval iv;
    memset(&iv, 0, sizeof iv);
    iv.meter = TALLY_METER_ACCELERATOR;
    snprintf(iv.resource, sizeof iv.resource, "ins-%d", i);
    snprintf(iv.dim, sizeof iv.dim, "h100");
    iv.weight = 1;
    iv.start_s = start;
    iv.end_s = start + len;
    return iv;
}

static bal_cache_entry *entry(bal_cache *c, const char *id)
{
    tally_account a;
    memset(&a, 0, sizeof a);
    snprintf(a.id, sizeof a.id, "%s", id);
    snprintf(a.currency, sizeof a.currency, "CNY");
    bal_cache_entry *e = NULL;
    assert_int_equal(bal_cache_add(c, &a, &e), TALLY_OK);
    return e;
}

/* A gather of period p as the refresh does it: from the cache when it
 * holds the window (then compared with the ledger), else loaded. */
static void gather(bal_cache *c, const model *m, int p)
{
    static tally_interval want[MAX_ROWS];
    static int64_t ids[MAX_ROWS];
    int64_t start = month[p], end = month[p + 1];
    size_t n = query(m, start, end, want, ids);
    bal_cache_entry *e = bal_cache_find(c, "acme");
    assert_non_null(e);
    const bal_cache_win *w = bal_cache_window(e, start, end);
    if (!w) {
        bal_cache_iv_load(c, e, start, end, want, ids, n);
        assert_non_null(bal_cache_window(e, start, end));
        return;
    }
    tally_interval *got = NULL;
    size_t cap = 0, n_got = 0;
    assert_int_equal(bal_cache_iv_rows(c, e, w, &got, &cap, &n_got), TALLY_OK);
    assert_int_equal(n_got, n);
    for (size_t i = 0; i < n; i++)
        assert_memory_equal(&got[i], &want[i], sizeof want[i]);
    free(got);
}

static void test_random_writes(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 40; seed++) {
        uint64_t s = seed * 0x9E3779B97F4A7C15ULL;
        bal_cache *c = NULL;
        assert_int_equal(bal_cache_create(&c), TALLY_OK);
        (void)entry(c, "acme");
        static model m;
        memset(&m, 0, sizeof m);
        for (int op = 0; op < 3000; op++) {
            uint64_t r = rnd(&s) % 10;
            if (r < 3 && m.n < MAX_ROWS) { /* a new row, anywhere in the six months */
                int64_t start = month[0] + (int64_t)(rnd(&s) % (uint64_t)(month[5] - month[0]));
                if (rnd(&s) % 2) /* near an edge: read by two periods */
                    start = month[1 + rnd(&s) % 4] - DAY + (int64_t)(rnd(&s) % (2 * DAY));
                m.id[m.n] = (int64_t)m.n + 1;
                m.iv[m.n] = row_at(start, 1 + (int64_t)(rnd(&s) % 3600), (int)m.n);
                bal_cache_iv_put(c, "acme", m.id[m.n], &m.iv[m.n]);
                m.n++;
            } else if (r < 6 && m.n) { /* a row grows, past an edge at times */
                size_t i = rnd(&s) % m.n;
                if (!m.id[i])
                    continue;
                m.iv[i].end_s += (int64_t)(rnd(&s) % (3 * DAY));
                bal_cache_iv_put(c, "acme", m.id[i], &m.iv[i]);
            } else if (r < 7 && m.n) { /* a row deleted */
                size_t i = rnd(&s) % m.n;
                bal_cache_iv_drop(c, "acme", m.id[i]);
                m.id[i] = 0;
            } else {
                gather(c, &m, (int)(rnd(&s) % N_PERIODS));
            }
        }
        for (int p = 0; p < N_PERIODS; p++)
            gather(c, &m, p);
        bal_cache_destroy(c);
    }
}

/* n rows starting on the first day of March: both February's gather (its
 * day after) and March's read them. */
static void edge_rows(size_t n, tally_interval **rows, int64_t **ids)
{
    *rows = calloc(n, sizeof **rows);
    *ids = calloc(n, sizeof **ids);
    assert_true(*rows && *ids);
    for (size_t i = 0; i < n; i++) {
        (*rows)[i] = row_at(month[2] + (int64_t)(i % 3600), 10, (int)i);
        (*ids)[i] = (int64_t)i + 1;
    }
}

/* A cache with account acme, and n rows of the first day of March for it
 * to load. */
static bal_cache *with_edge_rows(size_t n, tally_interval **rows, int64_t **ids,
                                 bal_cache_entry **acme)
{
    edge_rows(n, rows, ids);
    bal_cache *c = NULL;
    assert_int_equal(bal_cache_create(&c), TALLY_OK);
    *acme = entry(c, "acme");
    return c;
}

static void done(bal_cache *c, tally_interval *rows, int64_t *ids)
{
    bal_cache_destroy(c);
    free(rows);
    free(ids);
}

static void test_shared_rows_once(void **state)
{
    (void)state;
    size_t n = BAL_CACHE_ROWS / 2 + 1; /* twice that would not fit */
    tally_interval *rows;
    int64_t *ids;
    bal_cache_entry *e;
    bal_cache *c = with_edge_rows(n, &rows, &ids, &e);
    bal_cache_iv_load(c, e, month[1], month[2], rows, ids, n);
    bal_cache_iv_load(c, e, month[2], month[3], rows, ids, n);
    assert_non_null(bal_cache_window(e, month[1], month[2]));
    assert_non_null(bal_cache_window(e, month[2], month[3]));
    assert_int_equal(e->n_ivs, n);
    /* The rest of the bound is there for another account. */
    bal_cache_entry *f = entry(c, "beta");
    bal_cache_iv_load(c, f, month[2], month[3], rows, ids, BAL_CACHE_ROWS - n);
    assert_non_null(bal_cache_window(f, month[2], month[3]));
    done(c, rows, ids);
}

static void test_bound(void **state)
{
    (void)state;
    size_t n = BAL_CACHE_ROWS - 10;
    tally_interval *rows;
    int64_t *ids;
    bal_cache_entry *e;
    bal_cache *c = with_edge_rows(n, &rows, &ids, &e);
    bal_cache_iv_load(c, e, month[2], month[3], rows, ids, n);
    assert_non_null(bal_cache_window(e, month[2], month[3]));
    /* Another account's 20 rows would pass the bound: it holds none. */
    bal_cache_entry *f = entry(c, "beta");
    bal_cache_iv_load(c, f, month[2], month[3], rows, ids, 20);
    assert_null(bal_cache_window(f, month[2], month[3]));
    assert_int_equal(f->n_ivs, 0);
    /* Ten more fit; the eleventh row, written, lets all of its rows go. */
    bal_cache_iv_load(c, f, month[2], month[3], rows, ids, 10);
    assert_non_null(bal_cache_window(f, month[2], month[3]));
    tally_interval extra = row_at(month[2] + 5, 10, 99);
    bal_cache_iv_put(c, "beta", (int64_t)n + 1, &extra);
    assert_null(bal_cache_window(f, month[2], month[3]));
    assert_int_equal(f->n_ivs, 0);
    /* acme's window is untouched and still gives its rows. */
    const bal_cache_win *w = bal_cache_window(e, month[2], month[3]);
    assert_non_null(w);
    tally_interval *got = NULL;
    size_t cap = 0, n_got = 0;
    assert_int_equal(bal_cache_iv_rows(c, e, w, &got, &cap, &n_got), TALLY_OK);
    assert_int_equal(n_got, n);
    free(got);
    done(c, rows, ids);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_writes),
        cmocka_unit_test(test_shared_rows_once),
        cmocka_unit_test(test_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
