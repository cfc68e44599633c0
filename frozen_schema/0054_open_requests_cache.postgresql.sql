-- Migration 54 (open_requests_cache) on postgresql: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

-- The open requests' callers (has-active-request, from memory): a change that can turn an
-- answer is announced on its own channel and counted in its own row, apart from the tokens' and
-- schedules' (a request made or resolved must not empty the token rows of every process).
-- Its load reads a clinic's open requests alone, not every request the clinic ever had.
CREATE INDEX IF NOT EXISTS "patient_request_open" ON "patient_request" ("clinic_id", "patient_id") WHERE "done_at" IS NULL;
INSERT INTO "cache_generation" ("id", "n") VALUES (2, 0) ON CONFLICT DO NOTHING;
-- Counted as the transaction commits (deferred), once per transaction: the counter's row lock
-- is held for the commit alone, so writers of requests and patients neither queue behind a long
-- transaction's count nor deadlock on it (each takes it last, after its own rows).
CREATE OR REPLACE FUNCTION requests_notify_changed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF current_setting('clinic.requests_counted', true) IS DISTINCT FROM txid_current()::text THEN PERFORM set_config('clinic.requests_counted', txid_current()::text, true); UPDATE "cache_generation" SET "n" = "n" + 1 WHERE "id" = 2; PERFORM pg_notify('requests_changed', ''); END IF; RETURN NULL; END $$;
DROP TRIGGER IF EXISTS "requests_changed" ON "patient_request";
CREATE CONSTRAINT TRIGGER "requests_changed" AFTER INSERT OR DELETE ON "patient_request" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION requests_notify_changed();
DROP TRIGGER IF EXISTS "requests_changed_update" ON "patient_request";
CREATE CONSTRAINT TRIGGER "requests_changed_update" AFTER UPDATE ON "patient_request" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (OLD."done_at" IS DISTINCT FROM NEW."done_at" OR OLD."patient_id" IS DISTINCT FROM NEW."patient_id" OR OLD."clinic_id" IS DISTINCT FROM NEW."clinic_id") EXECUTE FUNCTION requests_notify_changed();
DROP TRIGGER IF EXISTS "requests_truncated" ON "patient_request";
CREATE TRIGGER "requests_truncated" AFTER TRUNCATE ON "patient_request" FOR EACH STATEMENT EXECUTE FUNCTION requests_notify_changed();
DROP TRIGGER IF EXISTS "requests_changed" ON "patient";
CREATE CONSTRAINT TRIGGER "requests_changed" AFTER DELETE ON "patient" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION requests_notify_changed();
DROP TRIGGER IF EXISTS "requests_changed_update" ON "patient";
CREATE CONSTRAINT TRIGGER "requests_changed_update" AFTER UPDATE ON "patient" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (OLD."phone" IS DISTINCT FROM NEW."phone" OR OLD."merged_into_id" IS DISTINCT FROM NEW."merged_into_id" OR OLD."organization_id" IS DISTINCT FROM NEW."organization_id") EXECUTE FUNCTION requests_notify_changed();
DROP TRIGGER IF EXISTS "requests_changed_insert" ON "patient";
CREATE CONSTRAINT TRIGGER "requests_changed_insert" AFTER INSERT ON "patient" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW."merged_into_id" IS NOT NULL) EXECUTE FUNCTION requests_notify_changed();
DROP TRIGGER IF EXISTS "requests_truncated" ON "patient";
CREATE TRIGGER "requests_truncated" AFTER TRUNCATE ON "patient" FOR EACH STATEMENT EXECUTE FUNCTION requests_notify_changed();
