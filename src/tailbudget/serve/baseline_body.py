"""The body of `POST /v1/baseline`: one form, known metrics, a bounded count.

`{"p99_ms": 850}` (the end-to-end p99) or `{"baselines": {"ttft.p99": 420,
"goodput": 0.97}}`, not both at once (which p99 would win is a guess). A
baseline names end to end, ttft, tpot, itl, goodput, or a stage the policy
reads or the service has observed; anything else is a typo a rule would never
read. The baselines kept are bounded as stage names are, so a client cannot
grow them without end.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from tailbudget.budget.metric import parse_metric
from tailbudget.budget.policy import parse_baselines
from tailbudget.errors import PolicyError

__all__ = ["EXAMPLE", "MAX_BASELINES", "BadBaseline", "parse_baseline_body"]

MAX_BASELINES = 64
"""Most baselines one service keeps (every metric a policy could compare is far fewer)."""

EXAMPLE = '{"p99_ms": 850} or {"baselines": {"ttft.p99": 420, "goodput": 0.97}}'

_SERIES = frozenset({"e2e", "ttft", "tpot", "itl"})


class BadBaseline(ValueError):
    """The body is not a baseline; the message is the one-line reason for the 400."""


def parse_baseline_body(
    value: Any, stages: Collection[str], kept: Collection[str]
) -> dict[str, float]:
    """{metric: baseline} (`p99` for the end-to-end form) from the JSON body.

    `stages`: the stage names a baseline may name; `kept`: the baselines held now."""
    if not isinstance(value, dict):
        raise BadBaseline(f"send a JSON object: {EXAMPLE}")
    extra = sorted(set(value) - {"p99_ms", "baselines"})
    if extra:
        raise BadBaseline(f"unknown field {extra[0][:40]!r}; send {EXAMPLE}")
    if "p99_ms" in value and "baselines" in value:
        raise BadBaseline(
            'send p99_ms or baselines, not both; put the end-to-end one in baselines as "p99"'
        )
    if "baselines" in value:
        return _named(value["baselines"], stages, kept)
    p99 = value.get("p99_ms")
    if isinstance(p99, bool) or not isinstance(p99, int | float) or not 0 < p99 < 1e9:
        raise BadBaseline(f"p99_ms must be a positive number of ms, got {p99!r}; send {EXAMPLE}")
    return {"p99": float(p99)}


def _named(raw: Any, stages: Collection[str], kept: Collection[str]) -> dict[str, float]:
    if isinstance(raw, dict) and len(raw) > MAX_BASELINES:
        raise BadBaseline(f"baselines has {len(raw):,} keys; at most {MAX_BASELINES}")
    if isinstance(raw, dict):
        for key in raw:
            _check_known(str(key), stages)
    try:
        wanted = parse_baselines(raw, "baselines")
    except PolicyError as exc:
        raise BadBaseline(str(exc)) from None
    if not wanted:
        raise BadBaseline(f"baselines is empty; send {EXAMPLE}")
    if any(not 0 < v < 1e9 for v in wanted.values()):
        name = next(k for k, v in wanted.items() if not 0 < v < 1e9)
        raise BadBaseline(f"baselines.{name}: must be below 1e9 ms, got {wanted[name]:g}")
    total = len(set(kept) | set(wanted))
    if total > MAX_BASELINES:
        raise BadBaseline(
            f"{total} baselines would be kept; at most {MAX_BASELINES} (set fewer percentiles)"
        )
    return wanted


def _check_known(key: str, stages: Collection[str]) -> None:
    try:
        ref = parse_metric(key)
    except PolicyError:
        return  # parse_baselines names the bad name and the forms it takes
    if ref.kind == "quantile" and ref.series not in _SERIES and ref.series not in stages:
        raise BadBaseline(
            f"baselines.{key[:60]}: no stage {ref.series[:40]!r} is read by the policy or "
            "observed; a baseline is for e2e, ttft, tpot, itl, goodput or a known stage"
        )
