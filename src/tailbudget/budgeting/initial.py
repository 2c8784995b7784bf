"""`tailbudget init --from LOG`: a budget file written from what a log measures.

Every number in the file says where it came from. Slices are the stages' measured
percentiles (so the file describes the service as it runs today, to be edited into
the slices a team commits to); the end-to-end objectives are the `--slo` given, or the
measured ones, labelled as such, when none is.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

import numpy as np

from tailbudget import _fmt as fmt
from tailbudget._units import PERCENTILES, quantile_of
from tailbudget.audit import metrics
from tailbudget.audit.profile import Profile
from tailbudget.budget import model as m
from tailbudget.budget.compose import additive, plan_percentiles
from tailbudget.budget.llm_spec import SPREAD_POINTS
from tailbudget.budget.load import parse_budget
from tailbudget.budget.objectives import METRICS, Objectives
from tailbudget.budgeting.checks import goodput_check
from tailbudget.budgeting.quiet_policy import quiet_policy
from tailbudget.budgeting.structure import Structure, structure, top_level_times
from tailbudget.logs.columns import UNATTRIBUTED
from tailbudget.logs.table import LogTable

"""The stage that holds time outside every measured stage (as the audit names it)."""
NEGLIGIBLE_MS = 1.0
_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*\Z")


@dataclass(frozen=True)
class MeasuredBudget:
    """The file's text and the facts a caller reports beside it."""

    text: str
    structure: Structure
    correlation: float
    unattributed: dict[str, float]
    """Measured percentiles of the unattributed time (total minus every stage; empty when
    negligible)."""
    breaches: tuple[str, ...] = ()
    """Stated objectives the log does not meet, each with its measured figure."""
    raised: tuple[str, ...] = ()
    """Default policy rules raised above the log's own windows (see quiet_policy)."""

    def notes(self) -> list[str]:
        """What `init --from` says beside the file: breached objectives, raised rules."""
        out = [
            f"the log is over {b}: the audit calls it inconclusive, not a breach"
            if "(inconclusive:" in b
            else f"the log breaches {b}: the policy will act on this service as measured"
            for b in self.breaches
        ]
        if self.raised:
            out.append(
                "policy: the default rules fire on this log's own windows; raised above "
                "them (" + ", ".join(self.raised) + ") so the service as measured triggers "
                "nothing"
            )
        return out


def sig(value: float, digits: int = 4) -> float:
    """`value` rounded up to `digits` significant figures: within 0.1% of the log, and
    never below it, so the log meets the slice it was measured into."""
    if value <= 0 or not math.isfinite(value):
        return 0.001
    places = max(0, digits - 1 - math.floor(math.log10(value)))
    rounded = round(value, places)
    if rounded < value:
        rounded = round(rounded + 10.0**-places, places)
    return rounded


def _fmt(points: dict[str, float]) -> str:
    # Seven significant digits, rounded up as the measured line's: at four, AIPerf's TTFT
    # p95 of 3,825.28 ms was written 3826 and plan printed 3,826 beside the audit's 3,825.
    return "{" + ", ".join(f"{p}: {_num(sig(v, 7))}" for p, v in points.items()) + "}"


def _exact(points: dict[str, float]) -> str:
    # Stated targets are written as given, never rounded.
    return "{" + ", ".join(f"{p}: {_num(v)}" for p, v in points.items()) + "}"


def _num(v: float) -> str:
    # Positional always: `:g` would print 1234567 as 1.23457e+06, below the measured value.
    return str(np.format_float_positional(v, trim="-"))


def measured_budget(
    log: LogTable,
    profile: Profile,
    *,
    service: str,
    slo_block: list[str] | None,
    log_block: list[str],
    stated: tuple[tuple[str, ...], ...] = (),
) -> MeasuredBudget:
    """The budget text; `slo_block` is the `slo:` line(s) to use, None for measured ones."""
    shape = structure(profile, stated)
    top = [s for s in profile.stages if s not in shape.nested]
    groups = [i for i in shape.items if isinstance(i, tuple)]
    residual = np.clip(profile.total - top_level_times(profile, top, groups), 0.0, None)
    rest = _residual_points(residual)
    # The stages as the file slices them: a caller's own time, its calls as stages.
    called = [c for calls in shape.calls.values() for c in calls]
    sliced = [shape.own(profile, s) for s in [*top, *called]]
    rho = _copula_rho(sliced, residual if rest else None)
    lines = [
        f"# Budget measured by tailbudget from {log.source}:",
        f"# {profile.how()}.",
        "# Each slice is what the stage measures today: edit them into the slices you commit to,",
        "# then check the file with `tailbudget plan` and the log with `tailbudget rebudget`.",
        f"service: {service}",
    ]
    body = ["headroom: 0.0", "pipeline:", *_pipeline(profile, shape)]
    if rest:
        body += [
            f"  - stage: {UNATTRIBUTED}   # total - stages: the time no stage covers",
            f"    budget: {_fmt(rest)}   # measured",
        ]
    body += [
        "composition:",
        f"  correlation: {rho:g}   # the stages' measured rank correlation, as a Gaussian copula",
        *log_block,
    ]
    if slo_block is None:
        slo_block = _measured_slo(profile, body)
    at = body.index("composition:") + 2
    body.insert(at, _requests_line("\n".join([*slo_block, *body]), profile))
    text = "\n".join([*lines, *slo_block, *body]) + "\n"
    breaches = _breaches(text, profile)
    raised: list[str] = []
    if not breaches:
        policy, raised = quiet_policy(text, log)
        text += "".join(f"{line}\n" for line in policy)
    return MeasuredBudget(text, shape, rho, rest, tuple(breaches), tuple(raised))


def _requests_line(text: str, profile: Profile) -> str:
    # The log's end-to-end figures beside the slices' sum they were measured with, at
    # every percentile the plan composes. Stage percentiles do not add into a request's:
    # no request is at every stage's p99 at once, and on a span table most requests call
    # only a few operations (the sum is 2-3x the log's p95 there). `plan` scales the sum
    # by the ratio, so it gives the log's figures (as the slices, within 0.1% and never
    # below) until a slice is edited. The sum keeps nine digits: the ratio is 1 for the
    # slices as written.

    probe = parse_budget(text, source="the measured budget")
    sums = additive(probe)
    names = plan_percentiles(probe)
    # Seven digits (rounded up): the composed figure reads as the audit's in every report.
    e2e = {p: sig(profile.quantile("total", p), 7) for p in names}
    then = {p: float(f"{sums[p]:.9g}") for p in names}
    lost = profile.errors + profile.failed
    failed = f", failed: {lost}" if lost else ""
    return (
        f"  measured: {{requests: {profile.used}{failed}, e2e: {_exact(e2e)}, "
        f"slices: {_exact(then)}{_counted(probe, profile)}}}"
        "   # the log's whole requests end to end, and the slices' sum then: plan "
        "composes and gates on these"
    )


def _counted(budget: m.Budget, profile: Profile) -> str:
    # Each objective's values over its target on the log, beside the figure: the verdict
    # rule proves a breach from the count (3 of 20 over a p99 target), which no figure
    # alone can; plan reads them while the target and the figure are still the log's.
    parts = []
    for o in budget.objectives:
        v = metrics.judged(profile, o)
        got = metrics.measured(profile, o)
        if got is None or got <= 0 or v.over is None or v.n < 1:
            continue
        parts.append(
            f"{json.dumps(o.key)}: {{target: {_num(o.target_ms)}, measured: {_num(got)}, "
            f"over: {v.over}, n: {v.n}}}"
        )
    return f", counted: {{{', '.join(parts)}}}" if parts else ""


def _breaches(text: str, profile: Profile) -> list[str]:
    # With the audit's definitions (metrics.py) and its rule for too few requests: what
    # `audit` will call a breach, and not what it will call inconclusive.

    out = []
    budget = parse_budget(text, source="the measured budget")
    good = goodput_check(budget, profile)
    if good is not None and good.verdict == "breach" and good.min is not None:
        out.append(
            f"goodput: measured {good.share:.1%} of {good.requests:,} requests against its "
            f"{good.min:.1%} minimum"
        )
    for o in budget.objectives:
        got, v = metrics.measured(profile, o), metrics.judged(profile, o)
        if got is None or (v.verdict != "breach" and got <= o.target_ms):
            continue
        said = f"{o.key}: measured {fmt.ms(got)} ms against {fmt.ms(o.target_ms)} ms"
        if v.verdict == "breach":
            out.append(f"{said} ({v.over:,} of {v.n:,} over it)")
        else:
            out.append(f"{said} (inconclusive: {v.reason})")
    return out


def _measured_slo(profile: Profile, body: list[str]) -> list[str]:
    # Without --slo, each end-to-end objective is what the measured slices add to (never
    # below the log's own figure): the slices fit it by construction, the log passes it,
    # and `rebudget` finds nothing to change. An SLO at the log's own percentile would
    # be breached by every other window of the healthy service it was measured on.

    e2e = profile.percentiles("total")
    probe = parse_budget("\n".join([f"slo: {_fmt(e2e)}", *body]), source="the measured budget")
    sums = additive(probe)
    slo = {p: max(e2e[p], sums[p]) for p in e2e}
    measured = ", ".join(f"{p} {_num(sig(v))}" for p, v in e2e.items())
    # Say which figure each objective is: a p50 where stage medians add to less than the
    # log's own median is the log's figure, not the slices' sum the comment names.
    own = [p for p in e2e if e2e[p] > sums[p]]
    what = "the measured slices' sum"
    if own:
        what += f" ({', '.join(own)}: the log's own figure, above the sum)"
    return [
        f"slo: {_fmt(slo)}   # no slo given: {what}; the log measures {measured} ms end "
        "to end: yours go here"
    ]


def _pipeline(profile: Profile, shape: Structure) -> list[str]:
    out: list[str] = []
    for item in shape.items:
        if isinstance(item, tuple):
            out.append("  - parallel:   # these overlap in time in the log")
            for s in item:
                out += _stage(profile, shape, s, "      ")
        else:
            out += _stage(profile, shape, item, "  ")
    called = {c for calls in shape.calls.values() for c in calls}
    for child, parent in shape.nested.items():
        if child in called:
            continue
        p = profile.percentiles(child)
        out.append(f"  # {child} runs inside {parent} (measured {_fmt(p)} ms): not added again")
    return out


def _stage(profile: Profile, shape: Structure, name: str, indent: str) -> list[str]:
    calls = shape.calls.get(name, [])
    if calls:
        # The audit finds these inside it: the slice is the stage's own time, and the calls
        # nest under it, so nothing is counted twice and each slice is one thing to fix.
        own = shape.own(profile, name)
        p = {q: float(np.quantile(own, quantile_of(q))) for q in PERCENTILES}
        why = f"measured: its own time, {name} less the {len(calls)} calls below"
        if len(calls) == 1:
            why = f"measured: its own time, {name} less the call below"
    else:
        p, why = profile.percentiles(name), "measured"
    lines = [f"{indent}- stage: {_yaml_name(name)}", f"{indent}  budget: {_fmt(p)}   # {why}"]
    llm = _llm_block(profile, name)
    if llm:
        lines.append(f"{indent}  {llm}")
    if calls:
        lines.append(f"{indent}  calls:   # run inside {name}, one after another")
        for child in calls:
            lines += _stage(profile, shape, child, indent + "    ")
    return lines


def _yaml_name(name: str) -> str:
    # Span operations (`/*`, `/api/v1/{id}`) are kept as the log names them, quoted.
    return name if _PLAIN.match(name) else json.dumps(name)


def _llm_block(profile: Profile, name: str) -> str:
    # The LLM call on its decode stage, with the audit's definitions: TTFT, TPOT and ITL
    # as measured distributions and the answer lengths, so `plan` reads each objective at
    # its own percentile. The `ttft` stage before it holds the same TTFT (not added again).
    out_tokens = profile.covariates.get("output_tokens")
    if name != "decode" or metrics.ttft(profile) is None or out_tokens is None:
        return ""
    parts = []
    for key, data in (
        ("ttft", metrics.ttft(profile)),
        ("tpot", metrics.tpot(profile)),
        ("itl", profile.gaps),
        ("longest_gap", profile.longest_gap),
        ("output_tokens", out_tokens),
    ):
        finite = None if data is None else data[np.isfinite(data)]
        points = metrics.spread(finite, SPREAD_POINTS)
        if points is None or (key == "tpot" and points["p50"] <= 0):
            continue
        # The count the audit judges each objective metric's percentiles on (`n`), so plan
        # calls a percentile of too few values inconclusive as the audit does.
        assert finite is not None
        n = f"n: {finite.size}, " if key in ("ttft", "tpot", "itl") else ""
        parts.append(f"{key}: {{{n}{_fmt(points)[1:]}")
    if not any(p.startswith("tpot") for p in parts):
        return ""
    return "llm: {" + ", ".join(parts) + "}   # measured; ttft is the ttft stage, not added again"


def _residual_points(residual: np.ndarray) -> dict[str, float]:
    if residual.size == 0:
        return {}
    points = {
        p: float(np.quantile(residual, q))
        for p, q in zip(PERCENTILES, (0.5, 0.95, 0.99), strict=True)
    }
    # Below a millisecond at p99 the stages cover the request (LLM benchmarks: ttft + decode).
    return points if points["p99"] >= NEGLIGIBLE_MS and points["p50"] > 0 else {}


def _copula_rho(sliced: list[np.ndarray], residual: np.ndarray | None) -> float:
    # Spearman's rho between stages, averaged over pairs, turned into the normal
    # copula's correlation (2 sin(pi rho_s / 6)); stages that trade time against each
    # other (TTFT and decode under a benchmark's fixed duration) correlate negatively.
    series = sliced + ([residual] if residual is not None else [])
    if len(series) < 2:
        return 0.0
    ranks = [np.argsort(np.argsort(x)) for x in series]
    rhos = []
    for i in range(len(ranks)):
        for j in range(i + 1, len(ranks)):
            c = float(np.corrcoef(ranks[i], ranks[j])[0, 1])
            rhos.append(c if math.isfinite(c) else 0.0)
    rho_s = float(np.mean(rhos))
    # k variables can share an equal correlation down to -1/(k-1) (rounded towards 0).
    least = math.ceil(-1000.0 / (len(series) - 1)) / 1000.0
    return round(max(least, min(1.0, 2 * math.sin(math.pi * rho_s / 6))), 3)


def slo_lines(objectives: Objectives) -> list[str]:
    """The `slo:` block, in the budget file's full form, for objectives from an SLO string."""
    lines = ["slo:   # as given"]
    stages: dict[str, dict[str, float]] = {}
    for metric in objectives.metrics():
        points = {o.percentile: o.target_ms for o in objectives.of(metric)}
        if metric in METRICS:
            tokens = objectives.e2e_output_tokens() if metric == "e2e" else None
            extra = f", output_tokens: {tokens}" if tokens else ""
            lines.append(f"  {metric}: {_exact(points)[:-1]}{extra}}}")
        else:
            stages[metric] = points
    if stages:
        inner = ", ".join(f"{s}: {_exact(p)}" for s, p in stages.items())
        lines.append(f"  stages: {{{inner}}}")
    if objectives.goodput is not None:
        g = objectives.goodput
        parts = ([f"min: {g.min:g}"] if g.min is not None else []) + [
            f"{k}: {v:g}" for k, v in g.thresholds.items()
        ]
        lines.append("  goodput: {" + ", ".join(parts) + "}")
    if objectives.error_rate is not None:
        lines.append(f"  error_rate: {objectives.error_rate:g}")
    return lines
