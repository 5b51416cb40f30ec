-- Tally ledger, migration 17: a document's rows join the ledger's chain as
-- two entries instead of one per row.
--
-- Until now each invoice or credit note, each of its lines and credits, its
-- entry and each posting had a chain entry of its own, written by the
-- triggers of migration 9: about ten entries (and twenty B-tree inserts)
-- for an invoice of four lines, a third of what a finalize writes. From
-- here the writers chain a group once its rows are all written
-- (ledger/chain.c, ledger_chain_group_add):
--   - 'invoice_group', row_key = the invoice's seq: the invoice or credit
--     note, then its invoice_lines by line_no, then its invoice_credits by
--     rowid;
--   - 'entry_group', row_key = the entry's id: the entry, then its postings
--     by rowid.
-- Its row_hash is the SHA-256 of the rows' canonical forms one after the
-- other, each as tally_canon(table, its columns in migration 9's order):
-- each form names its table and writes out every length, so the
-- concatenation reads back one way only. `tally verify` recomputes each
-- group from the rows there now, so a line or posting edited, deleted or
-- added under a chained parent changes its group's hash, and a row covered
-- neither by an entry of its own nor by its parent's group is reported as
-- written around Tally (ledger/verify_chain.c). Rows chained before this
-- migration keep their entries and are checked as before.
DROP TRIGGER IF EXISTS chain_invoices;
DROP TRIGGER IF EXISTS chain_invoice_lines;
DROP TRIGGER IF EXISTS chain_invoice_credits;
DROP TRIGGER IF EXISTS chain_entries;
DROP TRIGGER IF EXISTS chain_postings;
