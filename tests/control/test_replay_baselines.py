"""`replay --baseline LOG2`: a baseline for every metric a rule compares with, from LOG2."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tailbudget.budget.policy import Policy, parse_policy
from tailbudget.cli import app
from tailbudget.control.logsource import load_replay_log
from tailbudget.control.replay import log_baseline
from tests.control.replay_json import replay_json

from .synth import START

DATA = Path(
    os.environ.get("TAILBUDGET_SHARED_DATA")
    or Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
)
AIPERF = DATA / "aiperf_profile_export.jsonl"
DURATION, RPS = 900.0, 5.0
TTFT_TARGET = 5000.0  # far above either log: only the baseline rules can act
GOOD = {"ttft": 400.0}  # a good request's first token within 400 ms


def _log(path: Path, *, slow: float = 1.0, retrieval_slow: float = 1.0, seed: int = 1) -> Path:
    """Poisson arrivals; TTFT ~150 ms x `slow`; a retrieval stage ~40 ms x `retrieval_slow`."""
    rng = np.random.default_rng(seed)
    n = rng.poisson(DURATION * RPS)
    t = np.sort(rng.uniform(0, DURATION, n))
    ttft = rng.lognormal(np.log(150.0), 0.3, n) * slow
    retrieval = rng.lognormal(np.log(40.0), 0.2, n) * retrieval_slow
    tokens = rng.integers(20, 200, n)
    total = ttft + retrieval + (tokens - 1) * 20.0
    ts = pa.array(np.round((START + t) * 1e6).astype(np.int64)).cast(pa.timestamp("us", tz="UTC"))
    table = {
        "ts": ts,
        "total_ms": total,
        "ttft_ms": ttft,
        "output_tokens": tokens,
        "retrieval_ms": retrieval,
    }
    pq.write_table(pa.table(table), path)
    return path


def _llm_policy() -> Policy:
    return parse_policy("default", targets={"ttft.p95": TTFT_TARGET}, goodput=GOOD)


def test_every_baseline_a_rule_compares_with_comes_from_the_baseline_log(tmp_path: Path) -> None:
    before = load_replay_log(_log(tmp_path / "before.parquet"))
    policy = parse_policy(
        {
            "rules": [
                {
                    "name": "retrieval_regressed",
                    "metric": "retrieval.p99_vs_baseline",
                    "op": ">",
                    "threshold": 1.5,
                    "for": "1m",
                    "action": "rollback",
                },
                {
                    "name": "ttft_p95_regressed",
                    "metric": "ttft.p95_vs_baseline",
                    "op": ">",
                    "threshold": 1.5,
                    "for": "1m",
                    "action": "rollback",
                },
                {
                    "name": "good_fell",
                    "metric": "goodput_vs_baseline",
                    "op": "<",
                    "threshold": 1.0,
                    "for": "1m",
                    "action": "rollback",
                },
            ]
        },
        goodput=GOOD,
    )
    base = log_baseline(before, policy, "before.parquet")
    # exact percentiles over the baseline log's own values, as the e2e p99 always was
    assert base.p99_ms == pytest.approx(float(np.quantile(before.total_ms, 0.99)))
    assert base.others["retrieval.p99"] == pytest.approx(
        float(np.quantile(before.stages["retrieval"].ms, 0.99))
    )
    assert base.others["ttft.p95"] == pytest.approx(
        float(np.quantile(before.series["ttft"].ms, 0.95))
    )
    share = float(np.mean(before.series["ttft"].ms <= GOOD["ttft"]))
    assert base.others["goodput"] == pytest.approx(share)
    assert any(n.startswith("baselines from before.parquet: goodput") for n in base.notes)


def test_a_stage_regression_rolls_back_only_against_its_baseline(tmp_path: Path) -> None:
    before = load_replay_log(_log(tmp_path / "before.parquet"))
    after = load_replay_log(_log(tmp_path / "after.parquet", retrieval_slow=3.0, seed=2))
    policy = parse_policy(
        {
            "rules": [
                {
                    "name": "retrieval_regressed",
                    "metric": "retrieval.p99_vs_baseline",
                    "op": ">",
                    "threshold": 1.5,
                    "for": "1m",
                    "action": "rollback",
                }
            ]
        }
    )
    without = replay_json(after, policy)
    assert without["decisions"] == []
    assert "no retrieval.p99 baseline: rule retrieval_regressed inactive" in without["notes"]
    rep = replay_json(after, policy, baseline=log_baseline(before, policy, "before.parquet"))
    rollbacks = [d for d in rep["decisions"] if d["action"] == "rollback"]
    assert rollbacks and rollbacks[0]["metric"] == "retrieval.p99_vs_baseline"
    # the first evaluation with a full window, plus the rule's `for`
    assert rollbacks[0]["t_offset_s"] <= policy.window_s + 60 + policy.evaluate_every_s
    assert set(rep["baselines"]) == {"retrieval.p99"}
    # the same log as its own baseline: no regression, no rollback
    same = replay_json(before, policy, baseline=log_baseline(before, policy, "before.parquet"))
    assert [d for d in same["decisions"] if d["action"] == "rollback"] == []


def test_the_llm_default_rolls_back_on_ttft_and_goodput_against_the_baseline_log(
    tmp_path: Path,
) -> None:
    before = _log(tmp_path / "before.parquet")
    after = _log(tmp_path / "after.parquet", slow=2.5, seed=2)
    budget = tmp_path / "budget.yaml"
    budget.write_text(
        "service: chat\n"
        f"slo: {{e2e: {{p99: 60000}}, ttft: {{p95: {TTFT_TARGET:g}}}, "
        f"goodput: {{min: 0.5, ttft: {GOOD['ttft']:g}}}}}\n"
        "pipeline:\n  - stage: llm\n    budget: {p99: 50000}\n"
    )
    runner = CliRunner()
    args = ["replay", str(after), "--budget", str(budget), "-f", "json"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert not [d for d in json.loads(res.output)["decisions"] if d["action"] == "rollback"]
    res = runner.invoke(app, [*args, "--baseline", str(before)])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    assert {"ttft.p99", "goodput"} <= set(rep["baselines"])
    rules = {d["rule"] for d in rep["decisions"] if d["action"] == "rollback"}
    assert rules & {"rollback_ttft_p99_baseline", "rollback_goodput_baseline"}, rep["notes"]
    assert not any(n.startswith("no ttft.p99 baseline") for n in rep["notes"])
    text_args = [a for a in args if a not in ("-f", "json")]
    text = runner.invoke(app, [*text_args, "--baseline", str(before)]).output
    shown = next(line for line in text.splitlines() if line.startswith("baselines: "))
    assert "ttft.p99 " in shown and "goodput " in shown and "%" in shown


@pytest.mark.skipif(not AIPERF.is_file(), reason="../shared/data/aiperf_profile_export.jsonl")
def test_a_real_aiperf_export_as_its_own_baseline() -> None:
    # 89 requests of a burst: first tokens from 0.46 s to 3.8 s
    log = load_replay_log(AIPERF)
    ttft = log.series["ttft"].ms
    policy = parse_policy(
        "default", targets={"ttft.p95": 10 * float(ttft.max())}, goodput={"ttft": 2000.0}
    )
    base = log_baseline(log, policy, AIPERF.name)
    assert base.others["ttft.p99"] == pytest.approx(float(np.quantile(ttft, 0.99)))
    assert base.others["goodput"] == pytest.approx(float(np.mean(ttft <= 2000.0)))
    rep = replay_json(log, policy, baseline=base)
    # a log against itself: nothing regressed, nothing rolls back
    assert [d for d in rep["decisions"] if d["action"] == "rollback"] == []
    assert rep["baselines"]["ttft.p99"] == pytest.approx(base.others["ttft.p99"])


def test_a_metric_the_baseline_log_lacks_gets_no_baseline_and_says_why(tmp_path: Path) -> None:
    path = tmp_path / "plain.parquet"
    t = np.arange(0, 600, 0.2)
    ts = pa.array(np.round((START + t) * 1e6).astype(np.int64)).cast(pa.timestamp("us", tz="UTC"))
    pq.write_table(pa.table({"ts": ts, "total_ms": np.full(t.size, 300.0)}), path)
    base = log_baseline(load_replay_log(path), _llm_policy(), "plain.parquet")
    assert "ttft.p99" not in base.others
    assert any(n.startswith("no ttft.p99 baseline from plain.parquet: no ttft") for n in base.notes)
    assert base.p99_ms == pytest.approx(300.0)
