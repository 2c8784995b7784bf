"""Benchmark: live stage choice on Arrow (`serve --traces`), next to the engine's choice.

`choose_on_arrow` (what the live attribution runs on each batch of completed traces)
against the audit's own `choose_stages` on a DuckDB view of the same Arrow table,
registered and unregistered per batch (what the live attribution ran before issue 38).
Both give the same choice (asserted); batches of generated traces of 15 spans over 8
services, best of 15. Prints a markdown table.

    python bench/stage_choice.py
    python bench/stage_choice.py --quick     # the two smaller batches
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

import pyarrow as pa

from tailbudget.logs.engine import connect
from tailbudget.logs.options import ReadOptions
from tailbudget.logs.span_stages import choose_stages
from tailbudget.logs.stage_choice import StageChoice, choose_on_arrow

NAMES = ("gateway", "chat-api", "retriever", "vector-db", "reranker", "llm", "tool", "cache")


def _paths(traces: int, spans_per: int = 15) -> pa.Table:
    """Critical-path rows as the attribution gives them: one root a trace, the rest."""
    rng = random.Random(1)
    cols: dict[str, list[object]] = {k: [] for k in ("trace", "root", "dur", "stage", "own")}
    for t in range(traces):
        for k in range(spans_per):
            cols["trace"].append(f"{t:032x}")
            cols["root"].append(k == 0)
            cols["dur"].append(rng.random() * (1000 if k == 0 else 100))
            cols["stage"].append(NAMES[0] if k == 0 else rng.choice(NAMES))
            cols["own"].append(rng.random() * 50)
    return pa.table(
        {
            "trace": pa.array(cols["trace"], pa.string()),
            "is_root": pa.array(cols["root"], pa.bool_()),
            "dur_ms": pa.array(cols["dur"], pa.float64()),
            "stage_raw": pa.array(cols["stage"], pa.string()),
            "self_ms": pa.array(cols["own"], pa.float64()),
        }
    )


def _best_ms(fn: Callable[[], StageChoice], rounds: int = 15) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the two smaller batches")
    args = parser.parse_args()
    backend, options = connect(None), ReadOptions(span_stage="operation")

    def on_a_view(paths: pa.Table) -> StageChoice:
        backend.con.register("_tb_bench_paths", paths)
        try:
            return choose_stages(backend.table("_tb_bench_paths"), backend, options)
        finally:
            backend.con.unregister("_tb_bench_paths")

    print(
        "| spans in the batch | DuckDB view + choose_stages (ms) | choose_on_arrow (ms) | ratio |"
    )
    print("|---:|---:|---:|---:|")
    for traces in (34, 340) if args.quick else (34, 340, 3400):
        paths = _paths(traces)
        assert on_a_view(paths) == choose_on_arrow(paths, options)
        engine = _best_ms(lambda p=paths: on_a_view(p))
        arrow = _best_ms(lambda p=paths: choose_on_arrow(p, options))
        print(f"| {paths.num_rows:,} | {engine:.2f} | {arrow:.2f} | {engine / arrow:.0f}x |")


if __name__ == "__main__":
    main()
