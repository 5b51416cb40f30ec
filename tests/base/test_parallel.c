/* Tests for base/parallel.c: every index runs once, on worker ids below the
 * threads asked for, whatever the counts (none, one, more threads than
 * work, more than TALLY_PARALLEL_MAX). */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "testutil.h"

#include "tally/parallel.h"

#define N 5000

typedef struct seen {
    pthread_mutex_t mu;
    int count[N];
    size_t max_worker;
    bool other_thread; /* some index ran off the calling thread */
    pthread_t caller;
} seen;

static void mark(void *ctx, size_t worker, size_t i)
{
    seen *s = ctx;
    pthread_mutex_lock(&s->mu);
    s->count[i]++;
    if (worker > s->max_worker)
        s->max_worker = worker;
    if (!pthread_equal(pthread_self(), s->caller))
        s->other_thread = true;
    pthread_mutex_unlock(&s->mu);
}

static void run(size_t n, size_t threads, size_t want_max_worker_below)
{
    static seen s;
    memset(&s, 0, sizeof s);
    assert_int_equal(pthread_mutex_init(&s.mu, NULL), 0);
    s.caller = pthread_self();
    tally_parallel_for(n, threads, mark, &s);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(s.count[i], 1);
    for (size_t i = n; i < N; i++)
        assert_int_equal(s.count[i], 0);
    assert_true(s.max_worker < want_max_worker_below);
    if (threads <= 1 || n <= 1)
        assert_false(s.other_thread);
    pthread_mutex_destroy(&s.mu);
}

static void test_counts(void **state)
{
    (void)state;
    run(0, 4, 1);
    run(1, 4, 1);
    run(N, 1, 1);
    run(N, 0, 1);
    run(3, 8, 3);
    run(N, 2, 2);
    run(N, 64, TALLY_PARALLEL_MAX);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
