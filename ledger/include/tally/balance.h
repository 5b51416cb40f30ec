/* Prepaid balances in real time (SPEC section 9, schemas/012_balance.sql).
 *
 * The ledger keeps, per account, what a draft invoice run of its periods not
 * yet finalized would show (the running charges), what its grants can still
 * pay, the balance and a state (ok, low, exhausted). They are refreshed in
 * the same transaction as every write that can change them: a usage batch
 * from any input path, a grant, a change of the account's limits, a spot
 * price or rate card, an invoice finalized or voided; and, for what changes
 * with the clock alone (a grant expiring, the release grace ending, a
 * commitment's next period starting), by tally_balance_sweep and by any
 * read that finds the account due. So a read is a lookup, never a rating.
 *
 * A refresh that moves the state writes the events of SPEC section 9 to the
 * outbox in its transaction, in order (include/tally/outbox.h):
 *   balance.low        the balance went below the low mark;
 *   balance.exhausted  the balance reached the stop mark;
 *   account.suspend    with it: data.instances lists the accelerator
 *                      instances that reported usage in the 10 minutes
 *                      before the account's latest usage;
 *   balance.recovered  the balance went back above the mark it had crossed;
 *   account.resume     with it, when the account was exhausted;
 *   volume.release     the account stayed exhausted for its release grace:
 *                      data.volumes lists its storage volumes.
 * Each event's id is "<type>:<account>:<n>", n counting the account's
 * balance events from 1, so an id names one crossing forever.
 *
 * On a ledger directory, balances live in main.db; meters write usage into
 * shards that hold no grants. A meter's shard commit records each account
 * it touched in the shard's balance_pending, in the usage's transaction, and
 * right after the chunk's shard commits the meter refreshes those accounts
 * in main.db, one main.db transaction per shard per chunk, which also
 * raises main.db's mark for the shard (tally_shard_set_balances_flush,
 * ledger/shard_balance.c). The pending rows make it crash-safe: a row above
 * the mark is a refresh not done yet, and doing one twice announces nothing
 * twice. So a balance lags its usage by one chunk; longer while another
 * writer holds main.db (the flush then waits 100 ms at most and leaves the
 * rows pending); it is caught up by the next chunk's flush, the next
 * acquisition of the shard, or tally_balance_sweep (`tally publish`, every
 * 5 s). The writers of main.db (HTTP and file ingest, grants, limits,
 * invoice runs) refresh in their own transactions as on a plain ledger
 * (README, "Prepaid balances"). */
#ifndef TALLY_BALANCE_H
#define TALLY_BALANCE_H

#include <stdbool.h>
#include <stdint.h>

#include "tally/buf.h"
#include "tally/err.h"
#include "tally/event.h"
#include "tally/ledger.h"

#define TALLY_BALANCE_WINDOW_S        600              /* the burn rate's window */
#define TALLY_BALANCE_RELEASE_DEFAULT (15 * 86400)     /* --release-after's default */
#define TALLY_BALANCE_RELEASE_MAX     (3660LL * 86400) /* ten years */

typedef enum tally_balance_state {
    TALLY_BALANCE_OK = 0,
    TALLY_BALANCE_LOW,
    TALLY_BALANCE_EXHAUSTED,
    TALLY_BALANCE_STATE_COUNT
} tally_balance_state;

const char *tally_balance_state_name(tally_balance_state s);

/* An account's spend-control settings. */
typedef struct tally_limits {
    bool has_low;            /* a low mark is set */
    int64_t low_minor;       /* the low mark, when has_low */
    int64_t stop_at_minor;   /* exhausted at or below this (default 0) */
    int64_t release_after_s; /* volumes released after this long exhausted */
} tally_limits;

/* A change of settings: NULL pointers keep the stored value; clear_low
 * removes the low mark. */
typedef struct tally_limits_change {
    const int64_t *low_minor;
    bool clear_low;
    const int64_t *stop_at_minor;
    const int64_t *release_after_s;
} tally_limits_change;

typedef struct tally_balance {
    char account[TALLY_NAME_MAX];
    char currency[4];
    int minor_digits;
    int64_t running_minor; /* charges of the periods not yet finalized */
    int64_t covered_minor; /* the part of them that credits pay */
    int64_t credits_minor; /* what unexpired grants can still pay, after that */
    int64_t balance_minor; /* credits - (running - covered); negative: usage outran credits */
    int64_t burn_minor;    /* charges of the last TALLY_BALANCE_WINDOW_S of usage */
    bool has_runway;       /* false when nothing burns */
    int64_t runway_s;      /* seconds until the stop mark at that burn rate */
    tally_balance_state state;
    bool controlled; /* spend control applies: a grant or limits of its own */
    tally_limits limits;
    int64_t updated_at_s;
} tally_balance;

/* Sets an account's limits (the account must exist) and refreshes its
 * balance in the same transaction. Amounts are in the account's minor units;
 * each must be within +-TALLY_GRANT_MAX_MAJOR (SPEC section 4), the low mark
 * above the stop mark, release_after_s in [0, TALLY_BALANCE_RELEASE_MAX].
 * Errors: TALLY_NOT_FOUND, TALLY_RANGE (why says which), TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_limits_set(tally_ledger *l, const char *account,
                                            const tally_limits_change *c, char *why, size_t cap);

/* The account's balance: a lookup, refreshed first (in its own write
 * transaction) when the account has none yet or a grant expiry or a release
 * grace fell due since. Errors: TALLY_NOT_FOUND, TALLY_BUSY (a refresh is due
 * but the caller holds a transaction: end it and ask again), TALLY_DB, and
 * those of a refresh (TALLY_NO_PRICE, TALLY_OVERFLOW). */
TALLY_MUST_CHECK tally_err tally_balance_get(tally_ledger *l, const char *account,
                                             tally_balance *out);

/* Appends {"account","currency","running_charges","credits_available",
 * "balance","state","spend_control","runway_seconds" (null when nothing
 * burns or spend control does not apply),"burn_rate_per_hour","low_balance",
 * "stop_at","release_after_seconds","updated_at"} (money as decimal strings;
 * runway_seconds and low_balance may be null). Errors: TALLY_NOMEM. */
TALLY_MUST_CHECK tally_err tally_balance_json(const tally_balance *b, tally_buf *out);

/* Refreshes every account whose next check (a grant expiring, a release
 * grace ending, a commitment's next period starting) is at or before
 * now_s, each in its own transaction; on a ledger directory also the
 * accounts that meters' shard commits left pending (one main.db transaction
 * per shard; skipped quietly while another writer holds main.db). *n counts
 * them. Call it outside a transaction. Errors: TALLY_DB and those of a
 * refresh. */
TALLY_MUST_CHECK tally_err tally_balance_sweep(tally_ledger *l, int64_t now_s, int64_t *n);

/* Refreshes every account, each in its own transaction (`tally balance
 * --rebuild`: after usage was written with TALLY_NO_BALANCES=1, or a
 * balance verify found stale). Errors: as tally_balance_sweep. */
TALLY_MUST_CHECK tally_err tally_balance_refresh_all(tally_ledger *l, int64_t *n);

/* Accounts per state, for /metrics. Errors: TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_balance_state_counts(tally_ledger *l,
                                                      int64_t counts[TALLY_BALANCE_STATE_COUNT]);

/* ---- Admission (SPEC section 9) ---------------------------------------------- */

#define TALLY_ADMISSION_HOURS_MAX 8784 /* a leap year */

typedef struct tally_admission_req {
    const char *account;
    const char *sku;
    tally_pricing pricing; /* TALLY_PRICING_NONE: on-demand */
    int64_t cards;         /* 1..TALLY_CARDS_MAX */
    int64_t hours_nano;    /* hours x 10^9, (0, TALLY_ADMISSION_HOURS_MAX hours] */
} tally_admission_req;

typedef struct tally_admission {
    bool allowed;
    char currency[4];
    int minor_digits;
    tally_pricing pricing;
    int64_t unit_price_nano; /* per card-hour, today's (reserved: on-demand, for the overage) */
    int64_t billed_cards;    /* cards billed: reserved ones beyond the free committed cards */
    int64_t cost_minor;      /* billed cards x hours x price, rounded once half-up */
    int64_t balance_minor, stop_at_minor;
    int64_t shortfall_minor; /* cost - (balance - stop_at) when not allowed; else 0 */
} tally_admission;

/* Whether the account's balance pays for cards x hours of sku at today's
 * price (the rate card in force now, the spot point in force now) without
 * going below its stop mark. Reserved usage is priced as it is billed:
 * nothing more within the account's commitments of the SKU in force now,
 * less the reserved cards its instances reported in the last
 * TALLY_BALANCE_WINDOW_S seconds; on-demand for the cards beyond. An account not under spend
 * control (no grant, no limits: billed in arrears) is always allowed. Errors: TALLY_NOT_FOUND
 * (account), TALLY_INVAL (unknown SKU, no such pricing for it, cards or hours out of range: why
 * names it), TALLY_OVERFLOW, TALLY_DB. */
TALLY_MUST_CHECK tally_err tally_admission_check(tally_ledger *l, const tally_admission_req *r,
                                                 tally_admission *out, char *why, size_t cap);

/* {"allowed","account","currency","sku","pricing","cards","billed_cards","hours",
 *  "unit_price","cost","balance","stop_at","balance_after"[,"shortfall"]}.
 * Errors: TALLY_NOMEM. */
TALLY_MUST_CHECK tally_err tally_admission_json(const tally_admission_req *r,
                                                const tally_admission *a, tally_buf *out);

#endif
