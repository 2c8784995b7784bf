"""A fitted service model on disk: `--save-model FILE` writes it, `serve --model FILE` reads it.

The file is a NumPy `.npz` archive (read with pickling off): the work samples as
arrays, and the parameters, sources and notes as one JSON document. A log of more
than `MAX_SAMPLES` requests keeps a seeded random `MAX_SAMPLES` of them (the
model's `notes` say so), so the file stays small whatever the log's size.
"""

from __future__ import annotations

import json
import os
import re
import struct
import time
import zipfile
import zlib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tailbudget.errors import TailbudgetError
from tailbudget.sim.limits import check_params
from tailbudget.sim.model import LLMParams, Param, ServiceModel, WorkSamples
from tailbudget.sim.model_classes import CODE, read_classes, written_classes

if TYPE_CHECKING:
    from tailbudget.budget.classes import ClassSet

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
    classes: ClassSet | None = None
    """The classes the model was fitted with (each request's class is in its samples)."""


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
        classes=cut(s.classes),
    )
    return out, f"the saved model keeps a random {MAX_SAMPLES:,} of the log's {s.size:,} requests"


def save_model(model: ServiceModel, path: str | Path, classes: ClassSet | None = None) -> Path:
    """Write `model` to `path` (an `.npz` archive); returns the path written. With
    `classes` (and each sample's class), the file keeps the class mix and objectives."""
    samples, note = _subsample(model.samples)
    kept = written_classes(samples.classes, classes)
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
        "hit_levels": [] if model.llm is None else [list(lv) for lv in model.llm.hit_levels],
        "sources": list(model.sources),
        "load_levels": list(model.load_levels),
        "fit_quality": model.fit_quality,
        "notes": [*model.notes, *([note] if note else [])],
        "stages": sorted(samples.stages),
        **({"classes": kept[0]} if kept is not None else {}),
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
    if kept is not None:
        arrays[CODE] = kept[1]
    out = Path(path)
    try:
        with out.open("wb") as fh:
            np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]
    except OSError as exc:
        raise TailbudgetError(
            f"{out}: cannot write the model ({exc.strerror})", param="save_model"
        ) from None
    return out


MAX_FILE_BYTES = 256 * 1024 * 1024
"""A saved model is a few MB (MAX_SAMPLES requests); a larger file is not one of ours."""
MAX_ARRAYS = 1_024
MAX_META_BYTES = 4 * 1024 * 1024
MAX_JSON_DEPTH = 16
"""The metadata nests 3 deep; deeper is refused before the parser recurses."""


def _refuse(p: Path, why: str) -> TailbudgetError:
    return TailbudgetError(
        f"{p}: not a tailbudget model file ({why}); simulate and capacity write one with "
        "save_model",
        param="model",
    )


def _check_shapes(p: Path, fh: Any) -> None:
    """Every member's declared size, dtype and shape, read from the .npy headers before
    NumPy allocates anything: a 9 MB file declaring a 9.6 GB array stops here."""
    with zipfile.ZipFile(fh) as zf:
        infos = zf.infolist()
        if len(infos) > MAX_ARRAYS:
            raise _refuse(p, f"{len(infos):,} arrays, at most {MAX_ARRAYS:,}")
        for info in infos:
            meta = info.filename == "meta.npy"
            limit = MAX_META_BYTES if meta else MAX_SAMPLES
            with zf.open(info) as member:
                version = np.lib.format.read_magic(member)
                read = (
                    np.lib.format.read_array_header_1_0
                    if version == (1, 0)
                    else np.lib.format.read_array_header_2_0
                )
                shape, _, dtype = read(member)
            ok_kind = dtype.kind in ("u",) if meta else dtype.kind in ("f", "b", "i", "u")
            if len(shape) != 1 or shape[0] > limit or not ok_kind or dtype.itemsize > 8:
                raise _refuse(
                    p, f"array {info.filename!r} is {dtype.str} of shape {shape}, at most {limit:,}"
                )
    fh.seek(0)


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')


def _json_depth(raw: bytes) -> int:
    """How deep the JSON nests (strings stripped), counted without recursion."""
    depth = top = 0
    for c in _STRING.sub(b"", raw):
        if c in b"[{":
            depth += 1
            top = max(top, depth)
        elif c in b"]}":
            depth -= 1
    return top


def _meta(p: Path, raw: bytes) -> dict[str, Any]:
    if _json_depth(raw) > MAX_JSON_DEPTH:
        raise _refuse(p, f"its metadata nests deeper than {MAX_JSON_DEPTH}")
    meta = json.loads(raw.decode("utf-8"))
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise _refuse(p, f"no {FORMAT!r} metadata")
    return meta


def load_model(path: str | Path) -> SavedModel:
    """Read a model `save_model` wrote; anything else is a one-line TailbudgetError.

    Size, array shapes and JSON depth are checked before anything is allocated or parsed,
    and every parameter against its range (tailbudget.sim.limits) before it is used."""
    p = Path(path)
    bad = f"{p}: not a tailbudget model file (simulate and capacity write one with save_model)"
    try:
        with p.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > MAX_FILE_BYTES:
                raise _refuse(p, f"{size:,} bytes, at most {MAX_FILE_BYTES:,}")
            _check_shapes(p, fh)
            with np.load(fh, allow_pickle=False) as z:
                meta = _meta(p, bytes(z["meta"]))
                arrays = {k: np.asarray(z[k]) for k in z.files if k != "meta"}
        model = _build(p, meta, arrays)
        read = read_classes(str(p), meta.get("classes"), arrays.get(CODE), model.samples.size)
        if read is None:
            return SavedModel(model, str(meta["fitted_at"]), str(p))
        model = replace(model, samples=replace(model.samples, classes=read.labels))
        return SavedModel(model, str(meta["fitted_at"]), str(p), read.classes)
    except OSError as exc:
        raise TailbudgetError(f"{p}: cannot read the model ({exc})", param="model") from None
    except (KeyError, ValueError, TypeError, EOFError, AttributeError, IndexError,
            zipfile.BadZipFile, UnicodeDecodeError, RecursionError, zlib.error, struct.error,
            OverflowError, NotImplementedError):  # fmt: skip
        raise TailbudgetError(bad, param="model") from None


def _check_samples(p: Path, s: WorkSamples) -> None:
    """Equal lengths; finite, non-negative times and token counts."""
    named = {"work_ms": s.work_ms, **{f"stage {k}": v for k, v in s.stages.items()}}
    named.update({n: getattr(s, n) for n in _OPTIONAL if getattr(s, n) is not None})
    if s.work_ms.size == 0:
        raise _refuse(p, "no requests")
    for name, values in (*named.items(), ("error", s.error)):
        if values.size != s.work_ms.size:
            raise _refuse(p, f"{name} holds {values.size:,} values for {s.work_ms.size:,} requests")
    for name, values in named.items():
        if name == "load_rps":
            continue
        if not np.all(np.isfinite(values)) or np.any(values < 0):
            raise TailbudgetError(
                f"{p}: {name} holds a value that is not a finite time or count >= 0",
                param="model",
            )


def _build(p: Path, meta: dict[str, Any], a: dict[str, npt.NDArray[Any]]) -> ServiceModel:
    work = np.asarray(a["work_ms"], dtype=np.float64)
    optional: dict[str, Any] = {n: np.asarray(a[n], dtype=np.float64) for n in _OPTIONAL if n in a}
    samples = WorkSamples(
        work_ms=work,
        error=np.asarray(a["error"], dtype=bool),
        stages={
            k.removeprefix("stage:"): np.asarray(v, dtype=np.float64)
            for k, v in a.items()
            if k.startswith("stage:")
        },
        **optional,
    )
    _check_samples(p, samples)
    params = {k: _param(v) for k, v in meta["params"].items()}
    llm = None
    if meta.get("llm") is not None:
        levels = tuple((float(r), float(h), bool(b)) for r, h, b in meta.get("hit_levels", []))
        llm = replace(LLMParams(*(_param(d) for d in meta["llm"])), hit_levels=levels)
    given = [*params.values(), *(llm.params() if llm is not None else [])]
    check_params(((q.name, q.value) for q in given), f"{p}", "model")
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
        **params,  # type: ignore[arg-type]
    )
