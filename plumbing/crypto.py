"""Secrets at rest (platform passwords): Fernet with a key from SECRET_KEY."""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken

__all__ = ["MIN_SECRET_KEY_BYTES", "InvalidToken", "decrypt", "decrypt_bound", "encrypt", "encrypt_bound"]

#: Shortest SECRET_KEY a production process accepts, in UTF-8 bytes: 256 bits of a random
#: value, out of reach of guessing whatever is derived from it (config.py enforces it).
MIN_SECRET_KEY_BYTES = 32


def _fernet(secret_key: str) -> Fernet:
    # Fernet wants 32 url-safe base64 bytes; derive them so operators set any long secret.
    # The label keeps its first name: another would not decrypt the stored passwords.
    digest = hashlib.sha256(b"clinic-service/pbx-password\0" + secret_key.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def encrypt(plaintext: str, secret_key: str) -> str:
    return _fernet(secret_key).encrypt(plaintext.encode()).decode()


def decrypt(ciphertext: str, secret_key: str) -> str:
    return _fernet(secret_key).decrypt(ciphertext.encode()).decode()


def _bound_fernet(secret_key: str, binding: str, label: str) -> Fernet:
    digest = hashlib.sha256(f"clinic-service/{label}\0".encode() + secret_key.encode() + b"\0" + binding.encode())
    return Fernet(base64.urlsafe_b64encode(digest.digest()))


def encrypt_bound(plaintext: str, secret_key: str, binding: str, label: str) -> str:
    """Encrypt with a key from SECRET_KEY and `binding`, a secret the server does not keep
    (a session's cookie): what is stored cannot be read back without the browser that
    holds the binding. `label` keeps one use's keys apart from another's."""
    return _bound_fernet(secret_key, binding, label).encrypt(plaintext.encode()).decode()


def decrypt_bound(ciphertext: str, secret_key: str, binding: str, label: str) -> str:
    """`encrypt_bound`'s inverse; raises InvalidToken for another binding or a changed text."""
    return _bound_fernet(secret_key, binding, label).decrypt(ciphertext.encode()).decode()
