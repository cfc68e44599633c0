-- Migration 11 (audit_trail) on postgresql: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

CREATE TABLE IF NOT EXISTS "api_token" ("id" UUID NOT NULL PRIMARY KEY, "name" VARCHAR(200) NOT NULL, "secret_hash" VARCHAR(64) NOT NULL, "scopes" VARCHAR(50) NOT NULL, "created_at" TIMESTAMP NOT NULL, "expires_at" TIMESTAMP, "revoked_at" TIMESTAMP, "last_used_at" TIMESTAMP, "created_by" VARCHAR(220), "rotated_from" UUID);
CREATE TABLE IF NOT EXISTS "audit_event" ("id" BIGSERIAL NOT NULL PRIMARY KEY, "at" TIMESTAMP NOT NULL, "actor_kind" VARCHAR(16) NOT NULL, "token_id" UUID, "actor_name" VARCHAR(200) NOT NULL, "clinic_id" UUID, "action" VARCHAR(64) NOT NULL, "target_type" VARCHAR(40), "target_id" VARCHAR(64), "details" TEXT NOT NULL, "request_id" VARCHAR(128), "address" VARCHAR(64), "redacted_at" TIMESTAMP, FOREIGN KEY ("token_id") REFERENCES "api_token" ("id"));
CREATE INDEX IF NOT EXISTS "audit_event_at" ON "audit_event" ("at");
CREATE INDEX IF NOT EXISTS "audit_event_clinic_id_at" ON "audit_event" ("clinic_id", "at");
CREATE OR REPLACE FUNCTION audit_event_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION USING MESSAGE = 'audit_event is append-only: ' || TG_OP || ' refused', ERRCODE = 'insufficient_privilege'; END $$;
DROP TRIGGER IF EXISTS "append_only" ON "audit_event";
CREATE TRIGGER "append_only" BEFORE UPDATE OR DELETE ON "audit_event" FOR EACH STATEMENT EXECUTE FUNCTION audit_event_append_only();
