"""Hypothesis drives every command's options over small generated files.

Whatever it picks (extreme latencies, empty cells, timestamps in 1970 or 2200, odd
durations, replica counts of 1e12, names with line breaks), each command must hold the
CLI contract: exit 0, 1 or 2; no traceback; on exit 2 one `error:` line; JSON on stdout
that a strict RFC 8259 parser takes; the process's peak memory under 1 GB. Each case runs
under an alarm, so one that would hang fails the test naming itself instead of stalling CI.
Examples are derandomized (the same cases every run) and few enough for well under two
minutes on a 2-core machine.
"""

from __future__ import annotations

import math
import resource
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tailbudget.cli import app
from tests._json import strict_json
from tests.cli._inputs import BUDGET

runner = CliRunner()
CASE_SECONDS = 45
"""A case past this is a hang (every case is a few seconds on a loaded machine)."""
GIB_KIB = 1 << 20

latency = st.one_of(
    st.floats(min_value=0.5, max_value=5_000, allow_nan=False),
    st.sampled_from([0.0, -1.0, 1e308, 5e-324, math.nan, math.inf, 1e12]),
)
cell = st.one_of(latency.map(repr), st.sampled_from(["", "n/a", "1e999", "-0"]))
epoch = st.one_of(st.just(1_700_000_000.0), st.sampled_from([0.0, 7_258_118_400.0, -5.0, math.nan]))


@st.composite
def log_rows(draw: Any) -> str:
    n = draw(st.integers(min_value=1, max_value=40))
    base = draw(epoch)
    step = draw(st.sampled_from([0.5, 1.0, 30.0]))
    odd = draw(st.sets(st.integers(0, n - 1), max_size=3))
    rows = ["ts,total_ms,db_ms,llm_ms,error"]
    for i in range(n):
        total = draw(cell) if i in odd else f"{100.0 + 7.0 * (i % 13):.1f}"
        db = draw(cell) if i in odd else f"{10.0 + (i % 5):.1f}"
        ts = base + i * step if i not in odd else draw(epoch)
        rows.append(f"{ts!r},{total},{db},{50.0 + i % 7:.1f},{int(i % 11 == 0)}")
    return "\n".join(rows) + "\n"


slo = st.sampled_from(
    ["p99=900", "p95=800,p99=1500", "db.p99=300", "p50=100", "p99=inf", "p99=0", "llm.p95=1"]
)


def _mostly(good: list[str], bad: list[str]) -> st.SearchStrategy[str]:
    """Half the time a value that works (so runs get past their checks), else any."""
    return st.one_of(st.sampled_from(good), st.sampled_from(good + bad))


duration = _mostly(["1m", "5m"], ["0", "0s", "10000h", "2x", "-1m"])
arrivals = _mostly(
    ["poisson:2", "burst:1", "burst:20", "TRACE"],
    ["poisson:1e9", "poisson:-1", "poisson:nan", "burst:1e12", "burst:0"],
)
big_int = _mostly(["1", "3"], ["0", "-2", str(10**12), "1e12", "abc"])
name = st.sampled_from(["web", "web.app-1", "Web_App", "web\nx", "a" * 300, "-x", ""])
url = st.sampled_from(["http://p:9090", "ftp://x", "http://a b", "prom:9090", "http://p:99999"])
trace = st.sampled_from(
    [b"ts\n0\n1\n2\n", b"\x00\xff\xfe", "ts\n1\ncaf\xe9\n".encode("latin-1"), b"ts\n1\nnan\n",
     b"ts\n1\n-1e12\n", b"ts\n1\n1e12\n", b"", b"ts\n",
     b"ts,output_tokens\n0,-5\n1,3\n", b"ts,output_tokens\n0,nan\n", b"ts,input_tokens\n0,inf\n",
     b"ts,output_tokens\n0,1000000000\n1,3\n", b"ts,output_tokens\n0,5000000\n1,3\n"]
)  # fmt: skip
model_knobs = {
    "--seed": _mostly(["0", "7"], ["-1", str(2**64)]),
    "--provision-delay": _mostly(["45s"], ["0s", "1e300h", "999999999999s", "-1s", "nan"]),
    "--cold-window-min": _mostly(["5"], ["0", "-1", "nan", "inf", "1e9"]),
    "--cold-factor": _mostly(["2"], ["1", "0.5", "inf", "nan", "-1"]),
}
"""The model options simulate and capacity share (issue 35: tracebacks, hangs, exit 0)."""


def _pairs(draw: Any, options: dict[str, st.SearchStrategy[str]]) -> list[str]:
    out: list[str] = []
    for flag, values in options.items():
        if draw(st.booleans()):
            out += [flag, draw(values)]
    return out


COMMANDS = ("audit", "plan", "rebudget", "replay", "simulate", "capacity", "export", "init")


@st.composite
def command_lines(draw: Any, command: str) -> tuple[str, list[str], str, bytes]:
    """The command's arguments (LOG, BUDGET and TRACE filled in later), the log, the trace."""
    log, tr = draw(log_rows()), draw(trace)
    if command == "audit":
        args = ["audit", "LOG", "--format", "json", "--slo", draw(slo)]
        args += _pairs(draw, {"--cold-window-min": st.sampled_from(["5", "0", "-1", "1e9"])})
    elif command == "plan":
        args = ["plan", "BUDGET", "--format", "json"]
        args += _pairs(draw, {"--seed": big_int})
    elif command == "rebudget":
        args = ["rebudget", "BUDGET", "LOG", "--format", "json"]
    elif command == "replay":
        args = ["replay", "LOG", "--format", "json"]
        args += _pairs(draw, {"--baseline-p99": st.sampled_from(["900", "inf", "0", "-1"])})
    elif command == "simulate":
        args = ["simulate", "LOG", "--format", "json", "--slo", draw(slo)]
        args += _pairs(
            draw,
            {"--duration": duration, "--arrivals": arrivals, "--replicas": big_int,
             "--concurrency": big_int, "--policy": st.sampled_from(
                 ["fixed", "fixed:2", "fixed:100000000000", "fixed:1e11", "budget", "hpa:x"]),
             "--requests": big_int, "--load": st.sampled_from(["1", "2", "0", "inf", "1e9", "nan"]),
             "--logging-overhead-ms": _mostly(["5"], ["inf", "-1", "nan"]), **model_knobs},
        )  # fmt: skip
    elif command == "capacity":
        args = ["capacity", "LOG", "--format", "json", "--slo", draw(slo)]
        args += _pairs(
            draw,
            {"--duration": duration, "--arrivals": arrivals, "--concurrency": big_int,
             "--load": st.sampled_from(["1", "1,2", "0", "inf", "1e9", "x", "1,nan"]),
             **model_knobs},
        )  # fmt: skip
    elif command == "export":
        target = draw(st.sampled_from(["keda", "argo-rollouts", "flagger", "prometheus-rules"]))
        args = ["export", "BUDGET", "--to", target]
        args += _pairs(draw, {"--scale-target": name, "--namespace": name, "--prometheus-url": url})
    else:
        args = ["init", "--from", "LOG", "--slo", draw(slo)] if draw(st.booleans()) else ["init"]
        args += ["-o", draw(st.sampled_from(["OUT", "OUT/" + "x" * 300, "LOG/x.yaml"]))]
    return command, args, log, tr


class CaseTimeout(Exception):
    """A case ran past CASE_SECONDS."""


@contextmanager
def _alarm(seconds: int) -> Iterator[None]:
    def ring(signum: int, frame: Any) -> None:
        raise CaseTimeout(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _fill(args: list[str], files: dict[str, Path]) -> list[str]:
    out = []
    for a in args:
        for key, path in files.items():
            a = a.replace(key, str(path)) if a.startswith(key) else a
        out.append(a)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_holds_the_contract(tmp_path_factory, command: str) -> None:
    _fuzz(tmp_path_factory, command)


def _fuzz(tmp_path_factory: Any, command: str) -> None:
    @_SETTINGS
    @given(case=command_lines(command))
    def run(case: tuple[str, list[str], str, bytes]) -> None:
        _one_case(tmp_path_factory, case)

    run()


_SETTINGS = settings(
    max_examples=20,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
"""Twenty cases a command, the same every run: about a minute for all eight."""


def _one_case(tmp_path_factory: Any, case: tuple[str, list[str], str, bytes]) -> None:
    command, args, log_text, trace_bytes = case
    d = tmp_path_factory.mktemp("fuzz")
    files = {"LOG": d / "log.csv", "BUDGET": d / "b.yaml", "TRACE": d / "trace.csv", "OUT": d / "o"}
    files["LOG"].write_text(log_text)
    files["BUDGET"].write_text(BUDGET)
    files["TRACE"].write_bytes(trace_bytes)
    argv = _fill(args, files)
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with _alarm(CASE_SECONDS):
        result = runner.invoke(app, argv)
    where = f"{command}: {argv!r}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{where} raised {result.exception!r}") from result.exception
    assert result.exit_code in (0, 1, 2), where
    assert "Traceback" not in result.output, where
    if result.exit_code == 2:
        errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error: ")]
        assert len(errors) == 1, (where, result.stderr)
    elif "--format" in argv and argv[argv.index("--format") + 1] == "json":
        strict_json(result.stdout)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert peak <= max(peak_before, GIB_KIB), (where, peak)


# ---- model files (serve --model, /v1/model/refit) --------------------------------------

BAD_VALUES = [math.nan, math.inf, -math.inf, -1.0, 0.0, 0.5, 1e300, 5e8, "x", None, True, [1]]


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory: Any) -> Path:
    from tailbudget.logs import ReadOptions
    from tailbudget.sim.fit import ModelOptions
    from tailbudget.sim.fitting import fit_logs
    from tailbudget.sim.model_file import save_model
    from tests.sim.test_model_file import GRID, VLLM

    if not GRID.is_dir():
        pytest.skip("shared data not present")
    model = fit_logs(VLLM[:1], ReadOptions(), ModelOptions()).model
    return save_model(model, tmp_path_factory.mktemp("model") / "m.npz")


@st.composite
def model_mutations(draw: Any) -> tuple[str, Any, Any]:
    kind = draw(st.sampled_from(["param", "truncate", "flip"]))
    if kind == "param":
        return kind, draw(st.integers(0, 30)), draw(st.sampled_from(BAD_VALUES))
    return kind, draw(st.floats(0.0, 1.0)), draw(st.integers(0, 255))


def _mutated(saved: Path, folder: Path, case: tuple[str, Any, Any]) -> Path:
    import json

    import numpy as np

    kind, where, value = case
    out = folder / "mutated.npz"
    if kind == "param":
        with np.load(saved, allow_pickle=False) as z:
            meta = json.loads(bytes(z["meta"]).decode())
            arrays = {k: np.asarray(z[k]) for k in z.files if k != "meta"}
        params = [*meta["params"].values(), *(meta["llm"] or [])]
        params[where % len(params)]["value"] = value
        raw = json.dumps(meta).encode()  # NaN/Infinity as Python writes them
        np.savez(out, meta=np.frombuffer(raw, dtype=np.uint8), **arrays)
    else:
        body = bytearray(saved.read_bytes())
        at = int(where * (len(body) - 1))
        if kind == "truncate":
            body = body[:at]
        else:
            body[at] ^= value or 1
        out.write_bytes(bytes(body))
    return out


def test_model_files_load_in_range_or_are_one_line(saved_model: Path, tmp_path_factory) -> None:
    from tailbudget.errors import TailbudgetError
    from tailbudget.sim.limits import RANGES
    from tailbudget.sim.model_file import load_model

    @settings(max_examples=40, derandomize=True, database=None, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
    @given(case=model_mutations())
    def run(case: tuple[str, Any, Any]) -> None:
        path = _mutated(saved_model, tmp_path_factory.mktemp("mm"), case)
        with _alarm(CASE_SECONDS):
            try:
                model = load_model(path).model
            except TailbudgetError as exc:
                assert "\n" not in str(exc), (case, str(exc))
                return
        for p in model.params():
            assert RANGES[p.name].problem(p.value) is None, (case, p)

    run()
