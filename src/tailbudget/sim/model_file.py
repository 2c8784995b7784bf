"""A fitted service model on disk: `--save-model FILE` writes it, `serve --model FILE` reads it.

The file is a NumPy `.npz` archive (read with pickling off): the work samples as
arrays, and the parameters, sources and notes as one JSON document. A log of more
than `MAX_SAMPLES` requests keeps a seeded random `MAX_SAMPLES` of them (the
model's `notes` say so), so the file stays small whatever the log's size.
"""

from __future__ import annotations

import json
import time
import zipfile
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tailbudget.errors import TailbudgetError
from tailbudget.sim.model import LLMParams, Param, ServiceModel, WorkSamples

__all__ = ["MAX_SAMPLES", "SavedModel", "load_model", "save_model"]

MAX_SAMPLES = 200_000
FORMAT = "tailbudget-model/1"
_OPTIONAL = ("input_tokens", "output_tokens", "load_rps")


@dataclass(frozen=True)
class SavedModel:
    """A model read back, with where and when it was fitted."""

    model: ServiceModel
    fitted_at: str
    """ISO-8601 UTC time of the fit."""
    path: str


def _param(d: dict[str, Any]) -> Param:
    return Param(str(d["name"]), float(d["value"]), str(d["unit"]), d["source"], str(d["note"]))


def _subsample(s: WorkSamples) -> tuple[WorkSamples, str | None]:
    if s.size <= MAX_SAMPLES:
        return s, None
    keep = np.sort(np.random.default_rng(0).choice(s.size, MAX_SAMPLES, replace=False))

    def cut(x: npt.NDArray[Any] | None) -> npt.NDArray[Any] | None:
        return None if x is None else x[keep]

    out = WorkSamples(
        work_ms=s.work_ms[keep],
        error=s.error[keep],
        stages={k: v[keep] for k, v in s.stages.items()},
        input_tokens=cut(s.input_tokens),
        output_tokens=cut(s.output_tokens),
        load_rps=cut(s.load_rps),
    )
    return out, f"the saved model keeps a random {MAX_SAMPLES:,} of the log's {s.size:,} requests"


def save_model(model: ServiceModel, path: str | Path) -> Path:
    """Write `model` to `path` (an `.npz` archive); returns the path written."""
    samples, note = _subsample(model.samples)
    meta = {
        "format": FORMAT,
        "fitted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "kind": model.kind,
        "params": {
            f.name: getattr(model, f.name).to_dict()
            for f in fields(model)
            if isinstance(getattr(model, f.name), Param)
        },
        "llm": None if model.llm is None else [p.to_dict() for p in model.llm.params()],
        "sources": list(model.sources),
        "load_levels": list(model.load_levels),
        "fit_quality": model.fit_quality,
        "notes": [*model.notes, *([note] if note else [])],
        "stages": sorted(samples.stages),
    }
    arrays: dict[str, npt.NDArray[Any]] = {
        "work_ms": samples.work_ms,
        "error": samples.error,
        "meta": np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8),
    }
    for k, v in samples.stages.items():
        arrays[f"stage:{k}"] = v
    for name in _OPTIONAL:
        value = getattr(samples, name)
        if value is not None:
            arrays[name] = value
    out = Path(path)
    try:
        with out.open("wb") as fh:
            np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]
    except OSError as exc:
        raise TailbudgetError(
            f"{out}: cannot write the model ({exc.strerror})", param="save_model"
        ) from None
    return out


def load_model(path: str | Path) -> SavedModel:
    """Read a model `save_model` wrote; anything else is a one-line TailbudgetError."""
    p = Path(path)
    bad = f"{p}: not a tailbudget model file (simulate and capacity write one with save_model)"
    try:
        with p.open("rb") as fh, np.load(fh, allow_pickle=False) as z:
            meta = json.loads(bytes(z["meta"]).decode("utf-8"))
            if meta.get("format") != FORMAT:
                raise TailbudgetError(bad, param="model")
            arrays = {k: np.asarray(z[k]) for k in z.files if k != "meta"}
        return SavedModel(_build(meta, arrays), str(meta["fitted_at"]), str(p))
    except OSError as exc:
        raise TailbudgetError(f"{p}: cannot read the model ({exc})", param="model") from None
    except (KeyError, ValueError, TypeError, EOFError, AttributeError, IndexError,
            zipfile.BadZipFile, UnicodeDecodeError):  # fmt: skip
        raise TailbudgetError(bad, param="model") from None


def _build(meta: dict[str, Any], a: dict[str, npt.NDArray[Any]]) -> ServiceModel:
    work = np.asarray(a["work_ms"], dtype=np.float64)
    samples = WorkSamples(
        work_ms=work,
        error=np.asarray(a["error"], dtype=bool),
        stages={
            k.removeprefix("stage:"): np.asarray(v, dtype=np.float64)
            for k, v in a.items()
            if k.startswith("stage:")
        },
        **{n: np.asarray(a[n], dtype=np.float64) for n in _OPTIONAL if n in a},
    )
    if work.size == 0 or not np.all(np.isfinite(work)) or samples.error.size != work.size:
        raise ValueError("samples")
    params = {k: _param(v) for k, v in meta["params"].items()}
    llm = None
    if meta.get("llm") is not None:
        llm = LLMParams(*(_param(d) for d in meta["llm"]))
    if meta["kind"] not in ("queue", "llm") or (meta["kind"] == "llm") != (llm is not None):
        raise ValueError("kind")
    return ServiceModel(
        kind=meta["kind"],
        samples=samples,
        llm=llm,
        sources=tuple(str(s) for s in meta.get("sources", [])),
        load_levels=tuple(meta.get("load_levels", [])),
        fit_quality=dict(meta.get("fit_quality", {})),
        notes=tuple(str(n) for n in meta.get("notes", [])),
        **params,
    )
