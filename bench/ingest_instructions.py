"""Instructions per observation of `serve`'s ingest path, plain vs LLM, counted by valgrind.

On a shared machine the CPU-time ratios of `bench/ingest.py --llm` swing by
a fifth from run to run; instruction counts do not. This counts, with
valgrind's cachegrind, the instructions of one ingest in process (the
handler's parse, the write-ahead-log append and fsync, the window update; no
HTTP) for each body `bench/ingest.py --llm` posts, and prints them relative
to plain observations in the same body form. Each count is the difference
between a run of `--batches` + 4 batches and one of 4, so start-up cancels
out. The kernel's share (fsync, socket) is not counted: this is the user-space
cost the code controls.

    python bench/ingest_instructions.py              # about 3 minutes
    python bench/ingest_instructions.py --batches 20
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

KINDS = {
    "rows plain": {},
    "rows LLM": {"llm": True},
    "columns plain": {"columnar": True},
    "columns LLM": {"llm": True, "columnar": True},
    "arrow plain": {"arrow": True},
    "arrow LLM": {"llm": True, "arrow": True},
}


def _child(kind: str, batches: int) -> None:
    """Ingest `batches` batches of `kind` (after 4 warm-up batches) in this process."""
    from ingest import ARROW, _bodies

    from tailbudget.serve.actions import ActionsConfig
    from tailbudget.serve.app import _ingest
    from tailbudget.serve.runner import resolve_policy
    from tailbudget.serve.runtime import Runtime, RuntimeConfig

    bodies = _bodies(2000, 4, 0, **KINDS[kind])
    content_type = ARROW if KINDS[kind].get("arrow") else None
    with tempfile.TemporaryDirectory() as state:
        config = RuntimeConfig(state_dir=Path(state) / "state", actions=ActionsConfig(log=False))
        runtime = Runtime(resolve_policy(None), config)
        for i in range(4 + batches):
            _ingest(runtime, bodies[i % len(bodies)], content_type)
        runtime.close()


def _count(kind: str, batches: int) -> int:
    """Instructions valgrind counts for a child ingesting `batches` (+ 4) batches."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    # sys.executable may be a shim script; the interpreter itself is what is counted.
    python = os.path.realpath(sys.executable)
    cmd = [
        "valgrind",
        "--tool=cachegrind",
        "--cache-sim=no",
        "--cachegrind-out-file=/dev/null",
        python,
        __file__,
        "--child",
        kind,
        "--batches",
        str(batches),
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if found is None:
        raise SystemExit(f"valgrind printed no instruction count:\n{done.stderr[-500:]}")
    return int(found.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40, help="batches of 2000 counted")
    parser.add_argument(
        "--forms", default="rows,columns,arrow", help="body forms (default rows,columns,arrow)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.batches)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    per_obs = {}
    forms = set(args.forms.split(","))
    for kind in (k for k in KINDS if k.split()[0] in forms):
        extra = _count(kind, args.batches) - _count(kind, 0)
        per_obs[kind] = extra / (args.batches * 2000)
    print(
        f"# ingest in process (parse, WAL append + fsync, windows; no HTTP): instructions "
        f"per observation, {args.batches} batches of 2000, valgrind cachegrind\n"
    )
    print("| body | instructions per obs | vs plain (same body) |")
    print("|---|---:|---:|")
    for kind, value in per_obs.items():
        base = per_obs[kind.split()[0] + " plain"]
        print(f"| {kind} | {value:,.0f} | {value / base:.2f}x |")


if __name__ == "__main__":
    main()
