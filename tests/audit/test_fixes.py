"""The fix catalog: which fix answers a hypothesis, and the output-length variant of
input_shape (cap_output_tokens) with its own defaults, overridable by name."""

from __future__ import annotations

import pytest

from tailbudget.audit.fixes import CATALOG, action, catalog, fix_for, fix_name


@pytest.mark.parametrize(
    ("kind", "covariate", "name"),
    [
        ("input_shape", "output_tokens", "cap_output_tokens"),
        ("input_shape", "completion_tokens", "cap_output_tokens"),
        ("input_shape", "input_tokens", "cap_input_size"),
        ("input_shape", "seq_len", "cap_input_size"),
        ("input_shape", None, "cap_input_size"),
        # Only input_shape has an output variant: a fan-out count stays a fan-out count.
        ("fanout", "shards", "limit_fanout"),
        ("cold_start", None, "prewarm_replicas"),
        ("llm_decode", "output_tokens", "speed_up_decode"),
        ("no_such_kind", None, None),
    ],
)
def test_fix_name(kind: str, covariate: str | None, name: str | None) -> None:
    assert fix_name(kind, covariate) == name


def test_output_fix_entry() -> None:
    out, inp = CATALOG["cap_output_tokens"], CATALOG["cap_input_size"]
    assert out.kind == inp.kind == "input_shape"
    assert "output length" in out.counterfactual and "p95" in out.counterfactual
    assert "max_tokens" in out.counterfactual and "output" not in inp.counterfactual
    assert out.reversible
    text = action(out, "output_tokens", {"cap": 551.6, "p95": 551.6})
    assert text == "cap generation length: set max_tokens to about 552, the p95 of output_tokens"
    assert action(inp, "seq_len", {"cap": 812.0}) == "cap seq_len at about 812, its p95"
    assert action(out, None, {"cap": 1.0}) == "" and action(out, "x", {}) == ""


def test_overrides_apply_to_one_variant_only() -> None:
    cat = catalog({"cap_output_tokens": {"hours": 1, "risk": "low", "reversible": False}})
    out = fix_for(cat, "input_shape", "output_tokens")
    assert out is not None and (out.name, out.hours, out.risk, out.reversible) == (
        "cap_output_tokens",
        1.0,
        "low",
        False,
    )
    assert fix_for(cat, "input_shape", "seq_len") == CATALOG["cap_input_size"]
    cat = catalog({"cap_input_size": {"hours": 2}})
    assert fix_for(cat, "input_shape", "output_tokens") == CATALOG["cap_output_tokens"]
    assert fix_for(cat, "input_shape", "seq_len").hours == 2  # type: ignore[union-attr]


def test_with_replicas_carries_the_count_on_add_capacity() -> None:
    from tailbudget.audit.fixes import with_replicas
    from tailbudget.demo import planted
    from tests.audit.test_planted import audit

    r = audit(planted.contention())
    out = with_replicas(r, 6, "1 request(s) at once per replica, default")
    fix = next(f for f in out.ranking if f.fix == "add_capacity")
    assert fix.replicas == 6
    assert out.recommendation.text.endswith(
        "6 replicas (1 request(s) at once per replica, default)."
    )
    assert all(f.replicas is None for f in out.ranking if f.fix != "add_capacity")
