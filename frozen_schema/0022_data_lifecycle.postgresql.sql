-- Migration 22 (data_lifecycle) on postgresql: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

CREATE TABLE IF NOT EXISTS "pending_object_deletion" ("id" BIGSERIAL NOT NULL PRIMARY KEY, "key" VARCHAR(512) NOT NULL, "created_at" TIMESTAMP NOT NULL);
CREATE INDEX IF NOT EXISTS "patient_request_resolved_from_call" ON "patient_request" ("clinic_id", "done_at") WHERE "call_id" IS NOT NULL AND "done_at" IS NOT NULL;
CREATE INDEX IF NOT EXISTS "call_clinic_id_received_at" ON "call" ("clinic_id", "received_at");
CREATE INDEX IF NOT EXISTS "audit_event_with_address" ON "audit_event" ("clinic_id", "at") WHERE "address" IS NOT NULL;
DROP TRIGGER IF EXISTS "append_only" ON "audit_event";
CREATE TRIGGER "append_only" BEFORE DELETE ON "audit_event" FOR EACH STATEMENT EXECUTE FUNCTION audit_event_append_only();
CREATE OR REPLACE FUNCTION audit_event_redact_only() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF OLD.address IS NOT NULL AND NEW.address IS NULL AND NEW.redacted_at IS NOT NULL AND ROW(NEW.id, NEW.at, NEW.actor_kind, NEW.token_id, NEW.actor_name, NEW.clinic_id, NEW.action, NEW.target_type, NEW.target_id, NEW.details, NEW.request_id) IS NOT DISTINCT FROM ROW(OLD.id, OLD.at, OLD.actor_kind, OLD.token_id, OLD.actor_name, OLD.clinic_id, OLD.action, OLD.target_type, OLD.target_id, OLD.details, OLD.request_id) THEN RETURN NEW; END IF; RAISE EXCEPTION USING MESSAGE = 'audit_event is append-only: ' || TG_OP || ' refused (only an old event''s client address may be removed)', ERRCODE = 'insufficient_privilege'; END $$;
DROP TRIGGER IF EXISTS "redact_only" ON "audit_event";
CREATE TRIGGER "redact_only" BEFORE UPDATE ON "audit_event" FOR EACH ROW EXECUTE FUNCTION audit_event_redact_only();
