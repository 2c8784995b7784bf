"""The classes a saved model keeps (`--save-model`): each request's class and the class list
with its objectives, written beside the work samples and checked when read back.

Each request's class is stored as a whole-number code into a list of names in the
metadata (the archive holds numbers only, read with pickling off); the class list is
{by, classes: [{name, priority, skip, objectives}]} with each objective's fields, so a
model read back carries the class mix it was fitted on and each class's objectives.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from itertools import islice
from typing import Any

import numpy as np
import numpy.typing as npt

from tailbudget._json import JsonDict
from tailbudget.budget.classes import CLASS_NAME, OTHER, ClassSet, ServiceClass
from tailbudget.budget.objectives import Goodput, Objective, Objectives
from tailbudget.errors import TailbudgetError

__all__ = ["MAX_VALUES", "ClassesRead", "read_classes", "written_classes"]

MAX_VALUES = 1_024
"""Distinct class values a model file keeps; the rest (fewest requests first) fold into
`other`, as serve folds labels outside the class list."""
_VALUE = re.compile(r"^[^\x00-\x1f\x7f]{0,200}\Z")
CODE = "class_code"
"""The archive member holding each request's class code."""


def written_classes(
    labels: npt.NDArray[np.str_] | None, classes: ClassSet | None
) -> tuple[JsonDict, npt.NDArray[np.int32]] | None:
    """The metadata block and the codes array for `labels` (None: no classes)."""
    if labels is None or classes is None:
        return None
    values, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    codes = np.asarray(inverse, dtype=np.int32).reshape(-1)
    names = [str(v) for v in values]
    present = set(names)
    keep = [n for n in classes.names() if n in present]
    ranked = (names[i] for i in np.argsort(-counts, kind="stable") if _VALUE.match(names[i]))
    listed = set(keep)
    keep += list(islice((n for n in ranked if n not in listed), MAX_VALUES - 1 - len(keep)))
    kept = sorted(keep)
    if len(kept) < len(names):
        kept += [] if OTHER in kept else [OTHER]
        index = {n: i for i, n in enumerate(kept)}
        remap = np.asarray([index.get(n, index[OTHER]) for n in names], dtype=np.int32)
        codes = remap[codes]
        names = kept
    block: JsonDict = {
        "by": classes.by,
        "values": names,
        "classes": [_class(c) for c in classes.classes],
    }
    return block, np.asarray(codes, dtype=np.int32)


def _class(c: ServiceClass) -> JsonDict:
    o = c.objectives
    return {
        "name": c.name,
        "priority": c.priority,
        "skip": list(c.skip),
        "objectives": None if o is None else _objectives(o),
    }


def _objectives(o: Objectives) -> JsonDict:
    return {
        "items": [
            {"metric": x.metric, "percentile": x.percentile, "target_ms": x.target_ms,
             "gated": x.gated, "output_tokens": x.output_tokens}
            for x in o.items
        ],
        "goodput": None if o.goodput is None
        else {"min": o.goodput.min, "thresholds": dict(o.goodput.thresholds)},
        "error_rate": o.error_rate,
        "environment": o.environment,
    }  # fmt: skip


@dataclass(frozen=True)
class ClassesRead:
    """A model file's classes read back: each request's class and the class list."""

    labels: npt.NDArray[np.str_]
    classes: ClassSet


def read_classes(
    where: str, block: Any, codes: npt.NDArray[Any] | None, size: int
) -> ClassesRead | None:
    """The classes of a model file's metadata and codes; a malformed block is a
    TailbudgetError naming the file (param `model`), never a half-read model."""
    if block is None and codes is None:
        return None
    try:
        return _read(block, codes, size)
    except (TailbudgetError, KeyError, TypeError, ValueError, IndexError) as exc:
        why = str(exc) if isinstance(exc, TailbudgetError) else "a malformed classes block"
        raise TailbudgetError(
            f"{where}: not a tailbudget model file (classes: {why})", param="model"
        ) from None


def _read(block: Any, codes: npt.NDArray[Any] | None, size: int) -> ClassesRead:
    if not isinstance(block, dict) or codes is None:
        raise ValueError("classes")
    values = block["values"]
    if (
        not isinstance(values, list)
        or not 0 < len(values) <= MAX_VALUES
        or not all(isinstance(v, str) and _VALUE.match(v) for v in values)
    ):
        raise ValueError("values")
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iu" or codes.size != size:
        raise ValueError("codes")
    if codes.size and (int(codes.min()) < 0 or int(codes.max()) >= len(values)):
        raise TailbudgetError(f"a class code outside its {len(values)} values")
    listed = block["classes"]
    if not isinstance(listed, list) or len(listed) > MAX_VALUES:
        raise ValueError("classes")
    classes = ClassSet(str(block["by"]), tuple(_listed(c) for c in listed))
    labels = np.asarray(values, dtype=np.str_)[codes.astype(np.int64)]
    return ClassesRead(labels, classes)


def _listed(c: Any) -> ServiceClass:
    name, priority, skip = c["name"], c["priority"], c["skip"]
    if not isinstance(name, str) or not CLASS_NAME.match(name) or name == OTHER:
        raise TailbudgetError(f"{name!r} is not a class name")
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 1000:
        raise TailbudgetError(f"class {name}: priority {priority!r} is not 0 to 1000")
    if not isinstance(skip, list) or not all(isinstance(s, str) for s in skip):
        raise ValueError("skip")
    objs = None if c["objectives"] is None else _read_objectives(c["objectives"])
    return ServiceClass(name, objs, priority, tuple(skip))


def _read_objectives(o: dict[str, Any]) -> Objectives:
    items = tuple(
        Objective(
            str(x["metric"]), str(x["percentile"]), _number(x["target_ms"]),
            bool(x["gated"]), x["output_tokens"],
        )
        for x in o["items"]
    )  # fmt: skip
    g = o["goodput"]
    goodput = None if g is None else Goodput(g["min"], dict(g["thresholds"]))
    rate = o["error_rate"]
    if rate is not None and not (isinstance(rate, int | float) and 0.0 <= rate <= 1.0):
        raise TailbudgetError(f"error_rate {rate!r} is not a share")
    env = o["environment"]
    return Objectives(items, goodput, rate, None if env is None else str(env))


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TailbudgetError(f"target {value!r} is not a finite number of ms")
    return float(value)
