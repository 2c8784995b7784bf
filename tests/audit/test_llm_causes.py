"""TTFT queueing vs prefill and TPOT contention on logs with start times, where the truth
is planted: the in-flight count at arrival comes from an event sweep on the engine."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tailbudget.audit import AuditConfig, run_audit
from tailbudget.budget.objectives import parse_objectives
from tailbudget.logs import ReadOptions, read_log

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _queued_log(path: Path, n: int, *, per_busy: float, per_token: float) -> np.ndarray:
    """TTFT = 40 + per_busy x (requests in flight at arrival) + per_token x input + noise."""
    rng = np.random.default_rng(7)
    start = np.cumsum(rng.exponential(60.0, n))  # ms between arrivals
    inp = rng.integers(50, 3000, n).astype(float)
    out = rng.integers(2, 400, n).astype(float)
    ends: list[float] = []
    busy = np.zeros(n)
    ttft = np.zeros(n)
    total = np.zeros(n)
    for i in range(n):
        busy[i] = sum(1 for e in ends if e > start[i])
        ttft[i] = 40 + per_busy * busy[i] + per_token * inp[i] + rng.normal(0, 5)
        total[i] = ttft[i] + 30.0 * (out[i] - 1)
        ends.append(start[i] + total[i])
    ts = [T0 + timedelta(milliseconds=float(s)) for s in start]
    pq.write_table(
        pa.table(
            {
                "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
                "total_ms": total,
                "ttft_ms": ttft,
                "decode_ms": total - ttft,
                "input_tokens": inp,
                "output_tokens": out,
            }
        ),
        path,
    )
    return busy


def _audit(path: Path, slo: str):
    opts = ReadOptions(
        timestamp="ts", stages=("ttft_ms", "decode_ms"), shape=("input_tokens", "output_tokens")
    )
    objs = parse_objectives(slo)
    return run_audit(read_log(str(path), opts), AuditConfig(objs))


def test_ttft_rising_with_requests_in_flight_is_queueing(tmp_path: Path) -> None:
    busy = _queued_log(tmp_path / "q.parquet", 3000, per_busy=25.0, per_token=0.01)
    report = _audit(tmp_path / "q.parquet", "ttft.p95=200")
    (cause,) = [h for h in report.hypotheses if h.objective == "ttft.p95"]
    assert cause.kind == "llm_queueing"
    assert cause.figures["ms_per_request_in_flight"] == pytest.approx(25.0, rel=0.05)
    assert cause.figures["ms_per_input_token"] == pytest.approx(0.01, rel=0.2)
    assert cause.figures["in_flight_p50"] == pytest.approx(float(np.quantile(busy, 0.5)))
    fix = next(f for f in report.ranking if f.objective == "ttft.p95")
    assert fix.fix == "add_llm_replicas" and fix.objective_after_ms < fix.objective_before_ms


def test_ttft_rising_with_prompt_length_is_prefill(tmp_path: Path) -> None:
    _queued_log(tmp_path / "p.parquet", 3000, per_busy=0.0, per_token=0.2)
    report = _audit(tmp_path / "p.parquet", "ttft.p95=300")
    (cause,) = [h for h in report.hypotheses if h.objective == "ttft.p95"]
    assert cause.kind == "llm_prefill" and "breach is prefill" in cause.evidence
    assert cause.figures["ms_per_input_token"] == pytest.approx(0.2, rel=0.05)
    fix = next(f for f in report.ranking if f.objective == "ttft.p95")
    assert fix.fix == "cap_prompt_tokens"
    assert fix.objective_after_ms < fix.objective_before_ms
