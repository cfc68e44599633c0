"""Loopback ports: one free now, and whether one accepts connections."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port free on 127.0.0.1 now (the kernel's pick; free until someone binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening(port: int) -> bool:
    """Does 127.0.0.1:`port` accept a TCP connection now?"""
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
