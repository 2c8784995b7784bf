"""Mergeable streaming quantile sketch with a relative-error guarantee."""

from tailbudget.sketch.latency import LatencySketch

__all__ = ["LatencySketch"]
