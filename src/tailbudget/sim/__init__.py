"""Simulation: a service model fitted from logs, closed loop with the live Controller.

`fit_logs` reads one or more logs of a service (a load sweep fits one model),
`simulate` runs policies side by side on the same arrivals, `capacity_curve`
finds the fewest replicas meeting every gated objective per load multiple.
"""

from __future__ import annotations

from tailbudget.sim.arrivals import ArrivalSpec, parse_arrivals
from tailbudget.sim.capacity import CapacityReport, capacity_curve
from tailbudget.sim.fit import ModelOptions
from tailbudget.sim.fitting import Fitted, fit_logs
from tailbudget.sim.model import LLMParams, Param, ServiceModel
from tailbudget.sim.policies import PolicySpec, parse_policy_spec
from tailbudget.sim.run import SimReport, simulate

__all__ = [
    "ArrivalSpec",
    "CapacityReport",
    "Fitted",
    "LLMParams",
    "ModelOptions",
    "Param",
    "PolicySpec",
    "ServiceModel",
    "SimReport",
    "capacity_curve",
    "fit_logs",
    "parse_arrivals",
    "parse_policy_spec",
    "simulate",
]
