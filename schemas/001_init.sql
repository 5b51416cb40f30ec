-- Tally ledger, migration 1. Applied in one transaction; PRAGMA user_version
-- records the highest migration applied. Every table is STRICT.
--
-- Append-only tables (triggers below refuse UPDATE and DELETE): entries,
-- postings, invoices, invoice_lines, invoice_credits. Corrections are new
-- rows: a void is a credit note with reversing postings.

CREATE TABLE meta (
  key   TEXT PRIMARY KEY,
  value INTEGER NOT NULL
) STRICT;
-- usage_seq: bumped once per ingest batch that writes usage; usage rows carry
-- the value of the batch that last wrote them. count_*: totals kept by the
-- batch writer, so progress lines need no count(*) over the dedupe index.
INSERT INTO meta(key, value) VALUES ('usage_seq', 0), ('count_dedupe', 0),
  ('count_quarantine', 0), ('count_intervals', 0), ('count_points', 0);

CREATE TABLE accounts (
  id         TEXT PRIMARY KEY,
  currency   TEXT NOT NULL,
  timezone   TEXT NOT NULL DEFAULT 'UTC',
  name       TEXT NOT NULL DEFAULT '',
  created_at INTEGER NOT NULL
) STRICT;

-- Rate cards are kept as loaded (JSON, see schemas/ratecard.schema.json).
CREATE TABLE ratecards (
  id             TEXT PRIMARY KEY,
  currency       TEXT NOT NULL,
  effective_from INTEGER NOT NULL UNIQUE,
  body           TEXT NOT NULL,
  loaded_at      INTEGER NOT NULL
) STRICT;
CREATE TRIGGER ratecards_no_update BEFORE UPDATE ON ratecards
BEGIN SELECT RAISE(ABORT, 'rate cards are immutable; load a newer card'); END;
CREATE TRIGGER ratecards_no_delete BEFORE DELETE ON ratecards
BEGIN SELECT RAISE(ABORT, 'rate cards are immutable; load a newer card'); END;

-- Spot price points, from rate cards (origin = card id) and set at run time
-- (origin = 'runtime'). At equal from_s the later row wins.
CREATE TABLE spot_prices (
  id         INTEGER PRIMARY KEY,
  sku        TEXT NOT NULL,
  from_s     INTEGER NOT NULL,
  price_nano INTEGER NOT NULL CHECK (price_nano >= 0),
  origin     TEXT NOT NULL,
  created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX spot_prices_by_sku ON spot_prices(sku, from_s);
CREATE TRIGGER spot_prices_no_update BEFORE UPDATE ON spot_prices
BEGIN SELECT RAISE(ABORT, 'spot prices are append-only; add a newer point'); END;
CREATE TRIGGER spot_prices_no_delete BEFORE DELETE ON spot_prices
BEGIN SELECT RAISE(ABORT, 'spot prices are append-only; add a newer point'); END;

CREATE TABLE commitments (
  id         INTEGER PRIMARY KEY,
  account    TEXT NOT NULL REFERENCES accounts(id),
  sku        TEXT NOT NULL,
  cards      INTEGER NOT NULL CHECK (cards > 0),
  from_s     INTEGER NOT NULL,
  to_s       INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  CHECK (to_s > from_s)
) STRICT;
CREATE INDEX commitments_by_account ON commitments(account);

-- A grant's balance is the credit balance of ledger account 'grant:<id>'.
CREATE TABLE grants (
  id           INTEGER PRIMARY KEY,
  account      TEXT NOT NULL REFERENCES accounts(id),
  kind         TEXT NOT NULL,
  amount_minor INTEGER NOT NULL CHECK (amount_minor > 0),
  currency     TEXT NOT NULL,
  priority     INTEGER NOT NULL DEFAULT 50,
  effective_s  INTEGER NOT NULL,
  expires_s    INTEGER,              -- NULL: never
  scope        TEXT NOT NULL DEFAULT '',
  created_at   INTEGER NOT NULL
) STRICT;
CREATE INDEX grants_by_account ON grants(account);
CREATE TRIGGER grants_no_update BEFORE UPDATE ON grants
BEGIN SELECT RAISE(ABORT, 'grants are immutable'); END;
CREATE TRIGGER grants_no_delete BEFORE DELETE ON grants
BEGIN SELECT RAISE(ABORT, 'grants are immutable'); END;

-- Accelerator and storage usage: weight (cards or bytes) held over
-- [start_s, end_s). Consecutive events of one instance are coalesced into one
-- row, which never grows past 86400 s, so a month is about 31 rows per
-- instance. seq is the usage_seq of the batch that last wrote the row.
CREATE TABLE usage_intervals (
  id        INTEGER PRIMARY KEY,
  account   TEXT NOT NULL,
  meter     INTEGER NOT NULL,
  pricing   INTEGER NOT NULL,
  migration INTEGER NOT NULL,
  resource  TEXT NOT NULL,
  dim       TEXT NOT NULL,
  weight    INTEGER NOT NULL CHECK (weight >= 0),
  start_s   INTEGER NOT NULL,
  end_s     INTEGER NOT NULL,
  seq       INTEGER NOT NULL,
  CHECK (end_s > start_s AND end_s - start_s <= 86400)
) STRICT;
CREATE INDEX usage_intervals_by_account ON usage_intervals(account, start_s);

-- Traffic and token usage summed per second.
CREATE TABLE usage_points (
  account TEXT NOT NULL,
  meter   INTEGER NOT NULL,
  dim     TEXT NOT NULL,
  dim2    TEXT NOT NULL,
  t_s     INTEGER NOT NULL,
  qty     INTEGER NOT NULL CHECK (qty >= 0),
  seq     INTEGER NOT NULL,
  PRIMARY KEY (account, meter, dim, dim2, t_s)
) STRICT, WITHOUT ROWID;

-- Dedupe index: one row per accepted (source, id). src is a 64-bit hash of
-- the source; id is the event id's bytes. Producers' ids usually grow with
-- time per source (sequence numbers, ULIDs, UUIDv7), so inserts land at the
-- right edge of each source's key range instead of at random pages.
CREATE TABLE dedupe (
  src INTEGER NOT NULL,
  id  BLOB NOT NULL,
  fp  INTEGER NOT NULL,
  PRIMARY KEY (src, id)
) STRICT, WITHOUT ROWID;

CREATE TABLE quarantine (
  id         INTEGER PRIMARY KEY,
  origin     TEXT NOT NULL UNIQUE,   -- 'kafka:<topic>/<partition>@<offset>', 'file:<name>:<line>', ...
  reason     TEXT NOT NULL,
  detail     TEXT NOT NULL,
  source     TEXT,
  event_id   TEXT,
  raw        BLOB NOT NULL,
  created_at INTEGER NOT NULL
) STRICT;

-- The next offset to consume per partition; written in the same transaction
-- as the batch it ends, with compare-and-set on the previous value.
CREATE TABLE offsets (
  topic       TEXT NOT NULL,
  partition   INTEGER NOT NULL,
  next_offset INTEGER NOT NULL,
  updated_at  INTEGER NOT NULL,
  PRIMARY KEY (topic, partition)
) STRICT;

-- Drafts are working copies, replaced on every invoice run.
CREATE TABLE drafts (
  account    TEXT NOT NULL,
  period     TEXT NOT NULL,
  doc        BLOB NOT NULL,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (account, period)
) STRICT;

-- Finalized invoices and credit notes, in one hash chain ordered by seq.
CREATE TABLE invoices (
  seq              INTEGER PRIMARY KEY,
  id               TEXT NOT NULL UNIQUE,     -- INV-2026-000001 / CN-2026-000001
  doc_type         TEXT NOT NULL CHECK (doc_type IN ('invoice', 'credit_note')),
  year             INTEGER NOT NULL,
  number           INTEGER NOT NULL,
  account          TEXT NOT NULL,
  period           TEXT NOT NULL,            -- YYYY-MM
  currency         TEXT NOT NULL,
  subtotal_minor   INTEGER NOT NULL,
  credits_minor    INTEGER NOT NULL,
  amount_due_minor INTEGER NOT NULL,
  refers_to        TEXT,                     -- credit note: the invoice it voids
  reason           TEXT,
  usage_seq        INTEGER NOT NULL,         -- meta.usage_seq when finalized
  doc              BLOB NOT NULL,            -- canonical JSON, as hashed and signed
  hash             TEXT NOT NULL,
  prev_hash        TEXT NOT NULL,
  signature        TEXT NOT NULL,
  finalized_at     INTEGER NOT NULL,
  UNIQUE (doc_type, year, number)
) STRICT;
CREATE INDEX invoices_by_account ON invoices(account, period);

CREATE TABLE invoice_lines (
  invoice_seq     INTEGER NOT NULL REFERENCES invoices(seq),
  line_no         INTEGER NOT NULL,
  kind            TEXT NOT NULL,
  meter           INTEGER NOT NULL,
  pricing         INTEGER NOT NULL,
  migration       INTEGER NOT NULL,
  sku             TEXT NOT NULL,
  dim2            TEXT NOT NULL,
  quantity        TEXT NOT NULL,             -- base units, decimal (may exceed 64 bits)
  unit_price_nano INTEGER NOT NULL,
  amount_minor    INTEGER NOT NULL,
  original_period TEXT NOT NULL DEFAULT '',
  adjusts         TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (invoice_seq, line_no)
) STRICT;

CREATE TABLE invoice_credits (
  invoice_seq  INTEGER NOT NULL REFERENCES invoices(seq),
  grant_id     INTEGER NOT NULL REFERENCES grants(id),
  line_no      INTEGER NOT NULL,
  amount_minor INTEGER NOT NULL,
  PRIMARY KEY (invoice_seq, grant_id, line_no)
) STRICT;

-- Double entry. Each entry's postings balance per currency; ledger accounts:
--   receivable:<account>, revenue:<meter>, insurance:waivers,
--   promotions:<grant kind>, grant:<grant id>
CREATE TABLE entries (
  id         INTEGER PRIMARY KEY,
  kind       TEXT NOT NULL,                  -- grant | invoice | void
  ref        TEXT NOT NULL,                  -- grant id, invoice id, credit note id
  created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE postings (
  id           INTEGER PRIMARY KEY,
  entry_id     INTEGER NOT NULL REFERENCES entries(id),
  ledger_acct  TEXT NOT NULL,
  currency     TEXT NOT NULL,
  debit_minor  INTEGER NOT NULL CHECK (debit_minor >= 0),
  credit_minor INTEGER NOT NULL CHECK (credit_minor >= 0),
  CHECK ((debit_minor = 0) <> (credit_minor = 0))
) STRICT;
CREATE INDEX postings_by_acct ON postings(ledger_acct, currency);

-- Running balances, maintained by trigger; `tally verify` recomputes them.
CREATE TABLE balances (
  ledger_acct  TEXT NOT NULL,
  currency     TEXT NOT NULL,
  debit_minor  INTEGER NOT NULL,
  credit_minor INTEGER NOT NULL,
  PRIMARY KEY (ledger_acct, currency)
) STRICT;

CREATE TRIGGER postings_balance AFTER INSERT ON postings BEGIN
  INSERT INTO balances(ledger_acct, currency, debit_minor, credit_minor)
  VALUES (NEW.ledger_acct, NEW.currency, NEW.debit_minor, NEW.credit_minor)
  ON CONFLICT(ledger_acct, currency) DO UPDATE SET
    debit_minor = debit_minor + excluded.debit_minor,
    credit_minor = credit_minor + excluded.credit_minor;
END;

CREATE TRIGGER entries_no_update BEFORE UPDATE ON entries
BEGIN SELECT RAISE(ABORT, 'entries are append-only'); END;
CREATE TRIGGER entries_no_delete BEFORE DELETE ON entries
BEGIN SELECT RAISE(ABORT, 'entries are append-only'); END;
CREATE TRIGGER postings_no_update BEFORE UPDATE ON postings
BEGIN SELECT RAISE(ABORT, 'postings are append-only'); END;
CREATE TRIGGER postings_no_delete BEFORE DELETE ON postings
BEGIN SELECT RAISE(ABORT, 'postings are append-only'); END;
CREATE TRIGGER invoices_no_update BEFORE UPDATE ON invoices
BEGIN SELECT RAISE(ABORT, 'finalized invoices are immutable'); END;
CREATE TRIGGER invoices_no_delete BEFORE DELETE ON invoices
BEGIN SELECT RAISE(ABORT, 'finalized invoices are immutable'); END;
CREATE TRIGGER invoice_lines_no_update BEFORE UPDATE ON invoice_lines
BEGIN SELECT RAISE(ABORT, 'finalized invoice lines are immutable'); END;
CREATE TRIGGER invoice_lines_no_delete BEFORE DELETE ON invoice_lines
BEGIN SELECT RAISE(ABORT, 'finalized invoice lines are immutable'); END;
CREATE TRIGGER invoice_credits_no_update BEFORE UPDATE ON invoice_credits
BEGIN SELECT RAISE(ABORT, 'finalized invoice credits are immutable'); END;
CREATE TRIGGER invoice_credits_no_delete BEFORE DELETE ON invoice_credits
BEGIN SELECT RAISE(ABORT, 'finalized invoice credits are immutable'); END;
