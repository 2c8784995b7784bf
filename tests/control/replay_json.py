"""The replay as the JSON document `replay --format json` writes, for tests that read its keys."""

from __future__ import annotations

import json
from typing import Any

from tailbudget.control.replay import replay


def replay_json(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """`replay(...)`'s record, through the strict writer and back: the CLI's document."""
    doc: dict[str, Any] = json.loads(replay(*args, **kwargs).to_json())
    return doc
