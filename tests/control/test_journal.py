"""The decision journal and the durable state dir (snapshot + observation WAL)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailbudget.control.engine import Decision
from tailbudget.errors import TailbudgetError
from tailbudget.serve.journal import Journal, decision_key
from tailbudget.serve.state import StateDir, dumps_state, loads_state


def _decision(action: str = "scale_up", t_s: float = 100.0, **kw: object) -> Decision:
    fields: dict[str, object] = {
        "t_s": t_s,
        "action": action,
        "metric": "p95",
        "value": 2100.0,
        "threshold": 1800.0,
        "rule": "scale_up_p95",
        "reason": "p95 2100 ms > 1800 ms",
        "dry_run": False,
    }
    fields.update(kw)
    return Decision(**fields)  # type: ignore[arg-type]


def test_journal_appends_decisions_and_outcomes_in_order(tmp_path):
    path = tmp_path / "journal.jsonl"
    with Journal(path) as journal:
        rec = journal.append_decision(_decision())
        journal.append_outcome(rec["id"], "scale_up", ok=True, detail="done")
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["kind"] for x in lines] == ["decision", "outcome"]
    assert lines[0]["value"] == 2100.0 and lines[0]["threshold"] == 1800.0
    assert lines[0]["rule"] == "scale_up_p95" and lines[1]["id"] == lines[0]["id"]
    # Append-only: a second journal on the same file keeps the earlier records.
    with Journal(path) as again:
        again.append_decision(_decision("rollback", t_s=200.0))
    assert [r["action"] for r in Journal(path).records()] == ["scale_up", "scale_up", "rollback"]


def test_journal_skips_a_torn_last_line(tmp_path):
    path = tmp_path / "journal.jsonl"
    with Journal(path) as journal:
        journal.append_decision(_decision())
    with open(path, "a") as fh:
        fh.write('{"kind": "decision", "acti')  # crash mid-write
    assert len(list(Journal(path).records())) == 1


def test_decision_key_is_stable_and_distinguishes_decisions():
    a, b = _decision(), _decision()
    assert decision_key(a) == decision_key(b)
    assert decision_key(a) != decision_key(_decision(t_s=110.0))
    assert decision_key(a) != decision_key(_decision(action="trim_logging"))


def test_unwritable_state_dir_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(TailbudgetError, match="state dir is not writable"):
        StateDir(blocker / "state")


def _batch(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (
        1_700_000_000 + np.arange(n, dtype=np.float64),
        rng.lognormal(6, 0.5, n),
        rng.random(n) < 0.1,
    )


def test_wal_round_trip_and_torn_tail(tmp_path):
    state = StateDir(tmp_path)
    batches = [_batch(n, seed) for seed, n in enumerate((1, 50, 1000))]
    for seq, (ts, total, err) in enumerate(batches, 1):
        state.wal.append(seq, ts, total, err)
    # A torn record after the last fsync (kill -9 mid-append) was never acknowledged.
    with open(tmp_path / StateDir.WAL, "ab") as fh:
        fh.write(b"TBW1\x05\x00\x00")
    state.close()
    with StateDir(tmp_path) as again:
        got = list(again.pending(0))
    assert [b.seq for b in got] == [1, 2, 3]
    for batch, (ts, total, err) in zip(got, batches, strict=True):
        np.testing.assert_array_equal(batch.ts, ts)
        np.testing.assert_array_equal(batch.total_ms, total)
        np.testing.assert_array_equal(batch.error, err)
    with StateDir(tmp_path) as again:
        assert [b.seq for b in again.pending(2)] == [3]


def test_wal_stops_at_a_corrupt_record(tmp_path):
    state = StateDir(tmp_path)
    for seq in (1, 2):
        state.wal.append(seq, *_batch(10, seq))
    state.close()
    data = bytearray((tmp_path / StateDir.WAL).read_bytes())
    data[-5] ^= 0xFF  # flip a byte in the second record's payload
    (tmp_path / StateDir.WAL).write_bytes(bytes(data))
    with StateDir(tmp_path) as again:
        assert [b.seq for b in again.pending(0)] == [1]


def test_compact_snapshots_then_empties_the_log(tmp_path):
    state = StateDir(tmp_path)
    state.wal.append(1, *_batch(10, 1))
    state.compact({"seq": 1, "blob": b"\x00\x01sketch"})
    assert os.path.getsize(tmp_path / StateDir.WAL) == 0
    state.close()
    with StateDir(tmp_path) as again:
        snap = again.load_snapshot()
    assert snap == {"seq": 1, "blob": b"\x00\x01sketch"}


def test_unreadable_snapshot_names_the_file(tmp_path):
    (tmp_path / StateDir.SNAPSHOT).write_text("{not json")
    with pytest.raises(TailbudgetError, match=r"snapshot\.json"), StateDir(tmp_path) as state:
        state.load_snapshot()


@settings(max_examples=60, deadline=None)
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.text()
        | st.binary()
        | st.floats(allow_nan=False, allow_infinity=False),
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
        ),
        max_leaves=12,
    )
)
def test_state_serialization_round_trips(value):
    assert loads_state(dumps_state({"v": value})) == {"v": value}


def test_a_failed_append_leaves_no_partial_record(tmp_path):
    """A write cut short (here by a file-size limit, as on a full disk) is not
    acknowledged and is cut off, so the batches acknowledged after it replay."""
    script = f"""
import resource, signal, sys
import numpy as np
from tailbudget.serve.state import StateDir
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
state = StateDir({str(tmp_path)!r})
one = (np.ones(10), np.ones(10), np.zeros(10, dtype=bool))
state.wal.append(1, *one)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (state.wal.size() + 100, hard))
big = (np.ones(1000), np.ones(1000), np.zeros(1000, dtype=bool))
try:
    state.wal.append(2, *big)
except OSError:
    print("refused")
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
state.wal.append(3, *one)
print([b.seq for b in state.pending(0)])
"""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["refused", "[1, 3]"]
