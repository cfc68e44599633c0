"""Waiting for a condition, and a WSGI app behind a real HTTP server in a thread."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, interval: float = 0.01) -> bool:
    """Bounded wait for a condition set by another thread or process; returns its value."""
    end = time.monotonic() + timeout
    ev = threading.Event()
    while True:
        if predicate():
            return True
        if time.monotonic() >= end:
            return bool(predicate())
        ev.wait(interval)


class ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    """wsgiref's server, a thread per request."""

    daemon_threads = True
    request_queue_size = 64  # the default backlog of 5 resets simultaneous connects


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve_wsgi(app: Callable[..., Any], poll_interval: float = 0.05) -> Iterator[ThreadingWSGIServer]:
    """Serve `app` on a free port of 127.0.0.1 from a thread; yields the server (its
    `server_port`; `set_app` to swap the app). Shut down and closed afterwards."""
    httpd = make_server("127.0.0.1", 0, app, server_class=ThreadingWSGIServer, handler_class=QuietHandler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": poll_interval}, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)
