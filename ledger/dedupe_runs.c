/* Dedupe keys of ids that count up, kept as windows
 * (schemas/016_dedupe_windows.sql; run_codec_int.h codes their content).
 *
 * An id ending in 4 to 18 decimal digits, the whole id or after a
 * character that is not a letter, is (prefix, width, n). Its window is
 * the dedupe_windows row of (source, prefix, width, lo = n - n % RUN_SPAN):
 * a bitmap of the values seen and their contents, coded in the order of n.
 * The row follows from the id alone, so arrival order never matters and a
 * key has exactly one place. A replay is a duplicate when its content
 * (hashed without the time) and its time are those recorded, and a
 * conflict otherwise.
 *
 * Within a commit the batch keeps every window it used (run_slot): an id
 * is checked and recorded in memory, and each changed window is written
 * once when the commit ends. A source whose ids count up therefore costs
 * one row write per commit and window of 480 ids, instead of a row per
 * event.
 *
 * A held window is its first records coded for good (run_code: their bytes
 * and the coder's state after them) and the records after those, decoded,
 * in the order of n. A write codes for good what its window's last writes
 * no longer keep open (slot_settle; run_codec_int.h: a header's bytes are
 * final once a record it did not take follows it), so a window that grows
 * at its end costs what it grew by, not its size: with 20,000 hosts, a
 * commit adds two or three ids to each window, and coding every window
 * whole was 44 % of ingest's samples. An id that lands among the records
 * coded for good (ids later than the window keeps open), or a replay of
 * one, decodes the window whole again (slot_reopen), which costs what
 * coding it whole did before; the window then keeps more open.
 *
 * The windows stay held after a commit, as
 * written, and the next commit uses them without reading them again, but
 * only if nothing but this batch wrote in between (batch_commit.c,
 * runs_session: the same test as the balance cache's); a rolled-back commit
 * forgets them. With 20,000 hosts, reading each commit's runs again was 9 %
 * of the meter's samples.
 *
 * A ledger that has runs of migration 15 (160 ids, 6 bytes of fingerprint
 * each) keeps them: a window is read with the three runs it covers, and an
 * id one of them holds is judged by its fingerprint, as before. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger_int.h"
#include "run_codec_int.h"

#define RUN_SPAN   480
#define BITS_BYTES (RUN_SPAN / 8)
#define V1_SPAN    160 /* a run of migration 15 */
#define V1_BITS    (V1_SPAN / 8)
#define FP_BYTES   6
#define FP_MASK    ((UINT64_C(1) << (8 * FP_BYTES)) - 1)
#define RECS_FIRST 8                           /* records a slot has room for at first */
#define ENC_MAX    (1 + RUN_SPAN * RC_REC_MAX) /* a full window at its largest: 8,161 bytes */
_Static_assert(ENC_MAX == sizeof((runs_cache *)0)->code, "runs_cache.code holds a window");
/* Windows kept in memory by one commit, in an array that doubles from
 * SLOTS_FIRST as the commit's sources need. A commit needs a slot per
 * source and window it sees: with 4,096, a commit over 20,000 hosts wrote
 * and read each run again every few events (a third of ingest's CPU). When
 * SLOTS_MAX are held, or their contents pass BYTES_MAX, they are written
 * and forgotten (the next use of one reads it again). A slot is about
 * 250 bytes and 16 bytes a record (room for 8 at first, doubling as it
 * fills), so a batch holds at most about 16 + 64 MB. A slot beyond the
 * held ones (c->n) holds no memory: the windows a commit lets go free
 * theirs. */
#define SLOTS_FIRST 256
/* A window keeps open (decoded, not yet coded for good) the records added
 * since its last AGE_FIRST writes, up to AGE_MAX when its ids come late,
 * and all of them (AGE_OPEN) when they come later than that (slot_reopen).
 * Coding a record costs a few nanoseconds: what matters is that an id which
 * comes late finds its place open, for decoding a window again costs more
 * than coding it whole at each write. */
#define AGE_FIRST 1
#define AGE_MAX   8
#define AGE_OPEN  (AGE_MAX + 1)
/* A window codes nothing until this many records are open: a few records
 * decoded take less memory than a coder's state (about 350 bytes). */
#define OPEN_MIN  4
#define SLOTS_MAX 65536
#define BYTES_MAX ((size_t)64 << 20)

/* The runs of migration 15 that a window covers, merged: their bitmap and
 * fingerprints (6 bytes each, in the order of n). */
struct v1_runs {
    uint8_t bits[BITS_BYTES];
    uint32_t count;
    uint8_t fps[];
};

struct run_slot {
    uint64_t hash;    /* in the index */
    uint64_t used_in; /* the commit (runs_cache.commit_no) that last used it */
    int64_t src;
    int64_t lo;
    int64_t row;    /* its rowid when stored */
    uint32_t count; /* ids in the window: bits set, records held */
    uint32_t top;   /* 1 + the highest k present; 0 when none is */
    bool stored;    /* a row exists (UPDATE, not INSERT) */
    bool dirty;
    uint8_t width;
    uint8_t prefix_len;
    char prefix[TALLY_ID_MAX];
    uint8_t bits[BITS_BYTES];
    uint32_t fin;              /* the first records, coded for good into code */
    uint32_t flushes;          /* times it was written while held */
    uint32_t flushed[AGE_MAX]; /* its count after each of the last AGE_MAX of those */
    uint8_t age;               /* the records of the last age writes stay open */
    uint32_t cap;              /* records recs has room for */
    rc_rec *recs;              /* the records after those (count - fin), in the order of n */
    struct run_code *code;     /* NULL until records are coded; let go with the window */
    struct v1_runs *v1;        /* NULL: no run of migration 15 in the window */
};

/* A window's first records as written (without the version byte), and the
 * coder's state after them. */
struct run_code {
    rc_state st;
    uint32_t len, cap;
    uint8_t bytes[];
};

bool runs_split(const char *id, size_t len, runs_id *out)
{
    size_t digits = 0;
    while (digits < len && id[len - 1 - digits] >= '0' && id[len - 1 - digits] <= '9')
        digits++;
    if (digits < 4 || digits > 18 || len >= TALLY_ID_MAX)
        return false;
    /* The counter is the whole id or follows a separator: digits at the end
     * of a random UUID or ULID ("...-a46655440012") are no counter, and a
     * run per such id would cost more than a row of its own. */
    char before = digits < len ? id[len - digits - 1] : '-';
    if ((before >= 'a' && before <= 'z') || (before >= 'A' && before <= 'Z'))
        return false;
    int64_t n = 0;
    for (size_t i = len - digits; i < len; i++)
        n = n * 10 + (id[i] - '0');
    out->prefix = id;
    out->prefix_len = len - digits;
    out->width = (int)digits;
    out->n = n;
    return true;
}

typedef struct slot_probe {
    const runs_cache *c;
    int64_t src, lo;
    const runs_id *k;
} slot_probe;

static bool slot_eq(const void *ctx, uint32_t idx)
{
    const slot_probe *p = ctx;
    const struct run_slot *s = &p->c->slots[idx];
    return s->src == p->src && s->lo == p->lo && s->width == p->k->width &&
           s->prefix_len == p->k->prefix_len &&
           memcmp(s->prefix, p->k->prefix, p->k->prefix_len) == 0;
}

static void bind_key(sqlite3_stmt *st, const struct run_slot *s)
{
    sqlite3_bind_int64(st, 1, s->src);
    sqlite3_bind_blob(st, 2, s->prefix, s->prefix_len, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, s->width);
    sqlite3_bind_int64(st, 4, s->lo);
}

/* The bits set in bits[0 .. upto / 8] below bit upto, a word at a time. */
static uint32_t bits_count(const uint8_t *bits, uint32_t upto)
{
    uint32_t n = 0, i = 0;
    for (; i + 64 <= upto; i += 64) {
        uint64_t w;
        memcpy(&w, bits + i / 8, 8);
        n += (uint32_t)__builtin_popcountll(w);
    }
    for (; i + 8 <= upto; i += 8)
        n += (uint32_t)__builtin_popcount(bits[i / 8]);
    if (upto % 8)
        n += (uint32_t)__builtin_popcount(bits[upto / 8] & ((1u << (upto % 8)) - 1));
    return n;
}

static bool bit_set(const uint8_t *bits, uint32_t k)
{
    return bits[k / 8] & (1u << (k % 8));
}

/* Puts a stored bitmap into all, which is zero: with nbits 0, the n ids
 * from id at on; otherwise nbits bytes from byte at of the window's. False
 * if it does not fit the window. */
static bool bits_place(uint8_t *all, int64_t at, const void *bits, int nbits, int64_t n)
{
    if (nbits == 0) {
        if (at < 0 || n < 1 || at + n > RUN_SPAN)
            return false;
        for (int64_t k = at; k < at + n; k++)
            all[k / 8] |= (uint8_t)(1u << (k % 8));
        return true;
    }
    if (!bits || nbits < 1 || at < 0 || at + nbits > BITS_BYTES)
        return false;
    memcpy(all + at, bits, (size_t)nbits);
    return true;
}

/* Room in s->recs for need records (at most RUN_SPAN). */
static tally_err recs_room(runs_cache *c, struct run_slot *s, uint32_t need)
{
    if (need <= s->cap)
        return TALLY_OK;
    if (need > RUN_SPAN)
        return TALLY_RANGE; /* never: a window holds at most RUN_SPAN ids */
    uint32_t cap = s->cap ? s->cap : RECS_FIRST;
    while (cap < need)
        cap *= 2;
    if (cap > RUN_SPAN)
        cap = RUN_SPAN;
    rc_rec *p = realloc(s->recs, cap * sizeof *p);
    if (!p)
        return TALLY_NOMEM;
    c->bytes += (cap - s->cap) * sizeof *p;
    s->recs = p;
    s->cap = cap;
    return TALLY_OK;
}

/* Room in s->code for more bytes after its len. */
static tally_err code_room(runs_cache *c, struct run_slot *s, size_t more)
{
    uint32_t have = s->code ? s->code->cap : 0, len = s->code ? s->code->len : 0;
    if (len + more <= have)
        return TALLY_OK;
    size_t cap = have ? have : 64;
    while (cap < len + more)
        cap *= 2;
    if (cap > ENC_MAX)
        cap = ENC_MAX;
    struct run_code *p = realloc(s->code, sizeof *p + cap);
    if (!p)
        return TALLY_NOMEM;
    if (!s->code) {
        rc_init(&p->st);
        p->len = 0;
        c->bytes += sizeof *p;
    }
    c->bytes += cap - have;
    p->cap = (uint32_t)cap;
    s->code = p;
    return TALLY_OK;
}

/* The window's count when it was written age writes ago (0 before that,
 * and for AGE_OPEN). */
static uint32_t count_before(const struct run_slot *s, uint32_t age)
{
    return s->flushes >= age && age <= AGE_MAX ? s->flushed[(s->flushes - age) % AGE_MAX] : 0;
}

/* Codes for good the headers before the records added since the window's
 * last s->age writes (one record at least stays open), and gives back the
 * room of records a commit no longer needs decoded; then counts this write.
 * A header coded took fewer records than were open and looked at no record
 * past the first it did not take (run_codec_int.h), so the coded bytes stay
 * those rc_encode gives while the records from the first open one on are
 * not changed: an id may be added after it (runs_dedupe). */
static tally_err slot_settle(runs_cache *c, struct run_slot *s)
{
    uint32_t open = s->count - s->fin, done = 0, keep = s->count - count_before(s, s->age);
    s->flushed[s->flushes++ % AGE_MAX] = s->count;
    if (keep < 1)
        keep = 1;
    if (open <= keep || open < OPEN_MIN)
        return TALLY_OK;
    rc_state st; /* coded into the scratch, then kept at its size */
    if (s->code)
        st = s->code->st;
    else
        rc_init(&st);
    size_t len = 0;
    while (open - done > keep) {
        size_t used, left = open - done;
        if (left >= keep + RC_GROUP_MAX) { /* a header takes RC_GROUP_MAX at most */
            len += rc_encode_head(&st, s->recs + done, left, c->code + len, &used);
            done += (uint32_t)used;
            continue;
        }
        rc_state t = st;
        size_t n = rc_encode_head(&t, s->recs + done, left, c->code + len, &used);
        if (left - used < keep)
            break; /* they stay open, one at least: see runs_dedupe */
        st = t;
        len += n;
        done += (uint32_t)used;
    }
    if (done) {
        tally_err e = code_room(c, s, len);
        if (e != TALLY_OK)
            return e;
        memcpy(s->code->bytes + s->code->len, c->code, len);
        s->code->len += (uint32_t)len;
        s->code->st = st;
    }
    open -= done;
    memmove(s->recs, s->recs + done, open * sizeof *s->recs);
    s->fin += done;
    uint32_t room = RECS_FIRST; /* twice what stays open, as a power of two */
    while (room < 2 * open)
        room *= 2;
    if (s->cap > 2 * room) {
        rc_rec *p = realloc(s->recs, room * sizeof *p);
        if (p) {
            c->bytes -= (s->cap - room) * sizeof *p;
            s->recs = p;
            s->cap = room;
        }
    }
    return TALLY_OK;
}

/* Codes s's window into out (room for ENC_MAX bytes): the bytes coded for
 * good, then the records after them from the state they left. Returns its
 * length. */
static size_t content_code(const struct run_slot *s, uint8_t *out)
{
    out[0] = RC_VERSION;
    size_t len = 1;
    rc_state st;
    if (s->code) {
        memcpy(out + len, s->code->bytes, s->code->len);
        len += s->code->len;
        st = s->code->st;
    } else {
        rc_init(&st);
    }
    return len + rc_encode_from(&st, s->recs, s->count - s->fin, out + len);
}

/* Whether p (len bytes, after the version byte) is exactly count records;
 * they go to out, unless it is NULL. */
static bool records_decode(const uint8_t *p, size_t len, uint64_t count, rc_rec *out)
{
    rc_state st;
    rc_init(&st);
    size_t at = 0;
    uint64_t have = 0;
    while (have < count) {
        rc_rec g[RC_GROUP_MAX];
        size_t k, n = rc_decode(&st, p + at, len - at, g, &k);
        if (n == 0 || k > count - have)
            return false;
        if (out)
            memcpy(out + have, g, k * sizeof g[0]);
        have += k;
        at += n;
    }
    return at == len;
}

/* Whether p (len bytes) is a window's content of exactly count records;
 * they go to out, unless it is NULL. */
static bool content_decode(const uint8_t *p, size_t len, uint64_t count, rc_rec *out)
{
    return p && len >= 1 && p[0] == RC_VERSION && records_decode(p + 1, len - 1, count, out);
}

/* Decodes s's records coded for good back in front of the open ones: an id
 * among them, or next to them, is asked for or added (at rank, the record's
 * index in the window). An id added there arrived late: ids of a host
 * whose instances are spread over partitions come as each partition is
 * read, some way behind the others. The window then keeps open the
 * records of as many of its last writes as would have held it, or all of
 * them past AGE_MAX, and so does every window the batch opens after it:
 * ids as late as that then cost no more than others. */
static tally_err slot_reopen(tally_batch *b, struct run_slot *s, uint32_t rank, bool adding)
{
    runs_cache *c = &b->runs;
    tally_err e = recs_room(c, s, s->count);
    if (e != TALLY_OK)
        return e;
    memmove(s->recs + s->fin, s->recs, (s->count - s->fin) * sizeof *s->recs);
    if (!records_decode(s->code->bytes, s->code->len, s->fin, s->recs)) { /* never */
        snprintf(b->l->errmsg, sizeof b->l->errmsg,
                 "dedupe window at %lld: its coded records do not decode", (long long)s->lo);
        return TALLY_INTERNAL;
    }
    uint32_t late = s->count + 1 - rank, age = s->age + 1; /* behind the end, itself counted */
    while (adding && age <= AGE_MAX && s->count - count_before(s, age) < late)
        age++; /* past AGE_MAX: AGE_OPEN */
    c->reopens += adding;
    if (adding && age > s->age)
        s->age = (uint8_t)(age < AGE_OPEN ? age : AGE_OPEN);
    if (s->age > c->age_seed)
        c->age_seed = s->age;
    s->code->len = 0; /* its room is kept for the next settle */
    rc_init(&s->code->st);
    s->fin = 0;
    return TALLY_OK;
}

/* Decodes a stored content of s->count records into s->recs. Errors:
 * TALLY_TAMPERED (not that many records of the format), TALLY_NOMEM. */
static tally_err content_take(tally_batch *b, struct run_slot *s, const uint8_t *p, size_t len)
{
    tally_err e = recs_room(&b->runs, s, s->count);
    if (e != TALLY_OK)
        return e;
    if (content_decode(p, len, s->count, s->recs))
        return TALLY_OK;
    snprintf(b->l->errmsg, sizeof b->l->errmsg,
             "dedupe window %lld: its content does not hold its %u ids (edited?)",
             (long long)s->row, s->count);
    return TALLY_TAMPERED;
}

/* Writes s's window if this commit changed it. */
static tally_err slot_write(tally_batch *b, struct run_slot *s)
{
    if (!s->dirty)
        return TALLY_OK;
    tally_err e = slot_settle(&b->runs, s);
    if (e != TALLY_OK)
        return e;
    sqlite3_stmt *st = b->st[s->stored ? ST_RUN_UPD : ST_RUN_INS];
    bind_key(st, s);
    int at = 0, end = BITS_BYTES; /* the bitmap without its zero bytes at either end */
    while (at < end - 1 && !s->bits[at])
        at++;
    while (end > at + 1 && !s->bits[end - 1])
        end--;
    uint32_t first = (uint32_t)at * 8 + (uint32_t)__builtin_ctz(s->bits[at]);
    if (s->count && first + s->count == s->top) { /* no gap: the range alone */
        sqlite3_bind_int(st, 5, (int)first);
        sqlite3_bind_zeroblob(st, 6, 0);
    } else {
        sqlite3_bind_int(st, 5, at);
        sqlite3_bind_blob(st, 6, s->bits + at, end - at, SQLITE_STATIC);
    }
    sqlite3_bind_int64(st, 7, s->count);
    size_t len = content_code(s, b->runs.code);
    sqlite3_bind_blob(st, 8, b->runs.code, (int)len, SQLITE_STATIC);
    if (s->stored)
        sqlite3_bind_int64(st, 9, s->row);
    e = batch_step(b, st);
    if (e == TALLY_OK && sqlite3_changes(b->l->db) != 1) {
        snprintf(b->l->errmsg, sizeof b->l->errmsg, "dedupe window at %lld %s", (long long)s->lo,
                 s->stored ? "vanished" : "already stored");
        e = TALLY_TAMPERED;
    }
    if (e == TALLY_OK && !s->stored)
        s->row = sqlite3_last_insert_rowid(b->l->db);
    if (e == TALLY_OK) {
        s->stored = true;
        s->dirty = false;
    }
    return e;
}

/* A stored row as read: its bitmap must count its ids and its content
 * hold as many records. */
static tally_err take_row(tally_batch *b, struct run_slot *s, sqlite3_stmt *st)
{
    int64_t at = sqlite3_column_int64(st, 1);
    int nbits = sqlite3_column_bytes(st, 2);
    const void *bits = sqlite3_column_blob(st, 2);
    int64_t n = sqlite3_column_int64(st, 3);
    int bytes = sqlite3_column_bytes(st, 4);
    const void *content = sqlite3_column_blob(st, 4);
    s->row = sqlite3_column_int64(st, 0);
    bool fits = bits_place(s->bits, at, bits, nbits, n); /* the rest stays zero */
    if (!fits || !content || bytes > ENC_MAX || n != bits_count(s->bits, RUN_SPAN)) {
        snprintf(b->l->errmsg, sizeof b->l->errmsg,
                 "dedupe window %lld: its bitmap does not count its %lld ids (edited?)",
                 (long long)s->row, (long long)n);
        return TALLY_TAMPERED;
    }
    s->count = (uint32_t)n;
    s->stored = true;
    tally_err e = content_take(b, s, content, (size_t)bytes);
    for (uint32_t k = RUN_SPAN; e == TALLY_OK && k > 0 && !s->top; k--)
        if (bit_set(s->bits, k - 1))
            s->top = k;
    return e;
}

/* Merges one run of migration 15 (st's row) into v, which has room for a
 * window's fingerprints. */
static tally_err take_v1(tally_batch *b, const struct run_slot *s, struct v1_runs *v,
                         sqlite3_stmt *st)
{
    int64_t lo = sqlite3_column_int64(st, 1);
    int nbits = sqlite3_column_bytes(st, 2);
    const uint8_t *bits = sqlite3_column_blob(st, 2);
    int bytes = sqlite3_column_bytes(st, 3);
    const void *fps = sqlite3_column_blob(st, 3);
    uint32_t at = (uint32_t)((lo - s->lo) / V1_SPAN) * V1_BITS;
    if (lo % V1_SPAN || nbits != V1_BITS || !bits || !fps || bytes % FP_BYTES ||
        (uint32_t)bytes != bits_count(bits, V1_SPAN) * FP_BYTES ||
        v->count + (uint32_t)bytes / FP_BYTES > RUN_SPAN) { /* (three runs at most) */
        snprintf(b->l->errmsg, sizeof b->l->errmsg,
                 "dedupe run %lld: its bitmap does not count its %d bytes of fingerprints "
                 "(edited?)",
                 (long long)sqlite3_column_int64(st, 0), bytes);
        return TALLY_TAMPERED;
    }
    memcpy(v->bits + at, bits, V1_BITS);
    memcpy(v->fps + (size_t)v->count * FP_BYTES, fps, (size_t)bytes);
    v->count += (uint32_t)(bytes / FP_BYTES);
    return TALLY_OK;
}

/* Whether a stored window is sound: its bitmap counts n ids and its content
 * is n records of the format, nothing after them. */
static bool window_sound(int64_t at, const void *bits, int nbits, int64_t n, const uint8_t *content,
                         int len)
{
    uint8_t all[BITS_BYTES] = {0};
    return bits_place(all, at, bits, nbits, n) && len >= 0 && n == bits_count(all, RUN_SPAN) &&
           content_decode(content, (size_t)len, (uint64_t)n, NULL);
}

tally_err runs_check_windows(tally_ledger *l, int64_t *bad_row)
{
    sqlite3_stmt *st;
    *bad_row = 0;
    tally_err e =
        ledger_prepare(l, "SELECT id, bits_at, bits, n, content FROM dedupe_windows", &st);
    if (e != TALLY_OK)
        return e;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (!window_sound(sqlite3_column_int64(st, 1), sqlite3_column_blob(st, 2),
                          sqlite3_column_bytes(st, 2), sqlite3_column_int64(st, 3),
                          sqlite3_column_blob(st, 4), sqlite3_column_bytes(st, 4))) {
            *bad_row = sqlite3_column_int64(st, 0);
            sqlite3_finalize(st);
            return TALLY_TAMPERED;
        }
    }
    return ledger_finish(l, st, rc);
}

/* Reads the runs of migration 15 that s's window covers, if any. */
static tally_err v1_load(tally_batch *b, struct run_slot *s)
{
    sqlite3_stmt *st = b->st[ST_RUN_V1];
    bind_key(st, s);
    int rc;
    tally_err e = TALLY_OK;
    while (e == TALLY_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (!s->v1) {
            size_t size = sizeof *s->v1 + (size_t)RUN_SPAN * FP_BYTES;
            s->v1 = calloc(1, size);
            if (!s->v1)
                e = TALLY_NOMEM;
            else
                b->runs.bytes += size;
        }
        if (e == TALLY_OK)
            e = take_v1(b, s, s->v1, st);
    }
    if (e == TALLY_OK && rc != SQLITE_DONE)
        e = ledger_sqlite_err(b->l, rc);
    sqlite3_reset(st);
    return e;
}

/* Reads s's stored window, or starts it empty. */
static tally_err slot_load(tally_batch *b, struct run_slot *s)
{
    sqlite3_stmt *st = b->st[ST_RUN_FIND];
    bind_key(st, s);
    tally_err e = TALLY_OK;
    assert(!s->code); /* a slot past those held holds no memory */
    s->stored = s->dirty = false;
    s->count = s->top = s->fin = s->flushes = 0;
    memset(s->bits, 0, sizeof s->bits);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        e = take_row(b, s, st);
    else if (rc != SQLITE_DONE)
        e = ledger_sqlite_err(b->l, rc);
    sqlite3_reset(st);
    if (s->v1)
        memset(s->v1, 0, sizeof *s->v1); /* no run read yet (its fingerprints are unused) */
    if (e == TALLY_OK && b->runs_legacy)
        e = v1_load(b, s);
    return e;
}

/* Room for twice as many slots (SLOTS_FIRST at first), the index rebuilt. */
static tally_err slots_grow(runs_cache *c)
{
    size_t cap = c->cap ? c->cap * 2 : SLOTS_FIRST;
    if (cap > SLOTS_MAX)
        cap = SLOTS_MAX;
    struct run_slot *v = realloc(c->slots, cap * sizeof *v);
    if (!v)
        return TALLY_NOMEM;
    memset(v + c->cap, 0, (cap - c->cap) * sizeof *v); /* no content yet */
    c->slots = v;
    c->cap = cap;
    tally_err e = idx_table_reserve(&c->index, cap);
    if (e != TALLY_OK) {
        c->n = 0; /* the index may be gone: forget what was held */
        return e;
    }
    idx_table_clear(&c->index);
    for (size_t i = 0; i < c->n; i++)
        idx_table_insert(&c->index, c->slots[i].hash, (uint32_t)i);
    return TALLY_OK;
}

/* Lets go of the memory of slots from .. to - 1, which hold no window. */
static void slots_let_go(runs_cache *c, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        struct run_slot *s = &c->slots[i];
        size_t size = (size_t)s->cap * sizeof *s->recs;
        if (s->code)
            size += sizeof *s->code + s->code->cap;
        if (s->v1)
            size += sizeof *s->v1 + (size_t)RUN_SPAN * FP_BYTES;
        assert(size <= c->bytes); /* what recs_room and v1_load counted */
        c->bytes -= size;
        free(s->recs);
        free(s->code);
        free(s->v1);
        s->recs = NULL;
        s->code = NULL;
        s->v1 = NULL;
        s->cap = s->fin = s->flushes = 0;
    }
}

/* Lets go of every slot's memory (they are forgotten). */
static void slots_release(runs_cache *c)
{
    slots_let_go(c, 0, c->cap);
    c->bytes = 0;
}

/* The hash of the window (src, k's prefix and width, lo) in the index. */
static uint64_t window_hash(int64_t src, const runs_id *k, int64_t lo)
{
    uint64_t h[2];
    tally_hash128(k->prefix, k->prefix_len,
                  (uint64_t)src ^ (uint64_t)lo * 0x9E3779B97F4A7C15ULL ^ (uint64_t)k->width, h);
    return h[0];
}

int64_t runs_source_hash(const char *source)
{
    uint64_t h[2];
    tally_hash128(source, strlen(source), 0, h);
    return (int64_t)h[0];
}

uint64_t runs_window_hash(int64_t src, const char *id)
{
    runs_id k;
    if (!runs_split(id, strlen(id), &k))
        return 0;
    return window_hash(src, &k, k.n - k.n % RUN_SPAN);
}

void runs_prefetch(const tally_batch *b, uint64_t h, bool entry)
{
    const runs_cache *c = &b->runs;
    if (!h || !c->n)
        return;
    if (!entry) {
        idx_table_prefetch(&c->index, h);
        return;
    }
    int64_t i = idx_table_peek(&c->index, h);
    if (i >= 0)
        __builtin_prefetch(&c->slots[i]);
}

/* The held slot of (src, k's prefix and width, lo) under hash, or -1. */
static int64_t slot_find(const runs_cache *c, int64_t src, const runs_id *k, int64_t lo,
                         uint64_t hash)
{
    slot_probe p = {c, src, lo, k};
    return c->n ? idx_table_find(&c->index, hash, slot_eq, &p) : -1;
}

/* The slot of (src, k)'s window, read when this commit has not used it yet;
 * h is its window_hash, or 0 to take it here. */
static tally_err slot_of(tally_batch *b, int64_t src, const runs_id *k, uint64_t h,
                         struct run_slot **out)
{
    runs_cache *c = &b->runs;
    if (c->bytes > BYTES_MAX) { /* written, forgotten and let go */
        tally_err e = runs_flush(b);
        runs_forget(b);
        slots_release(c);
        if (e != TALLY_OK)
            return e;
    }
    int64_t lo = k->n - k->n % RUN_SPAN;
    if (!h)
        h = window_hash(src, k, lo);
    int64_t i = slot_find(c, src, k, lo, h);
    if (i >= 0) {
        *out = &c->slots[i];
        (*out)->used_in = c->commit_no;
        return TALLY_OK;
    }
    tally_err e = TALLY_OK;
    if (c->n == SLOTS_MAX) {
        e = runs_flush(b);
        runs_forget(b);
    } else if (c->n == c->cap)
        e = slots_grow(c);
    if (e != TALLY_OK)
        return e;
    struct run_slot *s = &c->slots[c->n];
    s->hash = h;
    s->used_in = c->commit_no;
    s->src = src;
    s->lo = lo;
    s->width = (uint8_t)k->width;
    s->prefix_len = (uint8_t)k->prefix_len;
    memcpy(s->prefix, k->prefix, k->prefix_len);
    e = slot_load(b, s);
    if (e != TALLY_OK)
        return e;
    s->age = c->age_seed > AGE_FIRST ? c->age_seed : AGE_FIRST;
    idx_table_insert(&c->index, h, (uint32_t)c->n++);
    *out = s;
    return TALLY_OK;
}

static uint64_t fp_get(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < FP_BYTES; i++)
        v = v << 8 | p[i];
    return v;
}

/* An id a run of migration 15 holds: judged by its fingerprint. */
static tally_event_result v1_judge(const struct v1_runs *v, uint32_t k, uint64_t fingerprint)
{
    uint64_t stored = fp_get(v->fps + (size_t)bits_count(v->bits, k) * FP_BYTES);
    return stored == (fingerprint & FP_MASK) ? TALLY_RESULT_DUPLICATE : TALLY_RESULT_CONFLICT;
}

tally_err runs_dedupe(tally_batch *b, int64_t src, const runs_id *k, const tally_event *ev,
                      uint64_t window_hash, tally_event_result *res)
{
    struct run_slot *s;
    tally_err e = slot_of(b, src, k, window_hash, &s);
    if (e != TALLY_OK)
        return e;
    uint32_t slot = (uint32_t)(k->n - s->lo);
    if (s->v1 && bit_set(s->v1->bits, slot)) {
        *res = v1_judge(s->v1, slot, tally_event_fingerprint(ev));
        return TALLY_OK;
    }
    rc_rec r = {ev->untimed & RC_HASH_MASK, ev->time_s};
    uint32_t rank = slot >= s->top ? s->count : bits_count(s->bits, slot);
    bool present = bit_set(s->bits, slot);
    if (s->fin && (present ? rank < s->fin : rank <= s->fin)) /* among those coded */
        e = slot_reopen(b, s, rank, !present);
    if (e != TALLY_OK)
        return e;
    rc_rec *at = s->recs + (rank - s->fin);
    if (present) {
        *res = at->hash == r.hash && at->t == r.t ? TALLY_RESULT_DUPLICATE : TALLY_RESULT_CONFLICT;
        return TALLY_OK;
    }
    e = recs_room(&b->runs, s, s->count - s->fin + 1);
    if (e != TALLY_OK)
        return e;
    at = s->recs + (rank - s->fin);
    memmove(at + 1, at, (s->count - rank) * sizeof *at);
    *at = r;
    s->bits[slot / 8] |= (uint8_t)(1u << (slot % 8));
    s->count++;
    if (slot >= s->top)
        s->top = slot + 1;
    s->dirty = true;
    *res = TALLY_RESULT_ACCEPTED;
    return TALLY_OK;
}

tally_err runs_flush(tally_batch *b)
{
    runs_cache *c = &b->runs;
    tally_err e = TALLY_OK;
    for (size_t i = 0; e == TALLY_OK && i < c->n; i++)
        e = slot_write(b, &c->slots[i]);
    return e;
}

void runs_keep_recent(tally_batch *b)
{
    runs_cache *c = &b->runs;
    size_t k = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (c->slots[i].used_in != c->commit_no)
            continue;
        if (i != k) { /* a swap: the dropped slot's memory is reused */
            struct run_slot t = c->slots[k];
            c->slots[k] = c->slots[i];
            c->slots[i] = t;
        }
        k++;
    }
    if (k != c->n) {
        /* The dropped windows' records are let go, so what is held follows
         * the windows in use; a slot kept for reuse would grow to the
         * largest window it ever held, and memory with the stream. */
        slots_let_go(c, k, c->n);
        c->n = k;
        idx_table_clear(&c->index);
        for (size_t i = 0; i < k; i++)
            idx_table_insert(&c->index, c->slots[i].hash, (uint32_t)i);
    }
    c->commit_no++;
}

void runs_forget(tally_batch *b)
{
    runs_cache *c = &b->runs;
    c->commit_no++;
    if (c->n)
        idx_table_clear(&c->index);
    slots_let_go(c, 0, c->n);
    c->n = 0;
}

void runs_free(tally_batch *b)
{
    if (b->runs.slots)
        slots_release(&b->runs);
    free(b->runs.slots);
    idx_table_free(&b->runs.index);
    b->runs = (runs_cache){0};
}
