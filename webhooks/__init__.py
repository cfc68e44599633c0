"""Webhooks: a clinic's endpoints (`endpoints`: added, rotated, disabled; their URLs held to
the server-side fetch rules) and one delivery of an event to one of them (`delivery`: the
Standard Webhooks body, headers and signature, the POST)."""
