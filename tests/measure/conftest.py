"""Fixtures for the measure tests: readers of what sinks wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()
    ]


def read_parquet(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


@pytest.fixture
def registry() -> Any:
    from prometheus_client import CollectorRegistry

    return CollectorRegistry()


@pytest.fixture(name="read_jsonl")
def _read_jsonl_fixture() -> Any:
    return read_jsonl


@pytest.fixture(name="read_parquet")
def _read_parquet_fixture() -> Any:
    return read_parquet
