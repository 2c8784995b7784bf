"""Shared fixtures: repository paths and the real-data folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Tests check correctness, never speed: no per-example deadline (a loaded CI machine
# would turn a slow example into a failure) and no too-slow health check.
settings.register_profile("tailbudget", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("tailbudget")

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """The real latency logs in ../shared/data (skip when absent)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data folder not found: {SHARED_DATA}")
    return SHARED_DATA
