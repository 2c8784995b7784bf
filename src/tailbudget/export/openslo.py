"""`--to openslo` and `tailbudget import openslo`: OpenSLO v1 SLO documents and back.

Reference: https://github.com/OpenSLO/OpenSLO#slo (apiVersion openslo/v1, kind SLO,
ratioMetric with good/total, budgetingMethod Occurrences).

A latency percentile pN <= T ms is the ratio SLI "requests at or under T"
(the histogram bucket `le=T`) over all requests, with target N/100; the error
rate is the ratio of ok requests with target 1 - error_rate. One SLO per SLO
percentile (labelled gated or not, so the environment survives the trip) and
one for the error rate. Annotations carry the exact figures, so importing our
own export is lossless; a foreign document is read from its target and the
`le` bound of its good query.
"""

from __future__ import annotations

import math
import re
from typing import TypedDict

import yaml

from tailbudget import _metric_names as names
from tailbudget._fleet import FleetPreset, FleetSeries, preset
from tailbudget._json import JsonDict
from tailbudget._units import PERCENTILES
from tailbudget.budget import parse_budget
from tailbudget.budget.model import GATES, Budget
from tailbudget.budget.objectives import Objective
from tailbudget.errors import BudgetError
from tailbudget.export import histograms
from tailbudget.export.classes import ClassObjective, class_objectives, unexported
from tailbudget.export.common import (
    LABEL_PREFIX,
    ExportOptions,
    dump_yaml,
    header,
    k8s_name,
    le_label,
    num,
    quantile,
    seconds,
    service_selector,
)

API_VERSION = "openslo/v1"
TIME_WINDOW = "28d"
A_SERVICE = f"{LABEL_PREFIX}/service"
A_KIND = f"{LABEL_PREFIX}/objective"
A_THRESHOLD_MS = f"{LABEL_PREFIX}/threshold-ms"
A_ERROR_RATE = f"{LABEL_PREFIX}/error-rate"
A_ENVIRONMENT = f"{LABEL_PREFIX}/environment"
A_CLASS = f"{LABEL_PREFIX}/class"
L_GATED = "gated"
L_CLASS = "class"


def _source(query: str) -> JsonDict:
    return {"metricSource": {"type": "Prometheus", "spec": {"query": query}}}


def metadata(budget: Budget, suffix: str, display: str, extra: dict[str, str]) -> JsonDict:
    """An SLO document's metadata: name, display name, the service and environment."""
    return {
        "name": k8s_name(budget.service, suffix),
        "displayName": display,
        "annotations": {
            A_SERVICE: budget.service,
            A_ENVIRONMENT: budget.environment or "unset",
            **extra,
        },
    }


def ratio_slo(
    meta: JsonDict, service: str, indicator: str, ratio: tuple[str, str], goal: JsonDict
) -> JsonDict:
    """An OpenSLO v1 SLO on the ratio good/total (`ratio`), rolling 28d, by occurrences.

    `goal` holds the objective's displayName and target, and the document's
    description; `meta` is the document's metadata.
    """
    good, total = ratio
    return {
        "apiVersion": API_VERSION,
        "kind": "SLO",
        "metadata": meta,
        "spec": {
            "description": goal["description"],
            "service": k8s_name(service),
            "indicator": {
                "metadata": {"name": indicator},
                "spec": {
                    "ratioMetric": {"counter": True, "good": _source(good), "total": _source(total)}
                },
            },
            "timeWindow": [{"duration": TIME_WINDOW, "isRolling": True}],
            "budgetingMethod": "Occurrences",
            "objectives": [{"displayName": goal["displayName"], "target": goal["target"]}],
        },
    }


def latency_slo(budget: Budget, p: str, ms: float) -> JsonDict:
    """The SLO 'pN of end-to-end latency <= ms' as a ratio of histogram buckets."""
    sel = service_selector(budget)
    bound = le_label(seconds(ms))
    good = f'sum(rate({names.REQUEST_DURATION}_bucket{{{sel}, le="{bound}"}}[5m]))'
    total = f"sum(rate({names.REQUEST_DURATION}_count{{{sel}}}[5m]))"
    gated = p in budget.gated
    meta = metadata(
        budget,
        f"latency-{p}",
        f"{budget.service} {p} latency <= {num(ms)} ms",
        {A_KIND: p, A_THRESHOLD_MS: num(ms)},
    )
    meta["labels"] = {L_GATED: "true" if gated else "false"}
    goal: JsonDict = {
        "description": f"{quantile(p) * 100:g}% of requests complete within {num(ms)} ms "
        f"(end to end, {names.REQUEST_DURATION} bucket le={bound}).",
        "displayName": f"{p} <= {num(ms)} ms",
        "target": quantile(p),
    }
    indicator = k8s_name(budget.service, f"latency-le-{bound}")
    return ratio_slo(meta, budget.service, indicator, (good, total), goal)


def error_slo(budget: Budget, rate: float) -> JsonDict:
    """The SLO 'share of ok requests >= 1 - error_rate'."""
    sel = service_selector(budget)
    good = f'sum(rate({names.REQUESTS_TOTAL}{{{sel}, outcome="ok"}}[5m]))'
    total = f"sum(rate({names.REQUESTS_TOTAL}{{{sel}}}[5m]))"
    return availability_slo(budget, rate, (good, total))


def availability_slo(
    budget: Budget,
    rate: float,
    queries: tuple[str, str],
    extra: dict[str, str] | None = None,
    counted: str = "",
) -> JsonDict:
    """The ratio SLO 'ok requests over all >= 1 - rate' of the (good, total) `queries`;
    `extra` annotations and `counted` (the failed-request counter, for the description)
    name a serving stack's series."""
    meta = metadata(
        budget,
        "availability",
        f"{budget.service} error rate <= {num(rate)}",
        {A_KIND: "error_rate", A_ERROR_RATE: num(rate), **(extra or {})},
    )
    goal: JsonDict = {
        "description": f"At most {num(rate * 100)}% of requests fail"
        + (f" ({counted})." if counted else "."),
        "displayName": "ok requests",
        "target": round(1.0 - rate, 12),
    }
    indicator = k8s_name(budget.service, "ok-requests")
    return ratio_slo(meta, budget.service, indicator, queries, goal)


def class_slo(budget: Budget, c: ClassObjective) -> JsonDict:
    """A class's gated objective as a ratio SLO on its class series (`class` label; the
    stage histogram's `stage="ttft"` for TTFT)."""
    o = c.objective
    sel = c.selector(budget)
    bound = le_label(seconds(o.target_ms))
    good = f'sum(rate({c.histogram}_bucket{{{sel}, le="{bound}"}}[5m]))'
    total = f"sum(rate({c.histogram}_count{{{sel}}}[5m]))"
    what = "end to end" if c.e2e else o.metric
    meta = metadata(
        budget,
        f"class-{c.name}-latency-{c.slug}",
        f"{budget.service} class {c.name} {o.metric} {o.percentile} <= {num(o.target_ms)} ms",
        {A_KIND: o.key, A_THRESHOLD_MS: num(o.target_ms), A_CLASS: c.name},
    )
    meta["labels"] = {L_GATED: "true", L_CLASS: k8s_name(c.name)}
    goal: JsonDict = {
        "description": f"{quantile(o.percentile) * 100:g}% of class {c.name}'s requests "
        f"within {num(o.target_ms)} ms ({what}, {c.histogram} bucket le={bound}).",
        "displayName": f"{c.name} {o.metric} {o.percentile} <= {num(o.target_ms)} ms",
        "target": quantile(o.percentile),
    }
    indicator = k8s_name(budget.service, f"class-{c.name}-{c.slug}-le-{bound}")
    return ratio_slo(meta, budget.service, indicator, (good, total), goal)


def build(budget: Budget, options: ExportOptions | None = None) -> list[JsonDict]:
    """One SLO document per SLO percentile, plus the error rate when set, plus one per
    gated class objective with a class series."""
    docs = [latency_slo(budget, p, ms) for p, ms in budget.objectives.e2e().items()]
    if budget.objectives.error_rate is not None and budget.objectives.error_rate > 0:
        docs.append(error_slo(budget, budget.objectives.error_rate))
    docs += [class_slo(budget, c) for c in class_objectives(budget)]
    return docs


def render(budget: Budget, options: ExportOptions | None = None) -> str:
    """The OpenSLO documents (multi-document YAML).

    With `options.metrics` naming a serving stack, the SLOs count its own histograms.
    """
    fleet = histograms.server_preset(options)
    if fleet is not None:
        docs, fleet_notes = build_fleet(budget, options)
        head = [f"series of the {fleet.name} preset; {n}" for n in fleet.notes] + fleet_notes
        return dump_yaml(docs, header(budget, "openslo", head))
    notes = [
        f"gated percentiles in {budget.environment or 'every environment'}: "
        f"{', '.join(budget.gated)} "
        f"(label {L_GATED}=true)."
    ]
    if class_objectives(budget):
        notes.append(
            f"one SLO per gated class objective (label {L_CLASS}, annotation {A_CLASS}), on "
            "the class label PrometheusSink sets; `import openslo` reads the service's SLOs."
        )
    missing = unexported(budget)
    if missing:
        notes.append(f"no class series for {', '.join(missing)}: not exported.")
    left = [o.key for o in budget.objectives if o.metric != "e2e"]
    if budget.objectives.goodput is not None and budget.objectives.goodput.min is not None:
        left.append("goodput")
    if left:
        notes.append(
            f"{', '.join(left)}: not exported: tailbudget's own metrics carry the end-to-end "
            "duration and the error count only; `tailbudget serve` still judges them (the "
            "metrics presets vllm and sglang carry ttft, tpot and itl)."
        )
    return dump_yaml(build(budget, options), header(budget, "openslo", notes))


# ---- import ------------------------------------------------------------------------

_LE = re.compile(r'\ble\s*=\s*"([^"]+)"')


def _target_percentile(target: object, where: str) -> str:
    if isinstance(target, bool) or not isinstance(target, int | float):
        raise BudgetError(f"{where}: objectives[0].target must be a number, got {target!r}")
    for p in PERCENTILES:
        if math.isclose(float(target), quantile(p), abs_tol=1e-9):
            return p
    raise BudgetError(
        f"{where}: a latency target of {target!r} is not p50, p95 or p99 (targets 0.5, 0.95, 0.99)"
    )


def _dig(value: object, *keys: str) -> object:
    """value[k1][k2]... or None when a level is missing or not a mapping."""
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _good_le(doc: JsonDict) -> str | None:
    """The `le` bound of a ratio SLI's good query, as written, if it counts a bucket."""
    query = _dig(doc, "spec", "indicator", "spec", "ratioMetric", "good", "metricSource")
    m = _LE.search(str(_dig(query, "spec", "query") or ""))
    return m.group(1) if m else None


def _number(raw: object, what: str) -> float:
    try:
        if not isinstance(raw, str | int | float):
            raise TypeError(raw)  # float() refuses it too, with the same message below
        value = float(raw)
    except (TypeError, ValueError):
        raise BudgetError(f"{what} must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise BudgetError(f"{what} must be a finite number, got {raw!r}")
    return value


def _threshold_ms(doc: JsonDict, ann: JsonDict, where: str) -> float:
    if A_THRESHOLD_MS in ann:
        return _number(ann[A_THRESHOLD_MS], f"{where}: annotation {A_THRESHOLD_MS}")
    bound = _good_le(doc)
    if bound is None:
        raise BudgetError(
            f"{where}: cannot find the latency threshold: no {A_THRESHOLD_MS} annotation and "
            'no le="..." bucket in the good query'
        )
    return round(_number(bound, f"{where}: le bound") * 1000.0, 6)


def _annotations(doc: JsonDict, where: str) -> JsonDict:
    if doc.get("apiVersion") != API_VERSION:
        raise BudgetError(
            f"{where}: apiVersion must be {API_VERSION}, got {doc.get('apiVersion')!r}"
        )
    ann = _dig(doc, "metadata", "annotations")
    return ann if isinstance(ann, dict) else {}


def _service_name(doc: JsonDict, ann: JsonDict, where: str, seen: str | None) -> str:
    name = ann.get(A_SERVICE) or _dig(doc, "spec", "service")
    if not isinstance(name, str) or not name:
        raise BudgetError(f"{where}: spec.service is missing")
    if seen is not None and name != seen:
        raise BudgetError(
            f"{where}: service {name!r} differs from {seen!r}; import one service at a time"
        )
    return name


def _target(doc: JsonDict, where: str) -> float:
    objectives = _dig(doc, "spec", "objectives")
    target = _dig(objectives[0], "target") if isinstance(objectives, list) and objectives else None
    if isinstance(target, bool) or not isinstance(target, int | float):
        raise BudgetError(f"{where}: spec.objectives[0].target must be a number, got {target!r}")
    return target


def _error_rate(ann: JsonDict, target: float, where: str) -> float:
    if A_ERROR_RATE in ann:
        rate = _number(ann[A_ERROR_RATE], f"{where}: annotation {A_ERROR_RATE}")
    elif 0 < target <= 1:
        rate = round(1.0 - float(target), 12)
    else:
        raise BudgetError(f"{where}: objectives[0].target must be in (0, 1], got {target!r}")
    if not 0 <= rate < 1:
        raise BudgetError(f"{where}: error rate must be in [0, 1), got {rate!r}")
    return rate


def _latency(
    doc: JsonDict, ann: JsonDict, kind: object, target: float, where: str
) -> tuple[str, float]:
    if isinstance(kind, str) and ("." in kind or kind == "goodput"):
        raise BudgetError(
            f"{where}: objective {kind} is not end to end; import reads end-to-end "
            "latency and error-rate SLOs (export those on the default tailbudget series)"
        )
    p = kind if kind in PERCENTILES else _target_percentile(target, where)
    ms = _threshold_ms(doc, ann, where)
    if not ms > 0:
        raise BudgetError(f"{where}: the {p} threshold must be above 0 ms, got {ms!r}")
    return p, ms


class ImportedSlo(TypedDict):
    """What `read_slos` found: the service, its environment, the SLO {p..: ms, error_rate}."""

    service: str
    environment: str
    slo: dict[str, float]


def read_slos(text: str, source: str = "OpenSLO file") -> ImportedSlo:
    """OpenSLO documents -> {service, environment, slo: {p..: ms, error_rate}}.

    Our own documents carry their figures in annotations. A foreign ratio SLO is a
    latency SLO when its good query counts a histogram bucket (`le="..."`; the
    target names the percentile), else an availability SLO (error rate = 1 - target).
    """
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise BudgetError(f"{source}: not valid YAML ({' '.join(str(exc).split())})") from None
    slos = [d for d in docs if isinstance(d, dict) and d.get("kind") == "SLO"]
    if not slos:
        raise BudgetError(f"{source}: no OpenSLO document of kind SLO found")
    service: str | None = None
    environment: object = None
    slo: dict[str, float] = {}
    gated: list[str] = []
    for i, doc in enumerate(slos):
        where = f"{source}: SLO #{i + 1}"
        ann = _annotations(doc, where)
        if A_CLASS in ann:
            continue  # a class's SLO: the starter budget holds the service's objectives
        name = _service_name(doc, ann, where, service)
        service = service or name
        environment = environment or ann.get(A_ENVIRONMENT)
        target = _target(doc, where)
        kind = ann.get(A_KIND)
        if kind == "error_rate" or (kind is None and _good_le(doc) is None):
            slo["error_rate"] = _error_rate(ann, target, where)
            continue
        p, ms = _latency(doc, ann, kind, target, where)
        slo[p] = ms
        labels = _dig(doc, "metadata", "labels")
        if not isinstance(labels, dict) or labels.get(L_GATED, "true") in ("true", ["true"]):
            gated.append(p)
    if not any(p in slo for p in PERCENTILES):
        raise BudgetError(
            f"{source}: no latency SLO found (a ratio SLO whose good query counts a "
            'histogram bucket le="...", with target 0.5, 0.95 or 0.99)'
        )
    assert service is not None  # a latency SLO was read, and with it its service
    if not isinstance(environment, str) or environment not in GATES:
        environment = next(
            (env for env, g in GATES.items() if sorted(g) == sorted(gated)), None
        ) or ("prd" if "p99" in slo else "qa" if "p95" in slo else "dev")
    return {"service": service, "environment": environment, "slo": slo}


def _one_line(text: str) -> str:
    """A YAML double-quoted scalar on one line, for any text (escapes, astral planes)."""
    out = yaml.safe_dump(text, default_style='"', width=math.inf, allow_unicode=True)
    return out.splitlines()[0]


def budget_yaml(found: ImportedSlo) -> str:
    """A starter budget file (YAML with comments) around the imported SLO."""
    slo: dict[str, float] = found["slo"]
    latency = {p: slo[p] for p in PERCENTILES if p in slo}
    slo_text = ", ".join(f"{k}: {num(v)}" for k, v in latency.items())
    if "error_rate" in slo:
        slo_text += f", error_rate: {num(slo['error_rate'])}"
    # One placeholder stage holding 90% of each percentile, so `plan` passes until the
    # real stages are written in.
    stage = ", ".join(f"{k}: {num(round(v * 0.9, 3))}" for k, v in latency.items())
    return (
        "# tailbudget budget file started by `tailbudget import openslo`.\n"
        "# Replace the placeholder stage with your pipeline's stages, then run\n"
        "#   tailbudget plan budget.yaml\n"
        f"service: {_one_line(found['service'])}\n"
        f"environment: {found['environment']}\n"
        f"slo: {{{slo_text}}}\n"
        "headroom: 0.10\n"
        "overhead_ms: 0\n"
        "pipeline:\n"
        "  - stage: app\n"
        f"    budget: {{{stage}}}\n"
        "policy: default\n"
    )


def import_openslo(text: str, source: str = "OpenSLO file") -> str:
    """OpenSLO text -> a starter budget file; BudgetError when it holds no usable SLO."""

    out = budget_yaml(read_slos(text, source))
    parse_budget(out)  # what we write must load
    return out


# ---- on a serving stack's own histograms (`--metrics vllm|sglang|tgi`) ----------------
# `--to openslo --metrics vllm|sglang|tgi`: OpenSLO documents on the server's series.
#
# One ratio SLO per percentile objective the preset maps (requests under the
# `le` bound nearest the target over all requests, target = the percentile),
# one for the error rate when the server counts failures, and one for goodput
# when it is one histogram's share. A bound standing in for the target is named
# in the description, the annotations (`le-used`) and the header. An objective
# the preset cannot express is named in the header; with none left the export
# is refused.


A_LE_USED = f"{LABEL_PREFIX}/le-used"
A_METRICS = f"{LABEL_PREFIX}/metrics"
RANGE = "5m"


def _share_slo(
    budget: Budget,
    fleet: FleetPreset,
    found: tuple[str, FleetSeries, float],
    goal: tuple[str, float, bool],
    notes: list[str],
) -> JsonDict:
    """Requests under the nearest bound to `ms` over all, for objective `key` at `target`."""
    (metric, series, ms), (key, target, gated) = found, goal
    where = histograms.resolve(series, ms, key)
    notes.extend(where.notes)
    assert where.le is not None
    bound, sel = le_label(where.le), histograms.selector(fleet, budget)
    under = histograms.selector(fleet, budget, f'le="{bound}"')
    good = f"sum(rate({series.histogram}_bucket{{{under}}}[{RANGE}]))"
    total = histograms.count_expr(series, sel, RANGE, "rate")
    extra = {A_KIND: key, A_THRESHOLD_MS: num(ms), A_LE_USED: bound, A_METRICS: fleet.name}
    meta = metadata(budget, k8s_name(key), f"{budget.service} {key} <= {num(ms)} ms", extra)
    meta["labels"] = {L_GATED: "true" if gated else "false"}
    stand_in = "" if where.check.exact else f"; the nearest bound to {num(ms)} ms"
    text: JsonDict = {
        "description": f"{target * 100:g}% of requests with {metric} within {num(ms)} ms "
        f"({series.histogram} bucket le={bound}{stand_in}).",
        "displayName": f"{key} <= {num(ms)} ms",
        "target": round(target, 12),
    }
    indicator = k8s_name(budget.service, f"{metric}-le-{bound}")
    return ratio_slo(meta, budget.service, indicator, (good, total), text)


def _key(o: Objective) -> str:
    return o.percentile if o.metric == "e2e" else o.key


def _error_slo(budget: Budget, fleet: FleetPreset, rate: float) -> JsonDict | str:
    if fleet.errors is None:
        return f"objective error_rate: {fleet.name} counts no failed requests"
    sel = histograms.selector(fleet, budget)
    total = histograms.requests_expr(fleet, sel, RANGE)
    good = f"{total}\n-\n({histograms.counter_expr(fleet.errors, sel, RANGE)} or vector(0))"
    return availability_slo(
        budget, rate, (good, total), {A_METRICS: fleet.name}, counted=fleet.errors
    )


def build_fleet(
    budget: Budget, options: ExportOptions | None = None
) -> tuple[list[JsonDict], list[str]]:
    """The SLO documents on the preset's series, and notes; BudgetError when none maps."""
    fleet = preset((options or ExportOptions()).metrics)
    mapped, notes = histograms.objectives_of(budget, fleet)
    docs = [
        # End-to-end objectives keep the flat name (`p95`), so `import openslo` reads them.
        _share_slo(budget, fleet, (o.metric, s, o.target_ms), (_key(o), o.q, o.gated), notes)
        for o, s in mapped
    ]
    rate = budget.objectives.error_rate
    if rate:
        doc = _error_slo(budget, fleet, rate)
        if isinstance(doc, str):
            notes.append(doc)
        else:
            docs.append(doc)
    goodput = budget.objectives.goodput
    if goodput is not None:
        found, why = histograms.goodput_series(budget, fleet)
        if found is None or goodput.min is None:
            notes.append(why or "goodput has no min share: nothing to hold it to")
        else:
            docs.append(_share_slo(budget, fleet, found, ("goodput", goodput.min, True), notes))
    if not docs:
        raise BudgetError(
            f"metrics {fleet.name}: no objective of the budget maps to a {fleet.name} "
            f"series ({'; '.join(notes)}); use another metrics preset or the default",
            param="metrics",
        )
    return docs, notes
