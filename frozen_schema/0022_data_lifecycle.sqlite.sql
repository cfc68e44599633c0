-- Migration 22 (data_lifecycle) on sqlite: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

CREATE TABLE IF NOT EXISTS "pending_object_deletion" ("id" INTEGER NOT NULL PRIMARY KEY, "key" VARCHAR(512) NOT NULL, "created_at" DATETIME NOT NULL);
CREATE INDEX IF NOT EXISTS "patient_request_resolved_from_call" ON "patient_request" ("clinic_id", "done_at") WHERE "call_id" IS NOT NULL AND "done_at" IS NOT NULL;
CREATE INDEX IF NOT EXISTS "call_clinic_id_received_at" ON "call" ("clinic_id", "received_at");
CREATE INDEX IF NOT EXISTS "audit_event_with_address" ON "audit_event" ("clinic_id", "at") WHERE "address" IS NOT NULL;
