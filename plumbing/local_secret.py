"""The embedded run's SECRET_KEY: random, made once into a file (mode 0600) and kept.

`bin/run` exports it (unless SECRET_KEY is set already), so even a local service does not
run on the built-in key from config.py, from which anyone could derive its storage signing
key and forge links. It is kept because the platform passwords in the local database are
encrypted with it: a new key each start would make them unreadable.

    python -m plumbing.local_secret var/secret_key   # prints the key (made on first use)
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
from pathlib import Path

from plumbing.crypto import MIN_SECRET_KEY_BYTES

__all__ = ["ensure_secret_key_file"]


def ensure_secret_key_file(path: str | os.PathLike[str]) -> str:
    """The key stored at `path`; on first use a new random one (64 url-safe characters) is
    written there, readable by its owner only. A file that is there but holds no usable key
    is an error, never replaced: what was encrypted with it would be lost."""
    target = Path(path)
    try:
        return _read(target)
    except FileNotFoundError:
        pass
    target.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(48)
    # Complete in a temporary file first, then linked in under its name: a concurrent start
    # sees either no file or the whole key, and of two starts racing, one key wins (link
    # refuses an existing name) and both use it.
    fd, temporary = tempfile.mkstemp(prefix=".secret_key-", dir=target.parent)  # mode 0600
    try:
        with open(fd, "w", encoding="ascii", closefd=True) as out:
            os.fchmod(out.fileno(), 0o600)
            out.write(key + "\n")
            out.flush()
            os.fsync(out.fileno())  # kept across a power loss, like the data it protects
        try:
            os.link(temporary, target)
        except FileExistsError:
            return _read(target)
    finally:
        os.unlink(temporary)
    directory = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)  # the new name too
    finally:
        os.close(directory)
    return key


def _read(path: Path) -> str:
    key = path.read_text(encoding="utf-8").strip()
    if len(key.encode("utf-8")) < MIN_SECRET_KEY_BYTES:
        raise ValueError(
            f"{path} does not hold a secret key of at least {MIN_SECRET_KEY_BYTES} bytes; "
            "remove it to have a new one made (platform passwords stored with the old "
            "key must then be onboarded again)"
        )
    return key


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m plumbing.local_secret PATH")
    try:
        print(ensure_secret_key_file(sys.argv[1]))
    except (OSError, ValueError) as exc:
        sys.exit(f"error: {exc}")
