"""Loopback helpers for tests that run a real server: a free port, an app in a thread."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn


def free_port() -> int:
    """A loopback port nothing listens on (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve_in_thread(app: Any, port: int, what: str) -> Iterator[None]:
    """Run an ASGI app with uvicorn on 127.0.0.1:`port` in a daemon thread while inside."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, f"{what} did not start"
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(10)
