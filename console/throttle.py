"""Login throttling: failures counted in Redis per account and per client address.

After `limit` failures within `window` seconds the login is refused before the password
is checked, for the account (by the e-mail as typed, lower case, known or not: counting
only known accounts would tell which exist) and for the address. Counters live in Redis
so that every gunicorn worker and process sees the same count; each expires `window`
seconds after its first failure."""

from __future__ import annotations

import hashlib

import redis


class LoginThrottle:
    def __init__(self, client: redis.Redis, limit: int, window: int) -> None:
        self.client = client
        self.limit = limit
        self.window = window

    @staticmethod
    def _keys(email: str, address: str) -> tuple[str, str]:
        # Hashed: the keys need not show e-mails to whoever reads Redis.
        account = hashlib.sha256(email.strip().lower().encode()).hexdigest()[:32]
        return f"console:login-fail:account:{account}", f"console:login-fail:addr:{address}"

    def blocked(self, email: str, address: str) -> int:
        """Seconds until a login is allowed again (0: allowed now): the longest remaining
        window of the counters over the limit, so the page can say how long to wait."""
        keys = self._keys(email, address)
        pipe = self.client.pipeline()
        for key in keys:
            pipe.get(key)
            pipe.ttl(key)
        answers = pipe.execute()
        waits = [max(int(ttl), 1) for count, ttl in zip(answers[::2], answers[1::2]) if int(count or 0) >= self.limit]
        return max(waits, default=0)

    def failed(self, email: str, address: str) -> None:
        pipe = self.client.pipeline()
        for key in self._keys(email, address):
            pipe.incr(key)
            pipe.expire(key, self.window, nx=True)
        pipe.execute()

    def succeeded(self, email: str) -> None:
        """A good login clears its account's count (not the address's: one office's
        shared address must not reset an attacker's count by logging in)."""
        self.client.delete(self._keys(email, "")[0])


class ResetThrottle:
    """ "Forgot password" requests counted in Redis per address typed (hashed, known or
    not: the limit tells nothing about which exist) and per client address, each over an
    hour: a few links for one address, a few more for one client, then a wait. It keeps
    one address's mailbox from being flooded and a client from walking a list."""

    WINDOW = 3600
    PER_ADDRESS = 3
    PER_CLIENT = 10

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    @staticmethod
    def _keys(email: str, address: str) -> tuple[str, str]:
        account = hashlib.sha256(email.strip().lower().encode()).hexdigest()[:32]
        return f"console:reset:account:{account}", f"console:reset:addr:{address}"

    def take(self, email: str, address: str) -> int:
        """Count one request; the seconds to wait when it is over a limit (0: go on)."""
        pipe = self.client.pipeline()
        for key in self._keys(email, address):
            pipe.incr(key)
            pipe.expire(key, self.WINDOW, nx=True)
            pipe.ttl(key)
        answers = pipe.execute()
        counts, ttls = answers[0::3], answers[2::3]
        waits = [
            max(int(ttl), 1)
            for count, ttl, limit in zip(counts, ttls, (self.PER_ADDRESS, self.PER_CLIENT))
            if int(count) > limit
        ]
        return max(waits, default=0)
