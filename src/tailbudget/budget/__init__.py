"""Plan layer: the budget file model, percentile composition and plan checks."""

from tailbudget.budget.compose import Composed, additive, compose, monte_carlo
from tailbudget.budget.distributions import (
    Constant,
    Exponential,
    Lognormal,
    Normal,
    SplicedLognormal,
    fit_lognormal,
    fit_stage,
)
from tailbudget.budget.load import load_budget, parse_budget
from tailbudget.budget.model import (
    GATES,
    SLO,
    Budget,
    LLMSpec,
    LogMapping,
    Parallel,
    Percentiles,
    Sequence,
    Stage,
)
from tailbudget.budget.objectives import Goodput, Objective, Objectives, parse_objectives
from tailbudget.budget.plan import Plan, Problem, make_plan

__all__ = [
    "GATES",
    "SLO",
    "Budget",
    "Composed",
    "Constant",
    "Exponential",
    "Goodput",
    "LLMSpec",
    "LogMapping",
    "Lognormal",
    "Normal",
    "Objective",
    "Objectives",
    "Parallel",
    "Percentiles",
    "Plan",
    "Problem",
    "Sequence",
    "SplicedLognormal",
    "Stage",
    "additive",
    "compose",
    "fit_lognormal",
    "fit_stage",
    "load_budget",
    "make_plan",
    "monte_carlo",
    "parse_budget",
    "parse_objectives",
]
