-- Migration 12 (upload_link_created_at_index) on sqlite: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

CREATE INDEX IF NOT EXISTS "upload_link_created_at" ON "upload_link" ("created_at");
