"""tailbudget: latency budgets for AI/ML inference services.

Plan an SLO into per-stage slices, measure every request, audit what drives
the tail, and act on rolling percentiles.
"""

from tailbudget.budget import Budget, Plan, load_budget, make_plan, parse_budget
from tailbudget.errors import BudgetError, LogError, PolicyError, TailbudgetError
from tailbudget.measure.recorder import Recorder

__version__ = "0.1.0"

__all__ = [
    "Budget",
    "BudgetError",
    "LogError",
    "Plan",
    "PolicyError",
    "Recorder",
    "TailbudgetError",
    "__version__",
    "load_budget",
    "make_plan",
    "parse_budget",
]
