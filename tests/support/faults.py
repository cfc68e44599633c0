"""Real servers the fault tests (and bench/load_bench.py) start, stop and break on purpose.

- `RedisServer`: a private `redis-server` on a free loopback port, no persistence, so
  stopping it loses everything, as an outage of a cache-like Redis does;
- `PostgresCluster`: a private PostgreSQL cluster (initdb into a temporary directory,
  run as the `postgres` user when we are root: PostgreSQL refuses to run as root);
- `TcpProxy`: a loopback TCP proxy to a server, cut and restored at will: an outage of
  that server as its clients see it (connections dropped, new ones refused), in a test's
  own process, without stopping a server others use;
- `gunicorn()`: the web process as the Procfile runs it (gevent workers), once every
  worker runs;
- `packets_dropped(port)`: every packet to or from a loopback port dropped (iptables, root),
  as a lost network drops them: what is sent is never acknowledged, nothing is refused;
- `prepare_database()`: create, migrate, onboard one clinic and issue a token, through the
  operator CLI, exactly as an operator would.

Nothing here touches the shared PostgreSQL or Redis beyond the database it is named.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

from tests.support.databases import recreate_database
from tests.support.gunicorn import start_gunicorn
from tests.support.ports import free_port, listening
from tests.support.processes import children, manage
from tests.support.servers import wait_until


class ServerTLS:
    """What a server needs to speak TLS: a certificate for `localhost` and 127.0.0.1 from
    `ca` (the suite's own trustme CA), written into `directory`, and the CA's file for
    clients. `owner`: the user the server runs as (it must read the key, 0600)."""

    def __init__(self, ca: Any, directory: Path, owner: str | None = None) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        cert = ca.issue_cert("localhost", "127.0.0.1")
        self.cert, self.key, self.ca_file = directory / "server.crt", directory / "server.key", directory / "ca.pem"
        cert.cert_chain_pems[0].write_to_path(str(self.cert))
        cert.private_key_pem.write_to_path(str(self.key))
        ca.cert_pem.write_to_path(str(self.ca_file))
        os.chmod(self.key, 0o600)
        if owner is not None:
            entry = pwd.getpwnam(owner)
            for path in (directory, self.cert, self.key, self.ca_file):
                os.chown(path, entry.pw_uid, entry.pw_gid)


class RedisServer:
    """A private redis-server on 127.0.0.1; `stop()` is SHUTDOWN NOSAVE, `start()` again
    comes back empty on the same port. With `tls`, it speaks TLS only (`rediss://`)."""

    def __init__(self, workdir: Path, tls: ServerTLS | None = None) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.tls = tls
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        if self.tls is not None:
            return f"rediss://localhost:{self.port}/0?ssl_ca_certs={self.tls.ca_file}"
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        if self.tls is not None:
            return redis.Redis(
                host="localhost",
                port=self.port,
                socket_connect_timeout=1,
                socket_timeout=5,
                ssl=True,
                ssl_ca_certs=str(self.tls.ca_file),
            )
        return redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1, socket_timeout=5)

    def start(self) -> RedisServer:
        listen = ["--port", str(self.port)]
        if self.tls is not None:
            listen = [
                "--port",
                "0",
                "--tls-port",
                str(self.port),
                "--tls-cert-file",
                str(self.tls.cert),
                "--tls-key-file",
                str(self.tls.key),
                "--tls-ca-cert-file",
                str(self.tls.ca_file),
                "--tls-auth-clients",
                "no",
            ]
        self.proc = subprocess.Popen(
            [
                "redis-server",
                *listen,
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        assert wait_until(self._pong, timeout=10, interval=0.05), "private redis-server did not start"
        return self

    def _pong(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis.RedisError:
            return False

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(redis.RedisError):  # SHUTDOWN closes the connection without a reply
            self.client().shutdown(nosave=True)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """The server stopped (SIGSTOP) for the block, then resumed: Redis lost without a
        word (its kernel still accepts connections and takes what is sent; nothing answers),
        as a hung host or a partition looks to its clients."""
        assert self.proc is not None, "not started"
        self.proc.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            self.proc.send_signal(signal.SIGCONT)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def packets_dropped(port: int) -> Iterator[None]:
    """Every packet to or from 127.0.0.1:`port` dropped, as a lost network drops them (a
    port of the test's own, a `TcpProxy`'s: nobody else's packets are touched)."""
    assert os.geteuid() == 0, "dropping packets takes root (iptables), as CI runs; bin/test --fast does without"
    assert shutil.which("iptables"), "install iptables (apt): .ci/run does"
    rules = [["INPUT", "-i", "lo", "-p", "tcp", side, str(port), "-j", "DROP"] for side in ("--dport", "--sport")]
    added = []
    try:
        for rule in rules:
            subprocess.run(["iptables", "-I", *rule], check=True, capture_output=True)
            added.append(rule)
        yield
    finally:
        for rule in added:
            subprocess.run(["iptables", "-D", *rule], check=True, capture_output=True)


class TcpProxy:
    """127.0.0.1:`port` forwarding to `host`:`target_port`; `cut()` drops every connection
    and refuses new ones (nothing listens), `restore()` listens again on the same port."""

    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.target = (host, target_port)
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    def restore(self) -> TcpProxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    start = restore

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    client.close()
                    upstream.close()
                    return
                self._open |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            open_, self._open = self._open, set()
        if listener is not None:
            listener.close()
        for conn in open_:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def url(self, database_url: str) -> str:
        """`database_url` (a PostgreSQL URL to the proxied server) through this proxy."""
        from urllib.parse import urlparse

        parts = urlparse(database_url)
        auth = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
        return parts._replace(netloc=f"{auth}127.0.0.1:{self.port}").geturl()

    def __enter__(self) -> TcpProxy:
        return self.restore()

    def __exit__(self, *exc: object) -> None:
        self.cut()


class PostgresCluster:
    """A private PostgreSQL cluster on a free port, its socket and data in a temp dir.
    With `tls`, it accepts TCP connections over TLS only (`url` asks `verify-full`)."""

    def __init__(self, tls_ca: Any = None) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
        assert found, "PostgreSQL server binaries not found under /usr/lib/postgresql"
        self.bindir = Path(found[-1]).parent
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="pg-fault-"))
        self.data = self.dir / "data"
        self.as_postgres = os.geteuid() == 0
        if self.as_postgres:
            entry = pwd.getpwnam("postgres")
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        self.tls = ServerTLS(tls_ca, self.dir / "tls", "postgres" if self.as_postgres else None) if tls_ca else None

    def _run(self, *args: str, timeout: float = 60) -> None:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, timeout=timeout, capture_output=True, cwd=self.dir)

    def url(self, database: str = "postgres") -> str:
        if self.tls is not None:
            return (
                f"postgresql://postgres@localhost:{self.port}/{database}"
                f"?sslmode=verify-full&sslrootcert={self.tls.ca_file}"
            )
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def init(self) -> PostgresCluster:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        if self.tls is not None:  # TCP over TLS only: a plain connection is refused
            (self.data / "pg_hba.conf").write_text(
                "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostssl all all ::1/128 trust\n"
            )
        return self

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=60"
        if self.tls is not None:
            options += f" -c ssl=on -c ssl_cert_file={self.tls.cert} -c ssl_key_file={self.tls.key}"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.dir / "server.log"), "-o", options, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, mode: str = "fast") -> None:
        # stop + start, not `pg_ctl restart`: that one would leave the server's output on
        # our pipe instead of the log file.
        self.stop(mode)
        self.start()

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):  # not running
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


def prepare_database(env: dict[str, str], slug: str = "fault-clinic") -> str:
    """Create `env["DATABASE_URL"]`, migrate it, onboard one English-speaking clinic;
    returns a read+write token for it."""
    recreate_database(env["DATABASE_URL"])
    manage(env, "migrate")
    with tempfile.NamedTemporaryFile("w", suffix=".json") as document:
        json.dump(
            {
                "organization": {"slug": f"{slug}-org", "name": "Faults"},
                "clinics": [
                    {"slug": slug, "name": "Faults", "timezone": "America/New_York", "country": "US", "language": "en"}
                ],
            },
            document,
        )
        document.flush()
        manage(env, "onboard", document.name)
    return manage(
        env,
        "token",
        "create",
        "--name",
        "faults",
        "--clinic",
        slug,
        "--scope",
        "read",
        "--scope",
        "write",
        "--expires-in-days",
        "1",
    )


def gunicorn(
    env: dict[str, str], log: Path, *, workers: int = 2, app: str = "wsgi:app"
) -> tuple[subprocess.Popen, str]:
    """`gunicorn wsgi:app` as the Procfile runs it, on a free port, output appended to
    `log`, once all `workers` run; returns the process and its base URL."""
    port = free_port()
    proc = start_gunicorn(
        port,
        "--workers",
        str(workers),
        env=env,
        app=app,
        log=log,
        interval=0.05,
        ready=lambda p: listening(port) and len(children(p.pid)) == workers,
    )
    return proc, f"http://127.0.0.1:{port}"


def post_json(url: str, token: str, body: dict[str, Any], timeout: float = 15) -> tuple[int, dict[str, Any]]:
    """One POST on a fresh connection; (status, JSON body)."""
    import requests

    answer = requests.post(url, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=timeout)
    try:
        return answer.status_code, answer.json()
    except ValueError:
        return answer.status_code, {"raw": answer.text[:200]}
