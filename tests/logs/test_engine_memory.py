"""The span roll-up's memory cap: lowered for the block, restored, never raised."""

from __future__ import annotations

import pytest

from tailbudget.logs.engine import MEMORY_LIMIT_ENV, _bytes, capped_memory, connect


def _limit(backend) -> str:
    return str(backend.raw_sql("SELECT current_setting('memory_limit')").fetchone()[0])


def test_cap_lowers_the_limit_for_the_block_then_restores_it(monkeypatch):
    monkeypatch.delenv(MEMORY_LIMIT_ENV, raising=False)
    backend = connect()
    before = _limit(backend)
    with capped_memory(backend, "128MB"):
        assert _limit(backend) in ("122.0 MiB", "128.0 MiB")
    # DuckDB shows the limit to 0.1 MiB: set back from that text, it may lose a little.
    assert _bytes(_limit(backend)) == pytest.approx(_bytes(before), rel=1e-3)
    with pytest.raises(RuntimeError), capped_memory(backend, "128MB"):
        raise RuntimeError("the block failed")
    assert _bytes(_limit(backend)) == pytest.approx(_bytes(before), rel=1e-3)


@pytest.mark.parametrize(("env", "session"), [("2GB", "2GB"), (None, "64MB")])
def test_cap_leaves_a_chosen_or_lower_limit_alone(monkeypatch, env, session):
    if env is None:
        monkeypatch.delenv(MEMORY_LIMIT_ENV, raising=False)
    else:
        monkeypatch.setenv(MEMORY_LIMIT_ENV, env)
    backend = connect()
    backend.raw_sql(f"SET memory_limit = '{session}'")
    before = _limit(backend)
    with capped_memory(backend, "128MB"):
        assert _limit(backend) == before


def test_cap_that_the_session_cannot_meet_keeps_its_limit(monkeypatch):
    # Without a spill folder DuckDB cannot evict what it holds: the cap is skipped.
    monkeypatch.delenv(MEMORY_LIMIT_ENV, raising=False)
    backend = connect()
    backend.raw_sql("SET temp_directory = ''")
    backend.raw_sql("CREATE TABLE held AS SELECT repeat('x', 200) || range AS s FROM range(200000)")
    before = _limit(backend)
    with capped_memory(backend, "1MB"):
        assert _limit(backend) == before
    assert backend.raw_sql("SELECT count(*) FROM held").fetchone()[0] == 200000
