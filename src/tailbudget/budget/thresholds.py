"""Thresholds as written in a policy (`1.8s`, `90% of ttft.p95`, `1%`, `1.2x`) -> numbers."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from tailbudget._units import PERCENTILES, parse_duration_s
from tailbudget.budget.metric import MetricRef, parse_metric
from tailbudget.budget.model import SLO
from tailbudget.budget.objectives import Objectives
from tailbudget.errors import PolicyError, TailbudgetError

_NUM = r"(\d+(?:\.\d+)?)"
_SHARE = re.compile(rf"^{_NUM}\s*%\s*of\s*(?:the\s+)?(?:slo\.)?(\S+)$")
_PERCENT = re.compile(rf"^{_NUM}\s*%$")
_TIMES = re.compile(rf"^{_NUM}\s*x(?:\s*(?:the\s+)?baseline)?$")
TargetTable = Mapping[str, float]
"""Objective targets by canonical metric name (`p95`, `ttft.p95`, `error_rate`, `goodput`)."""


def slo_targets(slo: SLO | Objectives | None) -> dict[str, float]:
    """The end-to-end p50/p95/p99 and error-rate targets by metric name."""
    objectives = None if slo is None else Objectives.coerce(slo)
    if objectives is None:
        return {}
    e2e = objectives.e2e()
    out = {p: float(e2e[p]) for p in PERCENTILES if p in e2e}
    if objectives.error_rate is not None:
        out["error_rate"] = float(objectives.error_rate)
    return out


def _target(targets: TargetTable, name: str, path: str) -> float:
    value = targets.get(name)
    if value is None:
        raise PolicyError(
            f"{path}: refers to slo.{name}, which the budget does not set; "
            f"add slo.{name} or write the threshold as a number"
        )
    return float(value)


def resolve_threshold(
    raw: Any, metric: str, targets: TargetTable | SLO | Objectives | None, path: str
) -> tuple[float, str]:
    """A threshold as written -> (resolved value, text); PolicyError naming `path`."""
    table = targets if isinstance(targets, Mapping) else slo_targets(targets)
    ref = parse_metric(metric)
    value, text = _threshold(raw, ref, table, path)
    if not (value > 0 and math.isfinite(value)):
        raise PolicyError(f"{path}: must resolve to a positive finite number, got {raw!r}")
    return value, text


def _share_of(share: float, ref: MetricRef, other: str, targets: TargetTable, path: str) -> float:
    if ref.ratio_of_baseline:
        if other == "baseline":
            return share
        want = "'120% of baseline'" if ref.higher_is_worse else "'95% of baseline'"
    else:
        try:
            target = parse_metric(other)
        except PolicyError:
            target = None
        if target is not None and target.kind == ref.kind:
            return share * _target(targets, target.name, path)
        want = {
            "quantile": "a latency percentile (e.g. '90% of p95', '90% of ttft.p95')",
            "error_rate": "'100% of error_rate'",
            "goodput": "'100% of goodput'",
        }[ref.kind]
    raise PolicyError(f"{path}: a {ref.name} threshold can be a share of {want}, got {other!r}")


def _threshold(raw: Any, ref: MetricRef, targets: TargetTable, path: str) -> tuple[float, str]:
    latency = ref.latency
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise PolicyError(f"{path}: must be a number or text like '90% of p95', got {raw!r}")
    if isinstance(raw, int | float):
        if not raw > 0 or raw != raw or raw == float("inf"):
            raise PolicyError(f"{path}: must be a positive number, got {raw!r}")
        return float(raw), f"{raw:g}{' ms' if latency else ''}"
    text = " ".join(raw.strip().lower().split())
    if m := _SHARE.match(text):
        share = float(m.group(1)) / 100.0
        other = raw.strip().split()[-1].removeprefix("slo.")
        return _share_of(share, ref, other, targets, path), raw.strip()
    if latency:
        try:
            ms = parse_duration_s(text if re.search(r"[a-z]$", text) else f"{text}ms") * 1000.0
        except TailbudgetError:
            raise PolicyError(
                f"{path}: a {ref.name} threshold is milliseconds (1800, '1.8s') or a share "
                f"of an objective ('90% of {ref.name}'), got {raw!r}"
            ) from None
        if ms <= 0:
            raise PolicyError(f"{path}: must be above 0 ms, got {raw!r}")
        return ms, raw.strip()
    if m := _PERCENT.match(text):
        return float(m.group(1)) / 100.0, raw.strip()
    if ref.ratio_of_baseline and (m := _TIMES.match(text)):
        return float(m.group(1)), raw.strip()
    try:
        value = float(text)
    except ValueError:
        hint = "1.2, '1.2x' or '120% of baseline'" if ref.ratio_of_baseline else "0.01 or '1%'"
        raise PolicyError(
            f"{path}: a {ref.name} threshold looks like {hint}, got {raw!r}"
        ) from None
    if not (value > 0 and math.isfinite(value)):
        raise PolicyError(f"{path}: must be a positive number, got {raw!r}")
    return value, raw.strip()


__all__ = ["TargetTable", "resolve_threshold", "slo_targets"]
