-- Migration 18 (handoff_anomalies) on sqlite: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

CREATE TABLE IF NOT EXISTS "refused_handoff" ("id" INTEGER NOT NULL PRIMARY KEY, "at" DATETIME NOT NULL, "clinic_id" TEXT, "clinic_slug" VARCHAR(64) NOT NULL, "token_id" TEXT, "call_sid" VARCHAR(200), "status" INTEGER NOT NULL, "code" VARCHAR(40) NOT NULL, "message" VARCHAR(500) NOT NULL);
CREATE INDEX IF NOT EXISTS "refused_handoff_at" ON "refused_handoff" ("at");
