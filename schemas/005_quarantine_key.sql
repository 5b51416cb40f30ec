-- Tally ledger, migration 5: the API key that sent each quarantined message
-- (POST /v1/events); NULL for messages from a file or from Kafka, and for
-- rows stored before this migration.
ALTER TABLE quarantine ADD COLUMN key_id INTEGER;
