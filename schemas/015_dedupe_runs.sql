-- Tally ledger, migration 15: dedupe keys of ids that count up, kept as runs.
--
-- Hosts number their reports ("h00347-000000000123"), so most ids are a
-- prefix followed by a counter. An id that ends in 4 to 18 decimal digits,
-- the whole id or after a character that is not a letter (so not the tail
-- of a random UUID or ULID), is split into that prefix, the digits' count (width, so "x-0007" and
-- "x-00007" stay different ids) and their value n. One row, a run, holds
-- the window of 160 values lo <= n < lo + 160 (lo a multiple of 160) of one
-- (source, prefix, width): `bits` marks the values seen (bit k of byte
-- k / 8, least significant first, for n = lo + k) and `fps` holds, in the
-- order of n, 6 bytes of each one's content fingerprint (its low 48 bits,
-- big-endian). The row of an id follows from the id alone, never from
-- when or in what order it arrived, so ids that reach the meter through
-- several partitions out of order fill the same rows, and a key is exact
-- forever. The row per id of every other id stays in `dedupe` (migration 1).
--
-- A full run is about a quarter of a 4 KiB page. It is a rowid table with
-- its key in an index, not WITHOUT ROWID: an index B-tree keeps whole rows
-- in its interior pages too, which for rows of ~1,000 bytes would cost a
-- quarter of the file.
CREATE TABLE dedupe_runs (
  id     INTEGER PRIMARY KEY,
  src    INTEGER NOT NULL,   -- 64-bit hash of the source, as dedupe.src
  prefix BLOB NOT NULL,      -- the id's bytes before its trailing digits
  width  INTEGER NOT NULL CHECK (width BETWEEN 4 AND 18),
  lo     INTEGER NOT NULL CHECK (lo >= 0 AND lo % 160 = 0),
  bits   BLOB NOT NULL CHECK (length(bits) = 20),
  fps    BLOB NOT NULL CHECK (length(fps) BETWEEN 6 AND 960 AND length(fps) % 6 = 0)
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
WITH RECURSIVE slot(src, prefix, width, lo, bits, fps, k, j, present) AS (
  SELECT src, prefix, width, lo, bits, fps, -1, 0, 0 FROM dedupe_runs
  UNION ALL
  SELECT src, prefix, width, lo, bits, fps, k + 1, j + present,
         ((instr('0123456789ABCDEF', substr(hex(substr(bits, (k + 1) / 8 + 1, 1)), 1, 1)) - 1)
          * 16 + instr('0123456789ABCDEF', substr(hex(substr(bits, (k + 1) / 8 + 1, 1)), 2, 1))
          - 1) >> ((k + 1) % 8) & 1
  FROM slot WHERE k < 159
)
SELECT src, id, printf('%012X', fp & 281474976710655) FROM dedupe
UNION ALL
SELECT src, CAST(CAST(prefix AS TEXT) || printf('%0*d', width, lo + k) AS BLOB),
       hex(substr(fps, j * 6 + 1, 6))
FROM slot WHERE present;
