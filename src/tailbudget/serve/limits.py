"""The bounds every body the service takes is held to, in one place.

A body is bounded twice: by the bytes on the wire (`max_body`) and by what
they decode to (`max_decoded_bytes`): a 9 KiB zstd-compressed Arrow body can
decode to 500 MiB, a gzip body likewise. Both are checked before anything is
allocated for the decoded form: Arrow IPC by the sizes its messages declare
(`arrow_size`), gzip and zstd by decoding in steps that stop at the bound.
Any route that takes a body (observations, OTLP traces) calls these.
"""

from __future__ import annotations

import io
import zlib
from dataclasses import dataclass

__all__ = [
    "DECODED_FACTOR",
    "MAX_BODY",
    "MAX_ITL_GAPS",
    "MAX_OUTPUT_TOKENS",
    "BodyLimits",
    "TooLarge",
    "decompress",
]

MAX_BODY = 1024 * 1024
"""Largest request body accepted (bytes on the wire)."""

DECODED_FACTOR = 8
"""`max_decoded_bytes` by default: this many times `max_body`."""

MAX_ITL_GAPS = 262_144
"""Most inter-token gaps one observation may carry (an answer of 256k tokens)."""

MAX_OUTPUT_TOKENS = 10_000_000
"""Largest `output_tokens` of one observation; past it a count is a unit or overflow bug."""


class TooLarge(ValueError):
    """A body (or what it decodes to) is past a bound; the message names it and its flag."""

    status = 413


@dataclass(frozen=True)
class BodyLimits:
    """The bounds of one service (`serve --max-decoded-bytes` sets the second)."""

    max_body: int = MAX_BODY
    max_decoded_bytes: int = DECODED_FACTOR * MAX_BODY

    def decoded_over(self, size: int, what: str) -> TooLarge:
        """The 413 for a body decoding to `size` bytes (or more)."""
        return TooLarge(
            f"{what} decodes to {size:,} bytes or more, past the server's max_decoded_bytes "
            f"{self.max_decoded_bytes:,}; send smaller batches"
        )


def decompress(data: bytes, encoding: str, limits: BodyLimits) -> bytes:
    """`data` decoded from a Content-Encoding (gzip, deflate, zstd), never past the bound.

    ValueError for an encoding it does not read or a corrupt stream; TooLarge when
    the decoded bytes pass `max_decoded_bytes` (decoding stops there)."""
    name = encoding.strip().lower()
    if name in ("", "identity"):
        return data
    if name in ("gzip", "x-gzip", "deflate"):
        return _inflate(data, name, limits)
    if name == "zstd":
        return _zstd(data, limits)
    raise ValueError(f"Content-Encoding {encoding!r} is not read; send gzip, zstd or none")


def _inflate(data: bytes, name: str, limits: BodyLimits) -> bytes:
    """gzip (every member: RFC 1952 allows several, and `gzip.compress` of parts joined
    is one) or deflate, decoded in steps that stop at the bound."""
    cap = limits.max_decoded_bytes
    wbits = 47 if name != "deflate" else 15  # 32 + 15: gzip or zlib header, detected
    parts: list[bytes] = []
    size = 0
    rest = data
    while True:
        inflater = zlib.decompressobj(wbits)
        try:
            part = inflater.decompress(rest, cap + 1 - size)
        except zlib.error as exc:
            raise ValueError(f"the {name} body is corrupt ({exc})") from None
        size += len(part)
        parts.append(part)
        if size > cap or inflater.unconsumed_tail:
            raise limits.decoded_over(cap + 1, f"the {name} body")
        if not inflater.eof:
            raise ValueError(f"the {name} body is cut short (its stream has no end)")
        rest = inflater.unused_data
        if name == "deflate" or not rest.strip(b"\0"):  # trailing zeros: padding
            if rest.strip(b"\0"):
                raise ValueError(f"the {name} body has {len(rest)} bytes after its stream")
            return b"".join(parts)


def _zstd(data: bytes, limits: BodyLimits) -> bytes:

    # A start-up guard: pyarrow loads on first use, not with this module.
    import pyarrow as pa

    cap = limits.max_decoded_bytes
    try:
        stream = pa.CompressedInputStream(pa.BufferReader(data), "zstd")
        out = io.BytesIO()
        while chunk := stream.read(64 * 1024):
            out.write(chunk)
            if out.tell() > cap:
                raise limits.decoded_over(cap + 1, "the zstd body")
    except (pa.ArrowException, OSError) as exc:  # pyarrow's IOError too: corrupt, not disk
        raise ValueError(f"the zstd body is corrupt ({exc})") from None
    return out.getvalue()
