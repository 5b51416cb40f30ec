-- Tally ledger, migration 8: prices are bitemporal (SPEC section 2).
--
-- Every rate card and spot point records when it was entered, besides when
-- it takes effect (effective_from, from_s). Late usage for a finalized period
-- is re-rated with only the prices entered by the time that period was
-- finalized (invoices.finalized_at), so a price set back-dated into a
-- finalized period changes only periods not yet finalized.
--
-- New rows carry entered_at. Rows stored before this migration keep it NULL
-- and are read as entered when they were stored (loaded_at, created_at): the
-- tables are append-only (their triggers refuse UPDATE), and those columns
-- already hold that time.
ALTER TABLE ratecards ADD COLUMN entered_at INTEGER;
ALTER TABLE spot_prices ADD COLUMN entered_at INTEGER;
