"""Culprits: the stages most likely to slow the tail, most likely first.

Three figures per stage, each a share of its kind across stages, weighted into a
score in 0..1:
- slow-vs-fast delta (mean in the slow group minus the fast group);
- growth against `--baseline` (or after an `--events` time inside the log against
  before it): the change of the stage's mean with a 95% interval; only growth whose
  interval excludes zero counts;
- path share: the stage's share of the slow requests' time (with critical-path
  attribution of spans, their critical-path share). Undefined when stages nest.
A slow group under WEAK_SLOW requests cannot carry the attribution: its weight drops
and growth leads. With nested stage columns, a container whose shift its inner stages
explain keeps only the unexplained rest and stays as context; the inner ones lead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tailbudget import _fmt as fmt
from tailbudget.audit.contention import Contention
from tailbudget.audit.context import UNATTRIBUTED
from tailbudget.audit.growth import Growth
from tailbudget.audit.nesting import direct
from tailbudget.audit.report import Culprit, Nesting, Recommendation, Tail

__all__ = ["MAX_CULPRITS", "WEAK_SLOW", "Inputs", "build", "name_in"]

WEAK_SLOW = 20
"""Below this many slow requests, slow-vs-fast attribution is weak."""
MAX_CULPRITS = 5
NOT_SUSPECTS = ("other", UNATTRIBUTED)
"""Buckets, not stages: `other` holds only negligible stages, `unattributed` no stage."""
MIN_SCORE = 0.02
CONTENTION_WEIGHT = 0.5
"""Share of the score given to contention, when a span table and its baseline show any."""
EXPLAINED = 0.5
"""Inner stages explaining this share of a container's shift make it context."""
_WEIGHTS = {  # (delta, growth, share)
    (False, True): (0.45, 0.35, 0.2),
    (True, True): (0.15, 0.7, 0.15),
    (False, False): (0.75, 0.0, 0.25),
    (True, False): (0.75, 0.0, 0.25),
}


@dataclass(frozen=True)
class Inputs:
    """What the culprit ranking reads from earlier audit steps."""

    tail: Tail
    slow_total_mean: float
    growth: dict[str, Growth] = field(default_factory=dict)
    nesting: list[Nesting] = field(default_factory=list)
    nested: bool = False
    attribution: str = ""
    contention: dict[str, Contention] = field(default_factory=dict)


def build(inp: Inputs) -> list[Culprit]:
    """Culprits, highest score first (at most MAX_CULPRITS, none below MIN_SCORE)."""
    deltas = {d.stage: d for d in inp.tail.deltas}
    weak = inp.tail.n_slow < WEAK_SLOW
    grow = {k: g.change if g.significant else 0.0 for k, g in inp.growth.items()}
    eff_delta = {k: max(d.delta, 0.0) for k, d in deltas.items()}
    eff_grow = {k: max(v, 0.0) for k, v in grow.items()}
    inside_of, explained = _explain(inp.nesting, eff_delta, eff_grow)
    total_d = sum(eff_delta.values())
    total_g = sum(eff_grow.values())
    has_growth = total_g > 0
    wd, wg, ws = _WEIGHTS[(weak, has_growth)]
    if inp.nested:
        ws = 0.0
    norm = wd + wg + ws
    eff_cont = {k: max(c.effect, 0.0) for k, c in inp.contention.items()}
    total_c = sum(v for k, v in eff_cont.items() if k not in NOT_SUSPECTS)
    wc = CONTENTION_WEIGHT if total_c > 0 else 0.0
    out = []
    for stage, d in deltas.items():
        if stage in NOT_SUSPECTS:
            continue
        share = d.mean_slow / inp.slow_total_mean if inp.slow_total_mean > 0 else 0.0
        parts = wd * _frac(eff_delta[stage], total_d) + ws * min(max(share, 0.0), 1.0)
        parts += wg * _frac(eff_grow.get(stage, 0.0), total_g)
        score = parts / norm if norm else 0.0
        score = (1.0 - wc) * score + wc * _frac(eff_cont.get(stage, 0.0), total_c)
        if score < MIN_SCORE:
            continue
        figures = {"delta_ms": d.delta, "mean_slow_ms": d.mean_slow, "mean_fast_ms": d.mean_fast}
        if not inp.nested:
            figures["path_share"] = share
        g = inp.growth.get(stage)
        if g is not None:
            figures |= {"growth_ms": g.change, "growth_low_ms": g.low, "growth_high_ms": g.high}
        if stage in explained:
            figures["explained_share"] = explained[stage]
        if stage in inp.contention:
            figures["contention"] = inp.contention[stage].effect
        contains = sorted(b for b, a in inside_of.items() if a == stage)
        out.append(
            Culprit(
                stage=stage,
                score=round(score, 4),
                evidence=_evidence(inp, stage, share, g, weak, contains, explained, inside_of),
                figures=figures,
                weak=weak,
                inside=inside_of.get(stage),
                contains=contains,
            )
        )
    out.sort(key=lambda c: (-c.score, c.stage))
    return out[:MAX_CULPRITS]


def _explain(
    pairs: list[Nesting], eff_delta: dict[str, float], eff_grow: dict[str, float]
) -> tuple[dict[str, str], dict[str, float]]:
    """({inner: its container}, {container: share of its shift the inner stages explain});
    an explained container keeps only the unexplained rest of its delta and growth."""
    inside_of: dict[str, str] = {}
    explained: dict[str, float] = {}
    for outer, inners in direct(pairs).items():
        for b in inners:
            inside_of.setdefault(b, outer)
        shift = eff_delta.get(outer, 0.0)
        within = sum(eff_delta.get(b, 0.0) for b in inners)
        if shift > 0 and within >= EXPLAINED * shift:
            explained[outer] = min(within / shift, 1.0)
            eff_delta[outer] = max(shift - within, 0.0)
            inner_growth = sum(eff_grow.get(b, 0.0) for b in inners)
            eff_grow[outer] = max(eff_grow.get(outer, 0.0) - inner_growth, 0.0)
    return inside_of, explained


def _frac(x: float, total: float) -> float:
    return x / total if total > 0 else 0.0


def _evidence(
    inp: Inputs,
    stage: str,
    share: float,
    g: Growth | None,
    weak: bool,
    contains: list[str],
    explained: dict[str, float],
    inside_of: dict[str, str],
) -> str:
    d = next(x for x in inp.tail.deltas if x.stage == stage)
    n = inp.tail.n_slow
    caveat = ": weak, too few to attribute" if weak else ""
    bits = [
        f"slow vs fast {fmt.signed_ms(d.delta)} ms (mean {fmt.ms(d.mean_slow)} vs "
        f"{fmt.ms(d.mean_fast)} ms, "
        f"{n:,} slow request{'s' if n != 1 else ''}{caveat})"
    ]
    if g is not None:
        sure = (
            ""
            if g.significant
            else ", a real drop: faster after than before"
            if g.high < 0
            else ", not distinguishable from no change"
        )
        bits.append(
            f"{g.change:+,.1f} ms per request against the {g.against} "
            f"(95% interval {g.low:+,.1f} to {g.high:+,.1f}; {g.before:,.1f} -> {g.after:,.1f} ms"
            f"{sure})"
        )
    if not inp.nested:
        what = "critical-path time" if inp.attribution == "critical_path" else "time"
        bits.append(f"{fmt.share(share, 0)} of the slow requests' {what} (not of the gap)")
    c = inp.contention.get(stage)
    if c is not None and c.effect > 0:
        bits.append(
            f"{c.rose} of its {c.keys} operations rose against the baseline, each against "
            f"its own spread (mean rank effect {c.effect:+.2f}): contention, not one slow call"
        )
    if stage in inside_of:
        bits.append(f"runs inside {inside_of[stage]}")
    if contains:
        if stage in explained:
            bits.append(
                f"contains {', '.join(contains)}, whose shifts explain {explained[stage]:.0%} "
                "of its own: context, not the culprit"
            )
        else:
            bits.append(f"contains {', '.join(contains)}")
    return "; ".join(bits)


def _first(top: Culprit) -> str:
    """A pointer to the culprit's row, not its figures again: each figure is stated once,
    in the culprits table, next to what it measures."""
    return f"first of the culprits, score {top.score:.2f}; its evidence is in that table"


def name_in(
    rec: Recommendation,
    culprits: list[Culprit],
    *,
    no_hypothesis: bool = False,
    too_few: bool = False,
    thin_miss: bool = False,
) -> Recommendation:
    """The recommendation with the top culprit named (unchanged when nothing is breached).

    With no hypothesis, the recommendation's "no cause stands out" would contradict a
    named culprit: the text says instead that only the stage times point at it. With
    `too_few` (no verdict yet), a culprit that grew against a baseline is named as where
    to look once the log is long enough, never as a fix."""
    if not culprits:
        return rec
    top = culprits[0]
    where = f" (inside {top.inside})" if top.inside else ""
    if rec.choice == "none":
        if not too_few or "growth_ms" not in top.figures:
            return rec
        text = (
            f"{rec.text} Meanwhile the stage that grew most is {top.stage}{where} ({top.evidence})."
        )
        return rec.model_copy(update={"text": text})
    if too_few and thin_miss:  # a miss known from a thin log: the culprit is where to look
        text = f"{rec.text} Where to look first: {top.stage}{where} ({_first(top)})."
        return rec.model_copy(update={"text": text})
    if no_hypothesis:
        text = (
            f"No known cause pattern explains the breach, but the stage times point at "
            f"{top.stage}{where} ({top.evidence}): look there first, or renegotiate the target."
        )
        return rec.model_copy(update={"text": text})
    caveat = (
        " The slow group is small, so this leans on the growth figures"
        if top.weak and "growth_ms" in top.figures
        else " The slow group is small: treat this as weak"
        if top.weak
        else ""
    )
    text = f"{rec.text} Most likely culprit: {top.stage}{where} ({_first(top)}).{caveat}"
    return rec.model_copy(update={"text": text.rstrip(".") + "."})
