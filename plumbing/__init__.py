"""Plumbing with no clinic rules in it: the database and its pool, the clock, PostgreSQL
LISTEN, the NOTIFY-invalidated row cache, logs, metrics, secrets at rest, strict JSON and
E.164 phone numbers."""
