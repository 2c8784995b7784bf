"""Replay over an LLM log: the LLM default acts on TTFT inside a planted queueing episode only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tailbudget.budget.policy import parse_policy
from tailbudget.control.logsource import load_replay_log
from tests.control.replay_json import replay_json

from .synth import START

TTFT_P95 = 800.0
EPISODE = (900.0, 1200.0)  # seconds from the start: requests queue, TTFT grows tenfold
DURATION, RPS = 2400.0, 5.0
TRIGGERS = {"scale_up", "trim_logging", "shed_load", "rollback"}


def _llm_log(path: Path, seed: int = 3) -> Path:
    """Poisson arrivals; TTFT lognormal ~150 ms, ~1.5 s while queued; 20-400 tokens at 25 ms.

    End-to-end time is TTFT plus decode: it grows with answer length whatever the load,
    which is why the policy reads TTFT, not e2e.
    """
    rng = np.random.default_rng(seed)
    n = rng.poisson(DURATION * RPS)
    t = np.sort(rng.uniform(0, DURATION, n))
    queued = (t >= EPISODE[0]) & (t < EPISODE[1])
    ttft = rng.lognormal(np.log(150.0), 0.3, n) * np.where(queued, 10.0, 1.0)
    tokens = rng.integers(20, 400, n)
    tpot = rng.lognormal(np.log(25.0), 0.1, n)
    total = ttft + (tokens - 1) * tpot
    table = pa.table(
        {
            "ts": pa.array(np.round((START + t) * 1e6).astype(np.int64)).cast(
                pa.timestamp("us", tz="UTC")
            ),
            "total_ms": total,
            "ttft_ms": ttft,
            "output_tokens": tokens,
        }
    )
    pq.write_table(table, path)
    return path


def test_scale_up_lands_inside_the_queueing_episode_and_nothing_fires_outside(
    tmp_path: Path,
) -> None:
    log = load_replay_log(_llm_log(tmp_path / "llm.parquet"))
    assert "ttft" in log.series
    policy = parse_policy("default", targets={"ttft.p95": TTFT_P95})
    assert policy.source.startswith("default (LLM)")
    rep = replay_json(log, policy)
    triggers = [d for d in rep["decisions"] if d["action"] in TRIGGERS]
    ups = [d for d in triggers if d["action"] == "scale_up"]
    assert ups, rep["notes"]
    lo, hi = EPISODE[0], EPISODE[1] + policy.window_s
    for d in triggers:
        assert lo <= d["t_offset_s"] <= hi, d
        assert d["metric"] == "ttft.p95"
    # the first scale_up within one window plus one evaluation of the episode's start
    assert ups[0]["t_offset_s"] <= lo + policy.window_s + policy.evaluate_every_s
    # over the target for 2 min inside a 5 min episode: shed_load too
    assert any(d["action"] == "shed_load" for d in triggers)
    # recovery only after the episode
    for d in rep["decisions"]:
        if d["action"] not in TRIGGERS:
            assert d["t_offset_s"] > EPISODE[1]
    assert any(w.get("ttft_p95") for w in rep["timeline"])
    assert any("LLM series replayed" in n for n in rep["notes"])


def test_the_seed_default_on_e2e_would_have_acted_outside_the_episode(tmp_path: Path) -> None:
    # e2e includes decode (up to 10 s for long answers): the seed default's e2e p95 rule
    # (1.8 s) fires whatever the load; the reason the LLM default reads TTFT.
    log = load_replay_log(_llm_log(tmp_path / "llm.parquet"))
    rep = replay_json(log, parse_policy("default"))
    outside = [
        d
        for d in rep["decisions"]
        if d["action"] == "scale_up" and not EPISODE[0] <= d["t_offset_s"] <= EPISODE[1] + 60
    ]
    assert outside


def test_the_cli_replays_an_llm_log_with_the_budgets_ttft_objective(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    log = _llm_log(tmp_path / "llm.parquet")
    budget = tmp_path / "budget.yaml"
    budget.write_text(
        "service: chat\n"
        f"slo: {{e2e: {{p99: 20000}}, ttft: {{p95: {TTFT_P95:g}}}}}\n"
        "pipeline:\n  - stage: llm\n    budget: {p99: 15000}\n"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tailbudget",
            "replay",
            str(log),
            "--budget",
            str(budget),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    rep = json.loads(out.stdout)
    assert rep["policy"]["source"].startswith("default (LLM)")
    ups = [d for d in rep["decisions"] if d["action"] == "scale_up"]
    assert ups and all(EPISODE[0] <= d["t_offset_s"] <= EPISODE[1] + 60 for d in ups)


AIPERF = (
    Path(__file__).resolve().parents[2].parent / "shared" / "data" / "aiperf_profile_export.jsonl"
)


def test_replay_of_a_real_aiperf_export_acts_on_its_ttft() -> None:
    # 100 requests started within 20 ms (a burst); 11 cancelled without a latency
    if not AIPERF.exists():
        import pytest

        pytest.skip("../shared/data/aiperf_profile_export.jsonl is missing")
    log = load_replay_log(AIPERF)
    assert log.format == "aiperf" and log.rows["used"] == 89
    assert set(log.series) == {"ttft", "tpot", "itl"}
    assert any("11 requests failed without a latency" in n for n in log.notes)
    ttft = np.sort(log.series["ttft"].ms)
    true_p95 = float(np.quantile(ttft, 0.95, method="lower"))
    tight = replay_json(log, parse_policy("default", targets={"ttft.p95": 1200.0}))
    ups = [d for d in tight["decisions"] if d["action"] == "scale_up"]
    assert len(ups) == 1 and ups[0]["metric"] == "ttft.p95"
    assert abs(ups[0]["value"] - true_p95) <= 0.01 * true_p95  # the sketch's accuracy
    assert ups[0]["count"] == 89
    # a target above what the burst reached: nothing to do
    loose = replay_json(log, parse_policy("default", targets={"ttft.p95": 2 * float(ttft[-1])}))
    assert [d for d in loose["decisions"] if d["action"] == "scale_up"] == []


def test_replay_of_aiperf_observes_each_request_at_its_completion() -> None:
    # AIPerf's timestamp is the send time (89 requests sent within 20 ms): a live service
    # sees a request when it completes, so no decision may cite a request not yet done.
    if not AIPERF.exists():
        import pytest

        pytest.skip("../shared/data/aiperf_profile_export.jsonl is missing")
    from tailbudget.logs.read import read_log

    sent = read_log(str(AIPERF)).table.select("ts", "total_ms").to_pyarrow()
    send_s = np.array([t.timestamp() for t in sent.column("ts").to_pylist()])
    done_s = np.sort(send_s + np.asarray(sent.column("total_ms").to_numpy()) / 1000.0)
    log = load_replay_log(AIPERF)
    assert log.at_completion
    np.testing.assert_allclose(log.ts_s, done_s, rtol=0, atol=1e-5)
    # the series follow the completion order: ttft <= e2e row by row
    ttft = log.series["ttft"]
    assert np.all(ttft.ms <= log.total_ms[ttft.index] + 1e-6)
    rep = replay_json(log, parse_policy("default", targets={"ttft.p95": 1200.0}))
    assert rep["notes"][0].startswith("open loop: each request is observed at completion")
    assert rep["decisions"]
    for d in rep["decisions"]:
        at = rep_t0(rep) + d["t_offset_s"]
        assert at >= done_s[0] - 1e-3  # no decision before the first completion
        assert d["count"] is None or d["count"] <= int(np.sum(done_s <= at + 1e-6))


def rep_t0(rep: dict[str, object]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(str(rep["start"]).replace("Z", "+00:00")).timestamp()
