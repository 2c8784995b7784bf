"""`--save-model` keeps the classes: each request's class (the class mix) and the class
list with its objectives come back from the file; a malformed classes block or class
code array is refused in one line naming the file, as every other hostile model file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import tailbudget as tb
from tailbudget.cli import app
from tailbudget.demo.tiers import BUDGET, tiered
from tailbudget.errors import TailbudgetError
from tailbudget.sim.model_classes import CODE
from tailbudget.sim.model_file import load_model

runner = CliRunner()


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    tmp = tmp_path_factory.mktemp("mc")
    df = tiered(n=2000, seed=5)
    log, budget, out = tmp / "tiers.parquet", tmp / "tiers.yaml", tmp / "model.npz"
    df.to_parquet(log, index=False)
    budget.write_text(BUDGET)
    args = ["simulate", str(log), "--budget", str(budget), "--policy", "fixed:40"]
    result = runner.invoke(app, [*args, "--save-model", str(out), "-f", "json"])
    assert result.exit_code == 0, result.output
    return out, df


def test_the_class_mix_and_objectives_round_trip(saved) -> None:
    path, df = saved
    back = load_model(path)
    labels = back.model.samples.classes
    assert labels is not None and labels.size == len(df)
    # The mix: each class's share of the samples is the log's.
    for name, share in df.tier.value_counts(normalize=True).items():
        assert abs(float(np.mean(labels == name)) - share) < 1e-9
    cs = back.classes
    assert cs is not None and cs.by == "tier" and cs.names() == ("premium", "standard", "batch")
    premium = cs.get("premium")
    assert premium is not None and premium.priority == 0
    assert premium.objectives is not None
    assert [(o.key, o.target_ms, o.gated) for o in premium.objectives] == [("e2e.p95", 800, True)]
    assert cs.shed_order()[0] == "batch"
    batch = cs.get("batch")
    assert batch is not None and batch.skip == ("rerank",)


def test_a_model_without_classes_has_none(tmp_path) -> None:
    log = tmp_path / "plain.parquet"
    tiered(n=500, seed=5).drop(columns=["tier"]).to_parquet(log, index=False)
    out = tmp_path / "m.npz"
    tb.simulate(log, "p99=1500", policy=["fixed:40"], save_model=out)
    back = load_model(out)
    assert back.classes is None and back.model.samples.classes is None


def _arrays(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(bytes(z["meta"]).decode())
        return meta, {k: np.asarray(z[k]) for k in z.files if k != "meta"}


def _write(path: Path, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> Path:
    raw = json.dumps(meta).encode()
    np.savez(path, meta=np.frombuffer(raw, dtype=np.uint8), **arrays)
    return path


def _bent(saved, tmp_path: Path, bend) -> Path:
    meta, arrays = _arrays(saved[0])
    bend(meta["classes"], arrays)
    return _write(tmp_path / "bent.npz", meta, arrays)


def _set(key: str, value: Any):
    def bend(block: dict[str, Any], _arrays: dict[str, np.ndarray]) -> None:
        block[key] = value

    return bend


def _set_class(key: str, value: Any):
    def bend(block: dict[str, Any], _arrays: dict[str, np.ndarray]) -> None:
        block["classes"][0][key] = value

    return bend


def _set_target(value: Any):
    def bend(block: dict[str, Any], _arrays: dict[str, np.ndarray]) -> None:
        block["classes"][0]["objectives"]["items"][0]["target_ms"] = value

    return bend


def _codes(values: np.ndarray):
    def bend(_block: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        arrays[CODE] = values

    return bend


@pytest.mark.parametrize(
    ("bend", "needle"),
    [
        (_set("values", "premium"), "classes"),
        (_set("values", ["a\x00b"]), "classes"),
        (_set("values", [f"v{i}" for i in range(5000)]), "classes"),
        (_set("by", ""), "class_by"),
        (_set("classes", {"premium": 1}), "classes"),
        (_set_class("name", "other"), "'other' is not a class name"),
        (_set_class("name", "bad name!"), "is not a class name"),
        (_set_class("priority", 10**9), "priority"),
        (_set_class("priority", True), "priority"),
        (_set_class("skip", "rerank"), "classes"),
        (_set_target(float("nan")), "target"),
        (_set_target(-5), "target"),
        (_set_target("800"), "target"),
        (_codes(np.full(2000, 99, dtype=np.int32)), "class code outside"),
        (_codes(np.full(2000, -1, dtype=np.int32)), "class code outside"),
        (_codes(np.zeros(3, dtype=np.int32)), "classes"),
        (_codes(np.zeros(2000, dtype=np.float64)), "classes"),
    ],
)
def test_a_malformed_classes_block_is_one_line(saved, tmp_path, bend, needle) -> None:
    path = _bent(saved, tmp_path, bend)
    with pytest.raises(TailbudgetError) as info:
        load_model(path)
    text = str(info.value)
    assert "\n" not in text and info.value.param == "model", text
    assert str(path) in text and needle in text, text


def test_codes_without_a_classes_block_are_refused(saved, tmp_path) -> None:
    meta, arrays = _arrays(saved[0])
    del meta["classes"]
    path = _write(tmp_path / "orphan.npz", meta, arrays)
    with pytest.raises(TailbudgetError, match="classes"):
        load_model(path)
