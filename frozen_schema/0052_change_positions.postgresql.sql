-- Migration 52 (webhooks) on postgresql: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

CREATE SEQUENCE IF NOT EXISTS change_position_seq;
CREATE OR REPLACE FUNCTION change_marked() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF TG_OP = 'INSERT' THEN NEW.change_position := NULL; NEW.updated_at := COALESCE(NEW.updated_at, NEW.created_at); ELSIF NEW.change_position IS NOT DISTINCT FROM OLD.change_position THEN NEW.change_position := NULL; IF NEW.updated_at IS NOT DISTINCT FROM OLD.updated_at THEN NEW.updated_at := now() AT TIME ZONE 'UTC'; END IF; END IF; RETURN NEW; END $$;
CREATE OR REPLACE FUNCTION request_child_changed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN UPDATE patient_request SET updated_at = now() AT TIME ZONE 'UTC' WHERE id = CASE WHEN TG_OP = 'DELETE' THEN OLD.request_id ELSE NEW.request_id END; RETURN NULL; END $$;
CREATE OR REPLACE FUNCTION patient_record_changed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN UPDATE patient SET updated_at = now() AT TIME ZONE 'UTC' WHERE id = CASE WHEN TG_OP = 'DELETE' THEN OLD.patient_id ELSE NEW.patient_id END; RETURN NULL; END $$;
DROP TRIGGER IF EXISTS patient_request_change_marked ON patient_request;
CREATE TRIGGER patient_request_change_marked BEFORE INSERT OR UPDATE ON patient_request FOR EACH ROW EXECUTE FUNCTION change_marked();
DROP TRIGGER IF EXISTS patient_change_marked ON patient;
CREATE TRIGGER patient_change_marked BEFORE INSERT OR UPDATE ON patient FOR EACH ROW EXECUTE FUNCTION change_marked();
DROP TRIGGER IF EXISTS patient_request_tag_changed ON patient_request_tag;
CREATE TRIGGER patient_request_tag_changed AFTER INSERT OR DELETE ON patient_request_tag FOR EACH ROW EXECUTE FUNCTION request_child_changed();
DROP TRIGGER IF EXISTS reservation_changed ON reservation;
CREATE TRIGGER reservation_changed AFTER INSERT OR UPDATE OR DELETE ON reservation FOR EACH ROW EXECUTE FUNCTION request_child_changed();
DROP TRIGGER IF EXISTS medical_record_changed ON medical_record;
CREATE TRIGGER medical_record_changed AFTER INSERT OR DELETE ON medical_record FOR EACH ROW EXECUTE FUNCTION request_child_changed();
DROP TRIGGER IF EXISTS patient_record_changed ON patient_record;
CREATE TRIGGER patient_record_changed AFTER INSERT OR UPDATE OR DELETE ON patient_record FOR EACH ROW EXECUTE FUNCTION patient_record_changed();
