"""Cost per stage of tailbudget's Recorder next to an OpenTelemetry SDK span and a plain timer.

Every contender does the same work: N requests, each a request context with
two covariates and K sequential (empty) stages, written to a sink; the clock
stops only when the sink has everything (writer thread drained / spans
exported), so serialization off the request path is counted too.

- otel-sdk span: TracerProvider + BatchSpanProcessor with a no-op exporter,
  one request span and K child spans via start_as_current_span.
- otel-sdk span + BudgetSpanProcessor: the same spans, the processor in place of the
  BatchSpanProcessor, each trace's critical-path stage times into a Recorder -> JSONL
  (the clock stops once every trace is attributed and written).
- plain timer -> JSONL: a class-based context-manager timer, one dict per
  request, json.dumps + write synchronously.
- tailbudget -> JSONL / Parquet: Recorder(sink=...), timed through close();
  "hot path" is the same run timed before close (what the request pays).

Every contender starts from a collected heap (gc.collect() before each timed
run, outside the timing); rounds are interleaved, times are medians, and
shares are medians of the per-round ratios.

Usage: python bench/measure.py [--quick] [--requests N] [--stages K] [--rounds R]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tailbudget import Recorder

STAGE_NAMES = ["embedding", "retrieval", "rerank", "llm", "post", "guard", "tool", "cache"]


def bench_otel(n: int, stages: list[str], tmp: Path) -> tuple[float, float, float]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class NoopExporter(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(
        BatchSpanProcessor(NoopExporter(), max_queue_size=n * (len(stages) + 1) + 1)
    )
    tracer = provider.get_tracer("bench")
    t0, c0 = time.perf_counter(), time.process_time()
    _trace_requests(tracer, n, stages)
    hot = time.perf_counter() - t0
    provider.force_flush()
    total, cpu = time.perf_counter() - t0, time.process_time() - c0
    provider.shutdown()
    return hot, total, cpu


def _trace_requests(tracer: Any, n: int, stages: list[str]) -> None:
    """The traced workload both span processors are timed on (the same for a fair ratio)."""
    for i in range(n):
        with tracer.start_as_current_span("request", attributes={"route": "chat", "seq_len": i}):
            for s in stages:
                with tracer.start_as_current_span(s):
                    pass


def bench_budget_processor(n: int, stages: list[str], tmp: Path) -> tuple[float, float, float]:
    from opentelemetry.sdk.trace import TracerProvider

    from tailbudget.otel import BudgetSpanProcessor

    rec = Recorder(sink=str(tmp / "p.jsonl"), capacity=n + 1)
    provider = TracerProvider()
    processor = BudgetSpanProcessor(rec, grace_s=0.0, max_traces=n + 1)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("bench")
    t0, c0 = time.perf_counter(), time.process_time()
    _trace_requests(tracer, n, stages)
    hot = time.perf_counter() - t0
    provider.force_flush()
    rec.close()
    total, cpu = time.perf_counter() - t0, time.process_time() - c0
    provider.shutdown()
    assert processor.traces_recorded == n, processor.traces_recorded
    return hot, total, cpu


class PlainTimer:
    """What a team writes by hand: a context manager that stores ms in a dict."""

    def __init__(self, row: dict[str, Any], name: str) -> None:
        self.row = row
        self.name = name

    def __enter__(self) -> PlainTimer:
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.row[self.name] = (time.perf_counter() - self.t0) * 1000.0


def bench_plain(n: int, stages: list[str], tmp: Path) -> tuple[float, float, float]:
    cols = [f"{s}_ms" for s in stages]
    with (tmp / "plain.jsonl").open("w") as fh:
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(n):
            row: dict[str, Any] = {"route": "chat", "seq_len": i, "ts": time.time()}
            start = time.perf_counter()
            for c in cols:
                with PlainTimer(row, c):
                    pass
            row["total_ms"] = (time.perf_counter() - start) * 1000.0
            fh.write(json.dumps(row) + "\n")
        hot = time.perf_counter() - t0
    return hot, time.perf_counter() - t0, time.process_time() - c0


def _bench_recorder(sink: str) -> Callable[[int, list[str], Path], tuple[float, float, float]]:
    def run(n: int, stages: list[str], tmp: Path) -> tuple[float, float, float]:
        rec = Recorder(sink=str(tmp / sink), capacity=n + 1)
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(n):
            with rec.request(route="chat", seq_len=i) as req:
                for s in stages:
                    with req.stage(s):
                        pass
        hot = time.perf_counter() - t0
        rec.close()
        total, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert rec.dropped == 0 and rec.written == n, (rec.dropped, rec.written)
        return hot, total, cpu

    return run


CONTENDERS: list[tuple[str, Callable[[int, list[str], Path], tuple[float, float, float]]]] = [
    ("otel-sdk span (BatchSpanProcessor, no-op exporter)", bench_otel),
    ("otel-sdk span + tailbudget BudgetSpanProcessor -> JSONL", bench_budget_processor),
    ("plain class timer -> JSONL (sync)", bench_plain),
    ("tailbudget Recorder -> JSONL", _bench_recorder("t.jsonl")),
    ("tailbudget Recorder -> Parquet", _bench_recorder("t.parquet")),
]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    ap.add_argument("--requests", type=int, default=None)
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args(argv)
    n = args.requests or (2_000 if args.quick else 20_000)
    rounds = args.rounds or (3 if args.quick else 7)
    stages = STAGE_NAMES[: max(1, min(args.stages, len(STAGE_NAMES)))]
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name, _ in CONTENDERS}
    for _ in range(rounds):  # interleaved rounds: machine noise hits every contender alike
        for name, fn in CONTENDERS:
            with tempfile.TemporaryDirectory() as d:
                # Start every contender from a collected heap, so none pays a full
                # collection triggered by the garbage of the one before it.
                gc.collect()
                results[name].append(fn(n, stages, Path(d)))
    per = n * len(stages)
    med = {
        name: [statistics.median(x[k] for x in r) / per * 1e6 for k in range(3)]
        for name, r in results.items()
    }
    ref = results[CONTENDERS[0][0]]

    def share(name: str, k: int) -> float:
        # Median of the per-round ratios: each round's contenders ran back to back,
        # so a slow spell of the machine cancels out of the ratio.
        return statistics.median(x[k] / y[k] for x, y in zip(results[name], ref, strict=True))

    print(
        f"{n} requests x {len(stages)} stages, median of {rounds} interleaved rounds; "
        "cost per stage includes the request and the sink (writer threads included).\n"
    )
    print(
        "| contender | wall µs/stage (request path) | wall µs/stage (incl. sink) "
        "| CPU µs/stage (incl. sink) | share of OTel (wall) | share of OTel (CPU) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, (hot, total, cpu) in med.items():
        print(
            f"| {name} | {hot:.2f} | {total:.2f} | {cpu:.2f} "
            f"| {share(name, 1):.3f} | {share(name, 2):.3f} |"
        )


if __name__ == "__main__":
    main()
