-- Migration 6 (auth_cache) on postgresql: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

CREATE OR REPLACE FUNCTION auth_notify_changed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_notify('auth_changed', ''); RETURN NULL; END $$;
DROP TRIGGER IF EXISTS "auth_changed" ON "api_token";
CREATE TRIGGER "auth_changed" AFTER UPDATE OF secret_hash, scopes, expires_at, revoked_at OR DELETE OR TRUNCATE ON "api_token" FOR EACH STATEMENT EXECUTE FUNCTION auth_notify_changed();
DROP TRIGGER IF EXISTS "auth_changed" ON "api_token_clinic";
CREATE TRIGGER "auth_changed" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "api_token_clinic" FOR EACH STATEMENT EXECUTE FUNCTION auth_notify_changed();
DROP TRIGGER IF EXISTS "auth_changed" ON "clinic";
CREATE TRIGGER "auth_changed" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "clinic" FOR EACH STATEMENT EXECUTE FUNCTION auth_notify_changed();
DROP TRIGGER IF EXISTS "call_notify_new" ON "call";
CREATE TRIGGER "call_notify_new" AFTER INSERT ON "call" FOR EACH STATEMENT EXECUTE FUNCTION call_notify_new();
