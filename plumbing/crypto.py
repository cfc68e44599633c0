"""Secrets at rest (platform passwords): Fernet with a key from SECRET_KEY."""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken

__all__ = ["MIN_SECRET_KEY_BYTES", "InvalidToken", "decrypt", "encrypt"]

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
