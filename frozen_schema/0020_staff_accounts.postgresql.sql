-- Migration 20 (staff_accounts) on postgresql: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

CREATE TABLE IF NOT EXISTS "staff_user" ("id" UUID NOT NULL PRIMARY KEY, "email" VARCHAR(254) NOT NULL, "name" VARCHAR(200) NOT NULL, "password_hash" TEXT NOT NULL, "language" VARCHAR(2) NOT NULL, "created_at" TIMESTAMP NOT NULL, "disabled_at" TIMESTAMP, "last_login_at" TIMESTAMP, "totp_secret_encrypted" TEXT, "totp_enabled_at" TIMESTAMP, "totp_last_step" BIGINT);
CREATE UNIQUE INDEX IF NOT EXISTS "staff_user_email" ON "staff_user" ("email");
CREATE TABLE IF NOT EXISTS "staff_password_link" ("id" UUID NOT NULL PRIMARY KEY, "user_id" UUID NOT NULL, "token_hash" VARCHAR(64) NOT NULL, "created_at" TIMESTAMP NOT NULL, "expires_at" TIMESTAMP NOT NULL, "used_at" TIMESTAMP, FOREIGN KEY ("user_id") REFERENCES "staff_user" ("id") ON DELETE CASCADE);
CREATE INDEX IF NOT EXISTS "staff_password_link_user_id" ON "staff_password_link" ("user_id");
CREATE UNIQUE INDEX IF NOT EXISTS "staff_password_link_token_hash" ON "staff_password_link" ("token_hash");
CREATE TABLE IF NOT EXISTS "staff_recovery_code" ("id" SERIAL NOT NULL PRIMARY KEY, "user_id" UUID NOT NULL, "code_hash" VARCHAR(64) NOT NULL, "used_at" TIMESTAMP, FOREIGN KEY ("user_id") REFERENCES "staff_user" ("id") ON DELETE CASCADE);
CREATE INDEX IF NOT EXISTS "staff_recovery_code_user_id" ON "staff_recovery_code" ("user_id");
CREATE UNIQUE INDEX IF NOT EXISTS "staff_recovery_code_user_id_code_hash" ON "staff_recovery_code" ("user_id", "code_hash");
