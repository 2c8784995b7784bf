"""The simulate parsers: every text either parses or is a one-line TailbudgetError."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailbudget.errors import TailbudgetError
from tailbudget.sim.arrivals import ArrivalSpec, make_arrivals, parse_arrivals
from tailbudget.sim.fit import LoggedRequests, ModelOptions, fit_queue_model, read_event_times
from tailbudget.sim.policies import parse_policy_spec

TEXT = st.text(alphabet="poisnburtfxedhac:=.,-0123456789 ", max_size=30)


@given(TEXT)
def test_policy_spec_parses_or_refuses(text: str) -> None:
    try:
        spec = parse_policy_spec(text)
    except TailbudgetError as exc:
        assert "\n" not in str(exc)
        return
    assert spec.kind in ("budget", "fixed", "hpa")


@given(TEXT)
def test_arrivals_parse_or_refuse(text: str) -> None:
    try:
        spec = parse_arrivals(text)
    except TailbudgetError as exc:
        assert "\n" not in str(exc)
        return
    assert spec.kind in ("poisson", "burst", "trace")


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("budget", "budget"),
        ("fixed", "fixed"),
        ("fixed:3", "fixed"),
        ("hpa:utilization=0.6", "hpa"),
    ],
)
def test_policy_specs(text: str, kind: str) -> None:
    assert parse_policy_spec(text).kind == kind
    assert parse_policy_spec(text).label == text


def test_load_scales_poisson_and_compresses_recorded_times() -> None:
    rng = np.random.default_rng(0)
    a, horizon = make_arrivals(
        ArrivalSpec("poisson", rate=10.0), pool=5, load=2.0, duration_s=100.0,
        max_requests=None, low_share=0.0, rng=rng,
    )  # fmt: skip
    assert horizon == 100.0 and a.size == pytest.approx(2000, rel=0.1)
    times = np.arange(0.0, 100.0, 1.0)
    b, horizon = make_arrivals(
        ArrivalSpec("log"), pool=100, load=2.0, duration_s=None, max_requests=None,
        low_share=0.0, rng=rng, log_times=times,
    )  # fmt: skip
    # 49.5 s of arrivals, replayed once, in a run of one whole minute (the shortest run)
    assert horizon == pytest.approx(60.0) and np.allclose(np.diff(b.t_s), 0.5)
    assert (b.src == np.arange(100)).all()
    c, horizon = make_arrivals(
        ArrivalSpec("log"), pool=300, load=2.0, duration_s=None, max_requests=None,
        low_share=0.0, rng=rng, log_times=np.arange(0.0, 300.0, 1.0),
    )  # fmt: skip
    assert horizon == pytest.approx(149.5) and c.size == 300


def test_cold_factor_measured_from_events() -> None:
    rng = np.random.default_rng(1)
    ts = np.sort(rng.uniform(0, 3600, 20_000))
    total = rng.lognormal(np.log(100), 0.3, ts.size)
    events = (600.0, 1800.0)
    cold = np.zeros(ts.size, dtype=bool)
    for e in events:
        cold |= (ts >= e) & (ts <= e + 300)
    total[cold] *= 2.0
    lg = LoggedRequests("mem", total, np.zeros(ts.size, dtype=bool), ts_s=ts)
    model = fit_queue_model([lg], ModelOptions(events_s=events))
    assert model.cold_factor.source == "measured"
    assert model.cold_factor.value == pytest.approx(2.0, rel=0.05)
    plain = fit_queue_model([lg], ModelOptions())
    assert plain.cold_factor.source == "default" and "cold_factor" in plain.unidentified


def test_event_times_read_as_the_audit_reads_them(tmp_path) -> None:
    good = tmp_path / "events.csv"
    good.write_text("ts,event\n1700000600.5,deploy\n2023-11-14T22:00:00Z,restart\n")
    assert read_event_times(good) == (1699999200.0, 1700000600.5)  # sorted
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"timestamp,event\n\x00\xff\xfe,x\n")
    with pytest.raises(TailbudgetError, match="not UTF-8 text"):
        read_event_times(binary)
    empty = tmp_path / "empty_time.csv"
    empty.write_text("timestamp,event\n,deploy\n")
    with pytest.raises(TailbudgetError, match=r"empty_time.csv:2: empty timestamp"):
        read_event_times(empty)
