-- Migration 14 (staff_console) on postgresql: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

CREATE TABLE IF NOT EXISTS "staff_user" ("id" UUID NOT NULL PRIMARY KEY, "email" VARCHAR(254) NOT NULL, "name" VARCHAR(200) NOT NULL, "password_hash" TEXT NOT NULL, "language" VARCHAR(2) NOT NULL, "created_at" TIMESTAMP NOT NULL, "disabled_at" TIMESTAMP, "last_login_at" TIMESTAMP, "totp_secret_encrypted" TEXT, "totp_enabled_at" TIMESTAMP, "totp_last_step" BIGINT);
CREATE UNIQUE INDEX IF NOT EXISTS "staff_user_email" ON "staff_user" ("email");
CREATE TABLE IF NOT EXISTS "organization" ("id" UUID NOT NULL PRIMARY KEY, "slug" VARCHAR(64) NOT NULL, "name" VARCHAR(200) NOT NULL, "patient_sharing" BOOLEAN NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS "organization_slug" ON "organization" ("slug");
CREATE TABLE IF NOT EXISTS "clinic" ("id" UUID NOT NULL PRIMARY KEY, "organization_id" UUID NOT NULL, "slug" VARCHAR(64) NOT NULL, "name" VARCHAR(200) NOT NULL, "timezone" VARCHAR(64) NOT NULL, "country" VARCHAR(2) NOT NULL, "subdivision" VARCHAR(16), "language" VARCHAR(8), "languages" TEXT, "missed_call_requests" BOOLEAN NOT NULL, "platform_api_url" VARCHAR(500), "platform_username" VARCHAR(200), "platform_password_encrypted" TEXT, "platform_source_markers" TEXT, "two_factor_required" BOOLEAN NOT NULL, "retention_call_requests_days" INTEGER, "retention_calls_days" INTEGER, "retention_audit_details_days" INTEGER, "retention_documents_days" INTEGER, FOREIGN KEY ("organization_id") REFERENCES "organization" ("id") ON DELETE CASCADE);
CREATE INDEX IF NOT EXISTS "clinic_organization_id" ON "clinic" ("organization_id");
CREATE UNIQUE INDEX IF NOT EXISTS "clinic_slug" ON "clinic" ("slug");
CREATE TABLE IF NOT EXISTS "staff_membership" ("id" SERIAL NOT NULL PRIMARY KEY, "user_id" UUID NOT NULL, "clinic_id" UUID NOT NULL, "role" VARCHAR(8) NOT NULL, FOREIGN KEY ("user_id") REFERENCES "staff_user" ("id") ON DELETE CASCADE, FOREIGN KEY ("clinic_id") REFERENCES "clinic" ("id") ON DELETE CASCADE);
CREATE INDEX IF NOT EXISTS "staff_membership_user_id" ON "staff_membership" ("user_id");
CREATE INDEX IF NOT EXISTS "staff_membership_clinic_id" ON "staff_membership" ("clinic_id");
CREATE UNIQUE INDEX IF NOT EXISTS "staff_membership_user_id_clinic_id" ON "staff_membership" ("user_id", "clinic_id");
CREATE TABLE IF NOT EXISTS "staff_session" ("id" VARCHAR(64) NOT NULL PRIMARY KEY, "user_id" UUID NOT NULL, "created_at" TIMESTAMP NOT NULL, "last_seen_at" TIMESTAMP NOT NULL, "csrf_token" VARCHAR(64) NOT NULL, "ip" VARCHAR(64), "user_agent" VARCHAR(300), "pending" VARCHAR(8), FOREIGN KEY ("user_id") REFERENCES "staff_user" ("id") ON DELETE CASCADE);
CREATE INDEX IF NOT EXISTS "staff_session_user_id" ON "staff_session" ("user_id");
