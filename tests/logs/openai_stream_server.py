"""A small OpenAI-compatible streaming server for driving real load generators on loopback.

`/v1/chat/completions` and `/v1/completions` stream `max_tokens` tokens as
server-sent events. Timing is controlled and load-dependent, like a real
engine's: the first token waits `ttft_ms` plus `prefill_ms_per_token` per
prompt word plus `queue_ms` per request already in flight; each next token
waits `itl_ms` times (1 + `contention` x requests decoding). Every
`fail_every`-th request is answered 500, to give the tool errors to record.
Run it with uvicorn; `serve_in_thread` does that on 127.0.0.1 for a script.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

MODEL = "tiny-stream"


@dataclass
class Timing:
    """How slow the fake engine is."""

    ttft_ms: float = 20.0
    prefill_ms_per_token: float = 0.05
    queue_ms: float = 4.0
    itl_ms: float = 4.0
    contention: float = 0.05
    fail_every: int = 0


class _Engine:
    def __init__(self, timing: Timing) -> None:
        self.timing = timing
        self.in_flight = 0
        self.count = 0

    async def stream(self, body: dict[str, Any], chat: bool) -> AsyncIterator[bytes]:
        t = self.timing
        prompt = _prompt_text(body, chat)
        n_in = len(prompt.split())
        n_out = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        ahead = self.in_flight
        self.in_flight += 1
        try:
            await asyncio.sleep(
                (t.ttft_ms + t.prefill_ms_per_token * n_in + t.queue_ms * ahead) / 1e3
            )
            for i in range(n_out):
                if i:
                    await asyncio.sleep(t.itl_ms * (1 + t.contention * (self.in_flight - 1)) / 1e3)
                yield _event(_chunk(f" w{i}", chat))
            yield _event(_usage_chunk(n_in, n_out, chat))
            yield b"data: [DONE]\n\n"
        finally:
            self.in_flight -= 1


def _prompt_text(body: dict[str, Any], chat: bool) -> str:
    if not chat:
        prompt = body.get("prompt", "")
        return " ".join(prompt) if isinstance(prompt, list) else str(prompt)
    parts = []
    for msg in body.get("messages") or []:
        content = msg.get("content", "")
        if isinstance(content, list):
            content = " ".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
        parts.append(str(content))
    return " ".join(parts)


def _chunk(text: str, chat: bool) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "finish_reason": None}
    if chat:
        choice["delta"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    return {
        "id": "cmpl-tiny",
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": int(time.time()),
        "model": MODEL,
        "choices": [choice],
    }


def _usage_chunk(n_in: int, n_out: int, chat: bool) -> dict[str, Any]:
    out = _chunk("", chat)
    out["choices"] = []
    out["usage"] = {
        "prompt_tokens": n_in,
        "completion_tokens": n_out,
        "total_tokens": n_in + n_out,
    }
    return out


def _event(doc: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(doc)}\n\n".encode()


def make_app(timing: Timing | None = None) -> Starlette:
    """The ASGI app."""
    engine = _Engine(timing or Timing())

    async def completions(request: Request) -> Response:
        chat = request.url.path.endswith("chat/completions")
        body = await request.json()
        engine.count += 1
        every = engine.timing.fail_every
        if every and engine.count % every == 0:
            return JSONResponse({"error": {"message": "injected failure"}}, status_code=500)
        if not body.get("stream"):
            return JSONResponse({"error": {"message": "only stream=true is served"}}, 400)
        return StreamingResponse(engine.stream(body, chat), media_type="text/event-stream")

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def health(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", completions, methods=["POST"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/models", models),
            Route("/health", health),
        ]
    )


@contextmanager
def serve_in_thread(timing: Timing | None = None, port: int = 0) -> Iterator[str]:
    """Serve on 127.0.0.1 in a background thread; yields the base URL."""
    import uvicorn

    config = uvicorn.Config(make_app(timing), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the stream server did not start")
        time.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{bound}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
