"""The service runtime without HTTP: durable ingest, replay after a crash, decisions, dry run."""

from __future__ import annotations

import json
import re
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailbudget.budget.policy import parse_policy, resolve_policy
from tailbudget.control.backpressure import PriorityShedder, TokenBucket
from tailbudget.errors import TailbudgetError
from tailbudget.serve.actions import ActionsConfig
from tailbudget.serve.actions.config import CommandConfig, ShedConfig
from tailbudget.serve.batch import Batch
from tailbudget.serve.ingest import MAX_PAST_S, BadBatch, _checked, parse_observations
from tailbudget.serve.runtime import Runtime, RuntimeConfig
from tests.control.runtimes import crash, policy, runtime

T0 = 1_800_000_000.0


def _ingest(rt: Runtime, n: int, ms: float, t: float, errors: int = 0) -> None:
    ts = np.full(n, t)
    err = np.zeros(n, dtype=bool)
    err[:errors] = True
    rt.ingest(Batch(ts, np.full(n, ms), err))


def test_acknowledged_batches_survive_a_crash_with_and_without_compaction(tmp_path):
    rt = runtime(tmp_path)
    _ingest(rt, 40, 100.0, T0, errors=4)
    rt.compact()
    _ingest(rt, 60, 120.0, T0 + 1)  # only in the write-ahead log
    before = rt.controller.window_stats(T0 + 2)
    crash(rt)
    again = runtime(tmp_path)
    assert (again.observations_total, again.errors_total, again.seq) == (100, 4, 2)
    after = again.controller.window_stats(T0 + 2)
    assert (after.count, after.errors, after.p95) == (before.count, before.errors, before.p95)
    again.close()


def test_decisions_are_journaled_executed_and_snapshotted(tmp_path):
    rt = runtime(tmp_path)
    for i in range(3):
        _ingest(rt, 20, 900.0, T0 + i)
        decisions = rt.evaluate(T0 + i + 1)
        if decisions:
            break
    assert [d.action for d in decisions] == ["scale_up"]
    assert rt.replicas.desired == 2 and rt.status(T0 + 3)["desired_replicas"] == 2
    kinds = [(r["kind"], r.get("action")) for r in rt.journal.records()]
    assert kinds[0] == ("decision", "scale_up") and kinds[-1][0] == "outcome"
    snap = rt.state.load_snapshot()
    assert snap is not None and snap["desired_replicas"] == 2  # snapshot right after deciding
    crash(rt)
    again = runtime(tmp_path)
    assert again.replicas.desired == 2 and again.decisions_total[("scale_up", "scale")] == 1
    assert again.last_decisions[-1]["value"] > 500
    again.close()


def test_dry_run_journals_and_does_not_execute(tmp_path):
    rt = runtime(tmp_path, dry_run=True)
    _ingest(rt, 20, 900.0, T0)
    decisions = rt.evaluate(T0 + 1)
    assert decisions and all(d.dry_run for d in decisions)
    assert rt.replicas.desired == 1  # not executed
    records = list(rt.journal.records())
    assert records[0]["dry_run"] is True and "dry run" in records[1]["detail"]
    assert "dry run" in " ".join(rt.status(T0 + 1)["notes"])
    rt.close()


def test_verdict_is_unknown_without_data_and_healthy_with_it(tmp_path):
    rt = runtime(tmp_path)
    assert rt.verdict(T0)["verdict"] == "unknown"
    _ingest(rt, 20, 100.0, T0)
    assert rt.verdict(T0 + 0.5)["verdict"] == "healthy"
    rt.close()


def test_parse_observations_json_and_ndjson():
    body = b'[{"total_ms": 5, "ts": "2026-01-01T00:00:00Z", "error": 1}]'
    a = parse_observations(body, now_s=1767225600.0 + 60)
    assert a.ts[0] == 1767225600.0 and bool(a.error[0]) and a.total_ms[0] == 5
    b = parse_observations(
        b'{"total_ms": 1.5}\n\n{"total_ms": 2, "stages": {"llm": 1}}\n', now_s=T0
    )
    assert list(b.ts) == [T0, T0] and b.stage_counts == {"llm": 1}
    assert list(b.stages["llm"].index) == [1] and list(b.stages["llm"].ms) == [1.0]
    fast = b'[{"total_ms": 3, "ts": 1799999000.5, "error": true}, {"total_ms": 4}]'
    c = parse_observations(fast, now_s=T0)
    assert list(c.ts) == [1799999000.5, T0] and list(c.error) == [True, False]
    with pytest.raises(BadBatch, match="with a zone"):
        parse_observations(b'[{"total_ms": 5, "ts": "2026-01-01T00:00:00"}]', now_s=T0)
    with pytest.raises(BadBatch, match=r"item 1: ts is .* ahead of the server clock"):
        parse_observations(b'[{"total_ms": 5}, {"total_ms": 5, "ts": 1700000000000}]', now_s=T0)
    with pytest.raises(BadBatch, match="item 0: total_ms"):
        parse_observations(b'[{"total_ms": true}]', now_s=T0)
    with pytest.raises(BadBatch, match="item 2: total_ms"):
        parse_observations(b'[{"total_ms": 1}, {"total_ms": 2}, {"total_ms": NaN}]', now_s=T0)
    with pytest.raises(BadBatch, match=r"stages\.llm"):
        parse_observations(b'[{"total_ms": 1, "stages": {"llm": "x"}}]', now_s=T0)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"[" * 30_000 + b"]" * 30_000, "nested too deep"),
        (b'{"total_ms": 1}\n' + b"[" * 30_000, "NDJSON line 2: JSON nested too deep"),
        (b'[{"total_ms": ' + b"9" * 400 + b"}]", "a number with 400 digits"),
        (b'[{"total_ms": 1, "ts": ' + b"1" * 5000 + b"}]", "a number with 5000 digits"),
        (b'[{"total_ms": 1e400}]', "item 0: total_ms"),
        (b'[{"total_ms": 1, "stages": {"a": 1e999}}]', r"stages\.a"),
        (b'[{"total_ms": 1, "ts": "0001-01-01T00:00:00Z"}]', "days before the server clock"),
        (b'[{"total_ms": 1, "ts": 0}]', "days before the server clock"),
        (b'[{"total_ms": 1, "ts": "0001-01-01T00:00:00+14:00"}]', "item 0: ts"),
        (b'[{"total_ms": 1, "stages": {"a\\n": 1}}]', "control character"),
    ],
    ids=[
        "deep",
        "deep-ndjson",
        "400-digits",
        "5000-digits",
        "1e400",
        "stage-1e999",
        "year-1",
        "epoch-0",
        "year-1-zone",
        "newline-stage",
    ],
)
def test_hostile_bodies_are_bad_batches_with_the_reason(body, reason):
    with pytest.raises(BadBatch, match=reason):
        parse_observations(body, now_s=T0)


def test_commands_run_off_the_evaluation_thread_after_journaling(tmp_path):
    marker = tmp_path / "ran"
    script = f"import sys; open({str(marker)!r}, 'a').write(sys.argv[1] + '\\n')"
    actions = ActionsConfig(
        log=False, commands=[CommandConfig(argv=[sys.executable, "-c", script, "{action}"])]
    )
    rt = Runtime(policy(), RuntimeConfig(state_dir=tmp_path / "state", actions=actions))
    _ingest(rt, 20, 900.0, T0)
    assert [d.action for d in rt.evaluate(T0 + 1)] == ["scale_up"]
    rt.wait_for_actions(timeout_s=60)
    assert marker.read_text() == "scale_up\n"
    outcomes = [r for r in rt.journal.records() if r["kind"] == "outcome"]
    assert any(r["detail"].startswith("command") and r["ok"] for r in outcomes)
    rt.close()


_item = st.fixed_dictionaries(
    {"total_ms": st.floats(0, 1e7, allow_nan=False) | st.integers(0, 10**7)},
    optional={
        "ts": st.floats(T0 - MAX_PAST_S, T0, allow_nan=False) | st.none(),
        "error": st.booleans() | st.none() | st.sampled_from([0, 1]),
        # a few names per item, so a batch stays within MAX_STAGES names
        "stages": st.dictionaries(
            st.text(
                st.characters(
                    blacklist_categories=("Cc", "Cs", "Zl", "Zp", "Zs", "Cf", "Co", "Cn")
                ),
                min_size=1,
                max_size=5,
            ),
            st.floats(0, 1e5),
            max_size=2,
        ),
        "route": st.text(max_size=5),
    },
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_item, min_size=1, max_size=30), st.booleans())
def test_parse_round_trips_valid_batches(items, ndjson):
    body = ("\n".join(json.dumps(i) for i in items) if ndjson else json.dumps(items)).encode()
    got = parse_observations(body, now_s=T0)
    assert len(got) == len(items)
    for k, item in enumerate(items):
        assert got.total_ms[k] == float(item["total_ms"])
        ts = item.get("ts")
        assert got.ts[k] == (T0 if ts is None else float(ts))
        assert bool(got.error[k]) == bool(item.get("error"))
        for name, ms in item.get("stages", {}).items():  # row k carries its stage times
            col = got.stages[name]
            assert list(col.ms[col.index == k]) == [ms]
    assert sum(got.stage_counts.values()) == sum(len(i.get("stages", {})) for i in items)
    # the vectorized path and the item-by-item one agree
    slow = _checked(
        json.loads(body) if not ndjson else [json.loads(x) for x in body.splitlines()], T0
    )
    assert slow.stage_counts == got.stage_counts
    for name, col in got.stages.items():
        assert list(col.index) == list(slow.stages[name].index)
        assert list(col.ms) == list(slow.stages[name].ms)


@pytest.mark.parametrize(
    ("stages", "reason"),
    [
        ('{"": 5}', "stage name '' must be 1 to 100 characters"),
        ('{"' + "x" * 101 + '": 5}', "must be 1 to 100 characters"),
        ('{"llm": -1}', "item 1: stages.llm must be a number >= 0"),
        ('{"llm": 1e400}', "item 1: stages.llm must be a number >= 0"),
        ('{"llm": null}', "item 1: stages.llm must be a number >= 0"),
        ('{"\\ud800": 5}', "is not valid UTF-8"),
        ("[1, 2]", "item 1: stages must be an object"),
        ("{" + ", ".join(f'"s{i}": 1' for i in range(65)) + "}", "more than 64 stage names"),
    ],
)
def test_bad_stage_names_and_times_are_named(stages, reason):
    body = f'[{{"total_ms": 1, "stages": {{"ok": 1}}}}, {{"total_ms": 2, "stages": {stages}}}]'
    with pytest.raises(BadBatch, match=re.escape(reason)):
        parse_observations(body.encode(), now_s=T0)


def test_unusable_controller_state_restarts_the_rules_and_keeps_the_counts(tmp_path):
    rt = runtime(tmp_path)
    _ingest(rt, 30, 100.0, T0)
    rt.close()
    snap = rt.state.load_snapshot()
    assert snap is not None
    snap["controller"]["rules"] = {"scale": {"since": "not a time"}}
    rt.state.write_snapshot(snap)
    again = runtime(tmp_path)
    assert again.observations_total == 30
    assert "rule state restarted" in " ".join(again.status(T0)["notes"])
    again.close()


def test_embedded_runtime_sheds_on_the_applications_gates_and_resumes(tmp_path):
    policy = parse_policy(
        {
            "window": "10s",
            "evaluate_every": "1s",
            "min_samples": 5,
            "rules": [{"name": "shed", "metric": "p95", "threshold": 500, "action": "shed_load"}],
        }
    )
    config = RuntimeConfig(
        state_dir=tmp_path / "state",
        actions=ActionsConfig(log=False, shed=ShedConfig(fraction=0.4, rate_per_s=20.0)),
    )
    shedder, limiter = PriorityShedder(), TokenBucket(1000.0)
    rt = Runtime(policy, config, shedder=shedder, limiter=limiter)
    _ingest(rt, 20, 900.0, T0)
    assert [d.action for d in rt.evaluate(T0 + 1)] == ["shed_load"]
    assert shedder.fraction == 0.4 and limiter.rate_per_s == 20.0
    crash(rt)
    fresh_shedder = PriorityShedder()
    again = Runtime(policy, config, shedder=fresh_shedder, limiter=TokenBucket(1000.0))
    assert fresh_shedder.fraction == 0.4  # the shedding in force survives a restart
    assert again.status(T0 + 1)["shed"] == {"fraction": 0.4, "rate_per_s": 20.0}
    again.close()


def test_a_snapshot_from_another_version_is_a_clear_error(tmp_path):
    rt = runtime(tmp_path)
    rt.close()
    rt.state.write_snapshot({"version": 99})
    with pytest.raises(TailbudgetError, match="snapshot version 99"):
        runtime(tmp_path)


def test_default_policy_says_the_baseline_rule_is_inactive_until_a_baseline_is_set(tmp_path):
    config = RuntimeConfig(state_dir=tmp_path / "state", actions=ActionsConfig(log=False))
    rt = Runtime(resolve_policy(None), config)
    assert "no baseline: p99 rollback rule inactive" in rt.status(T0)["notes"]
    rt.set_baseline(850.0)
    status = rt.status(T0)
    assert status["baseline_p99_ms"] == 850.0
    assert "no baseline: p99 rollback rule inactive" not in status["notes"]
    rt.close()
