-- Tally ledger, migration 9: the ledger's own hash chain (SPEC section 5).
--
-- Every row that can move money is recorded in ledger_chain in the same
-- transaction that writes it, by the triggers below: the row's canonical
-- form is tally_canon(table, its columns in this fixed order), and its
-- row_hash = tally_sha256 of that. Each entry's hash covers the previous
-- entry's hash, its seq, the table, the row's rowid and row_hash, so
-- changing, removing or reordering any entry breaks every later hash. The
-- triggers pass the canonical form to tally_chain_add(), which hashes it,
-- links it and inserts the entry with statements cached per connection
-- (trigger bodies are compiled into every statement that writes a table).
-- tally_canon, tally_sha256 and tally_chain_add are SQL functions the
-- ledger registers on every connection it opens (ledger/chain.c); `tally verify` recomputes
-- each row's hash from the row (ledger/verify_chain.c) and checks signed
-- heads (`tally head`, `tally verify --head`, `ledger.head` events).
--
-- Usage is covered by batch totals: each ingest commit writes one
-- usage_batches row per meter it added usage to (new events, and their
-- quantity: weight x seconds for accelerator and storage, the amount for
-- traffic and tokens), chained like any row; verify checks that the
-- batches' quantities add up, per meter, to what usage_intervals and
-- usage_points hold. A ledger directory's shards are ledger files of their
-- own and chain their own batches.
CREATE TABLE usage_batches (
  seq        INTEGER NOT NULL,     -- meta.usage_seq of the commit (0: usage before migration 9)
  meter      INTEGER NOT NULL,
  events     INTEGER NOT NULL,
  qty        TEXT NOT NULL,        -- decimal; may pass 64 bits
  created_at INTEGER NOT NULL,
  PRIMARY KEY (seq, meter)
) STRICT;
-- The usage already there, as one batch 0 (events: its rows), written
-- before the chain's triggers exist; it is chained below with the rest.
INSERT INTO usage_batches(seq, meter, events, qty, created_at)
SELECT 0, meter, count(*), tally_qty_sum(w, s), 0 FROM (SELECT meter, weight w, end_s - start_s s
  FROM usage_intervals UNION ALL SELECT meter, qty, 1 FROM usage_points) GROUP BY meter;
CREATE TRIGGER usage_batches_no_update BEFORE UPDATE ON usage_batches
BEGIN SELECT RAISE(ABORT, 'usage batch totals are append-only'); END;
CREATE TRIGGER usage_batches_no_delete BEFORE DELETE ON usage_batches
BEGIN SELECT RAISE(ABORT, 'usage batch totals are append-only'); END;

-- Covered: usage batch totals, accounts (inserts and updates: billing settings), rate cards,
-- spot points, commitments, grants, entries, postings, invoices and credit
-- notes with their lines and credits, outbox rows (all but sent_at).
-- Rows written before this migration are chained here, in table order.

CREATE TABLE ledger_chain (
  seq      INTEGER PRIMARY KEY,
  tbl      TEXT NOT NULL,
  row_key  INTEGER NOT NULL,       -- the row's rowid
  row_hash TEXT NOT NULL,
  hash     TEXT NOT NULL           -- tally_sha256(tally_canon(previous hash or '', seq, tbl, row_key, row_hash))
) STRICT;
CREATE INDEX ledger_chain_by_row ON ledger_chain(tbl, row_key, seq);

CREATE TRIGGER ledger_chain_no_update BEFORE UPDATE ON ledger_chain
BEGIN SELECT RAISE(ABORT, 'the ledger chain is append-only'); END;
CREATE TRIGGER ledger_chain_no_delete BEFORE DELETE ON ledger_chain
BEGIN SELECT RAISE(ABORT, 'the ledger chain is append-only'); END;

CREATE TRIGGER chain_usage_batches AFTER INSERT ON usage_batches BEGIN
  SELECT tally_chain_add('usage_batches', NEW.rowid,
    tally_canon('usage_batches', NEW.seq, NEW.meter, NEW.events, NEW.qty, NEW.created_at));
END;
CREATE TRIGGER chain_accounts AFTER INSERT ON accounts BEGIN
  SELECT tally_chain_add('accounts', NEW.rowid,
    tally_canon('accounts', NEW.id, NEW.currency, NEW.timezone, NEW.name, NEW.created_at));
END;
CREATE TRIGGER chain_accounts_update AFTER UPDATE ON accounts BEGIN
  SELECT tally_chain_add('accounts', NEW.rowid,
    tally_canon('accounts', NEW.id, NEW.currency, NEW.timezone, NEW.name, NEW.created_at));
END;
CREATE TRIGGER chain_ratecards AFTER INSERT ON ratecards BEGIN
  SELECT tally_chain_add('ratecards', NEW.rowid,
    tally_canon('ratecards', NEW.id, NEW.currency, NEW.effective_from, NEW.body, NEW.loaded_at,
      NEW.entered_at));
END;
CREATE TRIGGER chain_spot_prices AFTER INSERT ON spot_prices BEGIN
  SELECT tally_chain_add('spot_prices', NEW.rowid,
    tally_canon('spot_prices', NEW.id, NEW.sku, NEW.from_s, NEW.price_nano, NEW.origin, NEW.created_at,
      NEW.entered_at));
END;
CREATE TRIGGER chain_commitments AFTER INSERT ON commitments BEGIN
  SELECT tally_chain_add('commitments', NEW.rowid,
    tally_canon('commitments', NEW.id, NEW.account, NEW.sku, NEW.cards, NEW.from_s, NEW.to_s, NEW.created_at));
END;
CREATE TRIGGER chain_grants AFTER INSERT ON grants BEGIN
  SELECT tally_chain_add('grants', NEW.rowid,
    tally_canon('grants', NEW.id, NEW.account, NEW.kind, NEW.amount_minor, NEW.currency, NEW.priority, NEW.effective_s, NEW.expires_s, NEW.scope, NEW.created_at));
END;
CREATE TRIGGER chain_entries AFTER INSERT ON entries BEGIN
  SELECT tally_chain_add('entries', NEW.rowid,
    tally_canon('entries', NEW.id, NEW.kind, NEW.ref, NEW.created_at));
END;
CREATE TRIGGER chain_postings AFTER INSERT ON postings BEGIN
  SELECT tally_chain_add('postings', NEW.rowid,
    tally_canon('postings', NEW.id, NEW.entry_id, NEW.ledger_acct, NEW.currency, NEW.debit_minor, NEW.credit_minor));
END;
CREATE TRIGGER chain_invoices AFTER INSERT ON invoices BEGIN
  SELECT tally_chain_add('invoices', NEW.rowid,
    tally_canon('invoices', NEW.seq, NEW.id, NEW.doc_type, NEW.year, NEW.number, NEW.account, NEW.period, NEW.currency, NEW.subtotal_minor, NEW.credits_minor, NEW.amount_due_minor, NEW.refers_to, NEW.reason, NEW.usage_seq, NEW.doc, NEW.hash, NEW.prev_hash, NEW.signature, NEW.finalized_at));
END;
CREATE TRIGGER chain_invoice_lines AFTER INSERT ON invoice_lines BEGIN
  SELECT tally_chain_add('invoice_lines', NEW.rowid,
    tally_canon('invoice_lines', NEW.invoice_seq, NEW.line_no, NEW.kind, NEW.meter, NEW.pricing, NEW.migration, NEW.sku, NEW.dim2, NEW.quantity, NEW.unit_price_nano, NEW.amount_minor, NEW.original_period, NEW.adjusts));
END;
CREATE TRIGGER chain_invoice_credits AFTER INSERT ON invoice_credits BEGIN
  SELECT tally_chain_add('invoice_credits', NEW.rowid,
    tally_canon('invoice_credits', NEW.invoice_seq, NEW.grant_id, NEW.line_no, NEW.amount_minor));
END;
CREATE TRIGGER chain_outbox AFTER INSERT ON outbox BEGIN
  SELECT tally_chain_add('outbox', NEW.rowid,
    tally_canon('outbox', NEW.id, NEW.event_id, NEW.type, NEW.subject, NEW.payload, NEW.created_at));
END;
-- An accepted Kafka offset gap says which usage was never read (migration 6).
CREATE TRIGGER chain_offset_gaps AFTER INSERT ON offset_gaps BEGIN
  SELECT tally_chain_add('offset_gaps', NEW.rowid,
    tally_canon('offset_gaps', NEW.id, NEW.topic, NEW.partition, NEW.from_offset, NEW.to_offset,
      NEW.kind, NEW.stored_next, NEW.log_start, NEW.log_end, NEW.created_at));
END;

-- The rows already there, in table order, linked one after the other.
CREATE TEMP TABLE chain_stage (n INTEGER PRIMARY KEY, tbl TEXT, row_key INTEGER, row_hash TEXT);
INSERT INTO temp.chain_stage(tbl, row_key, row_hash) SELECT 'usage_batches', rowid,
  tally_sha256(tally_canon('usage_batches', seq, meter, events, qty, created_at)) FROM usage_batches ORDER BY rowid;
INSERT INTO temp.chain_stage(tbl, row_key, row_hash) SELECT 'accounts', rowid,
  tally_sha256(tally_canon('accounts', id, currency, timezone, name, created_at)) FROM accounts ORDER BY rowid;
INSERT INTO temp.chain_stage(tbl, row_key, row_hash) SELECT 'ratecards', rowid,
  tally_sha256(tally_canon('ratecards', id, currency, effective_from, body, loaded_at, entered_at))
  FROM ratecards ORDER BY rowid;
INSERT INTO temp.chain_stage(tbl, row_key, row_hash) SELECT 'spot_prices', rowid,
  tally_sha256(tally_canon('spot_prices', id, sku, from_s, price_nano, origin, created_at,
  entered_at)) FROM spot_prices ORDER BY rowid;
INSERT INTO temp.chain_stage(tbl, row_key, row_hash) SELECT 'commitments', rowid,
  tally_sha256(tally_canon('commitments', id, account, sku, cards, from_s, to_s, created_at)) FROM commitments ORDER BY rowid;
INSERT INTO temp.chain_stage(tbl, row_key, row_hash) SELECT 'grants', rowid,
  tally_sha256(tally_canon('grants', id, account, kind, amount_minor, currency, priority, effective_s, expires_s, scope, created_at)) FROM grants ORDER BY rowid;
INSERT INTO temp.chain_stage(tbl, row_key, row_hash) SELECT 'entries', rowid,
  tally_sha256(tally_canon('entries', id, kind, ref, created_at)) FROM entries ORDER BY rowid;
INSERT INTO temp.chain_stage(tbl, row_key, row_hash) SELECT 'postings', rowid,
  tally_sha256(tally_canon('postings', id, entry_id, ledger_acct, currency, debit_minor, credit_minor)) FROM postings ORDER BY rowid;
INSERT INTO temp.chain_stage(tbl, row_key, row_hash) SELECT 'invoices', rowid,
  tally_sha256(tally_canon('invoices', seq, id, doc_type, year, number, account, period, currency, subtotal_minor, credits_minor, amount_due_minor, refers_to, reason, usage_seq, doc, hash, prev_hash, signature, finalized_at)) FROM invoices ORDER BY rowid;
INSERT INTO temp.chain_stage(tbl, row_key, row_hash) SELECT 'invoice_lines', rowid,
  tally_sha256(tally_canon('invoice_lines', invoice_seq, line_no, kind, meter, pricing, migration, sku, dim2, quantity, unit_price_nano, amount_minor, original_period, adjusts)) FROM invoice_lines ORDER BY rowid;
INSERT INTO temp.chain_stage(tbl, row_key, row_hash) SELECT 'invoice_credits', rowid,
  tally_sha256(tally_canon('invoice_credits', invoice_seq, grant_id, line_no, amount_minor)) FROM invoice_credits ORDER BY rowid;
INSERT INTO temp.chain_stage(tbl, row_key, row_hash) SELECT 'outbox', rowid,
  tally_sha256(tally_canon('outbox', id, event_id, type, subject, payload, created_at)) FROM outbox ORDER BY rowid;
INSERT INTO temp.chain_stage(tbl, row_key, row_hash) SELECT 'offset_gaps', rowid,
  tally_sha256(tally_canon('offset_gaps', id, topic, partition, from_offset, to_offset, kind,
    stored_next, log_start, log_end, created_at)) FROM offset_gaps ORDER BY rowid;
WITH RECURSIVE link(n, hash) AS (
  SELECT 0, ''
  UNION ALL
  SELECT s.n, tally_sha256(tally_canon(link.hash, s.n, s.tbl, s.row_key, s.row_hash))
  FROM temp.chain_stage s JOIN link ON s.n = link.n + 1
)
INSERT INTO ledger_chain(seq, tbl, row_key, row_hash, hash)
SELECT s.n, s.tbl, s.row_key, s.row_hash, link.hash FROM temp.chain_stage s JOIN link USING (n)
ORDER BY s.n;
DROP TABLE temp.chain_stage;
