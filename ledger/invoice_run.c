/* Invoice runs: rate a period for every account (or one), keep drafts,
 * finalize.
 *
 * An account is in a run when, in its own time zone's period, it has usage,
 * a commitment, a grant with money left whose window touches the period, or
 * late usage in an earlier finalized period (adjustments pending).
 *
 *   - A period that already has a live (not voided) finalized invoice keeps
 *     it: the run reports it as already finalized, changes nothing and, with
 *     an output directory, writes its stored document again.
 *   - Drafts are recomputed on every run and kept in the drafts table.
 *   - Accounts are run in groups of up to GROUP_ACCOUNTS, one BEGIN
 *     IMMEDIATE transaction per group, each account under a SAVEPOINT of its
 *     own. Finalizing an account, inside its savepoint: the check for a live
 *     invoice, the gather and rating, the next gapless number of (invoice,
 *     year of the period), the link to the previous document's hash, the
 *     signed document, its rows, its balanced entry, its outbox event and
 *     its balance refresh.
 *   - Finalizing is pipelined over the group so that signing overlaps the
 *     rest of the work (trust/signer.c): each account's savepoint takes its
 *     number and chain link, writes its credit, entry and draft's removal,
 *     and queues its document's hash; the signed documents are stored, with
 *     their outbox events and balance refreshes, in account order when the
 *     group ends (flush). The group's first number and link are read from
 *     the database inside the transaction; the others follow the group's
 *     last pending account, which is only pending once its savepoint has
 *     succeeded, so what a rolled-back savepoint took is taken again by the
 *     next account. The ledger a group leaves is the one the accounts run
 *     one by one would leave.
 *   - When the flush fails, the group is rolled back and run again, and the
 *     rest of the run with it, one account at a time: each account's
 *     savepoint then stores its own document, so the failure is met by the
 *     account it belongs to and handled as below.
 *   - A failing account is rolled back to its savepoint; the accounts before
 *     it in its group are committed (they stay finalized and a re-run skips
 *     them), the run stops, and the error names the account. When SQLite
 *     itself ended the transaction (an I/O error, a full disk, a trigger's
 *     RAISE(ROLLBACK)), the group's earlier accounts went with it, and the
 *     error says so. A failed commit names the group's accounts; none of them is
 *     reported, although WAL recovery may still find the group whole after
 *     a crash (RELIABILITY.md, disk faults): a re-run finalizes whatever is
 *     missing and writes every file again.
 *   - A crash leaves a group all there or not at all: numbers stay gapless,
 *     the documents' chain intact.
 * Output files and on_invoice follow a group's commit: the group's results
 * (and, with an output directory, its documents: a group also ends once
 * GROUP_DOC_BYTES of them are held) wait until then, so neither ever shows
 * an invoice that was not committed. The files are written on a thread of
 * their own while the next group is run (invoice_writer.c); that group
 * commits only once they are written, so a file that cannot be written
 * still ends the run after its group. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ledger_int.h"
#include "tally/money.h"
#include "tally/sign.h"

#define GROUP_ACCOUNTS  256        /* accounts per transaction */
#define GROUP_DOC_BYTES (8u << 20) /* documents held for the output directory */
/* A group's hashes all wait in the signing queue until it is flushed: a
 * larger group fails at its account TALLY_SIGNER_QUEUE + 1 with an internal
 * error (measured with 1,024). */
_Static_assert(GROUP_ACCOUNTS <= TALLY_SIGNER_QUEUE, "a group's hashes fit the signing queue");

/* An account's result, delivered (files, on_invoice) once its group's
 * transaction has committed. */
typedef struct held {
    tally_invoice_summary s;
    size_t doc_off, doc_len; /* in run.held_docs (with an output directory) */
} held;

/* A finalized account whose document waits for its signature: what the
 * flush needs to store it. d points into the rest. */
typedef struct pending {
    const tally_account *a;
    tally_rating_result res;
    tally_invoice_summary s;
    inv_doc d;
    char prev[65], hash[65];
    int64_t usage_seq;
    uint64_t ticket;
    size_t held_ix; /* its place among the group's results */
    tally_buf doc;  /* the document up to its prev_hash */
} pending;

typedef struct tz_bounds {
    char tz[64];
    int64_t start_s, end_s;
} tz_bounds;

typedef struct run {
    tally_ledger *l;
    const tally_invoice_run_opts *o;
    inv_gatherer *g;
    bal_engine *bal; /* refreshes balances after a finalize (include/tally/balance.h) */
    inv_input in, scratch;
    tally_line *extra;
    size_t n_extra, cap_extra;
    tally_buf doc;
    tz_bounds *tzs;
    size_t n_tzs;
    bool in_tx;
    size_t group_first, group_accounts; /* the group's first account's index; its size */
    held *held;                         /* GROUP_ACCOUNTS of them */
    size_t n_held;
    pending *pend; /* GROUP_ACCOUNTS of them */
    size_t n_pend, pend_bytes;
    bool serial; /* each account stores its document in its own savepoint */
    bool rerun;  /* the group was rolled back: run it again, serially */
    tally_buf held_docs;
    inv_writer *w;        /* writes the files of committed groups (NULL: here) */
    tally_signer *signer; /* signs finalized documents on a thread of its own */
    ledger_ckpt *ckpt;    /* checkpoints the WAL while the run writes (finalizing) */
    int64_t now_s;
    char *why;
    size_t cap;
} run;

static tally_err fail(run *r, const char *account, tally_err e, const char *what)
{
    if (r->why && r->cap)
        snprintf(r->why, r->cap, "account %s: %s", account, what);
    return e;
}

/* Period bounds per time zone, computed once per run. */
static tally_err bounds_for(run *r, const char *tz, int64_t *start, int64_t *end)
{
    for (size_t i = 0; i < r->n_tzs; i++)
        if (strcmp(r->tzs[i].tz, tz) == 0) {
            *start = r->tzs[i].start_s;
            *end = r->tzs[i].end_s;
            return TALLY_OK;
        }
    tally_err e = tally_period_bounds(r->o->period, tz, start, end);
    if (e)
        return e;
    tz_bounds *p = realloc(r->tzs, (r->n_tzs + 1) * sizeof *p);
    if (!p)
        return TALLY_NOMEM;
    r->tzs = p;
    snprintf(p[r->n_tzs].tz, sizeof p[r->n_tzs].tz, "%s", tz);
    p[r->n_tzs].start_s = *start;
    p[r->n_tzs].end_s = *end;
    r->n_tzs++;
    return TALLY_OK;
}

static tally_err tx_open(run *r)
{
    if (r->in_tx)
        return TALLY_OK;
    tally_err e = ledger_begin(r->l);
    r->in_tx = e == TALLY_OK;
    r->group_accounts = 0;
    r->n_held = 0;
    tally_buf_reset(&r->held_docs);
    return e;
}

/* Forgets the group's pending documents and their queued hashes. */
static void pend_reset(run *r)
{
    for (size_t i = 0; i < r->n_pend; i++)
        tally_rating_result_release(&r->pend[i].res);
    r->n_pend = 0;
    r->pend_bytes = 0;
    if (r->signer)
        tally_signer_drop(r->signer);
}

static tally_err tx_commit(run *r)
{
    if (!r->in_tx)
        return TALLY_OK;
    r->in_tx = false;
    return ledger_commit(r->l);
}

static void tx_rollback(run *r)
{
    if (r->in_tx)
        ledger_rollback(r->l);
    r->in_tx = false;
}

/* Each account of a group runs under this savepoint. */
static tally_err sp_begin(run *r)
{
    return ledger_cached_exec(r->l, "SAVEPOINT invoice_account", false);
}

static tally_err sp_release(run *r)
{
    return ledger_cached_exec(r->l, "RELEASE invoice_account", false);
}

/* Undoes the account's writes, keeping the group's earlier accounts and the
 * failure's message; nothing to undo when SQLite ended the transaction. */
static void sp_undo(run *r)
{
    if (sqlite3_get_autocommit(r->l->db))
        return;
    (void)ledger_cached_exec(r->l, "ROLLBACK TO invoice_account", true);
    (void)ledger_cached_exec(r->l, "RELEASE invoice_account", true);
}

static void summary_init(run *r, const tally_account *a, tally_invoice_summary *s)
{
    memset(s, 0, sizeof *s);
    snprintf(s->account, sizeof s->account, "%s", a->id);
    snprintf(s->period, sizeof s->period, "%s", r->o->period);
    snprintf(s->currency, sizeof s->currency, "%s", a->currency);
    const tally_currency *c = tally_currency_find(a->currency);
    s->minor_digits = c ? c->minor_digits : 2;
}

/* The live finalized invoice of the account's period, if any: fills s and
 * leaves its stored document in r->doc. */
static tally_err live_invoice(run *r, const tally_account *a, tally_invoice_summary *s, bool *live)
{
    sqlite3_stmt *st = inv_stmt(r->g, INV_Q_LIVE);
    sqlite3_bind_text(st, 1, a->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, r->o->period, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    tally_err e = TALLY_OK;
    *live = rc == SQLITE_ROW;
    if (rc == SQLITE_ROW) {
        snprintf(s->invoice_id, sizeof s->invoice_id, "%s", sqlite3_column_text(st, 0));
        s->subtotal_minor = sqlite3_column_int64(st, 1);
        s->credits_minor = sqlite3_column_int64(st, 2);
        s->amount_due_minor = sqlite3_column_int64(st, 3);
        s->finalized = s->already_finalized = true;
        tally_buf_reset(&r->doc);
        e = tally_buf_append(&r->doc, sqlite3_column_blob(st, 5),
                             (size_t)sqlite3_column_bytes(st, 5));
    } else if (rc != SQLITE_DONE) {
        e = ledger_sqlite_err(r->l, rc);
    }
    sqlite3_reset(st);
    return e;
}

static void doc_from(run *r, const tally_account *a, const tally_rating_result *res, inv_doc *d)
{
    *d = (inv_doc){
        .account = a->id,
        .currency = a->currency,
        .minor_digits = r->in.in.minor_digits,
        .period = r->o->period,
        .period_start_s = r->in.start_s,
        .period_end_s = r->in.end_s,
        .timezone = a->timezone,
        .issued_at_s = r->now_s,
        .lines = res->lines,
        .n_lines = res->n_lines,
        .credits = res->credits,
        .n_credits = res->n_credits,
        .subtotal_minor = res->subtotal_minor,
        .total_credits_minor = res->total_credits_minor,
        .amount_due_minor = res->amount_due_minor,
        .credit_issued_minor = res->credit_issued_minor,
        .prev_hash = "",
    };
}

/* What late adjustments owe the customer becomes an `adjustment` grant: no
 * expiry, no scope, in force from the start of the period that issued it,
 * funded by this invoice's entry (inv_post_invoice). */
static tally_err issue_credit(run *r, const tally_account *a, inv_doc *d)
{
    if (d->credit_issued_minor <= 0)
        return TALLY_OK;
    tally_grant_spec g = {.account = a->id,
                          .kind = TALLY_GRANT_ADJUSTMENT,
                          .amount_minor = d->credit_issued_minor,
                          .priority = 50,
                          .effective_s = d->period_start_s,
                          .expires_s = TALLY_TIME_MAX,
                          .scope = ""};
    return ledger_grant_insert(r->l, &g, a->currency, &d->credit_grant_id);
}

static tally_err save_draft(run *r, const tally_account *a, const tally_rating_result *res,
                            tally_invoice_summary *s)
{
    inv_doc d;
    doc_from(r, a, res, &d);
    tally_err e =
        tally_fmt(s->invoice_id, sizeof s->invoice_id, "draft:%s:%s", a->id, r->o->period);
    if (e)
        return e;
    d.invoice_id = s->invoice_id;
    tally_buf_reset(&r->doc);
    e = inv_doc_json(&d, NULL, &r->doc, NULL, NULL);
    if (e)
        return e;
    sqlite3_stmt *st;
    e = ledger_cached(r->l,
                      "INSERT OR REPLACE INTO drafts(account, period, doc, updated_at) "
                      "VALUES (?1, ?2, ?3, ?4)",
                      &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, a->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, r->o->period, -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 3, r->doc.data, (int)r->doc.len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, r->now_s);
    return ledger_cached_done(r->l, st, sqlite3_step(st));
}

static tally_err drop_draft(run *r, const char *account)
{
    sqlite3_stmt *st;
    tally_err e = ledger_cached(r->l, "DELETE FROM drafts WHERE account = ?1 AND period = ?2", &st);
    if (e)
        return e;
    sqlite3_bind_text(st, 1, account, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, r->o->period, -1, SQLITE_STATIC);
    return ledger_cached_done(r->l, st, sqlite3_step(st));
}

/* The invoice's entry and the draft's removal: what finalizing writes that
 * does not need the signature, written while the signer makes it. */
static tally_err while_signing(run *r, const inv_doc *d)
{
    tally_err e = inv_post_invoice(r->l, d);
    return e ? e : drop_draft(r, d->account);
}

/* The first pending account of a group takes the next number and the
 * chain's last hash from the database; the others follow the account
 * pending before them. */
static tally_err number_and_link(run *r, pending *p)
{
    int y, m;
    if (r->n_pend) {
        const pending *last = &r->pend[r->n_pend - 1];
        p->d.number = last->d.number + 1;
        memcpy(p->prev, last->hash, sizeof p->prev);
        return TALLY_OK;
    }
    tally_err e = tally_period_parse(r->o->period, &y, &m);
    if (!e)
        e = inv_next_number(r->l, "invoice", y, &p->d.number);
    return e ? e : inv_last_hash(r->l, p->prev);
}

/* Keeps doc with h, for the output directory. */
static tally_err hold_doc(run *r, held *h, const tally_buf *doc)
{
    h->doc_off = r->held_docs.len;
    h->doc_len = 0;
    if (!r->o->out_dir)
        return TALLY_OK;
    tally_err e = tally_buf_append(&r->held_docs, doc->data, doc->len);
    if (!e)
        h->doc_len = doc->len;
    return e;
}

/* Keeps the account's result (and its document, for the output directory)
 * until the group commits. */
static tally_err hold(run *r, const tally_invoice_summary *s, const tally_buf *doc)
{
    held *h = &r->held[r->n_held];
    h->s = *s;
    tally_err e = hold_doc(r, h, doc);
    if (!e)
        r->n_held++;
    return e;
}

static tally_err flush(run *r);

/* Finalizing, in the account's savepoint: numbers and chains the invoice,
 * issues its credit, queues its document's hash for signing and posts its
 * entry; the flush stores it. Takes res. */
static tally_err finalize_begin(run *r, const tally_account *a, tally_rating_result *res,
                                int64_t usage_seq, const tally_invoice_summary *s)
{
    pending *p = &r->pend[r->n_pend];
    p->a = a;
    p->res = *res;
    *res = (tally_rating_result){0};
    p->s = *s;
    p->usage_seq = usage_seq;
    doc_from(r, a, &p->res, &p->d);
    int y, m;
    tally_err e = tally_period_parse(r->o->period, &y, &m);
    if (!e)
        e = number_and_link(r, p);
    if (!e)
        e = issue_credit(r, a, &p->d);
    if (!e)
        e = tally_fmt(p->s.invoice_id, sizeof p->s.invoice_id, "INV-%04d-%06lld", y,
                      (long long)p->d.number);
    p->d.invoice_id = p->s.invoice_id;
    p->d.finalized = true;
    p->d.prev_hash = p->prev;
    tally_buf_reset(&p->doc);
    if (!e)
        e = inv_doc_unsealed(&p->d, tally_signer_key_id(r->signer), &p->doc, p->hash);
    if (!e)
        e = tally_signer_push(r->signer, p->hash, &p->ticket);
    if (!e)
        e = while_signing(r, &p->d);
    if (e) { /* a hash queued stays until the group's pending documents go */
        tally_rating_result_release(&p->res);
        return e;
    }
    p->held_ix = r->n_held;
    r->held[r->n_held++] = (held){.s = p->s};
    r->n_pend++;
    r->pend_bytes += p->doc.len;
    return r->serial ? flush(r) : TALLY_OK;
}

/* The period leaves the account's running charges. */
static tally_err refresh_balance(run *r, const tally_account *a)
{
    if (r->l->no_balances)
        return TALLY_OK;
    tally_err e = r->bal ? TALLY_OK : bal_engine_create(r->l, &r->bal);
    return e ? e : bal_refresh(r->bal, a->id, 1, 0, "invoice");
}

/* Stores a pending invoice with its signature: its rows, its outbox event
 * (in this same transaction) and its balance refresh; fills its result. */
static tally_err finalize_end(run *r, pending *p)
{
    inv_sealed sealed = {.usage_seq = p->usage_seq};
    memcpy(sealed.hash, p->hash, sizeof sealed.hash);
    tally_err e = tally_signer_wait(r->signer, p->ticket, sealed.signature);
    if (!e)
        e = inv_doc_seal(&p->doc, sealed.hash, sealed.signature);
    if (e)
        return e;
    sealed.doc = p->doc.data;
    sealed.len = p->doc.len;
    e = inv_store(r->l, &p->d, &sealed);
    if (!e)
        e = ledger_outbox_invoice_finalized(r->l, p->d.invoice_id, p->a->id, p->doc.data,
                                            p->doc.len);
    if (!e)
        e = refresh_balance(r, p->a);
    if (e)
        return e;
    held *h = &r->held[p->held_ix];
    h->s = p->s;
    h->s.finalized = true;
    return hold_doc(r, h, &p->doc);
}

/* Stores the group's pending invoices, in account order. Whatever the
 * outcome, none is pending after it. */
static tally_err flush(run *r)
{
    tally_err e = TALLY_OK;
    for (size_t i = 0; !e && i < r->n_pend; i++)
        e = finalize_end(r, &r->pend[i]);
    pend_reset(r);
    return e;
}

/* Gathers, adds pending adjustments and rates; *skip when the account has
 * nothing to bill in the period. */
static tally_err rate(run *r, const tally_account *a, tally_rating_result *res, bool *skip)
{
    int64_t start, end;
    tally_err e = bounds_for(r, a->timezone, &start, &end);
    if (e)
        return fail(r, a->id, e, "bad time zone");
    e = inv_gather(r->g, a, start, end, true, &r->in);
    r->n_extra = 0;
    if (!e)
        e = inv_adjustments(r->g, a, r->o->period, &r->scratch, &r->extra, &r->n_extra,
                            &r->cap_extra, r->why, r->cap, NULL);
    if (e)
        return e;
    *skip = r->in.n_in_window == 0 && r->in.n_commitments == 0 && r->in.n_grants == 0 &&
            r->n_extra == 0;
    if (*skip)
        return TALLY_OK;
    r->in.in.extra_lines = r->extra;
    r->in.in.n_extra_lines = r->n_extra;
    return tally_rate_period(&r->in.in, res, r->why, r->cap);
}

/* One account, inside its savepoint: a draft, a finalized invoice, or the
 * one it already has; *skip when it has nothing to bill. */
static tally_err account_body(run *r, const tally_account *a, tally_invoice_summary *s, bool *skip)
{
    tally_rating_result res = {0};
    bool live = false;
    int64_t usage_seq = 0;
    tally_err e = live_invoice(r, a, s, &live);
    if (!e && live)
        return hold(r, s, &r->doc);
    if (!e && r->o->finalize)
        e = inv_usage_seq(r->l, &usage_seq);
    if (!e)
        e = rate(r, a, &res, skip);
    if (!e && !*skip) {
        s->subtotal_minor = res.subtotal_minor;
        s->credits_minor = res.total_credits_minor;
        s->amount_due_minor = res.amount_due_minor;
        s->credit_issued_minor = res.credit_issued_minor;
        if (r->o->finalize)
            return finalize_begin(r, a, &res, usage_seq, s);
        e = save_draft(r, a, &res, s);
        if (!e)
            e = hold(r, s, &r->doc);
    }
    tally_rating_result_release(&res);
    return e;
}

/* One account of the open group, under its savepoint; a failure leaves the
 * group as it was before the account. */
static tally_err run_account(run *r, const tally_account *a)
{
    tally_invoice_summary s;
    bool skip = false;
    size_t held_before = r->n_held, docs_before = r->held_docs.len, pend_before = r->n_pend;
    summary_init(r, a, &s);
    tally_err e = sp_begin(r);
    if (e)
        return e;
    e = account_body(r, a, &s, &skip);
    if (!e)
        e = sp_release(r);
    if (e) { /* its result and pending document go with the savepoint */
        r->n_held = held_before;
        r->held_docs.len = docs_before;
        if (r->held_docs.data)
            r->held_docs.data[docs_before] = '\0';
        for (; r->n_pend > pend_before; r->n_pend--) {
            r->pend_bytes -= r->pend[r->n_pend - 1].doc.len;
            tally_rating_result_release(&r->pend[r->n_pend - 1].res);
        }
        sp_undo(r);
    }
    r->group_accounts++;
    return e;
}

/* With the files on the writer's thread: hands it the group's documents
 * and reports each result; the files' failure comes from settle. */
static tally_err deliver_to_writer(run *r)
{
    tally_err first = TALLY_OK;
    for (size_t i = 0; i < r->n_held; i++) {
        const held *h = &r->held[i];
        tally_err e =
            first ? TALLY_OK
                  : inv_writer_add(r->w, h->s.account, r->held_docs.data + h->doc_off, h->doc_len);
        if (e && !first) {
            first = e;
            snprintf(r->why, r->cap, "account %s: %s", h->s.account, tally_err_str(e));
        }
        if (r->o->on_invoice)
            r->o->on_invoice(r->o->ctx, &h->s);
    }
    inv_writer_go(r->w);
    r->n_held = 0;
    tally_buf_reset(&r->held_docs);
    return first;
}

/* Waits for the files of the group delivered last; their first failure
 * (why names the account) is the run's. */
static tally_err settle(run *r)
{
    char why[512] = "";
    tally_err e = r->w ? inv_writer_wait(r->w, why, sizeof why) : TALLY_OK;
    if (e && r->cap)
        snprintf(r->why, r->cap, "%s", why);
    return e;
}

/* What a committed group leaves to do, in account order: each held
 * result's files, then on_invoice. Every result is reported (its invoice is
 * committed); the first file that cannot be written is the error. */
static tally_err deliver(run *r)
{
    if (r->w)
        return deliver_to_writer(r);
    tally_err first = TALLY_OK;
    char why[512] = "";
    for (size_t i = 0; i < r->n_held; i++) {
        const held *h = &r->held[i];
        tally_err e = TALLY_OK;
        if (r->o->out_dir)
            e = inv_write_files(r->l, r->o->out_dir, h->s.account, r->o->period,
                                r->held_docs.data + h->doc_off, h->doc_len, why, sizeof why);
        if (e && !first) { /* named as explain() names an account's failure */
            first = e;
            if (strncmp(why, "account ", 8) == 0)
                snprintf(r->why, r->cap, "%s", why);
            else
                snprintf(r->why, r->cap, "account %s: %s", h->s.account,
                         why[0] ? why : tally_err_str(e));
        }
        if (r->o->on_invoice)
            r->o->on_invoice(r->o->ctx, &h->s);
    }
    r->n_held = 0;
    tally_buf_reset(&r->held_docs);
    return first;
}

/* Names the account and the cause in why, keeping a reason already there. */
static tally_err explain(run *r, const char *account, tally_err e)
{
    if (!r->why || !r->cap)
        return e;
    char inner[384];
    if (r->why[0])
        snprintf(inner, sizeof inner, "%s", r->why);
    else if (e == TALLY_DB || e == TALLY_IO || e == TALLY_BUSY)
        snprintf(inner, sizeof inner, "%s: %s", tally_err_str(e), tally_ledger_errmsg(r->l));
    else
        snprintf(inner, sizeof inner, "%s", tally_err_str(e));
    if (strncmp(inner, "account ", 8) == 0)
        snprintf(r->why, r->cap, "%s", inner);
    else
        snprintf(r->why, r->cap, "account %s: %s", account, inner);
    return e;
}

/* Every account, or the one asked for. */
static tally_err load_accounts(run *r, tally_account **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (r->o->account) {
        tally_account *a = calloc(1, sizeof *a);
        if (!a)
            return TALLY_NOMEM;
        tally_err e = tally_ledger_account_get(r->l, r->o->account, a);
        if (e) {
            free(a);
            snprintf(r->why, r->cap, "unknown account '%s'", r->o->account);
            return e;
        }
        *out = a;
        *n = 1;
        return TALLY_OK;
    }
    sqlite3_stmt *st;
    tally_err e =
        ledger_prepare(r->l, "SELECT id, currency, timezone, name FROM accounts ORDER BY id", &st);
    size_t cap = 0;
    int rc;
    while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            tally_account *p = realloc(*out, nc * sizeof *p);
            if (!p) {
                e = TALLY_NOMEM;
                break;
            }
            *out = p;
            cap = nc;
        }
        tally_account *a = &(*out)[(*n)++];
        memset(a, 0, sizeof *a);
        const char *cols[4];
        for (int c = 0; c < 4; c++)
            cols[c] = (const char *)sqlite3_column_text(st, c);
        snprintf(a->id, sizeof a->id, "%s", cols[0] ? cols[0] : "");
        snprintf(a->currency, sizeof a->currency, "%s", cols[1] ? cols[1] : "");
        snprintf(a->timezone, sizeof a->timezone, "%s", cols[2] ? cols[2] : "UTC");
        snprintf(a->name, sizeof a->name, "%s", cols[3] ? cols[3] : "");
    }
    if (!e && rc != SQLITE_DONE)
        e = ledger_sqlite_err(r->l, rc);
    sqlite3_finalize(st);
    return e;
}

/* Finalizing needs a usable signing key: checked once, before anything is
 * written, by starting the run's signer and signing with it. */
static tally_err check_key(run *r)
{
    char sig[129];
    uint64_t ticket = 0;
    tally_err e =
        r->o->key_path ? tally_signer_start(r->o->key_path, true, &r->signer) : TALLY_NOT_FOUND;
    if (!e)
        e = tally_signer_push(r->signer, INV_ZERO_HASH, &ticket);
    if (!e)
        e = tally_signer_wait(r->signer, ticket, sig);
    if (e)
        snprintf(r->why, r->cap, "signing key %s: %s (create one with 'tally keygen')",
                 r->o->key_path ? r->o->key_path : "(none)", tally_err_str(e));
    return e ? TALLY_CRYPTO : TALLY_OK;
}

/* Creates dir and its parents. */
static tally_err make_dir(run *r, const char *dir)
{
    char path[1024];
    int n = snprintf(path, sizeof path, "%s", dir);
    if (n <= 0 || (size_t)n >= sizeof path)
        return TALLY_IO;
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            goto out_fail;
        *p = '/';
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        goto out_fail;
    return TALLY_OK;
out_fail:
    snprintf(r->why, r->cap, "cannot create %s: %s", path, strerror(errno));
    return TALLY_IO;
}

/* Appends to r->why (printf-style). */
static void why_add(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void why_add(run *r, const char *fmt, ...)
{
    size_t used = strnlen(r->why, r->cap);
    if (used + 1 >= r->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why + used, r->cap - used, fmt, ap);
    va_end(ap);
}

/* The group's flush failed: rolls it back, to be run again from its first
 * account with each account storing its own invoice. */
static tally_err run_again(run *r)
{
    tx_rollback(r);
    r->n_held = 0;
    tally_buf_reset(&r->held_docs);
    pend_reset(r);
    r->serial = true;
    r->rerun = true;
    return TALLY_OK;
}

/* Commits the open group (accounts group_first .. end - 1) and delivers
 * its results. */
static tally_err group_commit(run *r, const tally_account *accts, size_t end)
{
    if (!r->in_tx)
        return TALLY_OK;
    /* The group's invoices are stored while the writer still writes the
     * files of the group before (flushing first keeps both cores busy);
     * then those files: one that failed ends the run there, as if it had
     * been written before this group began. */
    tally_err flushed = flush(r);
    tally_err e = settle(r);
    if (e) {
        tx_rollback(r);
        r->n_held = 0;
        return e;
    }
    if (flushed)
        return run_again(r);
    e = tx_commit(r);
    if (e && end - r->group_first == 1)
        snprintf(r->why, r->cap, "account %s: committing it failed: %s: %s",
                 accts[r->group_first].id, tally_err_str(e), tally_ledger_errmsg(r->l));
    else if (e)
        snprintf(r->why, r->cap, "accounts %s to %s: committing their group failed: %s: %s",
                 accts[r->group_first].id, accts[end - 1].id, tally_err_str(e),
                 tally_ledger_errmsg(r->l));
    if (e) {
        r->n_held = 0;
        return e;
    }
    return deliver(r);
}

/* Account i failed with e (its savepoint undone, r->why naming it): the
 * group's earlier accounts are committed and delivered while the
 * transaction stands. A file of theirs that cannot be written comes first
 * in the message, as it comes first in account order. */
static tally_err group_fail(run *r, tally_err e)
{
    const char *what = r->o->finalize ? "invoices" : "drafts";
    size_t before = r->n_held;
    tally_err files = settle(r); /* the group before's: then this one never ran */
    if (files) {
        tx_rollback(r);
        r->n_held = 0;
        pend_reset(r);
        return files;
    }
    if (r->in_tx && !sqlite3_get_autocommit(r->l->db) && flush(r) != TALLY_OK)
        return run_again(r); /* the earlier accounts' invoices could not be stored */
    pend_reset(r);
    if (!r->in_tx)
        return e;
    r->in_tx = false;
    if (sqlite3_get_autocommit(r->l->db)) { /* SQLite rolled the transaction back */
        if (before)
            why_add(r,
                    "; the transaction was rolled back, so the %zu %s before it in its group "
                    "were not committed either",
                    before, what);
        r->n_held = 0;
        return e;
    }
    if (ledger_commit(r->l) != TALLY_OK) {
        if (before)
            why_add(r, "; committing the %zu %s before it in its group failed too: %s", before,
                    what, tally_ledger_errmsg(r->l));
        r->n_held = 0;
        return e;
    }
    char failed[512];
    snprintf(failed, sizeof failed, "%s", r->why);
    tally_err d = deliver(r);
    if (!d)
        d = settle(r);
    if (!d)
        return e;
    why_add(r, "; then %s", failed);
    return d;
}

static tally_err run_all(run *r)
{
    tally_account *accts = NULL;
    size_t n = 0;
    /* The gatherer first: in a ledger directory it adds the accounts first
     * seen in shards to main.db, where they are listed. */
    tally_err e = inv_gatherer_create(r->l, &r->g);
    if (!e)
        e = load_accounts(r, &accts, &n);
    if (e && !r->why[0])
        snprintf(r->why, r->cap, "%s: %s", tally_err_str(e), tally_ledger_errmsg(r->l));
    size_t i = 0;
    while (!e && (i < n || r->in_tx)) {
        r->why[0] = '\0';
        if (i == n) {
            e = group_commit(r, accts, n);
        } else if (!r->in_tx) {
            e = tx_open(r);
            r->group_first = i;
        } else if ((e = run_account(r, &accts[i])) != TALLY_OK) {
            e = group_fail(r, explain(r, accts[i].id, e));
        } else {
            if (r->o->on_progress) /* the account is run; its results follow its group's commit */
                r->o->on_progress(r->o->ctx, i + 1, n);
            i++;
            if (r->group_accounts >= GROUP_ACCOUNTS ||
                r->held_docs.len + r->pend_bytes >= GROUP_DOC_BYTES)
                e = group_commit(r, accts, i);
        }
        if (r->rerun) { /* the group again, from its first account */
            r->rerun = false;
            i = r->group_first;
        }
    }
    if (!e)
        e = settle(r);
    tx_rollback(r);
    free(accts);
    return e;
}

tally_err tally_invoice_run(tally_ledger *l, const tally_invoice_run_opts *o, char *why, size_t cap)
{
    char local_why[512] = "";
    run r = {.l = l, .o = o, .now_s = tally_now_s(), .why = why ? why : local_why};
    r.cap = why ? cap : sizeof local_why;
    if (r.cap)
        r.why[0] = '\0';
    int y, m;
    if (!o || tally_period_parse(o->period, &y, &m) != TALLY_OK) {
        snprintf(r.why, r.cap, "bad period '%s': expected YYYY-MM",
                 o && o->period ? o->period : "");
        return TALLY_INVAL;
    }
    tally_err e = o->finalize ? check_key(&r) : TALLY_OK;
    if (!e && o->out_dir)
        e = make_dir(&r, o->out_dir);
    if (!e && o->out_dir)
        e = inv_writer_start(l, o->out_dir, o->period, &r.w);
    tally_buf_init(&r.doc, 0);
    tally_buf_init(&r.held_docs, GROUP_DOC_BYTES + TALLY_BUF_DEFAULT_CAP);
    if (!e && !(r.held = calloc(GROUP_ACCOUNTS, sizeof *r.held)))
        e = TALLY_NOMEM;
    if (!e && !(r.pend = calloc(GROUP_ACCOUNTS, sizeof *r.pend)))
        e = TALLY_NOMEM;
    for (size_t i = 0; r.pend && i < GROUP_ACCOUNTS; i++)
        tally_buf_init(&r.pend[i].doc, 0);
    if (!e && o->finalize && ledger_ckpt_start(l, &r.ckpt) != TALLY_OK)
        r.ckpt = NULL; /* then the run checkpoints itself, as SQLite does by default */
    if (!e)
        e = run_all(&r);
    ledger_ckpt_stop(r.ckpt, NULL, NULL);
    inv_writer_stop(r.w);
    pend_reset(&r);
    tally_signer_stop(r.signer);
    inv_gatherer_destroy(r.g);
    bal_engine_destroy(r.bal);
    inv_input_release(&r.in);
    inv_input_release(&r.scratch);
    free(r.extra);
    free(r.tzs);
    tally_buf_release(&r.doc);
    tally_buf_release(&r.held_docs);
    free(r.held);
    for (size_t i = 0; r.pend && i < GROUP_ACCOUNTS; i++)
        tally_buf_release(&r.pend[i].doc);
    free(r.pend);
    return e;
}
