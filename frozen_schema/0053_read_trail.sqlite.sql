-- Migration 52 (read_trail) on sqlite: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

CREATE TABLE IF NOT EXISTS "read_event" ("id" INTEGER NOT NULL PRIMARY KEY, "at" DATETIME NOT NULL, "clinic_id" TEXT NOT NULL, "reader_kind" VARCHAR(8) NOT NULL, "reader_id" TEXT NOT NULL, "reader_name" VARCHAR(254) NOT NULL, "kind" VARCHAR(16) NOT NULL, "patient_id" TEXT, "patient_request_id" TEXT, "request_id" VARCHAR(128), "address" VARCHAR(64));
CREATE INDEX IF NOT EXISTS "read_event_clinic_id_at" ON "read_event" ("clinic_id", "at");
CREATE INDEX IF NOT EXISTS "read_event_reader_id_at" ON "read_event" ("reader_id", "at");
CREATE INDEX IF NOT EXISTS "read_event_patient_id_at" ON "read_event" ("patient_id", "at");
