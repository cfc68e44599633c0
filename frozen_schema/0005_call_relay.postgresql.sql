-- Migration 5 (call_relay) on postgresql: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

CREATE INDEX IF NOT EXISTS "call_unqueued" ON "call" ("received_at") WHERE "state" = 'pending' AND "queued_at" IS NULL;
CREATE OR REPLACE FUNCTION call_notify_new() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_notify('call_pending', ''); RETURN NULL; END $$;
DROP TRIGGER IF EXISTS "call_notify_new" ON "call";
CREATE TRIGGER "call_notify_new" AFTER INSERT ON "call" FOR EACH ROW EXECUTE FUNCTION call_notify_new();
