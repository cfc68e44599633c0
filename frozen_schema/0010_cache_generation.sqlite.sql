-- Migration 10 (cache_generation) on sqlite: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

-- Nothing on SQLite: these are PostgreSQL's NOTIFY triggers and their change counter (on SQLite the row
-- caches and the relay poll).
