-- Migration 11 (audit_trail) on sqlite: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

CREATE TABLE IF NOT EXISTS "api_token" ("id" TEXT NOT NULL PRIMARY KEY, "name" VARCHAR(200) NOT NULL, "secret_hash" VARCHAR(64) NOT NULL, "scopes" VARCHAR(50) NOT NULL, "created_at" DATETIME NOT NULL, "expires_at" DATETIME, "revoked_at" DATETIME, "last_used_at" DATETIME, "created_by" VARCHAR(220), "rotated_from" TEXT);
CREATE TABLE IF NOT EXISTS "audit_event" ("id" INTEGER NOT NULL PRIMARY KEY, "at" DATETIME NOT NULL, "actor_kind" VARCHAR(16) NOT NULL, "token_id" TEXT, "actor_name" VARCHAR(200) NOT NULL, "clinic_id" TEXT, "action" VARCHAR(64) NOT NULL, "target_type" VARCHAR(40), "target_id" VARCHAR(64), "details" TEXT NOT NULL, "request_id" VARCHAR(128), "address" VARCHAR(64), "redacted_at" DATETIME, FOREIGN KEY ("token_id") REFERENCES "api_token" ("id"));
CREATE INDEX IF NOT EXISTS "audit_event_at" ON "audit_event" ("at");
CREATE INDEX IF NOT EXISTS "audit_event_clinic_id_at" ON "audit_event" ("clinic_id", "at");
