"""A real load sweep: fitted on vLLM at 1/s and 4/s, predict all 200 requests at once."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tailbudget.logs import ReadOptions
from tailbudget.sim.arrivals import ArrivalSpec, make_arrivals
from tailbudget.sim.fit import ModelOptions
from tailbudget.sim.fitting import fit_logs
from tailbudget.sim.policies import FixedPolicy
from tailbudget.sim.run import run_once

GRID = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "vllm_grid"
NAME = "vllm_llama33-70b_04_tp4_pp2_IB_qps_{}.json"


def _real(q: str) -> tuple[float, float, float]:
    data = json.loads((GRID / NAME.format(q)).read_text())
    ttft = np.asarray(data["ttfts"]) * 1000.0
    e2e = ttft + np.asarray([sum(x) for x in data["itls"]]) * 1000.0
    return float(np.median(ttft)), float(np.median(e2e)), float(np.percentile(e2e, 99))


@pytest.fixture(scope="module")
def fitted():  # type: ignore[no-untyped-def]
    if not GRID.is_dir():
        pytest.skip("shared data not present")
    paths = [str(GRID / NAME.format(q)) for q in ("01", "04")]
    return fit_logs(paths, ReadOptions(), ModelOptions())


def _predict(model, arrivals: ArrivalSpec, seed: int, duration: float | None = None):  # type: ignore[no-untyped-def]
    arr, horizon = make_arrivals(
        arrivals, pool=model.samples.size, load=1.0, duration_s=duration,
        max_requests=None, low_share=0.0, rng=np.random.default_rng(seed),
    )  # fmt: skip
    trace = run_once(model, arr, FixedPolicy(1), replicas=1, end_s=horizon)
    assert trace.ttft_s is not None
    ttft = (trace.ttft_s - trace.arrival_s) * 1000.0
    e2e = trace.e2e_ms
    return float(np.median(ttft)), float(np.median(e2e)), float(np.percentile(e2e, 99))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_all_at_once_within_20_percent(fitted, seed: int) -> None:  # type: ignore[no-untyped-def]
    model = fitted.model
    assert model.kind == "llm"
    got = _predict(model, ArrivalSpec("burst", count=200), seed)
    want = _real("inf")
    for g, w in zip(got, want, strict=True):
        assert g == pytest.approx(w, rel=0.20), (got, want)


def test_ignoring_load_is_far_off(fitted) -> None:  # type: ignore[no-untyped-def]
    # the unloaded TTFT (what a model without queueing would predict) is ~10x too low
    low_ttft, _, _ = _real("01")
    assert _real("inf")[0] / low_ttft > 8


def test_model_says_what_it_fitted_and_what_it_could_not(fitted) -> None:  # type: ignore[no-untyped-def]
    d = fitted.model.to_dict()
    names = {p["name"]: p for p in d["parameters"]}
    assert names["step_per_seq_ms"]["source"] == "fitted"
    assert names["batch_limit"]["source"] == "default"
    assert "token_budget" in d["unidentified"]
    assert d["fit_quality"]["tpot_line"].startswith("2 load levels")
    assert len(d["load_levels"]) == 2


def test_in_sample_levels_reproduced(fitted) -> None:  # type: ignore[no-untyped-def]
    for q, rate in (("01", 1.0), ("04", 4.0)):
        got = _predict(fitted.model, ArrivalSpec("poisson", rate=rate), 1, 200 / rate)
        want = _real(q)
        assert got[1] == pytest.approx(want[1], rel=0.20)


def test_llm_budget_policy_scales_on_ttft(fitted) -> None:  # type: ignore[no-untyped-def]
    from tailbudget.budget.objectives import parse_objectives
    from tailbudget.sim.policies import llm_default_policy, parse_policy_spec
    from tailbudget.sim.run import simulate

    rep = simulate(
        fitted.model,
        parse_objectives("ttft.p95=400"),
        arrivals=ArrivalSpec("poisson", rate=12.0),
        policies=[parse_policy_spec("budget"), parse_policy_spec("fixed")],
        budget_policy=llm_default_policy(400.0),
        replicas=1,
        duration_s=600.0,
        seed=3,
        signal="ttft",
    )
    budget, fixed = rep.runs
    ups = [d for d in budget.decisions if d.action == "scale_up"]
    assert ups and ups[0].threshold == pytest.approx(360.0)
    assert budget.peak_replicas > 1
    assert budget.objectives[0].minutes_in_breach < fixed.objectives[0].minutes_in_breach
    assert any("time to first token" in n for n in rep.notes)


def _figures(q: str) -> dict[str, float]:
    data = json.loads((GRID / NAME.format(q)).read_text())
    ttft = np.asarray(data["ttfts"]) * 1000.0
    dec = np.asarray([sum(x) for x in data["itls"]]) * 1000.0
    out = np.asarray(data["output_lens"], dtype=np.float64)
    tpot = np.where(out > 1, dec / np.maximum(out - 1.0, 1.0), 0.0)
    v = {"ttft": ttft, "tpot": tpot, "e2e": ttft + dec}
    return {f"{m}.p{p}": float(np.percentile(v[m], p)) for m, p in _KEYS}


_KEYS = (
    ("ttft", 50),
    ("ttft", 95),
    ("ttft", 99),
    ("tpot", 50),
    ("tpot", 99),
    ("e2e", 50),
    ("e2e", 99),
)


@pytest.fixture(scope="module")
def burst_predicted(fitted):  # type: ignore[no-untyped-def]
    from tailbudget.sim.objectives import metric_values

    rows = []
    for seed in range(3):
        arr, horizon = make_arrivals(
            ArrivalSpec("burst", count=200), pool=fitted.model.samples.size, load=1.0,
            duration_s=None, max_requests=None, low_share=0.0, rng=np.random.default_rng(seed),
        )  # fmt: skip
        assert np.all(arr.t_s == 0.0)  # burst:N is N requests at once
        trace = run_once(fitted.model, arr, FixedPolicy(1), replicas=1, end_s=horizon)
        row = {}
        for m, p in _KEYS:
            v = metric_values(trace, m)
            row[f"{m}.p{p}"] = float(np.percentile(v[np.isfinite(v)], p))
        rows.append(row)
    return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}


# the figures docs/simulate.md's accuracy table states within these bounds
_HOLDS = {"ttft.p50": 0.20, "tpot.p50": 0.20, "e2e.p50": 0.20, "e2e.p99": 0.20}
# issue 26.5 asks 25% for these; the held-out run was served from a prefix cache warmer than
# the fitted runs show (test_burst_prompts_cached_beyond_what_the_fitted_runs_show), so the
# model's error is documented in docs/simulate.md, Accuracy, not tuned away on the held-out run
_TAILS = {"ttft.p95": 0.25, "ttft.p99": 0.25, "tpot.p99": 0.25}


@pytest.mark.parametrize("key", sorted(_HOLDS))
def test_burst_figure_within_bound_and_same_verdicts(burst_predicted, key: str) -> None:  # type: ignore[no-untyped-def]
    want, got = _figures("inf")[key], burst_predicted[key]
    assert got == pytest.approx(want, rel=_HOLDS[key])
    for target in (0.8 * want, 1.2 * want):  # targets on both sides of the real value
        assert (got <= target) == (want <= target)


@pytest.mark.xfail(
    strict=True,
    reason="measured +66% / +72% / -33%: burst served from a warmer prefix cache than the "
    "fitted runs show; docs/simulate.md, Accuracy",
)
@pytest.mark.parametrize("key", sorted(_TAILS))
def test_burst_tail_within_25_percent(burst_predicted, key: str) -> None:  # type: ignore[no-untyped-def]
    assert burst_predicted[key] == pytest.approx(_figures("inf")[key], rel=_TAILS[key])


def test_burst_prefill_faster_than_the_hardware_allows() -> None:
    # the reason the tails cannot be predicted from the 1/s and 4/s runs: the burst's prompt
    # tokens, at 2 x 70e9 FLOPs each, need more than 8 x 312 TFLOP/s for the time it took
    if not GRID.is_dir():
        pytest.skip("shared data not present")
    data = json.loads((GRID / NAME.format("inf")).read_text())
    flops = 2 * 70e9 * float(np.sum(data["input_lens"]))
    assert flops / (8 * 312e12) > 1.5 * max(data["ttfts"])


def test_burst_prompts_cached_beyond_what_the_fitted_runs_show() -> None:
    # the three runs sent the same prompts in the same order; at 4/s (the second pass) some
    # long prompts come back at under half the 1/s run's prefill cost: prefix-cache hits. Even
    # crediting the burst (the third pass) with that hit share, its uncached prompt tokens at
    # the 1/s run's per-token cost, both pipeline stages busy, need more time than the burst
    # took to deliver every first token: its cache was warmer than the fitted runs can tell
    if not GRID.is_dir():
        pytest.skip("shared data not present")
    runs = {q: json.loads((GRID / NAME.format(q)).read_text()) for q in ("01", "04", "inf")}
    assert runs["01"]["input_lens"] == runs["04"]["input_lens"] == runs["inf"]["input_lens"]
    x = np.asarray(runs["01"]["input_lens"], dtype=np.float64)
    t1, t4 = (np.asarray(runs[q]["ttfts"]) * 1000.0 for q in ("01", "04"))
    per_token, base = np.polyfit(x, t1, 1)
    long = x >= 300
    hit = long & (t4 < base + 0.5 * per_token * x)
    share = float(x[hit].sum() / x[long].sum())
    assert hit.sum() >= 20 and 0.25 < share < 0.45
    uncached_s = (1.0 - share) * float(x.sum()) * per_token / 2 / 1000.0
    assert uncached_s > 1.5 * max(runs["inf"]["ttfts"])


def test_prefill_cost_per_token_shows_in_the_slow_runs_gaps() -> None:
    # at 1/s a decoding request's gap jumps when another prompt is prefilled in its step;
    # the excess gaps' quantiles against the prompt lengths' give the per-token cost, the
    # same as TTFT's slope: the slow runs pay for every prompt token the burst did not
    if not GRID.is_dir():
        pytest.skip("shared data not present")
    data = json.loads((GRID / NAME.format("01")).read_text())
    excess = []
    for itl in data["itls"]:
        gaps = np.asarray(itl) * 1000.0
        if gaps.size >= 20:
            e = gaps - np.median(gaps)
            excess.extend(e[e > 8.0])
    q = np.linspace(0.05, 0.95, 10)
    lens = np.asarray(data["input_lens"], dtype=np.float64)
    per_token, _ = np.polyfit(np.quantile(lens, q), np.quantile(excess, q), 1)
    ttft_slope, _ = np.polyfit(lens, np.asarray(data["ttfts"]) * 1000.0, 1)
    assert 0.14 < per_token < 0.20 and per_token == pytest.approx(ttft_slope, rel=0.15)
    # all 42,659 burst prompt tokens at half that (both pipeline stages busy) > 2x its last TTFT
    burst = json.loads((GRID / NAME.format("inf")).read_text())
    assert per_token / 2 * float(lens.sum()) / 1000.0 > 2 * max(burst["ttfts"])
