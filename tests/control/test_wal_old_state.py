"""A state dir written before dense log records (TBW3 + TBW4 records, snapshot version 4)
still loads: every acknowledged observation, stage time and LLM series value comes back."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from tailbudget.serve.batch import Batch
from tailbudget.serve.snapshot import SNAPSHOT_VERSION
from tailbudget.serve.wal import ObservationLog, StageColumn

from .runtimes import crash, runtime

FIXTURE = Path(__file__).parent / "data" / "state-v4"
"""Left by kill -9 after two batches: a plain one with stages (TBW3) and an LLM one
(TBW4: ttft on every row, tpot and itl_p99 on some, itl gaps with repeated rows)."""
T0 = 1_764_570_000.0


def test_the_old_records_read_back_exactly() -> None:
    log = ObservationLog(FIXTURE / "observations.wal")
    try:
        contents = log.read()
    finally:
        log.close()
    assert not contents.corruption and contents.torn_bytes == 0
    plain, llm = contents.batches
    assert (plain.seq, llm.seq) == (1, 2)
    assert plain.series == {} and plain.error.tolist() == [False, False, True, False, False, False]
    assert plain.stages["retrieval"].index.tolist() == [0, 2, 4]
    assert llm.total_ms.tolist() == [1000.0, 1100, 1200, 1300, 1400, 1500]
    assert llm.series["ttft"].ms.tolist() == [50.0, 60, 70, 80, 90, 100]
    assert llm.series["tpot"].index.tolist() == [0, 1, 3]
    assert llm.series["itl"].index.tolist() == [0, 0, 1, 1, 1, 5]
    assert llm.series["itl_p99"].ms.tolist() == [40.0, 41]


def test_an_old_state_dir_resumes_and_keeps_running(tmp_path) -> None:
    shutil.copytree(FIXTURE, tmp_path / "state")
    rt = runtime(tmp_path)
    status = rt.status(T0 + 3)
    assert status["observations_total"] == 12 and status["errors_total"] == 1
    assert status["stages"]["retrieval"]["count"] == 9
    counts = {name: s["count"] for name, s in status["series"].items()}
    assert counts == {"ttft": 6, "tpot": 3, "itl": 8}
    assert status["series"]["ttft"]["p99_upper"] == 100.0
    # Marked at once with today's version: an older tailbudget stops at its version
    # check instead of reading the new records as damage.
    snap = rt.state.load_snapshot()
    assert snap is not None and snap["version"] == SNAPSHOT_VERSION and snap["seq"] == 2
    # New records follow the old ones, and a crash after them loses nothing.
    ts = np.array([T0 + 2.0, T0 + 2.1])
    ttft = {"ttft": StageColumn(np.arange(2), np.array([55.0, 65.0]))}
    rt.ingest(Batch(ts, np.array([700.0, 800.0]), np.zeros(2, bool), series=ttft))
    crash(rt)
    again = runtime(tmp_path)
    status = again.status(T0 + 3)
    assert status["observations_total"] == 14
    assert {name: s["count"] for name, s in status["series"].items()}["ttft"] == 8
    again.close()
