-- Tally ledger, migration 14: prepaid balances of a ledger directory's
-- meters (SPEC sections 8 and 9, include/tally/balance.h).
--
-- A `tally meter` writing a shard of a ledger directory cannot refresh a
-- balance in the shard's transaction: grants, limits, account_balances and
-- the outbox live in main.db. So the shard's batch commit records, in the
-- same transaction as the usage, each account it touched in
-- balance_pending: the span of event time of its new usage and the shard's
-- usage_seq of that commit. Right after, the meter refreshes those accounts
-- in one main.db transaction, which also raises main.db's
-- shard_balance_marks row of the shard to the highest seq it refreshed. A
-- row whose seq is above the shard's mark is a refresh not yet done: a crash
-- between the two commits leaves it pending, and the next flush (the next
-- chunk, the next acquisition of the shard, `tally publish`'s sweep) does
-- it. A refresh is a recompute whose events are written only when the
-- stored state changes, so doing it twice is harmless.
--
-- Both tables are bookkeeping, derived from the chained usage and settings
-- like account_balances (migration 12): they hold no fact of their own, so
-- nothing chains them and no trigger guards them. balance_pending is used
-- in shards (in main.db it stays empty: main.db's own batches refresh in
-- their transaction), shard_balance_marks in main.db only.
CREATE TABLE balance_pending (
  account TEXT PRIMARY KEY,
  lo_s    INTEGER NOT NULL,  -- the first second of its usage since the last refresh
  hi_s    INTEGER NOT NULL,  -- the last one
  seq     INTEGER NOT NULL   -- the shard's usage_seq of the commit that wrote the row last
) STRICT;
CREATE INDEX balance_pending_by_seq ON balance_pending(seq);

CREATE TABLE shard_balance_marks (
  shard TEXT PRIMARY KEY,    -- "shard-<topic>-<partition>"
  seq   INTEGER NOT NULL     -- balance_pending rows up to this seq are refreshed in main.db
) STRICT;
