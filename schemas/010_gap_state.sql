-- Tally ledger, migration 10: the offset gaps a meter stopped at, not only
-- those an operator accepted, so each one is on stderr and in /metrics.
--
-- A row of state 'open' is written, in a transaction of its own, when the
-- meter stops a partition at a gap; the partition's stored offset does not
-- move. Accepting it later (`tally meter --accept-gap`) writes a new row of
-- state 'accepted' and moves the stored offset in the same transaction, as
-- before; the open row stays as it was written (rows are never updated). An
-- open row is still open while its partition's stored offset is its
-- stored_next and no accepted row of that partition follows it (a greater
-- id); a partition has at most one open gap at a time (ledger/kafka_gaps.c).
-- Rows from before this migration were all accepted.
ALTER TABLE offset_gaps ADD COLUMN state TEXT NOT NULL DEFAULT 'accepted'
  CHECK (state IN ('open', 'accepted'));

-- The chain (migration 9) now hashes the state too. Rows already there are
-- recorded once more with it, as new entries at the end of the chain (the
-- entries before stay as they are, and verify compares each row with its
-- latest entry).
DROP TRIGGER chain_offset_gaps;
CREATE TRIGGER chain_offset_gaps AFTER INSERT ON offset_gaps BEGIN
  SELECT tally_chain_add('offset_gaps', NEW.rowid,
    tally_canon('offset_gaps', NEW.id, NEW.topic, NEW.partition, NEW.from_offset, NEW.to_offset,
      NEW.kind, NEW.stored_next, NEW.log_start, NEW.log_end, NEW.created_at, NEW.state));
END;
SELECT tally_chain_add('offset_gaps', rowid,
    tally_canon('offset_gaps', id, topic, partition, from_offset, to_offset, kind, stored_next,
      log_start, log_end, created_at, state))
  FROM offset_gaps ORDER BY rowid;

-- Open rows are kept as written too.
DROP TRIGGER offset_gaps_no_update;
CREATE TRIGGER offset_gaps_no_update BEFORE UPDATE ON offset_gaps
BEGIN SELECT RAISE(ABORT, 'an offset gap is kept as recorded; a new row says what changed'); END;
DROP TRIGGER offset_gaps_no_delete;
CREATE TRIGGER offset_gaps_no_delete BEFORE DELETE ON offset_gaps
BEGIN SELECT RAISE(ABORT, 'an offset gap is kept as recorded; a new row says what changed'); END;

-- A partition's gaps in order, for the meter's check and /metrics.
CREATE INDEX offset_gaps_by_partition ON offset_gaps(topic, partition, id);
