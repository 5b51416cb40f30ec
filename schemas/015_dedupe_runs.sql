-- Tally ledger, migration 15: dedupe keys of ids that count up, kept as runs.
--
-- Hosts number their reports ("h00347-000000000123"), so most ids are a
-- prefix followed by a counter. An id that ends in 4 to 18 decimal digits
-- is split into that prefix, the digits' count (width, so "x-0007" and
-- "x-00007" stay different ids) and their value n. One row then holds a
-- run of consecutive values lo, lo+1, ... of one (source, prefix, width):
-- for each, 6 bytes of the event's content fingerprint (its low 48 bits,
-- big-endian). A run holds at most 163 ids (fewer for long prefixes:
-- ledger/dedupe_runs.c), so that full runs pack four to a 4 KiB page. Runs of one prefix never overlap. The
-- row per id of every other id stays in `dedupe` (migration 1).
--
-- A rowid table with its key in an index, not WITHOUT ROWID: an index
-- B-tree keeps whole rows in its interior pages too, which for rows of
-- ~900 bytes cost a quarter of the file; here only the small key is
-- indexed, and fingerprints live in the table's leaves.
--
-- Which table an id belongs to depends on the id alone, never on when or
-- in what order it arrived, so a key is exact forever: every id is either
-- in a run or in `dedupe`, and looked up in that one place.
CREATE TABLE dedupe_runs (
  id     INTEGER PRIMARY KEY,
  src    INTEGER NOT NULL,   -- 64-bit hash of the source, as dedupe.src
  prefix BLOB NOT NULL,      -- the id's bytes before its trailing digits
  width  INTEGER NOT NULL CHECK (width BETWEEN 4 AND 18),
  lo     INTEGER NOT NULL CHECK (lo >= 0),
  fps    BLOB NOT NULL CHECK (length(fps) BETWEEN 6 AND 978 AND length(fps) % 6 = 0)
) STRICT;
CREATE UNIQUE INDEX dedupe_runs_key ON dedupe_runs(src, prefix, width, lo);

-- A ledger that held keys before this migration may have ids of the run
-- form in `dedupe`: for it, such ids are looked up there too (meta value 1),
-- so a replay of an event stored before the upgrade is still a duplicate.
INSERT INTO meta(key, value) VALUES ('dedupe_legacy', EXISTS (SELECT 1 FROM dedupe));

-- Every dedupe key, one row each, whichever table holds it: src, the id's
-- bytes, and the fingerprint as 12 hex digits (its low 48 bits, which is
-- what a run keeps). For inspection and tests; the batch never reads it.
CREATE VIEW dedupe_keys(src, id, fp) AS
WITH RECURSIVE slot(src, prefix, width, lo, fps, k) AS (
  SELECT src, prefix, width, lo, fps, 0 FROM dedupe_runs
  UNION ALL
  SELECT src, prefix, width, lo, fps, k + 1 FROM slot WHERE (k + 1) * 6 < length(fps)
)
SELECT src, id, printf('%012X', fp & 281474976710655) FROM dedupe
UNION ALL
SELECT src, CAST(CAST(prefix AS TEXT) || printf('%0*d', width, lo + k) AS BLOB),
       hex(substr(fps, k * 6 + 1, 6))
FROM slot;
