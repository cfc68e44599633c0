-- Migration 21 (idempotency_keys) on sqlite: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

CREATE TABLE IF NOT EXISTS "api_token" ("id" TEXT NOT NULL PRIMARY KEY, "name" VARCHAR(200) NOT NULL, "secret_hash" VARCHAR(64) NOT NULL, "scopes" VARCHAR(50) NOT NULL, "created_at" DATETIME NOT NULL, "expires_at" DATETIME, "revoked_at" DATETIME, "last_used_at" DATETIME, "created_by" VARCHAR(220), "rotated_from" TEXT);
CREATE TABLE IF NOT EXISTS "idempotency_key" ("id" INTEGER NOT NULL PRIMARY KEY, "token_id" TEXT NOT NULL, "operation" VARCHAR(40) NOT NULL, "key" VARCHAR(255) NOT NULL, "fingerprint" VARCHAR(64) NOT NULL, "status" INTEGER NOT NULL, "answer" BLOB NOT NULL, "created_at" DATETIME NOT NULL, "expires_at" DATETIME NOT NULL, FOREIGN KEY ("token_id") REFERENCES "api_token" ("id") ON DELETE CASCADE);
CREATE INDEX IF NOT EXISTS "idempotency_key_token_id" ON "idempotency_key" ("token_id");
CREATE INDEX IF NOT EXISTS "idempotency_key_expires_at" ON "idempotency_key" ("expires_at");
CREATE UNIQUE INDEX IF NOT EXISTS "idempotency_key_token_id_operation_key" ON "idempotency_key" ("token_id", "operation", "key");
