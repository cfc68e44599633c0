-- Migration 10 (cache_generation) on postgresql: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

CREATE TABLE IF NOT EXISTS "cache_generation" ("id" smallint PRIMARY KEY, "n" bigint NOT NULL);
INSERT INTO "cache_generation" ("id", "n") VALUES (1, 0) ON CONFLICT DO NOTHING;
CREATE OR REPLACE FUNCTION auth_notify_changed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN UPDATE "cache_generation" SET "n" = "n" + 1 WHERE "id" = 1; PERFORM pg_notify('auth_changed', ''); RETURN NULL; END $$;
DROP TRIGGER IF EXISTS "auth_changed" ON "organization";
CREATE TRIGGER "auth_changed" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "organization" FOR EACH STATEMENT EXECUTE FUNCTION auth_notify_changed();
