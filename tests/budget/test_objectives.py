"""Objectives: the `--slo` grammar, the budget file's `slo:` block, gating per environment."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailbudget.budget import parse_budget
from tailbudget.budget.objectives import (
    Goodput,
    Objective,
    Objectives,
    parse_objectives,
    parse_percentile,
)
from tailbudget.errors import BudgetError, TailbudgetError

PIPE = "pipeline: [{stage: llm, budget: {p99: 100}}]\n"


def test_design_examples_parse() -> None:
    objs = parse_objectives(
        "p99=900,e2e.p99.9=20000,ttft.p95=500,tpot.p99=60,itl.p99=150,"
        "retrieval.p99=800,goodput=0.95,goodput.ttft=1200,error_rate=0.01"
    )
    assert [(o.metric, o.percentile, o.target_ms) for o in objs] == [
        ("e2e", "p99", 900.0),
        ("e2e", "p99.9", 20000.0),
        ("ttft", "p95", 500.0),
        ("tpot", "p99", 60.0),
        ("itl", "p99", 150.0),
        ("retrieval", "p99", 800.0),
    ]
    assert all(o.gated for o in objs)
    assert objs.goodput == Goodput(0.95, {"ttft": 1200.0})
    assert objs.error_rate == 0.01
    assert objs.stages() == ("retrieval",)
    # Explicit thresholds win; other metrics use their target at the highest percentile.
    assert objs.thresholds() == {
        "ttft": 1200.0,
        "e2e": 20000.0,
        "tpot": 60.0,
        "itl": 150.0,
        "retrieval": 800.0,
    }
    assert objs.e2e() == {"p99": 900.0, "p99.9": 20000.0}


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("ttft.p100=5", "'p100' is not a percentile; write p and a number in (0, 100)"),
        ("ttft.p0=5", "'p0' is not a percentile"),
        ("tpot.p95=-1", "slo tpot.p95 must be a positive number of ms, got '-1'"),
        ("goodput=1.5", "goodput: the minimum share must be in (0, 1]"),
        ("goodput=0", "goodput: the minimum share must be in (0, 1]"),
        ("ttft:p95=5", "'ttft:p95' is not an objective"),
        ("p99=inf", "slo p99 must be a finite number of ms, got 'inf'"),
        ("p95=900,p99=800", "e2e.p99 (800 ms) is below e2e.p95 (900 ms)"),
        ("ttft.p95=1,ttft.p95=2", "ttft.p95 is given twice"),
        ("error_rate=1", "error_rate must be a share in [0, 1)"),
        ("p99", "is not NAME=VALUE"),
        ("", "slo is empty"),
        ("latency=5", "is not an objective"),
        ("e2e.output_tokens=2000", "needs an e2e objective"),
        ("e2e.p95=6000,e2e.output_tokens=2.5", "whole number"),
        ("goodput.ttft=0", "goodput.ttft must be a positive number of ms"),
    ],
)
def test_bad_objectives_name_the_fix(text: str, needle: str) -> None:
    with pytest.raises(TailbudgetError) as exc:
        parse_objectives(text)
    assert "\n" not in str(exc.value)
    assert needle in str(exc.value)
    assert exc.value.param == "slo" and "--" not in str(exc.value)


def test_stage_not_in_the_log() -> None:
    objs = parse_objectives("retrieval.p99=800,goodput.rerank=50")
    objs.check_stages({"retrieval", "rerank"})
    with pytest.raises(
        TailbudgetError, match=r"'retrieval': not a metric .* the log has no such stage"
    ):
        objs.check_stages({"embedding"})


def test_environment_gates_per_objective() -> None:
    objs = parse_objectives("p95=900,p99=1500,ttft.p99=800,tpot.p90=50", environment="prd")
    assert [(o.key, o.gated) for o in objs] == [
        ("e2e.p95", False),
        ("e2e.p99", True),
        ("ttft.p99", True),
        ("tpot.p90", False),
    ]
    assert [o.key for o in objs.gated()] == ["e2e.p99", "ttft.p99"]
    assert all(o.gated for o in objs.with_environment(None))


def test_percentile_names() -> None:
    assert parse_percentile("p99.9") == ("p99.9", pytest.approx(0.999))
    assert parse_percentile("p90.0")[0] == "p90"
    assert Objective("ttft", "p99.90", 5.0).percentile == "p99.9"
    with pytest.raises(TailbudgetError):
        Objective("ttft", "p99", float("nan"))


percentiles = st.one_of(
    st.integers(1, 99).map(str),
    st.tuples(st.integers(1, 99), st.integers(1, 999)).map(lambda t: f"{t[0]}.{t[1]}"),
).map(lambda s: "p" + s)
metrics = st.sampled_from(["e2e", "ttft", "tpot", "itl", "retrieval", "svc.op-1"])
targets = st.floats(min_value=0.001, max_value=1e7, allow_nan=False)


@given(st.dictionaries(st.tuples(metrics, percentiles), targets, min_size=1, max_size=6))
def test_round_trip_or_ordering_error(values: dict[tuple[str, str], float]) -> None:
    # Canonical names collapse p99.10 and p99.1; keep one of each for the oracle.
    canon = {(m, parse_percentile(p)[0]): ms for (m, p), ms in values.items()}
    text = ",".join(f"{m}.{p}={ms!r}" for (m, p), ms in canon.items())
    ordered = all(
        a[1] <= b[1]
        for m in {k[0] for k in canon}
        for a, b in zip(
            sorted((parse_percentile(p)[1], ms) for (mm, p), ms in canon.items() if mm == m),
            sorted((parse_percentile(p)[1], ms) for (mm, p), ms in canon.items() if mm == m)[1:],
            strict=False,
        )
    )
    try:
        objs = parse_objectives(text)
    except TailbudgetError as exc:
        assert not ordered and "must not be lower" in str(exc)
        return
    assert ordered
    assert {(o.metric, o.percentile): o.target_ms for o in objs} == canon


@given(st.text(max_size=40))
def test_any_text_parses_or_gives_one_line(text: str) -> None:
    try:
        objs = parse_objectives(text)
    except TailbudgetError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("slo") and exc.param == "slo"
    else:
        assert isinstance(objs, Objectives)


# ---- the budget file -------------------------------------------------------------------


def test_flat_slo_stating_only_p95_gates_p95() -> None:
    b = parse_budget("slo: {p95: 6000}\n" + PIPE)
    assert b.environment is None and b.gated == ("p95",)
    assert [(o.key, o.gated) for o in b.objectives] == [("e2e.p95", True)]


def test_full_slo_block() -> None:
    b = parse_budget(
        "slo:\n"
        "  e2e: {p95: 6000, p99.9: 9000, output_tokens: 2000}\n"
        "  ttft: {p95: 1200, p99: 2000}\n"
        "  tpot: {p95: 60}\n"
        "  itl: {p99: 150}\n"
        "  stages: {retrieval: {p99: 800}}\n"
        "  goodput: {min: 0.95, ttft: 1200, tpot: 60}\n"
        "  error_rate: 0.01\n"
        "pipeline: [{stage: llm, llm: {ttft_ms: 850, tokens_per_s: 22, output_tokens: 300}}]\n"
    )
    objs = b.objectives
    assert [o.key for o in objs] == [
        "e2e.p95",
        "e2e.p99.9",
        "ttft.p95",
        "ttft.p99",
        "tpot.p95",
        "itl.p99",
        "retrieval.p99",
    ]
    assert objs.e2e_output_tokens() == 2000
    assert objs.goodput == Goodput(0.95, {"ttft": 1200.0, "tpot": 60.0})
    assert b.slo.p95 == 6000 and b.slo.p99 is None and b.slo.error_rate == 0.01


@pytest.mark.parametrize(
    ("slo", "needle"),
    [
        ("{ttft: {p100: 5}}", "slo.ttft: 'p100' is not a percentile"),
        ("{tpot: {p95: -1}}", "slo.tpot.p95: must be a positive number of milliseconds"),
        (
            "{goodput: {min: 1.5, ttft: 9}}",
            "slo.goodput.min: must be a share of requests in (0, 1]",
        ),
        ("{goodput: {min: 0.9, ttft: x}}", "slo.goodput.ttft: must be a positive number"),
        ("{ttfb: {p95: 3}}", "slo: unknown key 'ttfb'"),
        ("{ttft: {p95: 900, p99: 800}}", "slo.ttft: p99 (800 ms) is below p95 (900 ms)"),
        ("{p99: 5, e2e: {p99: 3}}", "given both flat (slo.p99) and under slo.e2e"),
        ("{p99: .inf}", "slo.p99: must be a positive number of milliseconds, got inf"),
        ("{error_rate: 0.01}", "give at least one latency target"),
        ("{e2e: {p95: 9, output_tokens: 0}}", "slo.e2e.output_tokens"),
    ],
)
def test_bad_slo_blocks_name_the_path(slo: str, needle: str) -> None:
    with pytest.raises(BudgetError) as exc:
        parse_budget("slo: " + slo + "\n" + PIPE, source="b.yaml")
    assert "\n" not in str(exc.value)
    assert needle in str(exc.value)
    assert "--" not in str(exc.value)


def test_environment_without_a_gated_objective_is_refused() -> None:
    with pytest.raises(BudgetError, match=r"environment 'prd' gates p99 .*add slo.p99"):
        parse_budget("environment: prd\nslo: {p95: 6000, ttft: {p95: 1}}\n" + PIPE)
    b = parse_budget("environment: prd\nslo: {p95: 6000, ttft: {p99: 900}}\n" + PIPE)
    assert [(o.key, o.gated) for o in b.objectives] == [("e2e.p95", False), ("ttft.p99", True)]


def test_a_full_slo_block_as_a_mapping_reads_as_the_budget_file_does() -> None:
    block = {"e2e": {"p95": 900, "p99": 2000}, "ttft": {"p95": 500}, "goodput": {"min": 0.95}}
    budget = parse_budget("slo: " + str(block).replace("'", "") + "\n" + PIPE)
    assert Objectives.coerce(block) == budget.objectives
    with pytest.raises(BudgetError, match=r"^slo\.ttft: p99 \(100 ms\) is below p95") as err:
        Objectives.coerce({"ttft": {"p95": 900, "p99": 100}})
    assert err.value.param == "slo"
    with pytest.raises(BudgetError, match=r"^slo: unknown key 'ttfb'"):
        Objectives.coerce({"ttfb": {"p95": 900}})


def test_coerce_is_the_one_conversion_of_every_shape_an_slo_takes() -> None:
    from tailbudget.budget.slo import SLO

    text = parse_objectives("p95=900,p99=2000,ttft.p95=500")
    flat = {"p95": 900, "p99": 2000, "ttft.p95": 500}
    block = SLO.model_validate({"e2e": {"p95": 900, "p99": 2000}, "ttft": {"p95": 500}})
    for shape in ("p95=900,p99=2000,ttft.p95=500", flat, block, dict(block.model_dump()), text):
        assert Objectives.coerce(shape) == text
    regated = Objectives.coerce(text, environment="prd")
    assert [(o.key, o.gated) for o in regated] == [
        ("e2e.p95", False),
        ("e2e.p99", True),
        ("ttft.p95", False),
    ]
    with pytest.raises(TailbudgetError, match="slo must be a string") as err:
        Objectives.coerce(900)  # type: ignore[arg-type]
    assert err.value.param == "slo"
    with pytest.raises(TailbudgetError, match=r"^slo: 'p99=' is not NAME=VALUE") as err:
        Objectives.coerce({"p99": ""})
    assert err.value.param == "slo"
