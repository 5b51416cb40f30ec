-- Tally ledger, migration 11: idempotency keys of credit grants (top-ups).
--
-- A client that retries `tally credit grant ... --idempotency-key K` or
-- `POST /v1/accounts/{id}/credits` with `Idempotency-Key: K` must get the
-- grant it already has, not a second one. Each row remembers one key: what
-- it was used for (scope: 'credit.grant', the one operation that takes keys
-- so far), the SHA-256 of the canonical form of the request it came with
-- (ledger/idempotency.c says which fields), and the grant that request
-- made. The row is written in the same transaction as the grant and its
-- postings, so a key can never name a grant that was not stored, nor a grant
-- be stored whose key was lost.
--
-- Keys are one space per ledger (per scope), not per account: the target
-- account is part of the request's hash, so a key reused for another
-- account is a mismatch (409 / exit 2), never a second top-up.
--
-- Rows are kept forever (no expiry) and never change. They move no money,
-- so they do not join the ledger's hash chain (009_chain.sql); the grant
-- they point to does.
CREATE TABLE idempotency_keys (
  scope          TEXT NOT NULL,
  key            TEXT NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
  request_sha256 TEXT NOT NULL CHECK (length(request_sha256) = 64),
  account        TEXT NOT NULL REFERENCES accounts(id),
  grant_id       INTEGER NOT NULL REFERENCES grants(id),
  created_at     INTEGER NOT NULL,
  PRIMARY KEY (scope, key)
) STRICT;
CREATE TRIGGER idempotency_keys_no_update BEFORE UPDATE ON idempotency_keys
BEGIN SELECT RAISE(ABORT, 'idempotency keys are immutable'); END;
CREATE TRIGGER idempotency_keys_no_delete BEFORE DELETE ON idempotency_keys
BEGIN SELECT RAISE(ABORT, 'idempotency keys are immutable'); END;
