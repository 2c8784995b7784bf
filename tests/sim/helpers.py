"""Shared builders for the sim tests: models built straight from arrays."""

from __future__ import annotations

import numpy as np

from tailbudget.sim.model import Param, ServiceModel, WorkSamples


def queue_model(
    work_ms: np.ndarray,
    *,
    concurrency: int = 1,
    provision_delay_s: float = 30.0,
    cold_factor: float = 1.0,
    cold_window_s: float = 300.0,
) -> ServiceModel:
    """A queueing model over the given work samples."""
    return ServiceModel(
        kind="queue",
        samples=WorkSamples(work_ms=work_ms, error=np.zeros(work_ms.size, dtype=bool)),
        concurrency=Param("concurrency", float(concurrency), "requests", "stated"),
        cold_factor=Param("cold_factor", cold_factor, "x", "stated"),
        cold_window_s=Param("cold_window_s", cold_window_s, "s", "stated"),
        provision_delay_s=Param("provision_delay_s", provision_delay_s, "s", "stated"),
        logging_overhead_ms=Param("logging_overhead_ms", 0.0, "ms", "stated"),
        low_priority_share=Param("low_priority_share", 0.3, "share", "stated"),
    )
