"""Organizations, clinics, tokens and their settings from one JSON document."""
