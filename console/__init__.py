"""The staff console's feature code: passwords, sessions, login throttling, rendering
(Jinja2 with gettext, Czech first), its templates, stylesheet and message catalogue.
The responders are thin, in resources/console.py."""
