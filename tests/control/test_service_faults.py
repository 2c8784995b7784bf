"""The service runtime under faults: malformed snapshots, failing snapshot writes,
a rollback cleared by an operator, and a client naming stages without end."""

from __future__ import annotations

import errno
import json
import os

import numpy as np
import pytest
from typer.testing import CliRunner

from tailbudget.budget.policy import parse_policy
from tailbudget.cli import app
from tailbudget.errors import TailbudgetError
from tailbudget.serve.actions import ActionsConfig
from tailbudget.serve.batch import Batch
from tailbudget.serve.runtime import _STAGE_NAMES, Runtime, RuntimeConfig
from tailbudget.serve.state import StateDir
from tailbudget.serve.wal import StageColumn
from tests._json import strict_json
from tests.control.runtimes import crash, runtime

T0 = 1_800_000_000.0


def _ingest(rt: Runtime, n: int, ms: float, t: float, errors: int = 0) -> None:
    err = np.zeros(n, dtype=bool)
    err[:errors] = True
    rt.ingest(Batch(np.full(n, t), np.full(n, ms), err))


def _snapshot(tmp_path, change) -> None:
    rt = runtime(tmp_path)
    _ingest(rt, 10, 100.0, T0)
    rt.close()
    path = tmp_path / "state" / StateDir.SNAPSHOT
    snap = json.loads(path.read_text())
    change(snap)
    path.write_text(json.dumps(snap))


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda s: s.pop("seq"), "no 'seq'"),
        (lambda s: s.update(seq="12"), "'seq' must be an integer >= 0, got str"),
        (lambda s: s.update(observations_total=[1]), "'observations_total' must be an integer"),
        (lambda s: s.update(controller=None), "'controller' must be an object"),
        (lambda s: s.update(stage_observations={"a": "x"}), "stage_observations"),
        (lambda s: s.update(shed=3), "'shed' has the wrong type"),
        (lambda s: s["controller"].update(window=[]), "controller.window has the wrong type"),
    ],
    ids=["no-seq", "seq-str", "total-list", "controller-null", "stage-count", "shed", "window"],
)
def test_a_malformed_snapshot_is_one_line_naming_the_file(tmp_path, change, reason):
    _snapshot(tmp_path, change)
    with pytest.raises(TailbudgetError, match=r"snapshot\.json: the state snapshot is malformed"):
        runtime(tmp_path)
    result = CliRunner().invoke(
        app, ["serve", "--port", "1", "--state-dir", str(tmp_path / "state")]
    )
    # port 1 is refused before the state is read when not root; as root it binds, so
    # the state dir is what stops it. Either way: exit 2 and one line.
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    if os.geteuid() == 0:
        assert "snapshot.json" in result.output and reason in result.output


def test_a_snapshot_that_cannot_be_written_keeps_the_old_one_and_the_log(tmp_path, monkeypatch):
    rt = runtime(tmp_path)
    _ingest(rt, 10, 100.0, T0)
    rt.compact()
    state = tmp_path / "state"
    before = (state / StateDir.SNAPSHOT).read_bytes()
    _ingest(rt, 15, 100.0, T0 + 1)
    log_size = rt.state.wal.size()
    real_write = os.write

    def short(fd: int, data: bytes) -> int:  # a full disk: part of it, then nothing
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).endswith(".tmp"):
            if len(data) > 100:
                return real_write(fd, bytes(data[:100]))
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", short)
    with pytest.raises(OSError, match="No space left"):
        rt.set_baseline(900.0)
    assert rt.status()["snapshot"]["error"] == "cannot write the snapshot (No space left on device)"
    assert any("write-ahead log keeps every batch" in n for n in rt.status()["notes"])
    rt.evaluate(T0 + 2)  # a scheduled compaction fails quietly: logged, in the status
    monkeypatch.undo()
    assert (state / StateDir.SNAPSHOT).read_bytes() == before
    assert rt.state.wal.size() == log_size
    assert not (state / "snapshot.json.tmp").exists()
    crash(rt)
    again = runtime(tmp_path)
    assert again.observations_total == 25
    again.compact()  # the disk has room again
    assert again.status()["snapshot"]["error"] is None
    again.close()


def _rollback_runtime(tmp_path) -> Runtime:
    rules = [
        {"name": "errors", "metric": "error_rate", "threshold": 0.05, "action": "rollback"},
    ]
    pol = parse_policy({"window": "10s", "evaluate_every": "1s", "min_samples": 5, "rules": rules})
    config = RuntimeConfig(state_dir=tmp_path / "state", actions=ActionsConfig(log=False))
    return Runtime(pol, config)


def test_a_rollback_verdict_clears_on_request_journaled_and_durable(tmp_path):
    rt = _rollback_runtime(tmp_path)
    fired = []
    for k in range(200):  # errors every second until the rule's `for` span has held
        _ingest(rt, 50, 100.0, T0 + k, errors=20)
        fired += [d.action for d in rt.evaluate(T0 + k + 0.5)]
        if fired:
            break
    assert fired == ["rollback"]
    # after a rollback the canary gets no traffic: no data never counts as recovery
    end = T0 + k + 60
    for t in np.arange(T0 + k + 1.5, end, 1.0):
        rt.evaluate(float(t))
    assert rt.verdict(end)["verdict"] == "rollback"
    assert rt.clear_verdict("rolled back, fix deployed") == ["errors"]
    assert rt.verdict(end)["verdict"] == "unknown"
    (record,) = [r for r in rt.journal.records() if r["kind"] == "clear"]
    assert record["rules"] == ["errors"] and record["reason"] == "rolled back, fix deployed"
    crash(rt)
    again = _rollback_runtime(tmp_path)
    assert again.verdict(end)["verdict"] == "unknown"
    again.close()


def test_the_all_time_stage_name_set_is_bounded_like_the_window(tmp_path):
    rt = runtime(tmp_path, window="10s")
    for k in range(300):  # 3 fresh names a second for 300 s: 900 names in all
        names = {f"req-{k}-{j}": StageColumn(np.array([0]), np.array([5.0])) for j in range(3)}
        rt.ingest(Batch(np.array([T0 + k]), np.array([10.0]), np.zeros(1, dtype=bool), names))
        assert len(rt.stage_observations) <= _STAGE_NAMES + 10
    assert rt.observations_total == 300
    status = rt.status(T0 + 300)
    assert len(status["stage_observations"]) <= _STAGE_NAMES + 10
    rt.close()


def test_a_snapshot_and_journal_holding_infinity_load_with_it_skipped_and_reported(tmp_path):
    # As an older (lenient) writer left them: a scale_up on an overflowed p95 in the
    # snapshot's recent decisions and in the journal, bare Infinity and NaN.
    rt = runtime(tmp_path)
    for k in range(3):
        _ingest(rt, 20, 900.0, T0 + k)
        rt.evaluate(T0 + k + 0.5)
    assert rt.status(T0 + 3)["decisions_total"] == 1
    rt.close()
    state = tmp_path / "state"
    snap = json.loads((state / StateDir.SNAPSHOT).read_text())
    snap["controller"]["recent"][0]["value"] = float("inf")
    snap["controller"]["last_evaluated_s"] = float("nan")
    (state / StateDir.SNAPSHOT).write_text(json.dumps(snap))
    with open(state / StateDir.JOURNAL, "a") as fh:
        fh.write('{"kind":"decision","action":"scale_up","rule":"scale","value":Infinity}\n')
    again = runtime(tmp_path)
    status = again.status(T0 + 4)
    strict_json(json.dumps(status))
    notes = "\n".join(status["notes"])
    assert "2 NaN/Infinity figure(s)" in notes and "controller.recent[0].value" in notes
    assert "skipped 1 record(s) holding NaN or Infinity" in notes
    assert status["decisions_total"] == 1  # the journal's good decision is kept
    assert list(again.controller.recent) == []  # the decision on infinity is dropped
    again.close()
    strict_json((state / StateDir.SNAPSHOT).read_text())  # written strict on the way out


def test_the_verdict_goes_stale_when_no_evaluation_runs(tmp_path):
    rt = runtime(tmp_path)
    now = rt.started_s
    _ingest(rt, 20, 100.0, now)
    rt.evaluate(now + 0.5)
    assert rt.verdict(now + 1)["verdict"] == "healthy"
    rt.heartbeat.scheduled = True  # the service's evaluator runs it every second
    assert rt.verdict(now + 2.4)["verdict"] == "healthy"  # within two periods
    stale = rt.verdict(now + 3)
    assert stale["verdict"] == "unknown"
    assert "no good evaluation for 2 s (more than 2 periods of 1 s)" in stale["reason"]
    assert stale["by"] == [{"rule": None, "metric": "evaluation"}]
    rt.overran(5.0, 1.0)
    assert "past its 1 s deadline" in rt.verdict(now + 1)["reason"]
    assert rt.status(now + 3)["evaluation"]["errors"] == {"deadline": 1}
    rt.close()
