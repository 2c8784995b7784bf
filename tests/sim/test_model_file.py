"""`--save-model FILE`: the fitted model on disk, read back the same (for serve --model)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tailbudget.cli import app
from tailbudget.errors import TailbudgetError
from tailbudget.logs import ReadOptions
from tailbudget.sim.fit import ModelOptions
from tailbudget.sim.fitting import fit_logs
from tailbudget.sim.model_file import load_model, save_model
from tests.sim.synth import doubling_log

GRID = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "vllm_grid"
VLLM = [str(GRID / f"vllm_llama33-70b_04_tp4_pp2_IB_qps_{q}.json") for q in ("01", "04")]


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return doubling_log(tmp_path_factory.mktemp("mf") / "doubling.parquet")


def test_round_trip_queue_model(log: Path, tmp_path: Path) -> None:
    model = fit_logs([str(log)], ReadOptions(), ModelOptions(concurrency=4)).model
    saved = load_model(save_model(model, tmp_path / "m.npz"))
    back = saved.model
    assert [p.to_dict() for p in back.params()] == [p.to_dict() for p in model.params()]
    # 239,349 logged requests: a seeded 200,000 are kept, and the notes say so
    assert back.samples.size == 200_000 < model.samples.size
    assert any("keeps a random 200,000" in n for n in back.notes)
    q = [50, 95, 99]
    assert np.percentile(back.samples.work_ms, q) == pytest.approx(
        np.percentile(model.samples.work_ms, q), rel=0.02
    )
    assert sorted(back.samples.stages) == sorted(model.samples.stages)
    assert saved.fitted_at.endswith("Z")


def test_round_trip_llm_model(tmp_path: Path) -> None:
    if not GRID.is_dir():
        pytest.skip("shared data not present")
    model = fit_logs(VLLM, ReadOptions(), ModelOptions()).model
    back = load_model(save_model(model, tmp_path / "llm.npz")).model
    assert back.kind == "llm" and back.llm is not None and model.llm is not None
    assert [p.value for p in back.llm.params()] == pytest.approx(
        [p.value for p in model.llm.params()], rel=1e-6, abs=1e-6
    )
    assert back.samples.output_tokens is not None
    # the runs' hit-share levels a simulation interpolates between come back too
    assert back.llm.hit_levels == model.llm.hit_levels and len(model.llm.hit_levels) == len(VLLM)


@pytest.mark.parametrize("body", [b"", b"not a zip", b"PK\x03\x04garbage"])
def test_not_a_model_file_is_one_line(tmp_path: Path, body: bytes) -> None:
    bad = tmp_path / "bad.npz"
    bad.write_bytes(body)
    with pytest.raises(TailbudgetError, match="not a tailbudget model file"):
        load_model(bad)


def test_cli_save_model(log: Path, tmp_path: Path) -> None:
    out = tmp_path / "saved.npz"
    res = CliRunner().invoke(
        app,
        ["capacity", str(log), "--slo", "p95=1000", "--concurrency", "4", "--load", "1",
         "--duration", "5m", "--format", "json", "--save-model", str(out)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    params = {p["name"]: p["value"] for p in json.loads(res.output)["model"]["parameters"]}
    assert load_model(out).model.concurrency.value == params["concurrency"]
