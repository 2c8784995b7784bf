"""Small inputs the hostile-input and fuzz tests share."""

from __future__ import annotations

BUDGET = """\
service: svc
environment: prd
slo: {p50: 300, p95: 800, p99: 1500}
pipeline:
  - stage: db
    budget: {p50: 50, p95: 150, p99: 300}
  - stage: llm
    budget: {p50: 200, p95: 500, p99: 1000}
"""
"""A two-stage budget (db, llm) the commands under test accept."""
