-- Migration 7 (voicemail_detail) on sqlite: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

CREATE INDEX IF NOT EXISTS "patient_request_clinic_id_kind_created_at" ON "patient_request" ("clinic_id", "kind", "created_at");
