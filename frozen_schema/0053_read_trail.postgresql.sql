-- Migration 52 (read_trail) on postgresql: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

CREATE TABLE IF NOT EXISTS "read_event" ("id" BIGSERIAL NOT NULL PRIMARY KEY, "at" TIMESTAMP NOT NULL, "clinic_id" UUID NOT NULL, "reader_kind" VARCHAR(8) NOT NULL, "reader_id" UUID NOT NULL, "reader_name" VARCHAR(254) NOT NULL, "kind" VARCHAR(16) NOT NULL, "patient_id" UUID, "patient_request_id" UUID, "request_id" VARCHAR(128), "address" VARCHAR(64));
CREATE INDEX IF NOT EXISTS "read_event_clinic_id_at" ON "read_event" ("clinic_id", "at");
CREATE INDEX IF NOT EXISTS "read_event_reader_id_at" ON "read_event" ("reader_id", "at");
CREATE INDEX IF NOT EXISTS "read_event_patient_id_at" ON "read_event" ("patient_id", "at");
CREATE OR REPLACE FUNCTION read_event_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION USING MESSAGE = 'read_event is append-only: ' || TG_OP || ' refused', ERRCODE = 'insufficient_privilege'; END $$;
DROP TRIGGER IF EXISTS "append_only" ON "read_event";
CREATE TRIGGER "append_only" BEFORE UPDATE ON "read_event" FOR EACH STATEMENT EXECUTE FUNCTION read_event_append_only();
CREATE OR REPLACE FUNCTION audit_event_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF TG_OP = 'DELETE' AND current_setting('clinic_service.offboarding', true) = 'on' THEN RETURN NULL; END IF; RAISE EXCEPTION USING MESSAGE = 'audit_event is append-only: ' || TG_OP || ' refused', ERRCODE = 'insufficient_privilege'; END $$;
