"""Sustained batched ingest into `tailbudget serve` over loopback, next to the sketch's add_many.

Starts `python -m tailbudget serve` on a free loopback port with a fresh state
dir, POSTs batches of observations from `--clients` concurrent clients (each
batch acknowledged only once fsynced to the write-ahead log; batches that
arrive during an fsync share the next one) for `--seconds`, and reports
observations per second, batches per fsync (from the server's status) and the
server's RSS at the start and the end (a bounded RSS means the windows do not
grow with traffic). `--stages N` adds N per-stage times to every observation
(sketched per stage by the server). In the same run it times
`LatencySketch.add_many` in process on the same number of values: the ceiling
the service's HTTP, JSON and durability overheads are measured against.

    python bench/ingest.py                          # 30 s, 2 clients, batches of 2000
    python bench/ingest.py --clients 16 --batch 20  # many small concurrent batches
    python bench/ingest.py --quick                  # 5 s, for development
    python bench/ingest.py --llm --seconds 10       # plain e2e vs LLM observations, side by side

`--llm` runs the server on the same observations posted eight ways in one run:
as rows (a JSON array of objects) plain end-to-end, LLM (`ttft_ms`,
`output_tokens` so the server derives tpot, and the flat `itl_p99_ms`
summary), and LLM carrying every inter-token gap (`--gaps` of them, a list);
as columns (one JSON list per key) plain and LLM; and as an Arrow IPC stream
of those columns plain, LLM and with every gap (`--forms` picks the forms). It prints the cost per
observation of each relative to plain end-to-end in the same body form, from
the run's throughput and from the server's own CPU seconds per acknowledged
observation (steadier on a shared machine), with the server's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tailbudget.sketch import LatencySketch  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _llm_fields(rng: np.random.Generator, total: float, gaps: int) -> dict[str, object]:
    """ttft and tokens consistent with `total`; itl as a summary (gaps=0) or a list."""
    ttft = round(total * float(rng.uniform(0.05, 0.3)), 3)
    fields: dict[str, object] = {"ttft_ms": ttft, "output_tokens": int(rng.integers(2, 400))}
    if gaps:
        fields["itl_ms"] = [round(float(g), 2) for g in rng.lognormal(3.0, 0.3, gaps)]
    else:  # the flat summary, as the log readers name it
        fields["itl_p99_ms"] = round(float(rng.uniform(40, 90)), 2)
    return fields


def _columns(rows: list[dict[str, object]]) -> dict[str, list[object]]:
    """The same observations as one list per key (the columnar body)."""
    keys = sorted({k for r in rows for k in r})
    return {k: [r.get(k) for r in rows] for k in keys}


def _bodies(
    batch: int,
    count: int,
    stages: int,
    seed: int = 0,
    llm: bool = False,
    gaps: int = 0,
    columnar: bool = False,
    arrow: bool = False,
) -> list[bytes]:
    rng = np.random.default_rng(seed)
    names = [f"stage{k}" for k in range(stages)]
    out = []
    for _ in range(count):
        values = rng.lognormal(6.5, 0.6, batch)
        errors = rng.random(batch) < 0.01
        shares = rng.dirichlet(np.ones(stages + 1), batch) if stages else None
        items: list[dict[str, object]] = []
        for i, (v, e) in enumerate(zip(values, errors, strict=True)):
            item: dict[str, object] = {"total_ms": round(float(v), 3), "error": bool(e)}
            if llm:
                item.update(_llm_fields(rng, float(v), gaps))
            if shares is not None:  # the stages take most of the total, the rest is overhead
                item["stages"] = {
                    name: round(float(v * shares[i, k]), 3) for k, name in enumerate(names)
                }
            items.append(item)
        if arrow:
            out.append(_arrow_stream(_columns(items)))
        else:
            out.append(json.dumps(_columns(items) if columnar else items).encode())
    return out


def _arrow_stream(columns: dict[str, list[object]]) -> bytes:
    """The columns as an Arrow IPC stream (stages as a struct, as the server reads them)."""
    import pyarrow as pa

    stages = columns.pop("stages", None)
    table = pa.table(columns)
    if stages is not None:
        table = table.append_column("stages", pa.array(stages))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"serve exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/v1/status", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit("serve did not start within 30 s")


ARROW = "application/vnd.apache.arrow.stream"


def _client(
    url: str,
    bodies: list[bytes],
    stop: threading.Event,
    counts: list[int],
    i: int,
    content_type: str = "application/json",
) -> None:
    with httpx.Client(timeout=30) as client:
        k = 0
        while not stop.is_set():
            r = client.post(
                f"{url}/v1/observations",
                content=bodies[k % len(bodies)],
                headers={"Content-Type": content_type},
            )
            r.raise_for_status()
            counts[i] += int(r.json()["accepted"])
            k += 1


def bench_serve(
    seconds: float,
    batch: int,
    clients: int,
    stages: int,
    *,
    llm: bool = False,
    gaps: int = 0,
    columnar: bool = False,
    arrow: bool = False,
) -> dict[str, float]:
    """Run the server and the clients; return throughput and RSS figures."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as state:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tailbudget",
                "serve",
                "--port",
                str(port),
                "--state-dir",
                state,
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_ready(url, proc)
            server = psutil.Process(proc.pid)
            bodies = _bodies(batch, 8, stages, llm=llm, gaps=gaps, columnar=columnar, arrow=arrow)
            kind = ARROW if arrow else "application/json"
            # Warm up, then take the starting RSS.
            httpx.post(
                f"{url}/v1/observations", content=bodies[0], headers={"Content-Type": kind}
            ).raise_for_status()
            rss_start = server.memory_info().rss
            cpu_start = _cpu_s(server)
            stop = threading.Event()
            counts = [0] * clients
            threads = [
                threading.Thread(target=_client, args=(url, bodies, stop, counts, i, kind))
                for i in range(clients)
            ]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            time.sleep(seconds)
            stop.set()
            for t in threads:
                t.join()
            elapsed = time.perf_counter() - t0
            rss_end = server.memory_info().rss
            cpu = _cpu_s(server) - cpu_start
            peak = _peak_rss(server)
            status = httpx.get(f"{url}/v1/status", timeout=10).json()
            total = sum(counts)
            assert status["observations_total"] == total + batch, "server count disagrees with acks"
            # servers before group commit do not report it: one fsync per batch
            wal = status.get("wal") or {"batches": 1, "fsyncs": 1}
        finally:
            proc.terminate()
            proc.wait(30)
    return {
        "observations": float(total),
        "seconds": elapsed,
        "rate": total / elapsed,
        "rss_start": rss_start / 2**20,
        "rss_end": rss_end / 2**20,
        "per_fsync": wal["batches"] / max(1, wal["fsyncs"]),
        "cpu_us": cpu / max(1, total) * 1e6,
        "rss_peak": peak / 2**20,
    }


def _cpu_s(proc: psutil.Process) -> float:
    """CPU seconds the process has used (user + system, every thread)."""
    t = proc.cpu_times()
    return float(t.user + t.system)


def _peak_rss(proc: psutil.Process) -> float:
    """The process's peak RSS in bytes (VmHWM on Linux; the current RSS elsewhere)."""
    try:
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return float(proc.memory_info().rss)


def bench_sketch(n: int) -> dict[str, float]:
    """In-process LatencySketch.add_many on n heavy-tailed values (batches of 1M)."""
    rng = np.random.default_rng(1)
    values = rng.lognormal(6.5, 0.6, n)
    sketch = LatencySketch(relative_accuracy=0.01)
    t0 = time.perf_counter()
    for start in range(0, n, 1_000_000):
        sketch.add_many(values[start : start + 1_000_000])
    elapsed = time.perf_counter() - t0
    proc = psutil.Process()
    return {
        "observations": float(n),
        "seconds": elapsed,
        "rate": n / elapsed,
        "rss_start": proc.memory_info().rss / 2**20,
        "rss_end": proc.memory_info().rss / 2**20,
        "per_fsync": float("nan"),
        "cpu_us": elapsed / n * 1e6,
        "rss_peak": _peak_rss(proc) / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="ingest duration (default 30)")
    parser.add_argument("--batch", type=int, default=2000, help="observations per POST")
    parser.add_argument("--clients", type=int, default=2, help="concurrent HTTP clients")
    parser.add_argument("--stages", type=int, default=0, help="per-stage times per observation")
    parser.add_argument("--quick", action="store_true", help="5 s and a small in-process run")
    parser.add_argument("--llm", action="store_true", help="plain e2e vs LLM observations")
    parser.add_argument("--gaps", type=int, default=32, help="itl gaps per observation (--llm)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (--llm)")
    parser.add_argument(
        "--forms",
        default="rows,columns,arrow",
        help="body forms to compare (--llm; default rows,columns,arrow)",
    )
    args = parser.parse_args()
    seconds = 5.0 if args.quick else args.seconds
    if args.llm:
        _llm_table(seconds, args)
        return
    serve = bench_serve(seconds, args.batch, args.clients, args.stages)
    sketch = bench_sketch(1_000_000 if args.quick else 10_000_000)
    print(
        f"# ingest: {seconds:g} s, batches of {args.batch}, {args.clients} client(s), "
        f"{args.stages} stage(s) per observation, loopback\n"
    )
    print(
        "| path | observations | seconds | obs/s | batches/fsync | RSS start (MiB) | RSS end (MiB) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    rows = (
        ("`tailbudget serve` POST /v1/observations (durable before the 200)", serve),
        ("`LatencySketch.add_many` in process", sketch),
    )
    for name, r in rows:
        per = "-" if math.isnan(r["per_fsync"]) else f"{r['per_fsync']:.2f}"
        print(
            f"| {name} | {r['observations']:,.0f} | {r['seconds']:.3f} | {r['rate']:,.0f} "
            f"| {per} | {r['rss_start']:.1f} | {r['rss_end']:.1f} |"
        )
    print(
        f"\nserve reaches {serve['rate'] / sketch['rate']:.2%} of the in-process sketch rate; "
        f"server RSS grew {serve['rss_end'] - serve['rss_start']:+.1f} MiB."
    )


def _llm_table(seconds: float, args: argparse.Namespace) -> None:
    llm = "+ `ttft_ms`, `output_tokens` (tpot derived), `itl_p99_ms`"
    gaps = {"llm": True, "gaps": args.gaps}
    kinds: tuple[tuple[str, str, dict[str, Any]], ...] = (
        ("rows", "plain e2e (`total_ms`, `error`)", {}),
        ("rows", f"LLM: {llm}", {"llm": True}),
        ("rows", f"LLM with every gap: `itl_ms` a list of {args.gaps}", gaps),
        ("columns", "plain e2e", {"columnar": True}),
        ("columns", f"LLM: {llm}", {"llm": True, "columnar": True}),
        ("arrow", "plain e2e", {"arrow": True}),
        ("arrow", f"LLM: {llm}", {"llm": True, "arrow": True}),
        ("arrow", f"LLM with every gap: `itl_ms` a list of {args.gaps}", {**gaps, "arrow": True}),
    )
    forms = set(args.forms.split(","))
    kinds = tuple(k for k in kinds if k[0] in forms)
    # Rounds alternate the kinds, so a busy machine slows each alike; the best round
    # each (fastest, and least server CPU per observation: the least disturbed).
    best: dict[str, dict[str, float]] = {}
    cpu: dict[str, float] = {}
    for _ in range(args.rounds):
        for form, name, kw in kinds:
            r = bench_serve(seconds, args.batch, args.clients, 0, **kw)
            key = f"{form} {name}"
            if key not in best or r["rate"] > best[key]["rate"]:
                best[key] = r
            cpu[key] = min(cpu.get(key, math.inf), r["cpu_us"])
    print(
        f"# ingest, plain vs LLM observations: {seconds:g} s each, best of {args.rounds} "
        f"alternating rounds, batches of {args.batch}, {args.clients} client(s), loopback\n"
    )
    print(
        "| body | observations | obs/s | time per obs vs plain (same body) "
        "| server CPU per obs (us) | CPU per obs vs plain | server peak RSS (MiB) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    plain = {f: f"{f} {name}" for f, name, kw in kinds if not kw.get("llm")}
    for form, name, _ in kinds:
        key, base = f"{form} {name}", plain[form]
        r = best[key]
        print(
            f"| {form} | {name} | {r['rate']:,.0f} | {best[base]['rate'] / r['rate']:.2f}x "
            f"| {cpu[key]:.2f} | {cpu[key] / cpu[base]:.2f}x | {r['rss_peak']:.1f} |"
        )
    print(
        "\ntime per obs: from the obs/s of the whole run (server, clients and fsync on "
        "the same cores); server CPU: user + system seconds of the serve process over "
        "the observations it acknowledged."
    )


if __name__ == "__main__":
    main()
