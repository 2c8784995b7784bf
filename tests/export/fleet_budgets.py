"""Budgets of the fleet-preset export tests: an LLM chat service with every objective kind.

A uniquely named module (not conftest), like export_helpers.
"""

from __future__ import annotations

from typing import Any

from tailbudget.budget import Budget, parse_budget

CHAT: dict[str, Any] = {
    "service": "Llama-3.3-70B",
    "environment": "prd",
    "slo": {
        "e2e": {"p95": 6000, "p99": 9000},
        "ttft": {"p95": 400, "p99": 2000},
        "tpot": {"p99": 60},
        "itl": {"p99": 150},
        "stages": {"queue": {"p99": 200}},
        "goodput": {"min": 0.9},
        "error_rate": 0.01,
    },
    "pipeline": [{"stage": "llm", "budget": {"p95": 5000, "p99": 8000}}],
    "policy": "default",
}
"""Every objective; the LLM default policy (ttft scale/shed, goodput and ttft.p99 rollback)."""

TTFT_ONLY: dict[str, Any] = {
    "service": "chat",
    "slo": {"ttft": {"p95": 500, "p99": 2500}, "goodput": {"min": 0.9}, "error_rate": 0.01},
    "pipeline": [{"stage": "llm", "budget": {"p95": 5000, "p99": 8000}}],
    "policy": "default",
}
"""One per-request metric, so goodput is one histogram's share (ttft under 2.5 s)."""


def chat(**changes: Any) -> Budget:
    """The CHAT budget with top-level changes."""
    return parse_budget({**CHAT, **changes})


def ttft_only(**changes: Any) -> Budget:
    """The TTFT_ONLY budget with top-level changes."""
    return parse_budget({**TTFT_ONLY, **changes})
