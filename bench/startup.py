"""Benchmark: how long `tailbudget --help` and each `tailbudget CMD --help` take next to a
bare `import typer` (goal: every row within 1.5x of it).

Each row starts a fresh interpreter (as the console script does) and times it to exit;
best of 5 per row, rows interleaved so that load on the machine hits them alike. Peak
RSS is the child's own VmHWM.

    python bench/startup.py
    python bench/startup.py --repeat 9
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

_HWM = (
    "\nimport sys\n"
    "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
    "print(hwm, file=sys.stderr)\n"
)


def _cli(*args: str) -> str:
    # What the `tailbudget` console script runs, with the arguments it would get.
    return (
        f"import sys\nsys.argv = ['tailbudget', {', '.join(repr(a) for a in args)}]\n"
        "from tailbudget.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
    )


COMMANDS = (
    "init", "plan", "rebudget", "audit", "demo", "replay", "export", "import", "serve",
    "simulate", "capacity",
)  # fmt: skip
"""Every sub-command (as tailbudget.cli.COMMANDS; listed here so the bench imports nothing)."""

ROWS = [
    ("bare `import typer` (the peer)", "import typer\n"),
    ("`tailbudget --help`", _cli("--help")),
    ("`tailbudget --version`", _cli("--version")),
    *((f"`tailbudget {name} --help`", _cli(name, "--help")) for name in COMMANDS),
]


def _once(code: str) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code + _HWM],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    seconds = time.perf_counter() - t0
    return seconds, int(proc.stderr.strip().splitlines()[-1]) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    best: dict[str, tuple[float, float]] = {}
    for _ in range(a.repeat):
        for label, code in ROWS:
            seconds, rss = _once(code)
            if label not in best or seconds < best[label][0]:
                best[label] = (seconds, rss)
    peer = best[ROWS[0][0]][0]
    print(f"\nStart-up, best of {a.repeat} (fresh interpreter each run)\n")
    print("| run | best s | peak RSS MiB | x `import typer` |")
    print("|---|---:|---:|---:|")
    for label, _ in ROWS:
        seconds, rss = best[label]
        print(f"| {label} | {seconds:.3f} | {rss:.0f} | {seconds / peer:.2f} |")


if __name__ == "__main__":
    main()
