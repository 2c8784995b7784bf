"""Parsing of --slo, --events and fix-catalog overrides: good values and one-line errors."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailbudget.audit import AuditConfig, parse_slo
from tailbudget.audit.events import parse_time, read_events
from tailbudget.audit.fixes import CATALOG, catalog
from tailbudget.budget import parse_budget
from tailbudget.errors import BudgetError, TailbudgetError


@given(
    st.dictionaries(
        st.sampled_from(["p50", "p95", "p99"]),
        st.floats(min_value=0.001, max_value=1e7),
        min_size=1,
    )
)
def test_parse_slo_round_trip(values: dict[str, float]) -> None:
    # Targets must not decrease with the percentile: give them in order.
    names = [k for k in ("p50", "p95", "p99") if k in values]
    values = dict(zip(names, sorted(values.values()), strict=True))
    text = ",".join(f"{k}={v!r}" for k, v in values.items())
    assert parse_slo(text) == values


@pytest.mark.parametrize(
    "text",
    ["", "p99", "p99=", "p99=-1", "p99=nan", "p90=100", "p99=1e", "p99=inf", "p95=2000,p99=100"],
)
def test_parse_slo_rejects(text: str) -> None:
    # A Python caller reads the argument's name (and `.param`), never a CLI flag.
    with pytest.raises(TailbudgetError, match=r"^slo") as err:
        parse_slo(text)
    assert err.value.param == "slo" and "--" not in str(err.value)


def test_config_needs_an_slo_and_valid_slow() -> None:
    with pytest.raises(TailbudgetError, match=r"^slo") as err:
        AuditConfig.of_e2e({})
    assert err.value.param == "slo"
    with pytest.raises(TailbudgetError, match=r"^slow") as err:
        AuditConfig.of_e2e({"p99": 1.0}, slow="p80")
    assert err.value.param == "slow"
    with pytest.raises(TailbudgetError, match=r"^slow"):
        AuditConfig.of_e2e({"p99": 1.0}, slow=-3.0)
    assert AuditConfig.of_e2e({"p99": 1.0}, slow=250.0).slow == 250.0


def test_config_from_budget() -> None:
    b = parse_budget(
        "environment: uat\nslo: {p95: 800, p99: 1200}\npipeline:\n"
        "  - stage: a\n    budget: {p99: 300}\n"
        "  - stage: llm\n    llm: {ttft_ms: 200, tokens_per_s: 40, output_tokens: 100}\n"
        "fixes: {warm_cache: {hours: 3}, cap_output_tokens: {hours: 2, risk: low}}\n"
    )
    c = AuditConfig.from_budget(b, slow="p99")
    assert c.slo == {"p95": 800.0, "p99": 1200.0} and c.gated == ("p95", "p99")
    assert c.stage_budgets == {"a": {"p99": 300.0}} and set(c.llm) == {"llm"}
    cat = catalog(c.fixes)
    assert cat["warm_cache"].hours == 3 and c.slow == "p99"
    assert (cat["cap_output_tokens"].hours, cat["cap_output_tokens"].risk) == (2, "low")


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ({"nope": {"hours": 1}}, "unknown fix"),
        ({"warm_cache": {"hours": 0}}, "hours"),
        ({"warm_cache": {"risk": "huge"}}, "risk"),
        ({"warm_cache": {"reversible": "yes"}}, "reversible"),
        ({"warm_cache": {"cost": 3}}, "unknown key"),
        ({"cap_output_tokens": {"hours": -1}}, "cap_output_tokens.hours"),
        ({"cap_output_tokens": {"risk": "none"}}, "cap_output_tokens.risk"),
        ({"cap_max_tokens": {"hours": 1}}, "known fixes are .*cap_output_tokens"),
    ],
)
def test_fix_overrides_are_validated(override, needle) -> None:
    with pytest.raises(BudgetError, match=needle):
        catalog(override)


def test_catalog_covers_every_kind() -> None:
    from typing import get_args

    from tailbudget.audit.report import HypothesisKind

    # Every hypothesis has a fix; the other kinds are the changes `rebudget` proposes.
    rebudget_kinds = {"stage_speed", "model_size", "degrade", "structure"}
    assert {f.kind for f in CATALOG.values()} - rebudget_kinds == set(get_args(HypothesisKind))
    assert all(name == f.name for name, f in CATALOG.items())


def test_events_csv(tmp_path: Path) -> None:
    f = tmp_path / "e.csv"
    f.write_text("ts,event\n2026-03-01T12:30:00Z,deploy\n1772366400,scale_up\n")
    ev = read_events(f)
    assert ev == (
        (datetime(2026, 3, 1, 12, 0, tzinfo=UTC), "scale_up"),
        (datetime(2026, 3, 1, 12, 30, tzinfo=UTC), "deploy"),
    )
    assert parse_time("2026-03-01 12:00:00") == datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    with pytest.raises(TailbudgetError, match="no events"):
        (tmp_path / "x.csv").write_text("")
        read_events(tmp_path / "x.csv")
    with pytest.raises(TailbudgetError, match="cannot read"):
        read_events(tmp_path / "missing.csv")
