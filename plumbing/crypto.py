"""Secrets at rest (platform passwords, two-factor secrets) and one-time messages: Fernet
with keys derived from SECRET_KEY, as a key ring.

A `KeyRing` is the current SECRET_KEY and the keys it replaced (SECRET_KEY_FALLBACKS):
the current key encrypts, every key of the ring decrypts, and `rotate` re-encrypts a text
under the current key (`manage.py reencrypt` does it to every stored secret). So a key can
be changed without a stored secret becoming unreadable, and the old one retired once
nothing needs it. The functions take a ring or a single key (a ring of one).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

__all__ = [
    "MIN_SECRET_KEY_BYTES",
    "InvalidToken",
    "KeyRing",
    "Keys",
    "decrypt",
    "decrypt_bound",
    "encrypt",
    "encrypt_bound",
]

#: Shortest SECRET_KEY a production process accepts, in UTF-8 bytes: 256 bits of a random
#: value, out of reach of guessing whatever is derived from it (config.py enforces it).
MIN_SECRET_KEY_BYTES = 32


class KeyRing:
    """The current key (encrypts) and the previous ones (still decrypt), newest first."""

    def __init__(self, current: str, previous: Sequence[str] = ()) -> None:
        self.current = current
        # The current key once, first; a previous key repeated or equal to it adds nothing.
        self.keys: tuple[str, ...] = tuple(dict.fromkeys([current, *previous]))

    @classmethod
    def of(cls, keys: Keys) -> KeyRing:
        return keys if isinstance(keys, KeyRing) else cls(keys)

    def _multi(self) -> MultiFernet:
        return MultiFernet([_fernet(key) for key in self.keys])

    def encrypt(self, plaintext: str) -> str:
        return _fernet(self.current).encrypt(plaintext.encode()).decode()

    def decrypt(self, ciphertext: str) -> str:
        """Raises `InvalidToken` when no key of the ring opens it (or it was changed)."""
        return self._multi().decrypt(ciphertext.encode()).decode()

    def is_current(self, ciphertext: str) -> bool:
        """Whether the current key opens it (nothing to re-encrypt)."""
        try:
            _fernet(self.current).decrypt(ciphertext.encode())
        except InvalidToken:
            return False
        return True

    def rotate(self, ciphertext: str) -> str:
        """The same secret under the current key (its timestamp kept). Raises `InvalidToken`
        when no key of the ring opens it."""
        return self._multi().rotate(ciphertext.encode()).decode()

    def encrypt_bound(self, plaintext: str, binding: str, label: str) -> str:
        return _bound_fernet(self.current, binding, label).encrypt(plaintext.encode()).decode()

    def decrypt_bound(self, ciphertext: str, binding: str, label: str) -> str:
        fernets = [_bound_fernet(key, binding, label) for key in self.keys]
        return MultiFernet(fernets).decrypt(ciphertext.encode()).decode()


#: A key ring, or one key (a ring of one).
Keys = KeyRing | str


def _fernet(secret_key: str) -> Fernet:
    # Fernet wants 32 url-safe base64 bytes; derive them so operators set any long secret.
    # The label keeps its first name: another would not decrypt the stored passwords.
    digest = hashlib.sha256(b"clinic-service/pbx-password\0" + secret_key.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def encrypt(plaintext: str, keys: Keys) -> str:
    """Encrypted with the current key."""
    return KeyRing.of(keys).encrypt(plaintext)


def decrypt(ciphertext: str, keys: Keys) -> str:
    """Decrypted with whichever key of the ring opens it; `InvalidToken` if none does."""
    return KeyRing.of(keys).decrypt(ciphertext)


def _bound_fernet(secret_key: str, binding: str, label: str) -> Fernet:
    digest = hashlib.sha256(f"clinic-service/{label}\0".encode() + secret_key.encode() + b"\0" + binding.encode())
    return Fernet(base64.urlsafe_b64encode(digest.digest()))


def encrypt_bound(plaintext: str, keys: Keys, binding: str, label: str) -> str:
    """Encrypt with a key from SECRET_KEY and `binding`, a secret the server does not keep
    (a session's cookie): what is stored cannot be read back without the browser that
    holds the binding. `label` keeps one use's keys apart from another's."""
    return KeyRing.of(keys).encrypt_bound(plaintext, binding, label)


def decrypt_bound(ciphertext: str, keys: Keys, binding: str, label: str) -> str:
    """`encrypt_bound`'s inverse (any key of the ring); raises InvalidToken for another
    binding or a changed text."""
    return KeyRing.of(keys).decrypt_bound(ciphertext, binding, label)
