"""Hostile model files (issue 35, item 5): size and shape checked before any array is
allocated, JSON depth bounded, every parameter range-checked at load, naming it; the CLI
(`serve --model`) exits 2 with one line."""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tailbudget.errors import TailbudgetError
from tailbudget.logs import ReadOptions
from tailbudget.sim.fit import ModelOptions
from tailbudget.sim.fitting import fit_logs
from tailbudget.sim.model_file import load_model, save_model
from tests._net import free_port
from tests.sim.test_model_file import GRID, VLLM


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not GRID.is_dir():
        pytest.skip("shared data not present")
    model = fit_logs(VLLM[:1], ReadOptions(), ModelOptions()).model
    return save_model(model, tmp_path_factory.mktemp("hm") / "llm.npz")


def _arrays(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(bytes(z["meta"]).decode())
        return meta, {k: np.asarray(z[k]) for k in z.files if k != "meta"}


def _write(path: Path, meta: dict[str, Any] | bytes, arrays: dict[str, np.ndarray]) -> Path:
    raw = meta if isinstance(meta, bytes) else json.dumps(meta).encode()
    np.savez(path, meta=np.frombuffer(raw, dtype=np.uint8), **arrays)
    return path


def _with_param(saved: Path, tmp_path: Path, name: str, value: Any) -> Path:
    meta, arrays = _arrays(saved)
    for block in (list(meta["params"].values()), meta["llm"] or []):
        for p in block:
            if p["name"] == name:
                p["value"] = value
    return _write(tmp_path / "m.npz", meta, arrays)


def _one_line(path: Path, *needles: str) -> str:
    with pytest.raises(TailbudgetError) as info:
        load_model(path)
    text = str(info.value)
    assert "\n" not in text and info.value.param == "model", text
    for needle in needles:
        assert needle in text, text
    return text


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("token_budget", 0),  # every evaluation stepped forever; /v1/model/refit never answered
        ("provision_delay_s", 5e8),  # the server took 4.9 GB
        ("step_base_ms", float("nan")),  # "forecast in nan s"
        ("batch_limit", 0),
        ("batch_limit", 2.5),
        ("cold_factor", -1),
        ("cold_window_s", float("inf")),
        ("low_priority_share", 2),
        ("logging_overhead_ms", -5),
    ],
)
def test_a_parameter_out_of_range_is_refused_naming_it(
    saved: Path, tmp_path: Path, name: str, value: Any
) -> None:
    path = _with_param(saved, tmp_path, name, value)
    _one_line(path, f"parameter {name}")


def test_nested_metadata_is_refused_before_the_parser_recurses(saved: Path, tmp_path: Path) -> None:
    meta, arrays = _arrays(saved)
    raw = json.dumps(meta).encode()
    deep = raw[:-1] + b', "x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    _one_line(_write(tmp_path / "deep.npz", deep, arrays), "nests deeper")


def _npy_header(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    head = repr({"descr": descr, "fortran_order": False, "shape": shape}).encode()
    head += b" " * (-(len(head) + 11) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head


def test_a_huge_declared_array_is_refused_before_allocation(saved: Path, tmp_path: Path) -> None:
    # A small file whose work_ms header declares 1.2e9 float64 (9.6 GB).
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        with zipfile.ZipFile(saved) as src:
            zf.writestr("meta.npy", src.read("meta.npy"))
        zf.writestr("work_ms.npy", _npy_header((1_200_000_000,)) + b"\0" * 4096)
        zf.writestr("error.npy", _npy_header((10,), "|b1") + b"\0" * 10)
    path = tmp_path / "huge.npz"
    path.write_bytes(buf.getvalue())
    _one_line(path, "work_ms", "1200000000")


def test_an_object_array_or_a_2d_array_is_refused(saved: Path, tmp_path: Path) -> None:
    meta, arrays = _arrays(saved)
    arrays["work_ms"] = arrays["work_ms"].reshape(1, -1)
    _one_line(_write(tmp_path / "2d.npz", meta, arrays), "work_ms")


def test_samples_of_unequal_length_or_nan_are_refused(saved: Path, tmp_path: Path) -> None:
    meta, arrays = _arrays(saved)
    short = {**arrays, "output_tokens": arrays["output_tokens"][:-1]}
    _one_line(_write(tmp_path / "short.npz", meta, short), "output_tokens")
    nan = {**arrays, "output_tokens": np.where(arrays["output_tokens"] > 0, np.nan, 0.0)}
    _one_line(_write(tmp_path / "nan.npz", meta, nan), "output_tokens")


def test_a_file_over_the_size_bound_is_refused(
    saved: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tailbudget.sim import model_file

    monkeypatch.setattr(model_file, "MAX_FILE_BYTES", 1_000)
    _one_line(saved, "bytes, at most 1,000")


def test_serve_model_with_a_bad_file_exits_2_in_one_line(saved: Path, tmp_path: Path) -> None:
    path = _with_param(saved, tmp_path, "token_budget", 0)
    budget = tmp_path / "b.yaml"
    budget.write_text(
        "service: chat\nslo: {ttft: {p95: 2000}}\npipeline:\n"
        "  - stage: llm\n    budget: {p95: 9000}\npolicy: model\n"
    )
    # A subprocess: were the file accepted, serve would run until the timeout.
    run = subprocess.run(
        [sys.executable, "-m", "tailbudget", "serve", "--model", str(path), "--budget", str(budget), "--port",
         str(free_port()), "--state-dir", str(tmp_path / "state")],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")},
    )  # fmt: skip
    assert run.returncode == 2, run.stdout + run.stderr
    lines = (run.stdout + run.stderr).strip().splitlines()
    assert len(lines) == 1 and "parameter token_budget" in lines[0], lines


def test_the_saved_model_still_loads(saved: Path) -> None:
    assert load_model(saved).model.kind == "llm"


def test_a_refit_behind_a_long_evaluation_answers_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    # /v1/model/refit waited on the evaluation lock for ever (token_budget 0 spun every
    # evaluation); it now answers within REFIT_WAIT_S.
    import threading

    from tailbudget.sim import live

    monkeypatch.setattr(live, "REFIT_WAIT_S", 0.2)
    model = live.LiveModel.__new__(live.LiveModel)
    model.busy = threading.RLock()
    held, release = threading.Event(), threading.Event()

    def evaluation() -> None:
        with model.busy:
            held.set()
            release.wait(30)

    worker = threading.Thread(target=evaluation)
    worker.start()
    try:
        held.wait(30)
        with pytest.raises(TailbudgetError) as info:
            model.refit()
        assert info.value.param == "refit" and "retry" in str(info.value)
    finally:
        release.set()
        worker.join()


def test_a_refit_that_fits_out_of_range_is_refused(
    monkeypatch: pytest.MonkeyPatch, saved: Path
) -> None:
    from dataclasses import replace

    from tailbudget.sim import live

    good = load_model(saved).model
    assert good.llm is not None
    bad_llm = replace(good.llm, token_budget=replace(good.llm.token_budget, value=0.0))

    class Fitted:
        model = replace(good, llm=bad_llm)

    monkeypatch.setattr(live, "fit_logs", lambda *a, **k: Fitted())
    with pytest.raises(TailbudgetError) as info:
        live.load_source(live.ModelSource(None, ("log.csv",)))
    assert "parameter token_budget" in str(info.value) and info.value.param == "refit"
