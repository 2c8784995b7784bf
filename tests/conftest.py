"""Shared fixtures: repository paths and the real-data folder."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """The real latency logs in ../shared/data (skip when absent)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data folder not found: {SHARED_DATA}")
    return SHARED_DATA
