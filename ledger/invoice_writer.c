/* The output files of an invoice run, written on threads of their own
 * (invoice_run.c).
 *
 * Rendering a document as CSV and HTML and writing its three files costs
 * more than finalizing it. So the run hands each committed group's
 * documents to these threads, which render and write them, each with a
 * ledger connection of its own (the HTML page reads the account's name, grants
 * and usage) while the run goes on with the next group, and waits for them
 * before it commits that group. What a run leaves and reports is the same
 * as writing them in place: a file that cannot be written stops the run
 * after its group (the next group, not yet committed, is rolled back), the
 * group's other files are still written, and the first failure in account
 * order is named. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"

#define WRITER_THREADS 2 /* rendering and file creation keep two of them busy */

typedef struct out_item {
    char account[TALLY_NAME_MAX];
    size_t off, len; /* of its document in docs */
} out_item;

typedef struct writer_thread {
    struct inv_writer *w;
    tally_ledger *l; /* the thread's own connection */
    pthread_t thread;
} writer_thread;

struct inv_writer {
    writer_thread t[WRITER_THREADS];
    size_t n_threads;
    char *dir, period[8];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool busy; /* a batch was handed over and is not written yet */
    bool quit;
    out_item *items;
    size_t n, cap;
    size_t next, done; /* items taken by a thread; items written */
    tally_buf docs;
    size_t err_at; /* the first failing item (n: none), its error and why */
    tally_err err;
    char why[512];
};

/* One document's files; a failure is kept if it is the batch's first in
 * account order (the others still write their own documents). */
static void write_item(writer_thread *t, size_t i)
{
    inv_writer *w = t->w;
    const out_item *it = &w->items[i];
    char why[400] = ""; /* with "account <id>: " it fits w->why */
    tally_err e = inv_write_files(t->l, w->dir, it->account, w->period, w->docs.data + it->off,
                                  it->len, why, sizeof why);
    pthread_mutex_lock(&w->mu);
    if (e && i < w->err_at) {
        w->err_at = i;
        w->err = e;
        if (strncmp(why, "account ", 8) == 0)
            snprintf(w->why, sizeof w->why, "%s", why);
        else
            snprintf(w->why, sizeof w->why, "account %s: %s", it->account,
                     why[0] ? why : tally_err_str(e));
    }
    if (++w->done == w->n) {
        w->busy = false;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
}

static void *writer_main(void *arg)
{
    writer_thread *t = arg;
    inv_writer *w = t->w;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!(w->busy && w->next < w->n) && !w->quit)
            pthread_cond_wait(&w->cv, &w->mu);
        if (!(w->busy && w->next < w->n))
            break;
        size_t i = w->next++;
        pthread_mutex_unlock(&w->mu);
        write_item(t, i);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Up to WRITER_THREADS threads, each with a connection of its own. */
static void start_threads(inv_writer *w, const char *path)
{
    for (size_t i = 0; i < WRITER_THREADS; i++) {
        writer_thread *t = &w->t[w->n_threads];
        char why[256];
        t->w = w;
        if (tally_ledger_open(path, &t->l, why, sizeof why) != TALLY_OK)
            return;
        if (pthread_create(&t->thread, NULL, writer_main, t) != 0) {
            tally_ledger_close(t->l);
            t->l = NULL;
            return;
        }
        w->n_threads++;
    }
}

tally_err inv_writer_start(const tally_ledger *l, const char *dir, const char *period,
                           inv_writer **out)
{
    *out = NULL;
    const char *path = l->shards ? l->shards->dir : l->path;
    const char *off = getenv("TALLY_INVOICE_FILES_IN_PLACE"); /* for the tests */
    if (!path || !path[0] || !strcmp(path, ":memory:") || (off && !strcmp(off, "1")))
        return TALLY_OK;
    inv_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->dir = strdup(dir))) {
        free(w);
        return TALLY_NOMEM;
    }
    snprintf(w->period, sizeof w->period, "%s", period);
    tally_buf_init(&w->docs, 0);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    start_threads(w, path);
    if (!w->n_threads) { /* the run writes its files itself */
        inv_writer_stop(w);
        return TALLY_OK;
    }
    *out = w;
    return TALLY_OK;
}

tally_err inv_writer_wait(inv_writer *w, char *why, size_t cap)
{
    pthread_mutex_lock(&w->mu);
    while (w->busy)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    tally_err e = w->err;
    if (e && cap)
        snprintf(why, cap, "%s", w->why);
    w->err = TALLY_OK;
    w->n = 0;
    tally_buf_reset(&w->docs);
    return e;
}

tally_err inv_writer_add(inv_writer *w, const char *account, const char *doc, size_t len)
{
    void *items = w->items;
    tally_err e = ledger_grow(&items, w->n, &w->cap, sizeof *w->items, 256);
    w->items = items;
    if (e)
        return e;
    out_item *it = &w->items[w->n];
    snprintf(it->account, sizeof it->account, "%s", account);
    it->off = w->docs.len;
    it->len = len;
    e = tally_buf_append(&w->docs, doc, len);
    if (!e)
        w->n++;
    return e;
}

void inv_writer_go(inv_writer *w)
{
    pthread_mutex_lock(&w->mu);
    w->next = w->done = 0;
    w->err_at = w->n;
    w->err = TALLY_OK;
    w->busy = w->n > 0;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void inv_writer_stop(inv_writer *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->quit = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    for (size_t i = 0; i < w->n_threads; i++) { /* each finishes what it took */
        pthread_join(w->t[i].thread, NULL);
        tally_ledger_close(w->t[i].l);
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    tally_buf_release(&w->docs);
    free(w->items);
    free(w->dir);
    free(w);
}
