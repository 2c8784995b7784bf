"""Simulator speed: one hour at 100 requests/s, tailbudget's engine vs the same M/M/c in SimPy.

Both sides simulate 360,000 Poisson arrivals at 100/s on 10 single-slot
replicas with exponential work (mean 80 ms, utilization 0.8). tailbudget's
side also carries 10 stage times per request (resampled whole requests) and
runs the budget's policy (the live Controller, evaluated every 10 s) in the
loop; SimPy's side is the bare queue (a `Resource` of capacity 10). Each side
runs in its own child process, so peak RSS is measured per side. One run
each; the table also shows the e2e percentiles both sides produced.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

RATE = 100.0
MEAN_S = 0.08
SERVERS = 10
STAGES = 10


def _rss_mib() -> float:
    status = Path("/proc/self/status").read_text().splitlines()
    hwm = next((ln for ln in status if ln.startswith("VmHWM:")), None)
    if hwm:
        return int(hwm.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _pcts(e2e_s: np.ndarray) -> list[float]:
    return [round(float(x) * 1000.0, 1) for x in np.quantile(e2e_s, [0.5, 0.95, 0.99])]


def child_tailbudget(seconds: float, policy: str = "budget") -> None:
    """tailbudget's queue engine with the budget (reactive) or model policy in the loop."""
    from tailbudget.budget.objectives import parse_objectives
    from tailbudget.budget.policy import parse_policy
    from tailbudget.sim.arrivals import ArrivalSpec
    from tailbudget.sim.model import Param, ServiceModel, WorkSamples
    from tailbudget.sim.policies import PolicySpec
    from tailbudget.sim.run import simulate

    rng = np.random.default_rng(1)
    n = int(RATE * seconds)
    work = rng.exponential(MEAN_S * 1000.0, size=n)
    split = rng.dirichlet(np.ones(STAGES), size=n) * work[:, None]
    samples = WorkSamples(
        work_ms=work,
        error=np.zeros(n, dtype=bool),
        stages={f"stage{k}": split[:, k] for k in range(STAGES)},
    )
    p = lambda name, v, u: Param(name, v, u, "stated")  # noqa: E731
    model = ServiceModel(
        kind="queue",
        samples=samples,
        concurrency=p("concurrency", 1.0, "requests"),
        cold_factor=p("cold_factor", 1.0, "x"),
        cold_window_s=p("cold_window_s", 300.0, "s"),
        provision_delay_s=p("provision_delay_s", 30.0, "s"),
        logging_overhead_ms=p("logging_overhead_ms", 0.0, "ms"),
        low_priority_share=p("low_priority_share", 0.3, "share"),
    )
    t0, c0 = time.perf_counter(), time.process_time()
    rep = simulate(
        model,
        parse_objectives("p95=2800,p99=5200"),
        arrivals=ArrivalSpec("poisson", rate=RATE),
        policies=[PolicySpec(policy)],
        budget_policy=parse_policy("default"),
        replicas=SERVERS,
        duration_s=seconds,
        seed=2,
        floor=False,
    )
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    run = rep.runs[0]
    pcts = [round(o.measured_ms or 0.0, 1) for o in run.objectives]
    evals = int(seconds / 10)
    info = {"requests": run.arrived, "pcts": pcts, "evaluations": evals}
    print(json.dumps({"seconds": secs, "cpu": cpu, "rss_mib": _rss_mib(), **info}))


def child_simpy(seconds: float) -> None:
    """The same M/M/c queue as SimPy processes."""
    import simpy

    rng = np.random.default_rng(2)
    n = int(RATE * seconds * 1.01)
    gaps = rng.exponential(1.0 / RATE, size=n).tolist()
    work = rng.exponential(MEAN_S, size=n).tolist()
    e2e: list[float] = []

    def request(env: simpy.Environment, servers: simpy.Resource, w: float) -> object:
        start = env.now
        with servers.request() as slot:
            yield slot
            yield env.timeout(w)
        e2e.append(env.now - start)

    def source(env: simpy.Environment, servers: simpy.Resource) -> object:
        for k in range(n):
            yield env.timeout(gaps[k])
            if env.now > seconds:
                return
            env.process(request(env, servers, work[k]))

    t0, c0 = time.perf_counter(), time.process_time()
    env = simpy.Environment()
    servers = simpy.Resource(env, capacity=SERVERS)
    env.process(source(env, servers))
    env.run()
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    arr = np.asarray(e2e)
    print(
        json.dumps(
            {
                "seconds": secs,
                "cpu": cpu,
                "rss_mib": _rss_mib(),
                "requests": arr.size,
                "pcts": _pcts(arr),
            }
        )
    )


def _run(args: list[str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"child {args[1]} failed:\n{proc.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def _row(name: str, r: dict[str, Any], pcts: str, ratio: str) -> str:
    return (
        f"| {name} | {r['requests']:,} | {r['seconds']:.2f} | {r['cpu']:.2f} | "
        f"{r['rss_mib']:.0f} | {pcts} | {ratio} |"
    )


def main() -> None:
    """Run both sides once and print the markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3600.0, help="simulated time")
    ap.add_argument("--quick", action="store_true", help="6 simulated minutes")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        if a.child[0] == "simpy":
            child_simpy(float(a.child[1]))
        else:
            kind = a.child[0].removeprefix("tailbudget").removeprefix("-") or "budget"
            child_tailbudget(float(a.child[1]), kind)
        return
    secs = 360.0 if a.quick else a.seconds
    ours = _run(["--child", "tailbudget", str(secs)])
    peer = _run(["--child", "simpy", str(secs)])
    model = _run(["--child", "tailbudget-model", str(secs)])
    util = RATE * MEAN_S / SERVERS
    print(
        f"\n{secs / 3600:g} h at {RATE:g} requests/s on {SERVERS} single-slot replicas, "
        f"exponential work (mean {MEAN_S * 1000:g} ms, utilization {util:g}); one run each\n"
    )
    print(
        "| run | requests | wall s | CPU s | peak RSS MiB | e2e percentiles ms "
        "| speed vs SimPy (wall / CPU) |"
    )
    print("|---|---:|---:|---:|---:|---|---:|")
    print(
        _row(
            "SimPy 4 `Resource` (bare M/M/c)",
            peer,
            "p50/p95/p99 " + "/".join(map(str, peer["pcts"])),
            "1.0x",
        )
    )
    wall = peer["seconds"] / ours["seconds"]
    cpu = peer["cpu"] / ours["cpu"]
    print(
        _row(
            f"tailbudget simulate, {STAGES} stages, budget policy in the loop",
            ours,
            f"p95/p99 {ours['pcts'][0]}/{ours['pcts'][1]}",
            f"{wall:.1f}x / {cpu:.1f}x",
        )
    )
    print(
        _row(
            f"tailbudget simulate, {STAGES} stages, model policy in the loop",
            model,
            f"p95/p99 {model['pcts'][0]}/{model['pcts'][1]}",
            f"{peer['seconds'] / model['seconds']:.1f}x / {peer['cpu'] / model['cpu']:.1f}x",
        )
    )
    print(
        f"\nmodel policy / budget policy run time: {model['seconds'] / ours['seconds']:.2f}x wall, "
        f"{model['cpu'] / ours['cpu']:.2f}x CPU (goal: within 2x)"
    )
    print("\nGoal: >= 10x SimPy's speed and <= 10 s for the hour.")


if __name__ == "__main__":
    main()
