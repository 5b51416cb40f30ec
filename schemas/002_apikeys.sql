-- Tally ledger, migration 2: HTTP API keys.
--
-- A key is shown once when created; only its SHA-256 is kept. An account key
-- (account NOT NULL, admin = 0) sees only that account; an admin key (account
-- NULL, admin = 1) sees everything and may grant credits and set spot prices.
-- Keys are never deleted: revoking one stamps revoked_at.

CREATE TABLE api_keys (
  id         INTEGER PRIMARY KEY,
  key_hash   BLOB NOT NULL UNIQUE CHECK (length(key_hash) = 32),
  account    TEXT,
  admin      INTEGER NOT NULL CHECK (admin IN (0, 1)),
  created_at INTEGER NOT NULL,
  revoked_at INTEGER,
  CHECK ((admin = 1 AND account IS NULL) OR (admin = 0 AND account IS NOT NULL))
) STRICT;
