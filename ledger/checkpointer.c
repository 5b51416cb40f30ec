/* A WAL checkpointer on a thread of its own (ledger_int.h, "Checkpoints").
 *
 * SQLite checkpoints on the writing connection by default: a commit that
 * leaves the WAL at 1,000 pages or more copies them back into the database
 * file and syncs it before the writer goes on (wal_autocheckpoint). A long
 * write job with a core to spare (an invoice run, whose second core signs
 * only part of the time) starts a checkpointer instead: the writer's
 * commits only wake it, and it checkpoints (PASSIVE: it never waits for a
 * lock, never blocks the writer or a reader) on a connection of its own,
 * so copying and syncing overlap the writer's next transaction.
 *
 * The WAL stays bounded: if the thread falls behind and a commit leaves
 * CKPT_INLINE_PAGES or more, the writer waits for the thread's checkpoint
 * to end and checkpoints on its own connection, as without a checkpointer;
 * the next transaction then starts the WAL from its beginning. Stopping puts SQLite's own
 * autocheckpoint back on the writer. Nothing about durability moves: a commit is durable once its
 * WAL frames are synced (synchronous=FULL), and a checkpoint is crash-safe whichever connection
 * runs it (RELIABILITY.md).
 *
 * TALLY_CHECKPOINT=writer, or a machine with one processor, keeps the
 * checkpoints on the writer (README, "The ledger"). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ledger_int.h"

/* When the writer wakes the thread: SQLite's default autocheckpoint. */
#define CKPT_PAGES 1000
/* When the writer checkpoints itself: the thread is this far behind. */
#define CKPT_INLINE_PAGES (16 * CKPT_PAGES)

struct ledger_ckpt {
    tally_ledger *l;
    sqlite3 *db; /* the thread's connection to the same file */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_mutex_t run_mu; /* held by whoever checkpoints: the thread or the writer */
    bool want, stop;
    int64_t inline_runs; /* checkpoints the writer ran itself */
    int64_t pages;       /* WAL pages the thread's checkpoints copied */
    int last_done;       /* the WAL's pages checkpointed after the thread's last one */
};

/* Called by SQLite on the writer's connection after each commit, with the
 * WAL's size in pages. */
static int on_commit(void *arg, sqlite3 *db, const char *name, int pages)
{
    ledger_ckpt *c = arg;
    if (pages >= CKPT_INLINE_PAGES) { /* after the thread's checkpoint, if one runs */
        pthread_mutex_lock(&c->run_mu);
        c->inline_runs++;
        (void)sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        pthread_mutex_unlock(&c->run_mu);
    } else if (pages >= CKPT_PAGES) {
        pthread_mutex_lock(&c->mu);
        c->want = true;
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
    return SQLITE_OK;
}

static void *ckpt_main(void *arg)
{
    ledger_ckpt *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->want && !c->stop)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->stop)
            break;
        c->want = false;
        pthread_mutex_unlock(&c->mu);
        /* An I/O error leaves the pages for the next checkpoint; the
         * writer's own fallback bounds the WAL meanwhile. */
        int log = 0, done = 0;
        pthread_mutex_lock(&c->run_mu);
        int rc = sqlite3_wal_checkpoint_v2(c->db, "main", SQLITE_CHECKPOINT_PASSIVE, &log, &done);
        pthread_mutex_unlock(&c->run_mu);
        pthread_mutex_lock(&c->mu);
        if (rc == SQLITE_OK && done > 0) /* done counts from the WAL's last restart */
            c->pages += done >= c->last_done ? done - c->last_done : done;
        if (rc == SQLITE_OK)
            c->last_done = done;
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Whether checkpoints stay on the writer: asked for, or no second core. */
static bool on_writer(void)
{
    const char *how = getenv("TALLY_CHECKPOINT");
    return (how && strcmp(how, "writer") == 0) || sysconf(_SC_NPROCESSORS_ONLN) < 2;
}

tally_err ledger_ckpt_start(tally_ledger *l, ledger_ckpt **out)
{
    *out = NULL;
    const char *file = sqlite3_db_filename(l->db, "main");
    if (!file || !file[0] || on_writer()) /* in memory, temporary, or asked not to */
        return TALLY_OK;
    ledger_ckpt *c = calloc(1, sizeof *c);
    if (!c)
        return TALLY_NOMEM;
    c->l = l;
    int rc = sqlite3_open_v2(file, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    /* Its checkpoints sync as the writer's would. A connection learns that
     * the file is in WAL mode, and opens the WAL, with its first read; until
     * then a checkpoint on it does nothing. */
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(c->db, "PRAGMA synchronous=FULL; SELECT count(*) FROM sqlite_schema",
                          NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        sqlite3_close(c->db);
        free(c);
        return rc == SQLITE_NOMEM ? TALLY_NOMEM : TALLY_IO;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->run_mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (pthread_create(&c->thread, NULL, ckpt_main, c) != 0) {
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->run_mu);
        pthread_mutex_destroy(&c->mu);
        sqlite3_close(c->db);
        free(c);
        return TALLY_NOMEM;
    }
    (void)sqlite3_wal_hook(l->db, on_commit, c);
    *out = c;
    return TALLY_OK;
}

void ledger_ckpt_stop(ledger_ckpt *c, int64_t *pages, int64_t *inline_runs)
{
    if (!c)
        return;
    (void)sqlite3_wal_autocheckpoint(c->l->db, CKPT_PAGES); /* replaces on_commit */
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    if (pages)
        *pages = c->pages;
    if (inline_runs)
        *inline_runs = c->inline_runs;
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->run_mu);
    pthread_mutex_destroy(&c->mu);
    sqlite3_close(c->db);
    free(c);
}
