"""A log whose unit is only assumed does not gate when its figures look like seconds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from tailbudget.audit import AuditConfig, run_audit
from tailbudget.cli import app
from tailbudget.errors import LogError
from tailbudget.logs import ReadOptions, read_log
from tailbudget.logs.units import looks_like_seconds, unit_stated

runner = CliRunner()


def _seconds_log(path: Path, column: str = "Latency") -> Path:
    rng = np.random.default_rng(1)
    pd.DataFrame({column: rng.lognormal(-0.5, 0.4, 500)}).to_csv(path, index=False)
    return path


def test_a_log_in_seconds_does_not_pass_a_gate_as_one_ms(tmp_path):
    log = _seconds_log(tmp_path / "secs.csv")
    result = runner.invoke(app, ["audit", str(log), "--slo", "p99=900", "--fail-on-breach"])
    assert result.exit_code == 2, result.output
    assert "pass" not in result.output and "Traceback" not in result.output
    assert "unit" in result.output and "look like seconds" in result.output
    assert " s " in result.output  # the fix: the unit to state


def test_stating_the_unit_lets_the_log_through(tmp_path):
    log = _seconds_log(tmp_path / "secs.csv")
    as_s = runner.invoke(app, ["audit", str(log), "--slo", "p99=900", "--unit", "s"])
    assert as_s.exit_code == 0 and "breach" in as_s.output
    as_ms = runner.invoke(app, ["audit", str(log), "--slo", "p99=900", "--unit", "ms"])
    assert as_ms.exit_code == 0 and "pass" in as_ms.output


def test_the_library_refuses_and_names_the_parameter(tmp_path):
    config = AuditConfig.of_e2e({"p99": 900.0})
    log = _seconds_log(tmp_path / "secs.csv")
    with pytest.raises(LogError, match=r"^unit: "):
        run_audit(read_log(str(log)), config)
    as_s = run_audit(read_log(str(log), ReadOptions(unit="s")), config)
    assert as_s.snapshot.verdict["p99"] == "breach"
    named = _seconds_log(tmp_path / "named.csv", column="total_ms")
    assert run_audit(read_log(str(named)), config).snapshot.verdict["p99"] == "pass"


def test_what_counts_as_stated_and_as_seconds():
    assert unit_stated("s", "Latency", ())
    assert unit_stated(None, "latency_ms", ())
    assert not unit_stated(None, "Latency", ())
    assert not unit_stated(None, "latency_s", ())  # names seconds, would be read as ms
    assert unit_stated(None, None, ("db_ms", "llm_ms"))
    assert looks_like_seconds(0.6, 1.4, 2.1)
    assert not looks_like_seconds(120.0, 900.0, 2000.0)
