"""Where a recorded request's cost goes, in CPU instructions (valgrind's cachegrind).

Wall-clock timings on a shared machine drift by a third within minutes, too
much to see a 5% change. Instruction counts are repeatable: each row runs a
snippet N times in a fresh interpreter under cachegrind, subtracts a run with
N = 0, and divides by N. Hash seeds are fixed and BLAS threads off so two runs
of the same code count the same instructions. Instructions are not time (cache
misses and branch mispredictions are not in them), but for interpreter-bound
code they rank changes reliably.

Needs valgrind (Debian package valgrind); takes a few minutes.

Usage: python bench/anatomy.py [--requests N]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

SETUP = """
import os
from collections import deque
from time import perf_counter_ns, time_ns
from tailbudget import Recorder
from tailbudget.measure.record import Clock
from tailbudget.measure.sinks.base import Batch, Sink
from tailbudget.measure.sinks.jsonl import JsonlSink

class Null(Sink):
    def write(self, batch):
        pass

# A recorder whose queue never reaches the writer: the request path alone.
rec = Recorder(sink=Null(), capacity=10**9, flush_interval_s=10**6)
rec._queue = deque(maxlen=16)
rec._wake_at = -1
stages = ["embedding", "retrieval", "rerank", "llm"]

class Empty:
    __slots__ = ()
    def __enter__(self):
        return self
    def __exit__(self, et, ev, tb):
        pass

empty = Empty()
jsonl = JsonlSink(os.devnull, append=False)
held = []
"""

ROWS: list[tuple[str, str]] = [
    ("loop only", "pass"),
    ("rec.request(route=..., seq_len=...) call", 'rec.request(route="chat", seq_len=i)'),
    (
        "request with-block, no stage",
        'with rec.request(route="chat", seq_len=i) as req:\n    pass',
    ),
    (
        "+ 4 x `with` on an empty Python context manager",
        'with rec.request(route="chat", seq_len=i) as req:\n'
        "    for s in stages:\n        with empty:\n            pass",
    ),
    (
        "+ 4 x req.stage(s) calls (not entered)",
        'with rec.request(route="chat", seq_len=i) as req:\n'
        "    for s in stages:\n        req.stage(s)\n        with empty:\n            pass",
    ),
    (
        "request with 4 stages (the real thing)",
        'with rec.request(route="chat", seq_len=i) as req:\n'
        "    for s in stages:\n        with req.stage(s):\n            pass",
    ),
    (
        "the same, then written as JSONL by the writer's path (batches of 256)",
        'with rec.request(route="chat", seq_len=i) as req:\n'
        "    for s in stages:\n        with req.stage(s):\n            pass\n"
        "held.append(rec._queue[-1])\n"
        "if len(held) == 256:\n"
        '    jsonl.write(Batch(held, Clock(time_ns(), perf_counter_ns()), "r", set()))\n'
        "    held.clear()",
    ),
    ("one perf_counter_ns() call", "perf_counter_ns()"),
]

PROGRAM = """
import gc, os, sys
sys.path.insert(0, {src!r})
{setup}
def work(n):
    for i in range(n):
{body}
work(500)
gc.collect(); gc.freeze()
work(int(sys.argv[1]))
sys.stdout.flush(); os._exit(0)
"""


def instructions(program: str, n: int) -> int:
    env = {**os.environ, "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
         sys.executable, "-c", program, str(n)],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    found = re.search(r"I\s+refs:\s+([\d,]+)", run.stderr)
    if found is None:
        raise SystemExit(f"no instruction count from valgrind:\n{run.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--requests", type=int, default=4000)
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        raise SystemExit("bench/anatomy.py needs valgrind (apt-get install valgrind)")
    n = args.requests
    print(f"instructions per iteration ({n} iterations, minus an empty run)\n")
    print("| snippet (per iteration) | instructions |")
    print("|---|---:|")
    for name, body in ROWS:
        program = PROGRAM.format(src=str(SRC), setup=SETUP, body=textwrap.indent(body, " " * 8))
        per = (instructions(program, n) - instructions(program, 0)) / n
        print(f"| {name} | {per:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
