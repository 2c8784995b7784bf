"""Each synthetic log with one planted cause: the audit finds that cause, and only the
healthy log gets recommendation none."""

from __future__ import annotations

import math

import pytest

from tailbudget.audit import AuditConfig, run_audit
from tailbudget.audit.report import AuditReport
from tailbudget.demo import planted as synth

SLO = {"p50": 900.0, "p95": 1100.0, "p99": 1500.0}


def audit(log, **kw) -> AuditReport:
    return run_audit(log, AuditConfig.of_e2e(kw.pop("slo", SLO), **kw))


@pytest.fixture(scope="module")
def healthy() -> AuditReport:
    return audit(synth.healthy(), events=tuple(synth.EVENTS))


def kinds(r: AuditReport) -> set[str]:
    return {h.kind for h in r.hypotheses}


def test_healthy_log_gets_none(healthy: AuditReport) -> None:
    assert healthy.recommendation.choice == "none"
    assert healthy.hypotheses == []
    assert set(healthy.snapshot.verdict.values()) == {"pass"}
    assert healthy.cold_start is not None and healthy.cold_start.verdict == "not_cold_start"
    assert not any(c.flag for c in healthy.cohorts)


@pytest.mark.parametrize(
    ("make", "kind", "stage", "extra"),
    [
        (synth.input_shape, "input_shape", "llm", {}),
        (synth.cold_start, "cold_start", "llm", {"events": tuple(synth.EVENTS)}),
        (synth.contention, "contention", "llm", {}),
        (synth.external_dependency, "external_dependency", "retrieval", {}),
        (synth.cache_miss, "cache_miss", "retrieval", {}),
        (synth.fanout, "fanout", "retrieval", {"slo": {"p95": 1300.0, "p99": 1500.0}}),
        (synth.missing_slice, "missing_slice", "unattributed", {}),
    ],
)
def test_planted_cause_is_found_and_ranked(make, kind, stage, extra) -> None:
    r = audit(make(), **extra)
    assert kinds(r) == {kind}, r.hypotheses
    h = r.hypotheses[0]
    assert h.stage == stage
    assert h.evidence
    assert r.snapshot.verdict["p99"] == "breach"
    assert r.ranking and r.ranking[0].kind == kind
    top = r.ranking[0]
    assert 0 < top.p99_saved_ms < r.snapshot.p99
    assert top.p99_after_ms == pytest.approx(r.snapshot.p99 - top.p99_saved_ms)
    assert top.score == pytest.approx(top.p99_saved_ms / top.hours)
    expected = "add_capacity" if kind == "contention" else "fix_tail"
    if kind == "contention":
        assert r.recommendation.choice == expected
    else:
        assert r.recommendation.choice in ("fix_tail", "renegotiate_slo")


def test_cold_start_verdict_and_timeline() -> None:
    r = audit(synth.cold_start(), events=tuple(synth.EVENTS))
    cs = r.cold_start
    assert cs is not None and cs.verdict == "cold_start"
    assert cs.filtered_p99 is not None and cs.filtered_p99 <= SLO["p99"] < cs.unfiltered_p99
    assert len(cs.timeline) == 60 and sum(p.n for p in cs.timeline) == r.snapshot.count
    assert [e.event for e in cs.events] == ["scale_up"] * 3
    assert cs.events[0].t == "2026-03-01T12:10:00Z"
    # Cold requests are ~5 minutes after each of 3 events in a 60-minute steady log.
    assert cs.n_cold == pytest.approx(r.snapshot.count * 15 / 60, rel=0.05)


def test_input_shape_fit_and_profile() -> None:
    r = audit(synth.input_shape())
    fit = next(s for s in r.shape if s.stage == "llm" and s.covariate == "seq_len")
    assert fit.flag and fit.r2 > 0.95
    assert fit.slope == pytest.approx(1.5, rel=0.02)
    assert fit.intercept == pytest.approx(150, rel=0.1)
    xs = [p.x for p in fit.profile]
    assert len(fit.profile) >= 15 and xs == sorted(xs)
    assert sum(p.n for p in fit.profile) == r.snapshot.count
    # The profile follows the planted line: 150 + 1.5 x.
    mid = fit.profile[len(fit.profile) // 2]
    assert mid.mean_ms == pytest.approx(150 + 1.5 * mid.x, rel=0.05)


def test_cache_miss_share_matches_planted() -> None:
    r = audit(synth.cache_miss())
    h = r.hypotheses[0]
    assert h.figures["miss_share"] == pytest.approx(0.2, abs=0.03)
    assert h.figures["hit_ms"] == pytest.approx(40, rel=0.15)
    assert h.figures["miss_ms"] == pytest.approx(900, rel=0.15)


def test_contention_slope_positive_and_fit_strong() -> None:
    r = audit(synth.contention())
    h = r.hypotheses[0]
    assert h.figures["r2"] > 0.8 and h.figures["slope"] > 0


def test_no_stages_refuses_ranking() -> None:
    r = audit(synth.no_stages())
    assert r.ranking == [] and r.stages == [] and r.tail.driver is None
    assert any("no per-stage columns" in x for x in r.refusals)
    assert r.shape and r.shape[0].stage == "total_ms"


def test_llm_rules_decode_and_ttft_budget() -> None:
    from tailbudget.budget.model import LLMSpec

    log = synth.llm()
    slo = {"p50": 8000.0, "p99": 30000.0}
    r = audit(log, slo=slo)
    assert "llm_decode" in kinds(r)
    d = next(h for h in r.hypotheses if h.kind == "llm_decode")
    assert d.stage == "decode" and d.figures["tps_p5"] < 12 < 35 < d.figures["tps_p50"]
    # With a TTFT budget below the measured p99, TTFT is flagged as prefill (it rises with input).
    spec = LLMSpec(ttft_ms=200.0, tokens_per_s=30.0, output_tokens=300)
    r2 = audit(log, slo=slo, llm={"llm": spec})
    p = next(h for h in r2.hypotheses if h.kind == "llm_prefill")
    assert p.stage == "ttft" and "prefill" in p.evidence


def test_ttft_fitting_an_output_length_is_not_called_prefill() -> None:
    import numpy as np

    from tailbudget.budget.model import LLMSpec

    rng = np.random.default_rng(5)
    n = 20_000
    df = synth.base(n=n, seed=5).drop(columns=["llm_ms"])
    out = rng.integers(50, 600, n).astype(float)
    df["output_tokens"] = out
    # A confound, not a cause: TTFT tracks the answer's length (say, long answers come
    # from a slower model variant); output tokens cannot slow the first one.
    df["ttft_ms"] = 80 + 0.5 * out + synth.lognormal(rng, 50, 0.3, n)
    df["decode_ms"] = out / rng.uniform(36, 44, n) * 1000.0
    log = synth.finish(
        df, stages=("embedding", "retrieval", "ttft", "decode"), name="confound",
        shape=("output_tokens",),
    )  # fmt: skip
    spec = LLMSpec(ttft_ms=100.0, tokens_per_s=30.0, output_tokens=300)
    r = audit(log, slo={"p50": 8000.0, "p99": 30000.0}, llm={"llm": spec})
    assert any(s.stage == "ttft" and s.covariate == "output_tokens" for s in r.shape)
    p = next(h for h in r.hypotheses if h.kind == "llm_prefill")
    assert p.stage == "ttft" and "prefill" not in p.evidence
    assert "neither traffic nor input length" in p.evidence


def test_fix_catalog_override_changes_score() -> None:
    log = synth.cold_start()
    r = audit(
        log, events=tuple(synth.EVENTS), fixes={"prewarm_replicas": {"hours": 1, "risk": "medium"}}
    )
    top = r.ranking[0]
    assert top.hours == 1 and top.risk == "medium" and top.score == pytest.approx(top.p99_saved_ms)


def test_nested_stages_are_detected_and_not_remaindered() -> None:
    import numpy as np

    df = synth.base(n=4000, seed=21)
    # A gateway span contains the retrieval and llm calls: their sum exceeds the total.
    df["gateway_ms"] = df["retrieval_ms"] + df["llm_ms"] + 5.0
    df["total_ms"] = df["gateway_ms"] + df["embedding_ms"] + df.pop("overhead")
    import ibis

    con = ibis.duckdb.connect()
    log = synth.LogTable(
        table=synth.register(con, "nested", df),
        stages=("embedding", "gateway", "retrieval", "llm"),
        has_timestamp=True,
        rows=synth.RowCounts(len(df), len(df), 0),
        backend=con,
    )
    r = audit(log)
    assert r.overlap.nested and r.overlap.share == pytest.approx(1.0)
    assert "unattributed" not in {s.name for s in r.stages}
    assert any("nested" in n for n in r.provenance.notes)
    assert np.isfinite(r.snapshot.p99)


LLM_SLO = {"p95": 8000.0, "p99": 15000.0}


@pytest.mark.parametrize(
    "column", ["output_tokens", "completion_tokens", "generated_tokens", "output_len"]
)
def test_output_length_tail_caps_max_tokens(column: str) -> None:
    r = audit(synth.output_length(column), slo=LLM_SLO)
    assert r.tail.driver == "decode"
    assert [(h.kind, h.stage, h.covariate) for h in r.hypotheses] == [
        ("input_shape", "decode", column)
    ]
    assert f"per output token ({column}, R²" in r.hypotheses[0].evidence
    top = r.ranking[0]
    assert (top.fix, top.kind, top.stage) == ("cap_output_tokens", "input_shape", "decode")
    assert (top.hours, top.risk, top.reversible) == (4, "medium", True)
    assert "output length" in top.counterfactual
    assert all(f.fix != "cap_input_size" for f in r.ranking)
    rec = r.recommendation
    assert rec.choice == "fix_tail"
    assert "cap_output_tokens" in rec.text and "max_tokens" in rec.text and column in rec.text
    # The counterfactual caps the planted lognormal (median 150) at its p95, ~150 e^(1.645*0.8).
    cap = r.hypotheses[0].figures["cap"]
    assert cap == pytest.approx(150 * math.exp(1.645 * 0.8), rel=0.1)
    assert f"about {cap:,.0f}" in rec.text


def test_output_and_input_fix_share_the_counterfactual() -> None:
    """The same log with the token count named as an input: same estimate, other fix."""
    out = audit(synth.output_length("output_tokens"), slo=LLM_SLO).ranking[0]
    inp = audit(synth.output_length("seq_len"), slo=LLM_SLO).ranking[0]
    assert (out.fix, inp.fix) == ("cap_output_tokens", "cap_input_size")
    assert out.p99_saved_ms == pytest.approx(inp.p99_saved_ms)
    assert out.p99_saved_ms > 0.3 * (out.p99_saved_ms + out.p99_after_ms)
    assert out.counterfactual != inp.counterfactual


def test_input_length_tail_still_caps_input_size() -> None:
    """Both token counts present; prompts drive the tail, so the fix is on the input."""
    r = audit(synth.input_length(), slo=LLM_SLO)
    assert r.tail.driver == "ttft"
    shape = [h for h in r.hypotheses if h.kind == "input_shape"]
    assert [(h.stage, h.covariate) for h in shape] == [("ttft", "input_tokens")]
    # Decode does fit output_tokens well, but it does not drive the tail.
    fit = next(s for s in r.shape if (s.stage, s.covariate) == ("decode", "output_tokens"))
    assert fit.r2 > 0.9 and not fit.flag
    fixes = {(f.fix, f.stage) for f in r.ranking}
    assert ("cap_input_size", "ttft") in fixes
    assert all(f.fix != "cap_output_tokens" for f in r.ranking)


def test_output_fix_override_changes_score() -> None:
    r = audit(synth.output_length(), slo=LLM_SLO, fixes={"cap_output_tokens": {"hours": 1}})
    top = r.ranking[0]
    assert top.fix == "cap_output_tokens" and top.hours == 1
    assert top.score == pytest.approx(top.p99_saved_ms)
    # Overriding the input variant leaves the output fix at its defaults.
    r = audit(synth.output_length(), slo=LLM_SLO, fixes={"cap_input_size": {"hours": 1}})
    assert r.ranking[0].hours == 4
