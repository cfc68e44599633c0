"""API keys: the rules every key is issued, rotated and revoked by (`api_keys.rules`),
the same for the staff console and the operator CLI."""
