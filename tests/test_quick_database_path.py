"""A routing check's query in its own greenlet (plumbing/database.py: `within(here=True)`).

Under gevent (the Procfile's web workers), a routing read runs in the request's greenlet
on an idle pooled connection when one can be had at once, its waits on the server ended by
the wait callback at the deadline; otherwise in a greenlet beside it, as before. Checked in
a process gevent has patched, on the suite's database, with a real lock held by another
connection: the read gives up on time, its connection is closed and never handed out
again, the pool's count of connections in use is right, and the next read answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg2

from tests.conftest import PG_URL
from tests.support import ROOT

SCRIPT = """
from gevent import monkey
monkey.patch_all()
import json, sys, time
import gevent, gevent.event, psycopg2
import plumbing.database as database
from plumbing.database import DeadlinePassed, bind_database, hot_prepared, within

pool = bind_database(sys.argv[1], pool_size=4, pool_wait=5)
spawned = []
spawn = database._spawner()
database._gevent_spawn[:] = [lambda *a, **k: (spawned.append(1), spawn(*a, **k))[1]]
SQL = "SELECT count(*) FROM quick_path_probe WHERE n >= %s"

def read(timeout=None):
    return hot_prepared("quick_probe", SQL, (0,), statement_timeout=timeout).fetchone()[0]

out = {}
# A connection in the pool, idle (the first read's, beside): the read runs here.
within(1.0, read, pool, here=True)
spawned.clear()
out["idle"] = [within(1.0, read, pool, here=True), len(spawned), len(pool._in_use), len(pool._connections)]

# A lock held by another connection: the read gives up at its deadline, the server ends it
# later (its statement_timeout, as a check's is the deadline from the request's start),
# the connection is closed and dropped.
first = pool._connections[0][2]
locker = psycopg2.connect(sys.argv[1])
locker.cursor().execute("LOCK TABLE quick_path_probe IN ACCESS EXCLUSIVE MODE")
started = time.monotonic()
try:
    within(0.3, lambda: read(0.5), pool, here=True)
    out["locked"] = "answered"
except DeadlinePassed:
    out["locked"] = [round(time.monotonic() - started, 3), len(spawned), first.closed != 0, len(pool._in_use)]
cur = locker.cursor()
waiting = None
for _ in range(40):  # the server ended the statement given up on: no backend waits on the lock
    cur.execute("SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                "WHERE c.relname = 'quick_path_probe' AND NOT l.granted")
    waiting = cur.fetchone()[0]
    if waiting == 0:
        break
    time.sleep(0.05)
out["waiting"] = waiting
locker.rollback()
locker.close()
# The next read: a new connection (the closed one never handed out), through the greenlet
# beside (no idle connection), then here again.
out["after"] = [within(1.0, read, pool, here=True), len(spawned), within(1.0, read, pool, here=True), len(spawned)]
out["after_pool"] = [len(pool._in_use), len(pool._connections), any(c.closed for _, _, c in pool._connections)]

# The pool busy (its lock held by a greenlet opening a connection, as on a lost network):
# the read does not wait for it, it goes beside.
holder_in, release = gevent.event.Event(), gevent.event.Event()
def hold():
    with pool._pool_lock:
        holder_in.set()
        release.wait()
holder = gevent.spawn(hold)
holder_in.wait()
before = len(spawned)
started = time.monotonic()
try:
    within(0.3, read, pool, here=True)
    out["busy"] = "answered"
except DeadlinePassed:
    out["busy"] = [round(time.monotonic() - started, 3), len(spawned) - before]
release.set()
holder.join()
out["busy_after"] = [within(1.0, read, pool, here=True), len(pool._in_use)]
print(json.dumps(out))
"""


def test_under_gevent_a_routing_read_runs_here_and_gives_up_on_a_lock_within_its_deadline(app):
    conn = psycopg2.connect(PG_URL)
    try:
        with conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS quick_path_probe (n integer)")
            cur.execute("TRUNCATE quick_path_probe")
            cur.execute("INSERT INTO quick_path_probe VALUES (1), (2)")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        out = subprocess.run(
            [sys.executable, "-c", SCRIPT, PG_URL], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr[-3000:]
        found = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        with conn, conn.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS quick_path_probe")
        conn.close()
    assert found["idle"] == [2, 0, 0, 1], found  # answered here, the connection back in the pool
    took, spawned, closed, in_use = found["locked"]
    assert 0.25 <= took < 0.6 and spawned == 0 and closed and in_use == 0, found
    assert found["waiting"] == 0, found
    assert found["after"] == [2, 1, 2, 1], found  # beside once (a new connection), then here again
    assert found["after_pool"] == [0, 1, False], found
    took, spawned = found["busy"]  # beside: it waits there (on the pool's lock), the caller does not
    assert 0.25 <= took < 0.6 and spawned == 1, found
    assert found["busy_after"] == [2, 0], found
