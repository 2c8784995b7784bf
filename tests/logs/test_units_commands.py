"""Every command that turns a log into figures refuses a log that looks like seconds.

init --from, rebudget, replay, simulate and capacity read the log with the audit's one
check (`logs.units.check_log_unit`): exit 2 naming --unit, `.param == "unit"` in the
API, and with the unit stated, the figures of the same log in milliseconds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import tailbudget as tb
from tailbudget.cli import app
from tailbudget.errors import LogError

runner = CliRunner()
STAGES = ["--total", "latency", "--stage", "retrieve", "--stage", "generate"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same 400 requests over 30 minutes, in seconds and in milliseconds."""
    root = tmp_path_factory.mktemp("units")
    rng = np.random.default_rng(3)
    n = 400
    a, b = rng.lognormal(-2, 0.3, n), rng.lognormal(-0.7, 0.3, n)
    start = pd.Timestamp("2026-01-01")
    ts = start + pd.to_timedelta(np.sort(rng.uniform(0, 1800, n)), unit="s")
    out = {}
    for name, factor in (("s", 1.0), ("ms", 1000.0)):
        path = root / name / "log.csv"
        path.parent.mkdir()
        frame = {"timestamp": ts, "latency": (a + b) * factor}
        frame |= {"retrieve": a * factor, "generate": b * factor}
        pd.DataFrame(frame).to_csv(path, index=False)
        out[name] = path
    budget = tb.measure_budget(str(out["ms"]), "p99=2000", total="latency", stage=STAGES[3::2])
    out["budget"] = budget.save(root / "budget.yaml")
    return out


def _same(a: Any, b: Any) -> bool:
    """Equal up to float rounding (x/1000*1000 need not be x to the last bit)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, (int, float)):
        return bool(a == pytest.approx(b, rel=1e-6, abs=1e-9))
    return bool(a == b)


def _json(report: Any, logs: dict[str, Path]) -> Any:
    # the same figures from two files: only the file's name may differ
    text = report.to_json().replace(str(logs["s"].parent), str(logs["ms"].parent))
    data = json.loads(text)
    if isinstance(data.get("notes"), list):  # ...and the note that it was converted
        data["notes"] = [n for n in data["notes"] if "converted from s" not in n]
    return data


Call = Callable[[Path, dict[str, Path], dict[str, Any]], Any]
API: dict[str, Call] = {
    "replay": lambda log, lg, kw: tb.replay(str(log), str(lg["budget"]), **kw),
    "rebudget": lambda log, lg, kw: tb.rebudget(str(lg["budget"]), str(log), **kw),
    "simulate": lambda log, lg, kw: tb.simulate(
        str(log), "p99=2000", duration="10m", policy="fixed", **kw
    ),
    "capacity": lambda log, lg, kw: tb.capacity(
        str(log), "p99=2000", load="1,2", duration="10m", **kw
    ),
}
CLI: dict[str, Callable[[Path, dict[str, Path]], list[str]]] = {
    "init": lambda log, lg: ["init", "--from", str(log), "--slo", "p99=2000", *STAGES],
    "rebudget": lambda log, lg: ["rebudget", str(lg["budget"]), str(log)],
    "replay": lambda log, lg: ["replay", str(log), "--budget", str(lg["budget"])],
    "simulate": lambda log, lg: ["simulate", str(log), "--slo", "p99=2000", "--duration", "10m"],
    "capacity": lambda log, lg: ["capacity", str(log), "--slo", "p99=2000", "--load", "1,2"],
}


@pytest.mark.parametrize("command", sorted(CLI))
def test_the_cli_refuses_a_log_in_seconds_and_names_the_flag(command, logs):
    result = runner.invoke(app, CLI[command](logs["s"], logs))
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: --unit"), result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", sorted(CLI))
def test_the_cli_with_unit_s_runs(command, logs):
    result = runner.invoke(app, [*CLI[command](logs["s"], logs), "--unit", "s"])
    assert result.exit_code in (0, 1), result.output
    assert "error:" not in result.output


@pytest.mark.parametrize("command", sorted(API))
def test_the_api_raises_with_param_unit(command, logs):
    with pytest.raises(LogError) as raised:
        API[command](logs["s"], logs, {})
    assert raised.value.param == "unit"


@pytest.mark.parametrize("command", sorted(API))
def test_unit_s_gives_the_figures_of_the_log_in_ms(command, logs):
    as_s = _json(API[command](logs["s"], logs, {"unit": "s"}), logs)
    as_ms = _json(API[command](logs["ms"], logs, {}), logs)
    assert _same(as_s, as_ms)


def test_measure_budget_in_seconds(logs):
    kw: dict[str, Any] = {"total": "latency", "stage": ["retrieve", "generate"]}
    with pytest.raises(LogError) as raised:
        tb.measure_budget(str(logs["s"]), "p99=2000", **kw)
    assert raised.value.param == "unit"
    as_s = tb.measure_budget(str(logs["s"]), "p99=2000", unit="s", **kw)
    as_ms = tb.measure_budget(str(logs["ms"]), "p99=2000", **kw)
    slices = [line for line in as_ms.text.splitlines() if "budget:" in line]
    assert slices and slices == [line for line in as_s.text.splitlines() if "budget:" in line]
    assert "  unit: s" in as_s.text  # the budget reads the log again in its unit
    assert as_s.fits == as_ms.fits


def test_a_stated_ms_budget_log_and_a_named_column_pass(logs, tmp_path):
    named = tmp_path / "named.csv"
    pd.read_csv(logs["s"]).rename(columns={"latency": "latency_ms"}).to_csv(named, index=False)
    rep = tb.simulate(str(named), "p99=2000", duration="10m", policy="fixed")
    assert rep.to_json()


def _seconds_in_ms_column(tmp_path: Path) -> Path:
    # A log in seconds whose column still says ms (the case): the reader takes
    # the name's word for it, the audit only warns.
    rng = np.random.default_rng(3)
    n = 500
    frame = pd.DataFrame(
        {
            "ts": pd.date_range("2026-01-01", periods=n, freq="s"),
            "total_ms": rng.lognormal(np.log(0.4), 0.4, n),
        }
    )
    path = tmp_path / "seconds_named_ms.csv"
    frame.to_csv(path, index=False)
    return path


def test_a_gate_never_passes_on_latencies_that_look_like_seconds(tmp_path):
    log = _seconds_in_ms_column(tmp_path)
    gate = ["audit", str(log), "--slo", "p99=900", "--format", "json", "--fail-on-breach"]
    refused = runner.invoke(app, gate)
    assert refused.exit_code == 2, refused.output
    assert "--unit: latencies look like seconds" in refused.output
    assert "Traceback" not in refused.output
    # Stated explicitly, the gate runs on the unit given: ms (a fast service), or s.
    assert runner.invoke(app, [*gate, "--unit", "ms"]).exit_code == 0
    assert runner.invoke(app, [*gate, "--unit", "s"]).exit_code in (0, 1)
    budget = tmp_path / "b.yaml"
    budget.write_text(
        "service: s\nslo: {p99: 900}\nlog: {unit: ms}\n"
        "pipeline:\n  - stage: app\n    budget: {p99: 800}\n"
    )
    stated = runner.invoke(app, ["audit", str(log), "--budget", str(budget), "--fail-on-breach"])
    assert stated.exit_code == 0, stated.output
    # Without a gate the report is written, with the warning.
    plain = runner.invoke(app, gate[:-1])
    assert plain.exit_code == 0 and "warning: latencies look like seconds" in plain.output


def test_every_gate_asks_for_the_unit_on_latencies_that_look_like_seconds(tmp_path):
    # rebudget --fail-on-gap and capacity --fail-on-breach, as audit --fail-on-breach:
    # a total_ms column holding seconds never passes a gate unless the unit is stated.
    log = _seconds_in_ms_column(tmp_path)
    budget = tmp_path / "b.yaml"
    text = "service: s\nslo: {p99: 900}\npipeline:\n  - stage: app\n    budget: {p99: 800}\n"
    budget.write_text(text)
    gates = {
        "--fail-on-gap": ["rebudget", str(budget), str(log), "--fail-on-gap"],
        "--fail-on-breach": ["capacity", str(log), "--slo", "p99=900", "--load", "1",
                             "--duration", "2m", "--fail-on-breach"],
    }  # fmt: skip
    for flag, argv in gates.items():
        refused = runner.invoke(app, argv)
        assert refused.exit_code == 2, (flag, refused.output)
        assert "--unit: latencies look like seconds" in refused.output
        assert f"{flag} does not pass on a guessed unit" in refused.output
        assert "Traceback" not in refused.output
        assert runner.invoke(app, [*argv, "--unit", "ms"]).exit_code in (0, 1)
    stated = tmp_path / "stated.yaml"
    stated.write_text(text.replace("pipeline:", "log: {unit: ms}\npipeline:"))
    ok = runner.invoke(app, ["rebudget", str(stated), str(log), "--fail-on-gap"])
    assert ok.exit_code in (0, 1), ok.output


def test_init_from_warns_on_latencies_that_look_like_seconds(tmp_path):
    # init has no gate, but plan gates the budget it writes: a 1 ms budget from a log in
    # seconds would pass; init --from says so unless the unit is given.
    log = _seconds_in_ms_column(tmp_path)
    frame = pd.read_csv(log)
    frame["app_ms"] = frame["total_ms"]
    frame.to_csv(log, index=False)
    res = runner.invoke(app, ["init", "--from", str(log), "-o", str(tmp_path / "b.yaml")])
    assert res.exit_code == 0 and "warning: latencies look like seconds" in res.output
    again = ["init", "--from", str(log), "-o", str(tmp_path / "c.yaml"), "--unit", "ms"]
    assert "look like seconds" not in runner.invoke(app, again).output
