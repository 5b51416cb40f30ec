-- Tally ledger, migration 3: the outbox of announcements.
--
-- Finalizing an invoice, voiding one and issuing a credit note each append
-- their event here in the same transaction as the change itself, so an
-- announcement exists exactly when the change does. `tally publish` sends
-- pending rows to Kafka in id order and stamps sent_at once the broker has
-- acknowledged them (include/tally/outbox.h, include/tally/publish.h).
--
-- payload is the whole CloudEvent, built once at insert time, so every
-- retry publishes the same bytes under the same id. Rows are never deleted
-- and never change, except sent_at going once from NULL to a time.

CREATE TABLE outbox (
  id         INTEGER PRIMARY KEY,           -- publish order
  event_id   TEXT NOT NULL UNIQUE CHECK (length(event_id) > 0), -- '<type>:<document id>'
  type       TEXT NOT NULL CHECK (length(type) > 0),
  subject    TEXT NOT NULL CHECK (length(subject) > 0),          -- the account: the Kafka key
  payload    BLOB NOT NULL,                 -- CloudEvent JSON, as published
  created_at INTEGER NOT NULL,
  sent_at    INTEGER                        -- NULL: pending
) STRICT;
-- Pending rows in publish order, without scanning what was sent long ago.
CREATE INDEX outbox_pending ON outbox(id) WHERE sent_at IS NULL;

CREATE TRIGGER outbox_no_delete BEFORE DELETE ON outbox
BEGIN SELECT RAISE(ABORT, 'outbox events are kept as announced'); END;
CREATE TRIGGER outbox_no_update BEFORE UPDATE OF id, event_id, type, subject, payload, created_at
ON outbox
BEGIN SELECT RAISE(ABORT, 'an outbox event never changes; only sent_at is stamped'); END;
CREATE TRIGGER outbox_sent_once BEFORE UPDATE OF sent_at ON outbox
WHEN OLD.sent_at IS NOT NULL OR NEW.sent_at IS NULL
BEGIN SELECT RAISE(ABORT, 'sent_at is stamped once, from NULL to a time'); END;
-- INSERT OR REPLACE deletes the row it replaces without running the delete
-- trigger; refuse it up front.
CREATE TRIGGER outbox_no_replace BEFORE INSERT ON outbox
WHEN EXISTS (SELECT 1 FROM outbox WHERE event_id = NEW.event_id OR id = NEW.id)
BEGIN SELECT RAISE(ABORT, 'outbox event already recorded'); END;
