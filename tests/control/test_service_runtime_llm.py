"""LLM observations in the runtime: the LLM default policy acts on TTFT; windows are durable."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from tailbudget.budget.policy import Policy, parse_policy
from tailbudget.serve.actions import ActionsConfig
from tailbudget.serve.batch import Batch
from tailbudget.serve.ingest import BadBatch, parse_observations
from tailbudget.serve.runtime import Runtime, RuntimeConfig
from tests.control.runtimes import crash

T0 = 1_800_000_000.0
TTFT_P95 = 500.0


def llm_policy() -> Policy:
    """The LLM default for ttft.p95 = 500 ms on a 10 s window evaluated every second."""
    return parse_policy(
        {
            "window": "10s",
            "evaluate_every": "1s",
            "min_samples": 5,
            "replicas": {"min": 1, "max": 4, "step": 1},
            "baselines": {"ttft.p99": 200, "goodput": 0.99},
        },
        targets={"ttft.p95": TTFT_P95},
        goodput={"ttft": TTFT_P95},
    )


def llm_runtime(tmp_path: Any) -> Runtime:
    config = RuntimeConfig(state_dir=tmp_path / "state", actions=ActionsConfig(log=False))
    return Runtime(llm_policy(), config)


def post(rt: Runtime, t: float, ttft_ms: float, n: int = 20, **extra: Any) -> None:
    items = [
        {"ts": t, "total_ms": ttft_ms + 2000.0, "ttft_ms": ttft_ms, "output_tokens": 101, **extra}
        for _ in range(n)
    ]
    batch = parse_observations(json.dumps(items).encode(), now_s=t + 1)
    rt.ingest(batch)


def run(rt: Runtime, start: float, seconds: int, ttft_ms: float) -> list[Any]:
    decisions = []
    for k in range(seconds):
        t = start + k
        post(rt, t, ttft_ms)
        decisions += rt.evaluate(t + 1)
    return decisions


def test_the_llm_default_is_chosen_by_a_ttft_objective() -> None:
    p = llm_policy()
    assert p.source.startswith("default (LLM)")
    by_name = {r.name: r for r in p.rules}
    assert by_name["scale_up_ttft.p95"].threshold == pytest.approx(0.9 * TTFT_P95)
    assert by_name["shed_load_ttft.p95"].for_s == 120.0
    assert by_name["rollback_goodput_baseline"].op == "<"


def test_ttft_drives_scale_up_then_shed_load_then_rollback(tmp_path: Any) -> None:
    rt = llm_runtime(tmp_path)
    assert run(rt, T0, 15, 100.0) == []  # healthy: nothing fires
    assert rt.verdict(T0 + 15)["verdict"] == "healthy"
    # queueing: ttft over 90% of its target, under the target -> scale_up only
    first = run(rt, T0 + 15, 12, 470.0)
    assert [d.action for d in first][:1] == ["scale_up"] and first[0].metric == "ttft.p95"
    assert first[0].t_s <= T0 + 15 + 2  # within one evaluation of the window filling
    assert "shed_load" not in {d.action for d in first}
    # over the target for 2m -> shed_load; ttft.p99 4x its baseline and goodput far
    # below the baseline's for 2m -> rollback
    later = run(rt, T0 + 27, 140, 800.0)
    actions = {d.action: d for d in later}
    assert {"shed_load", "rollback"} <= set(actions)
    shed = actions["shed_load"]
    assert shed.metric == "ttft.p95" and shed.t_s - (T0 + 27) >= 120
    assert actions["rollback"].metric in ("goodput_vs_baseline", "ttft.p99_vs_baseline")
    judged = rt.verdict(T0 + 167)
    assert judged["verdict"] == "rollback"
    assert {b["metric"] for b in judged["by"]} <= {"goodput_vs_baseline", "ttft.p99_vs_baseline"}
    status = rt.status(T0 + 167)
    assert status["series"]["ttft"]["p95"] == pytest.approx(800, rel=0.02)
    assert status["series"]["goodput"]["count"] > 0
    assert any(o["metric"] == "ttft.p95" and o["status"] == "holding" for o in status["objectives"])
    rt.close()


def test_without_ttft_observations_the_llm_rules_stay_unknown(tmp_path: Any) -> None:
    rt = llm_runtime(tmp_path)
    for k in range(30):
        ts = np.full(20, T0 + k)
        rt.ingest(Batch(ts, np.full(20, 9000.0), np.zeros(20, dtype=bool)))
        assert rt.evaluate(T0 + k + 1) == []
    judged = rt.verdict(T0 + 30)
    assert judged["verdict"] == "unknown"
    assert {b["metric"] for b in judged["by"]} >= {"goodput_vs_baseline", "ttft.p99_vs_baseline"}
    rt.close()


def test_restart_and_kill_9_keep_every_acknowledged_ttft_and_tpot(tmp_path: Any) -> None:
    rt = llm_runtime(tmp_path)
    post(rt, T0, 300.0, n=30)
    rt.compact()  # these in the snapshot
    post(rt, T0 + 1, 600.0, n=50, itl_ms=[10.0, 20.0, 30.0])  # these only in the log
    before = rt.status(T0 + 2)["series"]
    crash(rt)
    again = llm_runtime(tmp_path)
    after = again.status(T0 + 2)["series"]
    for name in ("ttft", "tpot", "itl"):
        assert after[name]["count"] == before[name]["count"]
        assert after[name]["p99"] == before[name]["p99"]
    assert after["ttft"]["count"] == 80 and after["itl"]["count"] == 150
    # tpot as vLLM: (e2e - ttft) / (output_tokens - 1) = 2000 / 100
    assert after["tpot"]["p50"] == pytest.approx(20.0, rel=0.01)
    again.close()
    third = llm_runtime(tmp_path)  # a graceful restart: all from the snapshot
    assert third.status(T0 + 2)["series"]["ttft"]["count"] == 80
    third.close()


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"total_ms": 100, "ttft_ms": 200}, "ttft_ms \\(200\\) exceeds total_ms"),
        ({"total_ms": 100, "ttft_ms": -1}, "ttft_ms must be a number >= 0"),
        ({"total_ms": 100, "output_tokens": 1.5}, "output_tokens must be a whole number"),
        ({"total_ms": 100, "itl_ms": {"p50": 3}}, "itl_ms must be a list of gaps"),
        ({"total_ms": 100, "itl_ms": [1, "x"]}, "itl_ms gaps must be numbers"),
    ],
)
def test_bad_llm_fields_reject_the_batch_naming_the_item(
    item: dict[str, Any], message: str
) -> None:
    body = json.dumps([{"total_ms": 5}, item]).encode()
    with pytest.raises(BadBatch, match=f"^item 1: {message}"):
        parse_observations(body, now_s=T0)


def test_tpot_is_derived_as_vllm_and_an_itl_summary_counts_its_p99() -> None:
    items = [
        {"total_ms": 1000, "ttft_ms": 100, "output_tokens": 10},
        {"total_ms": 500, "ttft_ms": 500, "output_tokens": 1},  # one token: tpot 0
        {"total_ms": 800, "ttft_ms": 100, "tpot_ms": 7, "output_tokens": 10},  # given wins
        {"total_ms": 800, "itl_ms": {"p50": 5, "p99": 40}},
    ]
    batch = parse_observations(json.dumps(items).encode(), now_s=T0)
    tpot = batch.series["tpot"]
    assert tpot.index.tolist() == [0, 1, 2] and tpot.ms.tolist() == [100.0, 0.0, 7.0]
    assert batch.series["itl_p99"].ms.tolist() == [40.0]
    assert "itl" not in batch.series


def test_a_columnar_body_parses_to_the_same_batch_as_rows() -> None:
    rows = [
        {"ts": T0, "total_ms": 1000, "ttft_ms": 100, "output_tokens": 10, "error": True},
        {"ts": T0 + 1, "total_ms": 500, "itl_p99_ms": 40, "stages": {"db": 7}},
        {"ts": T0 + 2, "total_ms": 800, "itl_ms": [1, 2, 3]},
    ]
    columns = {
        "ts": [T0, T0 + 1, T0 + 2],
        "total_ms": [1000, 500, 800],
        "error": [True, False, None],
        "ttft_ms": [100, None, None],
        "output_tokens": [10, None, None],
        "itl_p99_ms": [None, 40, None],
        "itl_ms": [None, None, [1, 2, 3]],
        "stages": {"db": [None, 7, None]},
    }
    a = parse_observations(json.dumps(rows).encode(), now_s=T0 + 10)
    b = parse_observations(json.dumps(columns).encode(), now_s=T0 + 10)
    assert a.ts.tolist() == b.ts.tolist() and a.total_ms.tolist() == b.total_ms.tolist()
    assert a.error.tolist() == b.error.tolist() == [True, False, False]
    for name in ("ttft", "tpot", "itl", "itl_p99"):
        assert a.series[name].index.tolist() == b.series[name].index.tolist(), name
        assert a.series[name].ms.tolist() == b.series[name].ms.tolist(), name
    assert b.stages["db"].index.tolist() == [1]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"total_ms": [1, 2], "ttft_ms": [1]}, "column ttft_ms must be a list of 2 values"),
        ({"total_ms": [1, -2]}, "item 1: total_ms must be a number >= 0"),
        ({"total_ms": [5, 5], "ttft_ms": [1, 9]}, "item 1: ttft_ms \\(9\\) exceeds total_ms"),
        ({"total_ms": []}, "no observations"),
        ({"total_ms": [1], "error": ["yes"]}, "item 0: error must be true/false"),
        # a boolean is not a number, whether NumPy would read it as one or not
        ({"total_ms": [9, 9], "ttft_ms": [2.5, True]}, "item 1: ttft_ms must be a number"),
        ({"total_ms": [9, 9], "output_tokens": [3, False]}, "item 1: output_tokens must be"),
        ({"total_ms": [9, 9], "ttft_ms": [2.5, "3"]}, "item 1: ttft_ms must be a number"),
        ({"total_ms": [9, 9], "ttft_ms": [[1], [2]]}, "item 0: ttft_ms must be a number"),
        # the same bound on how old a ts may be as for rows (a clock or unit bug)
        ({"total_ms": [1, 1], "ts": [T0, T0 - 30 * 86_400]}, "item 1: ts .* 30 days before"),
    ],
)
def test_bad_columns_name_the_column_or_the_item(body: dict[str, Any], message: str) -> None:
    with pytest.raises(BadBatch, match=message):
        parse_observations(json.dumps(body).encode(), now_s=T0)


def test_a_one_line_ndjson_body_is_still_rows() -> None:
    batch = parse_observations(b'{"total_ms": 5, "ttft_ms": 2}', now_s=T0)
    assert len(batch) == 1 and batch.series["ttft"].ms.tolist() == [2.0]


def test_the_hold_on_a_count_that_breached_survives_kill_9(tmp_path: Any) -> None:
    # breach sizing does not step back, within 5 minutes, to a count that breached; a
    # restart (kill -9 after the scale-up's snapshot) must not forget which one and when
    rt = llm_runtime(tmp_path)
    ups = [d for d in run(rt, T0, 5, 900.0) if d.action == "scale_up"]
    assert [d.replicas for d in ups] == [2]  # 900 ms over 450: two replicas, one decision
    fired = ups[0].t_s
    assert rt.controller.breached_at == {1: fired}
    # quiet from here: one fewer would hold after clear_for (120 s), but not within the hold
    assert not [d for d in run(rt, T0 + 5, 150, 60.0) if d.action == "scale_down"]
    crash(rt)
    again = llm_runtime(tmp_path)
    assert again.controller.breached_at == {1: fired}
    assert again.controller.desired_replicas == 2
    downs = [d for d in run(again, T0 + 155, 250, 60.0) if d.action == "scale_down"]
    assert [d.replicas for d in downs] == [1]
    assert downs[0].t_s >= fired + 300.0  # the HPA's 5-minute stabilization, restart or not
    again.close()
