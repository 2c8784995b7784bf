"""The connection guard on uvicorn's httptools protocol: a header deadline, a header
size cap, kept-alive requests still served (uvicorn on loopback, in this process)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from tailbudget.serve.connections import guarded_protocol


async def _app(scope, receive, send):  # type: ignore[no-untyped-def]
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    )
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture
def port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = int(s.getsockname()[1])
    config = uvicorn.Config(
        _app,
        host="127.0.0.1",
        port=free,
        log_level="error",
        http=guarded_protocol(50, header_timeout_s=0.5, max_header_bytes=2048),
        timeout_keep_alive=30,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started
    yield free
    server.should_exit = True
    thread.join(timeout=10)


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _read_all(s: socket.socket) -> bytes:
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


def _request(body: bytes = b"") -> bytes:
    head = f"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def test_half_sent_headers_are_closed_after_the_deadline(port: int) -> None:
    with _connect(port) as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\n")
        start = time.monotonic()
        try:
            for _ in range(20):  # trickling bytes does not keep the connection
                time.sleep(0.2)
                s.sendall(b"X-A: b\r\n")
            answer = _read_all(s)
        except OSError:  # closed while we were still sending
            answer = b""
        assert answer == b""  # never answered
        assert time.monotonic() - start < 4.0


def test_a_kept_alive_connection_also_has_the_deadline(port: int) -> None:
    with _connect(port) as s:
        s.sendall(_request(b"x" * 100_000))
        time.sleep(0.1)
        first = s.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
        s.sendall(b"POST / HTTP/1.1\r\n")
        assert _read_all(s) == b""


def test_too_large_headers_are_refused(port: int) -> None:
    with _connect(port) as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\n" + b"X-Big: " + b"a" * 4000)
        assert _read_all(s).startswith(b"HTTP/1.1 400")


def test_large_bodies_and_many_requests_on_one_connection(port: int) -> None:
    with _connect(port) as s:
        for _ in range(3):
            s.sendall(_request(b"y" * 300_000))
            answer = b""
            while not answer.endswith(b"ok"):
                answer += s.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200")
