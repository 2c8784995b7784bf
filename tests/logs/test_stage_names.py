"""Stage names stay as the log wrote them, in every report; engine columns are mapped inside."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from tailbudget.cli import app
from tailbudget.logs import ReadOptions, read_log
from tailbudget.logs.columns import engine_columns

SEAT = "ts-seat-service_getLeftTicketOfInterval"


def _log(path: Path, n: int = 2000) -> Path:
    rng = np.random.default_rng(5)
    seat = rng.lognormal(np.log(80), 0.5, n)
    dash = rng.lognormal(np.log(500), 0.2, n)  # "a-b": slow
    under = rng.lognormal(np.log(10), 0.2, n)  # "a_b": fast
    lines = [f"request_id,a-b_ms,{SEAT}_ms,a_b_ms,total_ms"]
    lines += [
        f"{i},{d:.3f},{s:.3f},{u:.3f},{d + s + u + 3:.3f}"
        for i, (d, s, u) in enumerate(zip(dash, seat, under, strict=True))
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_engine_columns_are_safe_and_distinct() -> None:
    cols = engine_columns(["a-b", "a_b", "A_B", SEAT], taken=["total_ms"])
    assert cols["a-b"] != cols["a_b"] and len({c.lower() for c in cols.values()}) == 4
    assert all(c.replace("_", "").isalnum() for c in cols.values())


def test_names_survive_reading_and_do_not_swap(tmp_path: Path) -> None:
    log = read_log(str(_log(tmp_path / "log.csv")), ReadOptions())
    assert set(log.stages) == {"a-b", SEAT, "a_b"}
    means = {s: float(log.table[log.stage_column(s)].mean().execute()) for s in log.stages}
    assert means["a-b"] > 400 and means["a_b"] < 15


def test_every_report_keeps_the_names(tmp_path: Path) -> None:
    path = _log(tmp_path / "log.csv")
    out = {}
    for f in ("json", "md", "html"):
        res = CliRunner().invoke(app, ["audit", str(path), "--slo", "p99=900", "-f", f])
        assert res.exit_code == 0, res.output
        out[f] = res.output
    r = json.loads(out["json"])
    stages = {s["name"]: s for s in r["stages"]}
    assert {"a-b", SEAT, "a_b"} <= set(stages)
    assert stages["a-b"]["p50"] > 400 and stages["a_b"]["p50"] < 15
    assert r["tail"]["driver"] == "a-b"
    for text in out.values():
        assert SEAT in text and "ts_seat_service" not in text
        assert "a-b" in text
