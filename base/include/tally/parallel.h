/* Work shared over threads: one loop, used where independent jobs may run
 * on every core (a meter's shard commits). */
#ifndef TALLY_PARALLEL_H
#define TALLY_PARALLEL_H

#include <stddef.h>

#define TALLY_PARALLEL_MAX 16 /* threads of one tally_parallel_for, the caller's included */

/* Calls fn(ctx, worker, i) once for every i in [0, n), on up to threads
 * threads (at most TALLY_PARALLEL_MAX, never more than n): the calling
 * thread is worker 0, the others 1, 2, ...; each takes the next i until
 * none is left, and the call returns when all are done. A thread that
 * cannot be started leaves its share to the others. */
void tally_parallel_for(size_t n, size_t threads, void (*fn)(void *ctx, size_t worker, size_t i),
                        void *ctx);

#endif
