"""Percentiles, Targets and Spread share one base: one reading of the stated points, one
check that there is one and that they do not fall."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tailbudget.budget.blocks import PercentileBlock
from tailbudget.budget.llm_spec import Spread
from tailbudget.budget.model import Percentiles
from tailbudget.budget.slo import E2ETargets, Targets


@pytest.mark.parametrize("cls", [Percentiles, Targets, E2ETargets, Spread])
def test_every_block_by_percentile_shares_the_base(cls):
    assert issubclass(cls, PercentileBlock)
    block = cls.model_validate({"p99": 9.0, "p50": 1.0})
    assert block.given() == {"p50": 1.0, "p99": 9.0}  # lowest first
    with pytest.raises(ValidationError, match="is below p50"):
        cls.model_validate({"p50": 9.0, "p99": 1.0})
    with pytest.raises(ValidationError, match="give at least one"):
        cls.model_validate({})


def test_targets_take_any_percentile_by_its_canonical_name():
    assert Targets.model_validate({"p99.90": 5.0, "p90": 2.0}).given() == {"p90": 2.0, "p99.9": 5.0}
    assert Spread(p50=0.0, p99=3.0, n=4).given() == {"p50": 0.0, "p99": 3.0}
