"""The staff console, one module per page or group of pages, each holding its responders
and the rules only it uses: the inbox (and its live update), a request's page, a patient's
page, the settings, the team, the API keys, the audit trail, the account and the login,
the help. Shared by the pages: their addresses (`pages`), the session and CSRF middleware,
rendering (Jinja2 with gettext, Czech first), one-time messages (`flash`), writes done
once (`once`), the login throttle, the audit trail in words; the templates, the one
stylesheet and script (`static/`) and the message catalogue (`locale/`).

Sessions and CSRF are checked by `console.middleware.ConsoleSession` before a responder
runs; a responder with `login_required` never runs without a session, one with
`admin_required` only for an admin of the clinic it acts on."""
