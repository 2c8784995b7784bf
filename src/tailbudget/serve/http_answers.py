"""What every route of `serve` shares: strict JSON answers, one-line errors, and bodies
read within their limits (size and time). Below the routes (`serve.app`,
`serve.traces_route`), so neither imports the other inside a function."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse as _StarletteJSON
from starlette.responses import Response

from tailbudget._json import dumps
from tailbudget.serve.limits import MAX_BODY

__all__ = [
    "BODY_TIMEOUT_S",
    "BodyTooLarge",
    "JSONResponse",
    "error",
    "not_durable",
    "read_batch",
    "read_body",
    "read_json",
]

BODY_TIMEOUT_S = 30.0
"""Longest a client may take to send a body; a slower one gets 408 and its slot back."""

log = logging.getLogger("tailbudget.serve.app")  # the logger the routes have always used


class BodyTooLarge(Exception):
    """A body past its limit (the 413)."""


class JSONResponse(_StarletteJSON):
    """Strict JSON (RFC 8259) where a non-finite figure, should one ever get this far,
    is `null`: a status or verdict answer is never a 500 for it."""

    def render(self, content: Any) -> bytes:
        return dumps(content, indent=None).encode()


def error(status: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": " ".join(message.split())}, status_code=status, headers=headers)


def not_durable(what: str, exc: OSError) -> JSONResponse:
    log.error("cannot store %s: %s", what, exc)
    return error(503, f"cannot store {what} ({exc.strerror or exc}); not accepted, retry later")


async def read_body(request: Request, limit: int = MAX_BODY) -> bytes:
    """The body, refusing it as soon as it passes `limit` bytes (never buffering more)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async with asyncio.timeout(BODY_TIMEOUT_S):
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge
            chunks.append(chunk)
    return b"".join(chunks)


async def read_batch(request: Request) -> bytes | Response:
    """A batch body (observations, spans: MAX_BODY at most), or a ready error response."""
    try:
        return await read_body(request)
    except BodyTooLarge:
        return error(413, f"body over {MAX_BODY} bytes; send smaller batches")
    except TimeoutError:
        return error(408, f"body not received within {BODY_TIMEOUT_S:.0f} s")


async def read_json(request: Request, example: str) -> Any:
    """A small JSON body (64 KiB at most), or a ready error response."""
    try:
        raw = await read_body(request, limit=64 * 1024)
    except BodyTooLarge:
        return error(413, "body over 64 KiB")
    except TimeoutError:
        return error(408, f"body not received within {BODY_TIMEOUT_S:.0f} s")
    try:
        return json.loads(raw or b"null")
    except (ValueError, RecursionError):
        return error(400, f"send JSON like {example}")
