"""One simulated run on the engine the model calls for: the LLM batching engine or the
queue engine. Below `sim.run`, so the judge, the sizer and the floor that run a policy
import it without importing the comparison that uses them."""

from __future__ import annotations

from tailbudget.sim.batch_engine import run_batching
from tailbudget.sim.model import ServiceModel
from tailbudget.sim.queue_engine import run_queue
from tailbudget.sim.trace import Arrivals, RunPolicy, SimTrace

__all__ = ["run_once"]


def run_once(
    model: ServiceModel, arrivals: Arrivals, policy: RunPolicy, *, replicas: int, end_s: float
) -> SimTrace:
    """One run of the right engine for the model."""
    engine = run_batching if model.kind == "llm" else run_queue
    return engine(model, arrivals, policy, replicas=replicas, end_s=end_s)
