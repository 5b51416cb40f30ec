-- Tally ledger, migration 4: indexes for voids and verification, which look
-- up an entry's postings and a document's entries.
CREATE INDEX postings_by_entry ON postings(entry_id);
CREATE INDEX entries_by_ref ON entries(kind, ref);
