-- Migration 54 (open_requests_cache) on sqlite: what it creates, as it was when it was frozen.
-- Frozen: never edit; a later migration changes the schema.

-- Nothing on SQLite: these are PostgreSQL's NOTIFY triggers and their change counter (on SQLite
-- has-active-request asks the database each time).
