-- Migration 18 (handoff_anomalies) on postgresql: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

CREATE TABLE IF NOT EXISTS "refused_handoff" ("id" BIGSERIAL NOT NULL PRIMARY KEY, "at" TIMESTAMP NOT NULL, "clinic_id" UUID, "clinic_slug" VARCHAR(64) NOT NULL, "token_id" UUID, "call_sid" VARCHAR(200), "status" SMALLINT NOT NULL, "code" VARCHAR(40) NOT NULL, "message" VARCHAR(500) NOT NULL);
CREATE INDEX IF NOT EXISTS "refused_handoff_at" ON "refused_handoff" ("at");
