"""Small latency logs with one planted cause each (and a healthy one), as LogTables on DuckDB.

The test suite audits each and checks the planted cause is what the audit finds; they are
also a quick way to see what each hypothesis looks like in a report."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

import ibis
import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pyarrow as pa

from tailbudget.logs.table import LogTable, RowCounts

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
STAGES = ("embedding", "retrieval", "llm")


def lognormal(rng: np.random.Generator, median: float, sigma: float, n: int) -> np.ndarray:
    return median * np.exp(rng.normal(0.0, sigma, n))


def base(n: int = 20_000, seed: int = 1, minutes: int = 60) -> pd.DataFrame:
    """A healthy RAG service: independent lognormal stages, steady traffic."""
    rng = np.random.default_rng(seed)
    offsets = np.sort(rng.uniform(0, minutes * 60, n))
    df = pd.DataFrame(
        {
            "request_id": [f"r{i}" for i in range(n)],
            # Naive UTC: the canonical ts column (ibis 12 + duckdb 2 do not type TIMESTAMPTZ).
            "ts": (
                pd.Timestamp(T0.replace(tzinfo=None)) + pd.to_timedelta(offsets, unit="s")
            ).floor("us"),
            "embedding_ms": lognormal(rng, 20, 0.3, n),
            "retrieval_ms": lognormal(rng, 80, 0.3, n),
            "llm_ms": lognormal(rng, 600, 0.25, n),
            "seq_len": rng.integers(50, 400, n).astype(float),
            "shards": rng.integers(1, 9, n).astype(float),
            "route": rng.choice(["chat", "search", "summarize"], n, p=[0.5, 0.3, 0.2]),
            "error": rng.random(n) < 0.002,
        }
    )
    df["overhead"] = lognormal(rng, 10, 0.3, n)
    return df


def register(con: Any, name: str, df: pd.DataFrame) -> Any:
    """Register a frame as a DuckDB view (ibis 12's create_table trips on this sqlglot)."""
    con.con.register(name, pa.Table.from_pandas(df, preserve_index=False))
    return con.table(name)


def finish(
    df: pd.DataFrame,
    stages: tuple[str, ...] = STAGES,
    *,
    total: bool = True,
    name: str = "log",
    shape: tuple[str, ...] = ("seq_len", "shards"),
    cohorts: tuple[str, ...] = ("route",),
) -> LogTable:
    df = df.copy()
    if total:
        df["total_ms"] = sum(df[f"{s}_ms"] for s in stages) + df.pop("overhead")
    else:
        df.pop("overhead")
        df["total_ms"] = sum(df[f"{s}_ms"] for s in stages)
    con = ibis.duckdb.connect()
    t = register(con, name, df)
    n = len(df)
    return LogTable(
        table=t,
        stages=stages,
        shape=shape,
        cohorts=cohorts,
        has_timestamp=True,
        total_derived=not total,
        rows=RowCounts(n, n, 0),
        source=f"synth:{name}",
        format="table",
        backend=con,
    )


@cache
def healthy() -> LogTable:
    return finish(base(), name="healthy")


@cache
def input_shape() -> LogTable:
    df = base(seed=2)
    rng = np.random.default_rng(12)
    seq = np.minimum(lognormal(rng, 300, 0.8, len(df)), 8000).round()
    df["seq_len"] = seq
    df["llm_ms"] = 150 + 1.5 * seq + rng.normal(0, 30, len(df))
    return finish(df, name="input_shape")


EVENTS = [(T0 + timedelta(minutes=m), "scale_up") for m in (10, 30, 50)]


@cache
def cold_start() -> LogTable:
    df = base(seed=3)
    ts = df["ts"]
    cold = np.zeros(len(df), dtype=bool)
    for when, _ in EVENTS:
        w = pd.Timestamp(when.replace(tzinfo=None))
        cold |= ((ts >= w) & (ts < w + pd.Timedelta(minutes=5))).to_numpy()
    # A fresh replica serves a share of the traffic slowly while it loads weights and warms up.
    rng = np.random.default_rng(13)
    hit = cold & (rng.random(len(df)) < 0.3)
    df.loc[hit, "llm_ms"] *= 4.0
    return finish(df, name="cold_start")


@cache
def contention() -> LogTable:
    rng = np.random.default_rng(4)
    minutes = 60
    per_min = (150 + 120 * np.sin(np.arange(minutes) / 5.0) + rng.uniform(-20, 20, minutes)).astype(
        int
    )
    parts = []
    for m, k in enumerate(per_min):
        d = base(n=int(k), seed=100 + m, minutes=1)
        d["ts"] = (d["ts"] + pd.Timedelta(minutes=m)).dt.floor("us")
        d["llm_ms"] = d["llm_ms"] * (0.5 + k / 100.0)
        parts.append(d)
    df = pd.concat(parts, ignore_index=True)
    df["request_id"] = [f"r{i}" for i in range(len(df))]
    return finish(df, name="contention")


@cache
def external_dependency() -> LogTable:
    df = base(seed=5)
    rng = np.random.default_rng(15)
    stall = rng.random(len(df)) < 0.025
    df.loc[stall, "retrieval_ms"] += rng.uniform(1500, 4000, int(stall.sum()))
    return finish(df, name="external_dependency")


@cache
def cache_miss() -> LogTable:
    df = base(seed=6)
    rng = np.random.default_rng(16)
    miss = rng.random(len(df)) < 0.2
    df["retrieval_ms"] = np.where(
        miss, lognormal(rng, 900, 0.2, len(df)), lognormal(rng, 40, 0.2, len(df))
    )
    return finish(df, name="cache_miss")


@cache
def fanout() -> LogTable:
    df = base(seed=7)
    rng = np.random.default_rng(17)
    shards = rng.integers(1, 65, len(df)).astype(float)
    df["shards"] = shards
    df["retrieval_ms"] = 30 + 12 * shards + lognormal(rng, 20, 0.5, len(df))
    return finish(df, name="fanout")


@cache
def missing_slice() -> LogTable:
    df = base(seed=8)
    rng = np.random.default_rng(18)
    hop = rng.random(len(df)) < 0.08
    df.loc[hop, "overhead"] += lognormal(rng, 900, 0.3, int(hop.sum()))
    return finish(df, name="missing_slice")


@cache
def no_stages() -> LogTable:
    df = base(seed=9)
    df["total_ms"] = df["embedding_ms"] + df["retrieval_ms"] + df["llm_ms"] * 2 + df["overhead"]
    df = df.drop(columns=["embedding_ms", "retrieval_ms", "llm_ms", "overhead"])
    con = ibis.duckdb.connect()
    t = register(con, "nostages", df)
    return LogTable(
        table=t,
        stages=(),
        shape=("seq_len",),
        cohorts=("route",),
        has_timestamp=True,
        rows=RowCounts(len(df), len(df), 0),
        source="synth:no_stages",
        backend=con,
    )


@cache
def llm() -> LogTable:
    """TTFT grows with the queue under load; decode slows for some requests."""
    rng = np.random.default_rng(10)
    n = 20_000
    df = base(n=n, seed=10)
    inp = rng.integers(100, 3000, n).astype(float)
    out = rng.integers(50, 600, n).astype(float)
    df["input_tokens"] = inp
    df["output_tokens"] = out
    df["ttft_ms"] = 80 + 0.15 * inp + lognormal(rng, 50, 0.4, n)
    slow_decode = rng.random(n) < 0.1
    tps = np.where(slow_decode, rng.uniform(6, 10, n), rng.uniform(35, 45, n))
    df["decode_ms"] = out / tps * 1000.0
    return finish(
        df,
        stages=("embedding", "retrieval", "ttft", "decode"),
        name="llm",
        shape=("input_tokens", "output_tokens"),
    )


@cache
def output_length(column: str = "output_tokens") -> LogTable:
    """An LLM service whose decode time grows with the tokens it generates (a long-answer
    tail: the fix caps max_tokens); `column` names the output-token count."""
    rng = np.random.default_rng(11)
    n = 20_000
    df = base(n=n, seed=11).drop(columns=["llm_ms"])
    inp = rng.integers(100, 3000, n).astype(float)
    out = np.clip(np.round(lognormal(rng, 150, 0.8, n)), 1, 4096)
    df["input_tokens"] = inp
    df[column] = out
    df["ttft_ms"] = 80 + 0.05 * inp + lognormal(rng, 50, 0.3, n)
    df["decode_ms"] = out / rng.uniform(36, 44, n) * 1000.0
    return finish(
        df,
        stages=("embedding", "retrieval", "ttft", "decode"),
        name="output_length",
        shape=("input_tokens", column),
    )


@cache
def input_length() -> LogTable:
    """An LLM service with both token counts whose tail is long prompts: time to first token
    grows with input tokens (prefill), output length does not drive it."""
    rng = np.random.default_rng(19)
    n = 20_000
    df = base(n=n, seed=19).drop(columns=["llm_ms"])
    inp = np.clip(np.round(lognormal(rng, 2000, 0.8, n)), 16, 128_000)
    out = rng.integers(50, 150, n).astype(float)
    df["input_tokens"] = inp
    df["output_tokens"] = out
    df["ttft_ms"] = 50 + 1.2 * inp + lognormal(rng, 40, 0.3, n)
    df["decode_ms"] = out / rng.uniform(36, 44, n) * 1000.0
    return finish(
        df,
        stages=("embedding", "retrieval", "ttft", "decode"),
        name="input_length",
        shape=("input_tokens", "output_tokens"),
    )
