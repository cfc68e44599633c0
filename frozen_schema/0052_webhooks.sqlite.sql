-- Migration 52 (webhooks) on sqlite: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

CREATE TABLE IF NOT EXISTS "change_event" ("seq" INTEGER NOT NULL PRIMARY KEY, "position" INTEGER, "id" TEXT NOT NULL, "clinic_id" TEXT NOT NULL, "type" VARCHAR(40) NOT NULL, "occurred_at" DATETIME NOT NULL, "data" TEXT NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS "change_event_position" ON "change_event" ("position");
CREATE UNIQUE INDEX IF NOT EXISTS "change_event_id" ON "change_event" ("id");
CREATE INDEX IF NOT EXISTS "change_event_clinic_id_position" ON "change_event" ("clinic_id", "position");
CREATE INDEX IF NOT EXISTS "change_event_occurred_at" ON "change_event" ("occurred_at");
CREATE TABLE IF NOT EXISTS "webhook_endpoint" ("id" TEXT NOT NULL PRIMARY KEY, "clinic_id" TEXT NOT NULL, "url" VARCHAR(500) NOT NULL, "event_types" TEXT NOT NULL, "description" VARCHAR(200) NOT NULL, "secret_encrypted" TEXT NOT NULL, "previous_secret_encrypted" TEXT, "previous_until" DATETIME, "created_at" DATETIME NOT NULL, "disabled_at" DATETIME, "disabled_reason" VARCHAR(40), "failures" INTEGER NOT NULL, "failing_since" DATETIME, "paused_until" DATETIME, FOREIGN KEY ("clinic_id") REFERENCES "clinic" ("id") ON DELETE CASCADE);
CREATE INDEX IF NOT EXISTS "webhook_endpoint_clinic_id" ON "webhook_endpoint" ("clinic_id");
