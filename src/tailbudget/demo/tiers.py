"""A planted log with three service tiers, where a minority tier breaches unseen.

The whole service passes its p99 of 1,500 ms; the premium tier (8% of requests) misses its
own p95 of 800 ms by about 35%, through a slow reranker that only premium requests call
with a large candidate set; batch requests skip the reranker. The tests audit it per class
(tests/audit/test_classes.py), and docs/classes.md walks through it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd  # type: ignore[import-untyped]

from tailbudget.demo.planted import T0, lognormal

__all__ = ["BUDGET", "SHARES", "tiered"]

SHARES = {"premium": 0.08, "standard": 0.62, "batch": 0.30}
"""Each tier's share of requests."""

BUDGET = """\
service: tiered-rag
slo: {p99: 1500}
pipeline:
  - stage: retrieval
    budget: {p99: 300}
  - stage: rerank
    budget: {p99: 400}
  - stage: llm
    budget: {p99: 800}
classes:
  by: tier
  premium:  {slo: {p95: 800}, priority: 0}
  standard: {slo: {p99: 1500}, priority: 1}
  batch:    {slo: {p99: 6000}, priority: 2, skip: [rerank]}
"""
"""The budget the tiers are promised (premium's p95 is the one missed)."""


def tiered(n: int = 20_000, seed: int = 7, minutes: int = 60) -> pd.DataFrame:
    """The log: request_id, ts, tier, retrieval_ms, rerank_ms, llm_ms, total_ms."""
    rng = np.random.default_rng(seed)
    offsets = np.sort(rng.uniform(0, minutes * 60, n))
    tier = rng.choice(list(SHARES), n, p=list(SHARES.values()))
    premium, batch = tier == "premium", tier == "batch"
    retrieval = lognormal(rng, 80, 0.3, n)
    # The reranker: fast on the standard candidate set, slow and spread on premium's.
    rerank = np.where(premium, lognormal(rng, 225, 0.52, n), lognormal(rng, 35, 0.3, n))
    rerank = np.where(batch, np.nan, rerank)
    llm = np.where(batch, lognormal(rng, 560, 0.22, n), lognormal(rng, 420, 0.18, n))
    overhead = lognormal(rng, 12, 0.3, n)
    total = retrieval + np.nan_to_num(rerank) + llm + overhead
    return pd.DataFrame(
        {
            "request_id": [f"r{i}" for i in range(n)],
            "ts": (
                pd.Timestamp(T0.replace(tzinfo=None)) + pd.to_timedelta(offsets, unit="s")
            ).floor("us"),
            "tier": tier,
            "retrieval_ms": retrieval,
            "rerank_ms": rerank,
            "llm_ms": llm,
            "total_ms": total,
        }
    )
