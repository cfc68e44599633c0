"""The operator CLI's commands, one module per noun or role; `manage.py` wires them.

Each module's `register(sub)` adds its subcommands to `manage.py`'s parser and binds each
to its `cmd_*(config, args) -> exit code`; `manage.py main` binds the database first
(unless a command sets `needs_db=False`) and checks the production secrets of those
that set `needs_secret=True`.
"""
