-- Migration 8 (schedule_cache) on postgresql: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

DROP TRIGGER IF EXISTS "auth_changed" ON "office_hours";
CREATE TRIGGER "auth_changed" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "office_hours" FOR EACH STATEMENT EXECUTE FUNCTION auth_notify_changed();
DROP TRIGGER IF EXISTS "auth_changed" ON "calendar";
CREATE TRIGGER "auth_changed" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "calendar" FOR EACH STATEMENT EXECUTE FUNCTION auth_notify_changed();
DROP TRIGGER IF EXISTS "auth_changed" ON "vacation";
CREATE TRIGGER "auth_changed" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "vacation" FOR EACH STATEMENT EXECUTE FUNCTION auth_notify_changed();
