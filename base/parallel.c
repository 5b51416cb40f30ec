/* tally_parallel_for (include/tally/parallel.h). */
#include <pthread.h>

#include "tally/parallel.h"

typedef struct shared {
    size_t n, next;
    pthread_mutex_t mu;
    void (*fn)(void *ctx, size_t worker, size_t i);
    void *ctx;
} shared;

typedef struct worker {
    shared *s;
    size_t id;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    shared *s = w->s;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        size_t i = s->next++;
        pthread_mutex_unlock(&s->mu);
        if (i >= s->n)
            return NULL;
        s->fn(s->ctx, w->id, i);
    }
}

void tally_parallel_for(size_t n, size_t threads, void (*fn)(void *ctx, size_t worker, size_t i),
                        void *ctx)
{
    shared s = {.n = n, .fn = fn, .ctx = ctx};
    if (threads > TALLY_PARALLEL_MAX)
        threads = TALLY_PARALLEL_MAX;
    if (threads <= 1 || n <= 1 || pthread_mutex_init(&s.mu, NULL) != 0) {
        for (size_t i = 0; i < n; i++)
            fn(ctx, 0, i);
        return;
    }
    pthread_t th[TALLY_PARALLEL_MAX];
    worker w[TALLY_PARALLEL_MAX];
    size_t started = 0;
    while (started + 1 < threads && started + 1 < n) {
        w[started + 1] = (worker){&s, started + 1};
        if (pthread_create(&th[started], NULL, work, &w[started + 1]) != 0)
            break;
        started++;
    }
    w[0] = (worker){&s, 0};
    work(&w[0]);
    for (size_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&s.mu);
}
