-- Tally ledger, migration 12: prepaid balances in real time (SPEC section 9).
--
-- account_limits holds each account's spend-control settings (`tally account
-- set --low-balance --stop-at --release-after`). They decide when an account
-- is suspended, so they join the ledger's chain like the billing settings in
-- accounts do. An account without a row has the defaults: no low mark, a
-- stop mark of 0.00 and a release grace of 15 days.
--
-- account_balances and running_periods are derived: what a draft invoice run
-- of the account's periods not yet finalized shows, refreshed by the ledger
-- in the same transaction as every write that can change it (a usage batch,
-- a grant, a setting, a price, an invoice finalized or voided). They hold no
-- fact of their own: `tally verify` recomputes them and names an account
-- whose stored balance differs. The state transitions they cause are outbox
-- events (balance.low, balance.exhausted, balance.recovered,
-- account.suspend, account.resume, volume.release), which are chained.
CREATE TABLE account_limits (
  account           TEXT PRIMARY KEY,
  low_balance_minor INTEGER,                    -- NULL: no low mark
  stop_at_minor     INTEGER NOT NULL DEFAULT 0,
  release_after_s   INTEGER NOT NULL DEFAULT 1296000 CHECK (release_after_s >= 0),
  updated_at        INTEGER NOT NULL
) STRICT;

CREATE TRIGGER chain_account_limits AFTER INSERT ON account_limits BEGIN
  SELECT tally_chain_add('account_limits', NEW.rowid,
    tally_canon('account_limits', NEW.account, NEW.low_balance_minor, NEW.stop_at_minor,
      NEW.release_after_s, NEW.updated_at));
END;
CREATE TRIGGER chain_account_limits_update AFTER UPDATE ON account_limits BEGIN
  SELECT tally_chain_add('account_limits', NEW.rowid,
    tally_canon('account_limits', NEW.account, NEW.low_balance_minor, NEW.stop_at_minor,
      NEW.release_after_s, NEW.updated_at));
END;
CREATE TRIGGER account_limits_no_delete BEFORE DELETE ON account_limits
BEGIN SELECT RAISE(ABORT, 'account limits are changed, never deleted'); END;

CREATE TABLE account_balances (
  account           TEXT PRIMARY KEY,
  currency          TEXT NOT NULL,
  running_minor     INTEGER NOT NULL,  -- charges of the periods not yet finalized
  covered_minor     INTEGER NOT NULL,  -- the part of them credits pay
  credits_minor     INTEGER NOT NULL,  -- what unexpired grants can still pay, after that
  balance_minor     INTEGER NOT NULL,  -- credits_minor - (running_minor - covered_minor)
  burn_minor        INTEGER NOT NULL,  -- charges of the last 600 s of usage
  state             TEXT NOT NULL CHECK (state IN ('ok', 'low', 'exhausted')),
  exhausted_since_s INTEGER,           -- set while exhausted
  released          INTEGER NOT NULL DEFAULT 0,  -- volume.release announced for this exhaustion
  next_check_s      INTEGER,           -- a grant expires or the release grace ends then
  event_seq         INTEGER NOT NULL DEFAULT 0,  -- events announced for the account
  updated_at        INTEGER NOT NULL
) STRICT;
CREATE INDEX account_balances_due ON account_balances(next_check_s)
  WHERE next_check_s IS NOT NULL;
CREATE INDEX account_balances_state ON account_balances(state);

CREATE TABLE running_periods (
  account        TEXT NOT NULL,
  period         TEXT NOT NULL,        -- YYYY-MM in the account's time zone
  subtotal_minor INTEGER NOT NULL,
  credits_minor  INTEGER NOT NULL,
  due_minor      INTEGER NOT NULL,
  PRIMARY KEY (account, period)
) STRICT, WITHOUT ROWID;
