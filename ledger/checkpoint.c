/* WAL checkpoints off the committing thread (include/tally/ledger.h,
 * tally_ledger_checkpoint_in_background).
 *
 * SQLite checkpoints a WAL database on the connection that commits, once
 * the WAL passes 1,000 pages: the meter's commit thread then copies pages
 * into the database file and waits for its fsync before the next batch. In
 * the background mode the writer's WAL hook only counts: past
 * CKPT_PAGES it wakes a thread that checkpoints (PASSIVE: it never waits
 * for, or blocks, the writer or readers) on a connection of its own, with
 * the writer's VFS. If the WAL still grows past CKPT_PAGES_MAX (the thread
 * is behind, or a reader holds old frames), the writer checkpoints itself,
 * as SQLite would, so the WAL stays bounded.
 *
 * Durability does not change: a commit is durable once its WAL frames are
 * synced (synchronous=FULL), before any checkpoint, and a checkpoint cut
 * short by a crash is redone by SQLite's recovery on the next open. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"

#define CKPT_PAGES     1000  /* SQLite's own auto-checkpoint size */
#define CKPT_PAGES_MAX 16000 /* past this the writer checkpoints itself */

struct ledger_ckpt {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool due, stop;
    sqlite3 *db; /* the thread's own connection */
    int64_t runs;
};

static void *ckpt_main(void *arg)
{
    struct ledger_ckpt *k = arg;
    pthread_mutex_lock(&k->mu);
    for (;;) {
        while (!k->due && !k->stop)
            pthread_cond_wait(&k->cv, &k->mu);
        if (k->stop)
            break;
        k->due = false;
        pthread_mutex_unlock(&k->mu);
        (void)sqlite3_wal_checkpoint_v2(k->db, "main", SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        pthread_mutex_lock(&k->mu);
        k->runs++;
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

/* The writer's WAL hook, after each commit: pages is the WAL's size. */
static int ckpt_hook(void *arg, sqlite3 *db, const char *name, int pages)
{
    struct ledger_ckpt *k = arg;
    if (pages >= CKPT_PAGES_MAX) {
        (void)sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    } else if (pages >= CKPT_PAGES) {
        pthread_mutex_lock(&k->mu);
        k->due = true;
        pthread_cond_signal(&k->cv);
        pthread_mutex_unlock(&k->mu);
    }
    return SQLITE_OK;
}

static const char *vfs_name(sqlite3 *db)
{
    sqlite3_vfs *vfs = NULL;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_VFS_POINTER, &vfs) != SQLITE_OK || !vfs)
        return NULL;
    return vfs->zName;
}

static void ckpt_free(struct ledger_ckpt *k)
{
    sqlite3_close_v2(k->db);
    pthread_cond_destroy(&k->cv);
    pthread_mutex_destroy(&k->mu);
    free(k);
}

tally_err tally_ledger_checkpoint_in_background(tally_ledger *l)
{
    if (l->ckpt || l->shards) /* a directory's main.db is written little */
        return TALLY_OK;
    struct ledger_ckpt *k = calloc(1, sizeof *k);
    if (!k)
        return TALLY_NOMEM;
    if (pthread_mutex_init(&k->mu, NULL) != 0) {
        free(k);
        return TALLY_NOMEM;
    }
    if (pthread_cond_init(&k->cv, NULL) != 0) {
        pthread_mutex_destroy(&k->mu);
        free(k);
        return TALLY_NOMEM;
    }
    int rc = sqlite3_open_v2(l->path, &k->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                             vfs_name(l->db));
    if (rc == SQLITE_OK)
        sqlite3_busy_timeout(k->db, 0); /* PASSIVE: never wait */
    if (rc != SQLITE_OK || pthread_create(&k->thread, NULL, ckpt_main, k) != 0) {
        snprintf(l->errmsg, sizeof l->errmsg, "background checkpoint: %s",
                 k->db ? sqlite3_errmsg(k->db) : "out of memory");
        ckpt_free(k);
        return TALLY_DB;
    }
    l->ckpt = k;
    sqlite3_wal_hook(l->db, ckpt_hook, k);
    return TALLY_OK;
}

void ledger_checkpoint_stop(tally_ledger *l)
{
    struct ledger_ckpt *k = l->ckpt;
    if (!k)
        return;
    sqlite3_wal_autocheckpoint(l->db, CKPT_PAGES); /* the writer's own again */
    pthread_mutex_lock(&k->mu);
    k->stop = true;
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
    pthread_join(k->thread, NULL);
    ckpt_free(k);
    l->ckpt = NULL;
}

int64_t ledger_checkpoint_runs(const tally_ledger *l)
{
    if (!l->ckpt)
        return -1;
    pthread_mutex_lock(&l->ckpt->mu);
    int64_t n = l->ckpt->runs;
    pthread_mutex_unlock(&l->ckpt->mu);
    return n;
}
