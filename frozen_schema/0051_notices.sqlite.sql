-- Migration 51 (notices) on sqlite: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

CREATE TABLE IF NOT EXISTS "outbox" ("id" INTEGER NOT NULL PRIMARY KEY, "topic" VARCHAR(40) NOT NULL, "clinic_id" TEXT, "payload" TEXT NOT NULL, "dedup_key" VARCHAR(200), "group_key" VARCHAR(120), "created_at" DATETIME NOT NULL, "due_at" DATETIME NOT NULL, "state" VARCHAR(8) NOT NULL, "attempts" INTEGER NOT NULL, "queued_at" DATETIME, "done_at" DATETIME, "outcome" VARCHAR(40));
CREATE UNIQUE INDEX IF NOT EXISTS "outbox_dedup_key" ON "outbox" ("dedup_key");
CREATE INDEX IF NOT EXISTS "outbox_state_due_at" ON "outbox" ("state", "due_at");
CREATE INDEX IF NOT EXISTS "outbox_group_key_state" ON "outbox" ("group_key", "state");
