-- Tally ledger, migration 6: what the Kafka path must never lose silently.
--
-- Quarantine rows keep a bounded prefix of the raw message (64 KiB), with the
-- original's size and SHA-256, so one hostile message cannot put megabytes
-- into the ledger (ledger/batch_commit.c). Rows from before this migration
-- hold their whole raw value; their size and hash are filled in here.
ALTER TABLE quarantine ADD COLUMN raw_size INTEGER;
ALTER TABLE quarantine ADD COLUMN raw_sha256 TEXT;
UPDATE quarantine SET raw_size = length(raw);

-- A mark of the message before each partition's next offset (a hash of its
-- key and value), so a log that restarted (a recreated topic, a restarted
-- embedded broker) is noticed even when the new log is already longer than
-- the stored offset: on assignment the meter reads that message again and
-- compares (meter/consumer_gap.c). NULL: unknown (rows from before this
-- migration, or after an accepted gap).
ALTER TABLE offsets ADD COLUMN last_mark INTEGER;

-- Dead-letter copies delivered, by quarantine origin. A Kafka quarantine row
-- without a row here still needs its copy; the meter inserts the row once the
-- broker has acknowledged the copy, so a copy is re-sent only after a crash
-- between the acknowledgement and this insert. Rows from before this
-- migration count as sent (the old meter re-sent them from the committed
-- Kafka offset).
CREATE TABLE dlq_sent (
  origin  TEXT PRIMARY KEY,
  sent_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
INSERT INTO dlq_sent(origin, sent_at)
  SELECT origin, created_at FROM quarantine WHERE origin LIKE 'kafka:%';
CREATE TRIGGER dlq_sent_no_update BEFORE UPDATE ON dlq_sent
BEGIN SELECT RAISE(ABORT, 'a dead-letter delivery is recorded once'); END;
CREATE TRIGGER dlq_sent_no_delete BEFORE DELETE ON dlq_sent
BEGIN SELECT RAISE(ABORT, 'a dead-letter delivery is recorded once'); END;

-- Offset ranges of a partition that were never read because the broker no
-- longer has them (retention moved the log start past the stored offset, or
-- the log restarted below it), accepted by an operator with
-- `tally meter --accept-gap TOPIC/PARTITION` or `--accept-gaps`. The stored
-- offset then moves to the log start in the same transaction.
CREATE TABLE offset_gaps (
  id          INTEGER PRIMARY KEY,
  topic       TEXT NOT NULL,
  partition   INTEGER NOT NULL,
  from_offset INTEGER NOT NULL,       -- first offset never read
  to_offset   INTEGER NOT NULL,       -- offset after the last one never read
  kind        TEXT NOT NULL CHECK (kind IN ('retention', 'restarted')),
  stored_next INTEGER NOT NULL,       -- the ledger's next offset before the gap
  log_start   INTEGER NOT NULL,
  log_end     INTEGER NOT NULL,
  created_at  INTEGER NOT NULL,
  CHECK (to_offset >= from_offset)
) STRICT;
CREATE TRIGGER offset_gaps_no_update BEFORE UPDATE ON offset_gaps
BEGIN SELECT RAISE(ABORT, 'an accepted offset gap is kept as recorded'); END;
CREATE TRIGGER offset_gaps_no_delete BEFORE DELETE ON offset_gaps
BEGIN SELECT RAISE(ABORT, 'an accepted offset gap is kept as recorded'); END;
