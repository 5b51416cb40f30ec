/* The fault-injecting VFS for tests (include/tally/faultvfs.h).
 *
 * A shim in the style of SQLite's own test VFSes: each file opened through
 * it wraps the default VFS's file, allocated right behind the shim's in the
 * same block (szOsFile covers both). Writes, syncs and truncates are
 * counted and may fail; everything else passes through. With tracking on,
 * an undo log per path holds the bytes each unsynced write overwrote and the
 * size the file had at its last sync; a sync drops the path's log. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "faultvfs.h"

#define SECTOR 512

typedef struct undo_rec {
    struct undo_rec *prev; /* older record of the same path */
    sqlite3_int64 off;
    int wlen;             /* bytes written */
    int len;              /* of them, bytes that existed before the write */
    unsigned char data[]; /* len bytes */
} undo_rec;

typedef struct undo_file {
    struct undo_file *next;
    char *path;
    sqlite3_int64 synced_size; /* size at the last sync */
    undo_rec *recs;            /* newest first */
} undo_file;

typedef struct fault_file {
    sqlite3_file base;
    const char *path; /* SQLite's, valid until xClose */
    sqlite3_file *real;
} fault_file;

static struct {
    bool installed, tracking;
    sqlite3_vfs vfs;
    sqlite3_vfs *real;
    sqlite3_io_methods methods;
    tally_fault_mode mode;
    unsigned ops;
    int64_t nth, seen, failed;
    tally_fault_kind kind;
    int64_t count[3]; /* write, sync, truncate */
    undo_file *undo;
} fv;

/* ---- Faults ---------------------------------------------------------------- */

static int op_index(unsigned op)
{
    return op == TALLY_FAULT_WRITE ? 0 : op == TALLY_FAULT_SYNC ? 1 : 2;
}

/* Counts one call; returns the error it must fail with, or SQLITE_OK. */
static int fault_check(unsigned op, int ioerr)
{
    fv.count[op_index(op)]++;
    if (fv.mode == TALLY_FAULT_OFF || !(fv.ops & op))
        return SQLITE_OK;
    fv.seen++;
    bool fire = fv.mode == TALLY_FAULT_FAIL_ONCE ? fv.seen == fv.nth : fv.seen >= fv.nth;
    if (!fire)
        return SQLITE_OK;
    fv.failed++;
    return fv.kind == TALLY_FAULT_ENOSPC ? SQLITE_FULL : ioerr;
}

/* A sticky fault stops every later change, counted kind or not. */
static bool disk_dead(void)
{
    return fv.mode == TALLY_FAULT_FAIL_STICKY && fv.failed > 0;
}

void tally_faultvfs_arm(tally_fault_mode mode, unsigned ops, int64_t nth, tally_fault_kind kind)
{
    fv.mode = mode;
    fv.ops = ops;
    fv.nth = nth;
    fv.kind = kind;
    fv.seen = 0;
    fv.failed = 0;
}

void tally_faultvfs_disarm(void)
{
    fv.mode = TALLY_FAULT_OFF;
}

int64_t tally_faultvfs_count(unsigned ops)
{
    int64_t n = 0;
    for (unsigned i = 0; i < 3; i++)
        if (ops & (1u << i))
            n += fv.count[i];
    return n;
}

int64_t tally_faultvfs_failed(void)
{
    return fv.failed;
}

/* ---- Undo log -------------------------------------------------------------- */

static undo_file *undo_find(const char *path, bool create)
{
    for (undo_file *u = fv.undo; u; u = u->next)
        if (strcmp(u->path, path) == 0)
            return u;
    if (!create)
        return NULL;
    undo_file *u = calloc(1, sizeof *u);
    if (!u || !(u->path = strdup(path))) {
        free(u);
        return NULL;
    }
    u->synced_size = -1;
    u->next = fv.undo;
    fv.undo = u;
    return u;
}

static void undo_free_recs(undo_file *u)
{
    while (u->recs) {
        undo_rec *r = u->recs;
        u->recs = r->prev;
        free(r);
    }
}

static void undo_drop(const char *path)
{
    for (undo_file **pp = &fv.undo; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->path, path) == 0) {
            undo_file *u = *pp;
            *pp = u->next;
            undo_free_recs(u);
            free(u->path);
            free(u);
            return;
        }
}

/* Remembers what [off, off+len) and the size were before a change. An
 * allocation failure leaves the log short, which only weakens a power-cut
 * test; it never changes what is written. */
static void undo_note(fault_file *f, sqlite3_int64 off, int len)
{
    sqlite3_int64 size = 0;
    if (!fv.tracking || !f->path || f->real->pMethods->xFileSize(f->real, &size) != SQLITE_OK)
        return;
    undo_file *u = undo_find(f->path, true);
    if (!u)
        return;
    if (u->synced_size < 0)
        u->synced_size = size;
    int have = off >= size ? 0 : (int)(size - off < len ? size - off : len);
    undo_rec *r = malloc(sizeof *r + (size_t)(have > 0 ? have : 0));
    if (!r)
        return;
    r->off = off;
    r->wlen = len;
    r->len = have;
    if (have > 0 && f->real->pMethods->xRead(f->real, r->data, have, off) != SQLITE_OK) {
        free(r);
        return;
    }
    r->prev = u->recs;
    u->recs = r;
}

void tally_faultvfs_track(bool on)
{
    fv.tracking = on;
    if (!on)
        while (fv.undo)
            undo_drop(fv.undo->path);
}

static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Loses the sectors of one write that the disk did not keep: their old
 * bytes come back, or zeros where the file had none. */
static int undo_apply(int fd, const undo_rec *r, uint64_t *rng)
{
    static const unsigned char zeros[SECTOR];
    for (sqlite3_int64 at = r->off; at < r->off + r->wlen;) {
        sqlite3_int64 end = (at / SECTOR + 1) * SECTOR;
        if (end > r->off + r->wlen)
            end = r->off + r->wlen;
        if (!*rng || next_rand(rng) % 2) {
            sqlite3_int64 rel = at - r->off, n = end - at;
            const unsigned char *src = rel < r->len ? r->data + rel : zeros;
            if (rel < r->len && rel + n > r->len)
                n = r->len - rel;
            if (pwrite(fd, src, (size_t)n, at) != (ssize_t)n)
                return -1;
            end = at + n;
        }
        at = end;
    }
    return 0;
}

tally_err tally_faultvfs_power_cut(uint64_t torn_seed)
{
    uint64_t rng = torn_seed ? torn_seed * 2654435761u + 1 : 0;
    tally_err e = TALLY_OK;
    for (undo_file *u = fv.undo; u; u = u->next) {
        int fd = open(u->path, O_RDWR);
        if (fd < 0)
            continue; /* gone: SQLite deleted it after a checkpoint */
        for (const undo_rec *r = u->recs; r && e == TALLY_OK; r = r->prev)
            if (undo_apply(fd, r, &rng) != 0)
                e = TALLY_IO;
        bool keep_size = rng && next_rand(&rng) % 2;
        if (e == TALLY_OK && !keep_size && u->synced_size >= 0 &&
            ftruncate(fd, (off_t)u->synced_size) != 0)
            e = TALLY_IO;
        if (close(fd) != 0)
            e = TALLY_IO;
    }
    tally_faultvfs_track(false);
    tally_faultvfs_track(true);
    return e;
}

/* ---- I/O methods ------------------------------------------------------------ */

static sqlite3_file *real_of(sqlite3_file *f)
{
    return ((fault_file *)f)->real;
}

static int f_close(sqlite3_file *f)
{
    sqlite3_file *r = real_of(f);
    return r->pMethods ? r->pMethods->xClose(r) : SQLITE_OK;
}

static int f_read(sqlite3_file *f, void *buf, int amt, sqlite3_int64 off)
{
    return real_of(f)->pMethods->xRead(real_of(f), buf, amt, off);
}

static int f_write(sqlite3_file *f, const void *buf, int amt, sqlite3_int64 off)
{
    int rc = fault_check(TALLY_FAULT_WRITE, SQLITE_IOERR_WRITE);
    if (rc != SQLITE_OK || disk_dead())
        return rc != SQLITE_OK ? rc : SQLITE_IOERR_WRITE;
    undo_note((fault_file *)f, off, amt);
    return real_of(f)->pMethods->xWrite(real_of(f), buf, amt, off);
}

static int f_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    int rc = fault_check(TALLY_FAULT_TRUNCATE, SQLITE_IOERR_TRUNCATE);
    if (rc != SQLITE_OK || disk_dead())
        return rc != SQLITE_OK ? rc : SQLITE_IOERR_TRUNCATE;
    sqlite3_int64 cur = 0;
    if (real_of(f)->pMethods->xFileSize(real_of(f), &cur) == SQLITE_OK && cur > size)
        undo_note((fault_file *)f, size, (int)(cur - size > INT32_MAX ? INT32_MAX : cur - size));
    return real_of(f)->pMethods->xTruncate(real_of(f), size);
}

static int f_sync(sqlite3_file *f, int flags)
{
    int rc = fault_check(TALLY_FAULT_SYNC, SQLITE_IOERR_FSYNC);
    if (rc != SQLITE_OK || disk_dead())
        return rc != SQLITE_OK ? rc : SQLITE_IOERR_FSYNC;
    rc = real_of(f)->pMethods->xSync(real_of(f), flags);
    if (rc == SQLITE_OK && ((fault_file *)f)->path)
        undo_drop(((fault_file *)f)->path);
    return rc;
}

static int f_file_size(sqlite3_file *f, sqlite3_int64 *size)
{
    return real_of(f)->pMethods->xFileSize(real_of(f), size);
}

static int f_lock(sqlite3_file *f, int lock)
{
    return real_of(f)->pMethods->xLock(real_of(f), lock);
}

static int f_unlock(sqlite3_file *f, int lock)
{
    return real_of(f)->pMethods->xUnlock(real_of(f), lock);
}

static int f_check_reserved(sqlite3_file *f, int *out)
{
    return real_of(f)->pMethods->xCheckReservedLock(real_of(f), out);
}

static int f_file_control(sqlite3_file *f, int op, void *arg)
{
    return real_of(f)->pMethods->xFileControl(real_of(f), op, arg);
}

static int f_sector_size(sqlite3_file *f)
{
    return real_of(f)->pMethods->xSectorSize(real_of(f));
}

static int f_device(sqlite3_file *f)
{
    return real_of(f)->pMethods->xDeviceCharacteristics(real_of(f));
}

static int f_shm_map(sqlite3_file *f, int pg, int pgsz, int extend, void volatile **pp)
{
    return real_of(f)->pMethods->xShmMap(real_of(f), pg, pgsz, extend, pp);
}

static int f_shm_lock(sqlite3_file *f, int off, int n, int flags)
{
    return real_of(f)->pMethods->xShmLock(real_of(f), off, n, flags);
}

static void f_shm_barrier(sqlite3_file *f)
{
    real_of(f)->pMethods->xShmBarrier(real_of(f));
}

static int f_shm_unmap(sqlite3_file *f, int delete_flag)
{
    return real_of(f)->pMethods->xShmUnmap(real_of(f), delete_flag);
}

static int f_fetch(sqlite3_file *f, sqlite3_int64 off, int amt, void **pp)
{
    return real_of(f)->pMethods->xFetch(real_of(f), off, amt, pp);
}

static int f_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
    return real_of(f)->pMethods->xUnfetch(real_of(f), off, p);
}

static const sqlite3_io_methods fault_methods_v3 = {
    .iVersion = 3,
    .xClose = f_close,
    .xRead = f_read,
    .xWrite = f_write,
    .xTruncate = f_truncate,
    .xSync = f_sync,
    .xFileSize = f_file_size,
    .xLock = f_lock,
    .xUnlock = f_unlock,
    .xCheckReservedLock = f_check_reserved,
    .xFileControl = f_file_control,
    .xSectorSize = f_sector_size,
    .xDeviceCharacteristics = f_device,
    .xShmMap = f_shm_map,
    .xShmLock = f_shm_lock,
    .xShmBarrier = f_shm_barrier,
    .xShmUnmap = f_shm_unmap,
    .xFetch = f_fetch,
    .xUnfetch = f_unfetch,
};

/* ---- The VFS ----------------------------------------------------------------- */

static int v_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *file, int flags,
                  int *out_flags)
{
    (void)vfs;
    fault_file *f = (fault_file *)file;
    memset(f, 0, sizeof *f);
    f->real = (sqlite3_file *)(f + 1);
    f->path = name;
    int rc = fv.real->xOpen(fv.real, name, f->real, flags, out_flags);
    if (rc != SQLITE_OK) {
        f->base.pMethods = NULL; /* SQLite will not call xClose */
        return rc;
    }
    /* The real file's table decides what we may claim (WAL needs v2+). */
    fv.methods = fault_methods_v3;
    fv.methods.iVersion = f->real->pMethods->iVersion;
    f->base.pMethods = &fv.methods;
    return SQLITE_OK;
}

static int v_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
    (void)vfs;
    if (disk_dead())
        return SQLITE_IOERR_DELETE;
    undo_drop(name);
    return fv.real->xDelete(fv.real, name, sync_dir);
}

tally_err tally_faultvfs_install(void)
{
    if (fv.installed)
        return TALLY_OK;
    if (sqlite3_initialize() != SQLITE_OK)
        return TALLY_DB;
    fv.real = sqlite3_vfs_find(NULL);
    if (!fv.real)
        return TALLY_DB;
    fv.vfs = *fv.real; /* every other method, and pAppData, are the real VFS's */
    fv.vfs.pNext = NULL;
    fv.vfs.zName = "tally-fault";
    fv.vfs.szOsFile = (int)sizeof(fault_file) + fv.real->szOsFile;
    fv.vfs.xOpen = v_open;
    fv.vfs.xDelete = v_delete;
    if (sqlite3_vfs_register(&fv.vfs, 1) != SQLITE_OK)
        return TALLY_DB;
    fv.installed = true;
    return TALLY_OK;
}
