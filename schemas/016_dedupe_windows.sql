-- Tally ledger, migration 16: dedupe windows, which keep each id's content
-- instead of a fingerprint of it.
--
-- A run of migration 15 kept 6 bytes of fingerprint per id: a hash of the
-- whole event, time included, so no two reports of a host were alike and
-- the fingerprints were three quarters of a ledger. A window keeps, per id
-- present, the 48 low bits of the hash of the event's content without its
-- time, and the time itself, exactly (ledger/run_codec_int.h has the
-- format). A host that reports the same instances every few seconds costs
-- about a byte a report, and a replay with another time is a conflict
-- with certainty.
--
-- Ids are split as in migration 15 (prefix, width, n). A window is the 480
-- values lo <= n < lo + 480 (lo a multiple of 480, so three of migration
-- 15's runs) of one (source, prefix, width). `n` counts the values present
-- and `content` holds their records in the order of n. Which values are
-- present, with k = n - lo:
--   - `bits` empty: the n values from k = bits_at on, with no gap (a host
--     that numbers its reports fills its windows so);
--   - otherwise bit k of byte k / 8 - bits_at of `bits`, least significant
--     first: the bitmap without its zero bytes at either end, so a sparse
--     window's is a byte or two.
-- The row follows from the id alone, never from when or in what order it
-- arrived.
CREATE TABLE dedupe_windows (
  id      INTEGER PRIMARY KEY,
  src     INTEGER NOT NULL,   -- 64-bit hash of the source, as dedupe.src
  prefix  BLOB NOT NULL,      -- the id's bytes before its trailing digits
  width   INTEGER NOT NULL CHECK (width BETWEEN 4 AND 18),
  lo      INTEGER NOT NULL CHECK (lo >= 0 AND lo % 480 = 0),
  bits_at INTEGER NOT NULL CHECK (bits_at BETWEEN 0 AND 479),
  bits    BLOB NOT NULL CHECK (length(bits) <= 60),
  n       INTEGER NOT NULL CHECK (n BETWEEN 1 AND 480),
  content BLOB NOT NULL CHECK (length(content) BETWEEN 8 AND 8161),
  CHECK (CASE WHEN length(bits) = 0 THEN bits_at + n <= 480 ELSE bits_at + length(bits) <= 60 END)
) STRICT;
CREATE UNIQUE INDEX dedupe_windows_key ON dedupe_windows(src, prefix, width, lo);

-- The runs of migration 15 stay where they are and stay authoritative for
-- the ids they hold; nothing writes them again. While any exist (meta value
-- 1), a window is read together with the runs it covers.
INSERT INTO meta(key, value) VALUES ('dedupe_runs_legacy', EXISTS (SELECT 1 FROM dedupe_runs));
CREATE TRIGGER dedupe_runs_no_insert BEFORE INSERT ON dedupe_runs
BEGIN SELECT RAISE(ABORT, 'dedupe runs are kept in dedupe_windows since migration 16'); END;
CREATE TRIGGER dedupe_runs_no_update BEFORE UPDATE ON dedupe_runs
BEGIN SELECT RAISE(ABORT, 'dedupe runs are kept in dedupe_windows since migration 16'); END;

-- Every dedupe key, one row each, whichever table holds it: src, the id's
-- bytes, and the fingerprint as 12 hex digits where one is kept (a row of
-- `dedupe` or a run of migration 15; a window keeps content, not a
-- fingerprint, so its keys show NULL). For inspection and tests; the batch
-- never reads it.
DROP VIEW dedupe_keys;
CREATE VIEW dedupe_keys(src, id, fp) AS
WITH RECURSIVE slot(src, prefix, width, lo, bits, fps, span, first, cnt, k, j, present) AS (
  SELECT src, prefix, width, lo, bits, fps, 160, NULL, NULL, -1, 0, 0 FROM dedupe_runs
  UNION ALL
  SELECT src, prefix, width, lo,
         CASE WHEN length(bits) = 0 THEN NULL ELSE CAST(zeroblob(bits_at) || bits AS BLOB) END,
         NULL, 480, bits_at, n, -1, 0, 0
  FROM dedupe_windows
  UNION ALL
  SELECT src, prefix, width, lo, bits, fps, span, first, cnt, k + 1, j + present,
         CASE WHEN bits IS NULL THEN (k + 1 >= first AND k + 1 < first + cnt) ELSE
         ((instr('0123456789ABCDEF', substr(hex(substr(bits, (k + 1) / 8 + 1, 1)), 1, 1)) - 1)
          * 16 + instr('0123456789ABCDEF', substr(hex(substr(bits, (k + 1) / 8 + 1, 1)), 2, 1))
          - 1) >> ((k + 1) % 8) & 1 END
  FROM slot WHERE k < span - 1
)
SELECT src, id, printf('%012X', fp & 281474976710655) FROM dedupe
UNION ALL
SELECT src, CAST(CAST(prefix AS TEXT) || printf('%0*d', width, lo + k) AS BLOB),
       CASE WHEN fps IS NULL THEN NULL ELSE hex(substr(fps, j * 6 + 1, 6)) END
FROM slot WHERE present;
