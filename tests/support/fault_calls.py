"""Hand-offs for the fault suites, and the recordings' store they are served from."""

from __future__ import annotations

import psycopg2

from tests.support import bodies


def call_body(sid: str, url: str | None = None) -> dict[str, object]:
    """The shared body as the fault tests' PBX sends it (no recording id, no flow)."""
    return bodies.call_body(sid, url, Source="fault-pbx", Extra="{}")


class Store:
    """Plain SQL on a fault database (the session's models are bound to the test one)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def rows(self, sql: str, *args: object) -> list[tuple]:
        conn = psycopg2.connect(self.url, connect_timeout=3)
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
                found = cur.fetchall()
            conn.commit()  # the UPDATE ... RETURNING the tests use to set a call up must stick
            return found
        finally:
            conn.close()

    def call(self, sid: str) -> dict[str, object] | None:
        found = self.rows(
            "SELECT c.id, c.state, c.outcome, c.attempts, count(r.id) FROM call c "
            "LEFT JOIN patient_request r ON r.call_id = c.id WHERE c.call_sid = %s "
            "GROUP BY c.id",
            sid,
        )
        if not found:
            return None
        cid, state, outcome, attempts, requests = found[0]
        return {"id": cid, "state": state, "outcome": outcome, "attempts": attempts, "requests": requests}
