-- Tally ledger, migration 7: API key roles (SPEC section 7).
--
-- A key has one role:
--   account  sees one account's data (account NOT NULL) and never sends usage;
--   ingest   sends usage whose source starts with one of its prefixes
--            (api_key_sources, at least one) and nothing else;
--   admin    everything.
-- SQLite cannot change a CHECK constraint in place, so the table is rebuilt
-- (the ids are kept). Foreign keys are checked at commit, when api_keys
-- exists again under its name.

PRAGMA defer_foreign_keys = ON;

CREATE TABLE api_keys_v7 (
  id         INTEGER PRIMARY KEY,
  key_hash   BLOB NOT NULL UNIQUE CHECK (length(key_hash) = 32),
  role       TEXT NOT NULL CHECK (role IN ('account', 'ingest', 'admin')),
  account    TEXT,
  created_at INTEGER NOT NULL,
  revoked_at INTEGER,
  CHECK ((role = 'account') = (account IS NOT NULL))
) STRICT;

INSERT INTO api_keys_v7(id, key_hash, role, account, created_at, revoked_at)
  SELECT id, key_hash, CASE admin WHEN 1 THEN 'admin' ELSE 'account' END, account, created_at,
         revoked_at
  FROM api_keys;

DROP TABLE api_keys;
ALTER TABLE api_keys_v7 RENAME TO api_keys;

-- The source prefixes of an ingest key.
CREATE TABLE api_key_sources (
  key_id INTEGER NOT NULL REFERENCES api_keys(id),
  prefix TEXT NOT NULL CHECK (length(prefix) BETWEEN 1 AND 127),
  PRIMARY KEY (key_id, prefix)
) STRICT, WITHOUT ROWID;
