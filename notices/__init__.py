"""E-mail notices: what the service tells people on its own, and how it says it.

The causes write facts to the outbox in their own transactions (models/outbox.py): a
message flagged "may be urgent", a key about to expire or refused, a set-password link
asked for. The workers deliver them (jobs/outbox.py) through the handlers here: an event
becomes e-mails to the people it concerns (`urgent`, `keys`), an e-mail is written in the
recipient's language and sent (`mail`). Never patient data in an e-mail: ids, the clinic's
name, times and links to console pages that need a login.
"""
