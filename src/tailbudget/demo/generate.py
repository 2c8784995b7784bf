"""A realistic RAG-service latency log with causes planted in it, for `tailbudget demo`.

Four hours of traffic following a daily ramp (about 300k requests), stages embedding,
retrieval (a vector store behind a cache), rerank (a hosted API) and llm (TTFT plus
decode of the answer), with covariates and cohorts. Planted causes, each of which the
audit should find:
  - cold start: for 5 minutes after each scale-up, requests landing on the new replica
    run the llm about 3.5x slower (weights loading, cold KV cache);
  - input shape: llm time grows with output_tokens (decode at a per-variant rate);
  - external dependency: the hosted reranker stalls for 1.5-4 s on 1.5% of calls;
  - cache misses: 15% of retrievals miss the cache and go to the vector store (~1.1 s);
  - cohort: model_variant B decodes about 30% slower than A.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

START = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
MINUTES = 240
COLD_MIN = 5


@dataclass(frozen=True)
class DemoLog:
    """What `generate` wrote."""

    log: Path
    events: Path
    rows: int
    event_times: tuple[datetime, ...]


def _rates(rng: np.random.Generator, n: int) -> np.ndarray:
    minute = np.arange(MINUTES)
    shape = 0.6 + 0.8 * (0.5 - 0.5 * np.cos(2 * np.pi * minute / MINUTES))
    w = shape * rng.uniform(0.95, 1.05, MINUTES)
    exact = w / w.sum() * n
    per_min = np.asarray(np.floor(exact), dtype=np.int64)
    # Exactly n requests: the minutes with the largest remainders take one more each
    # (rounding alone overshoots n when minutes outnumber requests, as with --rows 1000).
    short = n - int(per_min.sum())
    per_min[np.argsort(per_min - exact, kind="stable")[:short]] += 1
    return per_min


def _scale_ups(per_min: np.ndarray) -> list[int]:
    # The autoscaler adds a replica each time traffic climbs past another step.
    steps = np.linspace(per_min.min() * 1.15, per_min.max() * 0.97, 6)
    out, k = [], 0
    for m, r in enumerate(per_min):
        while k < len(steps) and r >= steps[k]:
            out.append(m)
            k += 1
    return sorted(set(out))


def generate(out_dir: Path, rows: int = 300_000, seed: int = 7) -> DemoLog:
    """Write `rag_requests.parquet` and `events.csv` to `out_dir`."""
    table, events = make_table(rows, seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / "rag_requests.parquet"
    pq.write_table(table, log, compression="zstd")
    times = event_times(events)
    ev = write_events(out_dir / "events.csv", times)
    return DemoLog(log=log, events=ev, rows=table.num_rows, event_times=times)


def event_times(minutes: list[int]) -> tuple[datetime, ...]:
    """Scale-up minutes as UTC times."""
    return tuple(START + timedelta(minutes=m) for m in minutes)


def write_events(path: Path, times: tuple[datetime, ...]) -> Path:
    """The events CSV (timestamp,event) the audit's --events reads."""
    path.write_text(
        "timestamp,event\n"
        + "".join(f"{t.isoformat().replace('+00:00', 'Z')},scale_up\n" for t in times),
        encoding="utf-8",
    )
    return path


def make_table(
    rows: int, seed: int, id_offset: int = 0, traffic_seed: int | None = None
) -> tuple[pa.Table, list[int]]:
    """The log as an Arrow table, and the minutes of the scale-up events.

    `traffic_seed` fixes the per-minute traffic (hence the scale-ups) apart from `seed`, so
    chunks of one big log share their events."""
    rng = np.random.default_rng(seed)
    per_min = _rates(np.random.default_rng(traffic_seed) if traffic_seed is not None else rng, rows)
    n = int(per_min.sum())
    minute = np.repeat(np.arange(MINUTES), per_min)
    offset_s = minute * 60 + rng.uniform(0, 60, n)
    order = np.argsort(offset_s, kind="stable")
    offset_s, minute = offset_s[order], minute[order]

    route = rng.choice(np.array(["chat", "search", "agent"]), n, p=[0.6, 0.3, 0.1])
    variant = rng.choice(np.array(["A", "B"]), n, p=[0.7, 0.3])
    region = rng.choice(np.array(["us-east", "eu-west"]), n, p=[0.65, 0.35])
    query_tokens = np.clip(np.round(30 * np.exp(rng.normal(0, 0.5, n))), 3, 400)
    top_k = rng.choice(np.array([5, 10, 20]), n, p=[0.5, 0.35, 0.15])
    context_tokens = top_k * np.round(rng.uniform(180, 260, n))
    out_median = np.where(route == "agent", 90.0, np.where(route == "search", 30.0, 45.0))
    output_tokens = np.clip(np.round(out_median * np.exp(rng.normal(0, 0.7, n))), 1, 1024)

    embedding = 12 + 0.05 * query_tokens + 6 * np.exp(rng.normal(0, 0.3, n))
    miss = rng.random(n) < 0.15
    retrieval = np.where(
        miss, 1100 * np.exp(rng.normal(0, 0.25, n)), 28 * np.exp(rng.normal(0, 0.25, n))
    )
    rerank = 6 + 1.1 * top_k + 8 * np.exp(rng.normal(0, 0.3, n))
    stall = rng.random(n) < 0.015
    rerank = rerank + stall * rng.uniform(1500, 4000, n)
    tps = np.where(variant == "B", 62.0, 88.0) * np.exp(rng.normal(0, 0.08, n))
    ttft = 120 + 0.04 * context_tokens + 40 * np.exp(rng.normal(0, 0.35, n))
    llm = ttft + output_tokens / tps * 1000.0

    events = _scale_ups(per_min)
    cold = np.zeros(n, dtype=bool)
    for m in events:
        cold |= (offset_s >= m * 60) & (offset_s < (m + COLD_MIN) * 60)
    # Only the requests routed to the new replica are slow; the rest are served warm.
    cold &= rng.random(n) < 0.25
    llm = np.where(cold, llm * 3.5 + 400, llm)
    overhead = 18 * np.exp(rng.normal(0, 0.3, n))
    total = embedding + retrieval + rerank + llm + overhead
    error = (rng.random(n) < 0.002) | (stall & (rng.random(n) < 0.2))

    start = START.replace(tzinfo=None)
    ts = np.datetime64(start, "us") + (offset_s * 1e6).astype("timedelta64[us]")
    table = pa.table(
        {
            "request_id": [f"req-{i:08d}" for i in range(id_offset, id_offset + n)],
            "ts": pa.array(ts, pa.timestamp("us")),
            "route": route,
            "model_variant": variant,
            "region": region,
            "query_tokens": query_tokens.astype(np.int64),
            "top_k": top_k.astype(np.int64),
            "context_tokens": context_tokens.astype(np.int64),
            "output_tokens": output_tokens.astype(np.int64),
            "embedding_ms": np.round(embedding, 2),
            "retrieval_ms": np.round(retrieval, 2),
            "rerank_ms": np.round(rerank, 2),
            "llm_ms": np.round(llm, 2),
            "total_ms": np.round(total, 2),
            "error": error,
        }
    )
    return table, events


BUDGET_YAML = """\
# Budget of the demo RAG service (written by `tailbudget demo`).
service: rag-chat
environment: prd            # prd gates p99
slo: {p50: 1300, p95: 2800, p99: 4000, error_rate: 0.01}
headroom: 0.10
overhead_ms: 40
pipeline:
  - stage: embedding
    budget: {p50: 30, p95: 60, p99: 100}
  - stage: retrieval
    budget: {p50: 60, p95: 300, p99: 600}
  - stage: rerank
    budget: {p50: 30, p95: 60, p99: 150}
  - stage: llm
    llm: {ttft_ms: 450, tokens_per_s: 60, output_tokens: 60, tail_ms: 300}
    budget: {p50: 900, p95: 2000, p99: 2600}
log:
  timestamp: ts
  total: total_ms
  request_id: request_id
  error: error
  shape: [output_tokens, context_tokens, query_tokens, top_k]
  cohorts: [route, model_variant, region]
"""
