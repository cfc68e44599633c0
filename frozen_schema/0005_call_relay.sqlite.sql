-- Migration 5 (call_relay) on sqlite: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

CREATE INDEX IF NOT EXISTS "call_unqueued" ON "call" ("received_at") WHERE "state" = 'pending' AND "queued_at" IS NULL;
