"""Prometheus bridge: stage and request histograms in seconds, request and drop counters.

Observations happen in the writer thread. Histogram buckets are a default
latency ladder plus every threshold of the budget file (SLO and stage
percentiles), so `histogram_quantile` and `le` ratios are exact at the limits
that matter. Metrics are created once per registry (a registry refuses
duplicates); the first sink to create them fixes the buckets.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from tailbudget import _metric_names as names
from tailbudget.budget.classes import OTHER
from tailbudget.measure.record import valid_stages
from tailbudget.measure.sinks.base import Batch, Sink

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Histogram

    from tailbudget.budget import Budget

DEFAULT_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip

_lock = threading.Lock()
M = TypeVar("M")


@dataclass(frozen=True)
class RequestMetrics:
    """The stage and request histograms and the request and shed counters of a registry."""

    stage: Histogram
    request: Histogram
    requests: Counter
    shed: Counter


@dataclass
class _Slot:
    """What a registry holds of ours (the registry kept, so its id is not reused)."""

    registry: CollectorRegistry
    dropped: Counter | None = None
    requests: RequestMetrics | None = None


_metrics: dict[int, _Slot] = {}


def budget_buckets(
    budget: Budget | None, base: tuple[float, ...] = DEFAULT_BUCKETS_S
) -> list[float]:
    """Bucket upper bounds (seconds): `base` plus every SLO and stage threshold of the budget."""
    bounds = set(base)
    if budget is not None:
        bounds.update(ms / 1000.0 for ms in budget.objectives.e2e().values())
        for _, stage in budget.stages():
            if stage.budget is not None:
                bounds.update(ms / 1000.0 for ms in stage.budget.given().values())
            if stage.llm is not None:
                bounds.add(stage.llm.ttft_ms / 1000.0)
                bounds.add(stage.llm.total_ms / 1000.0)
    return sorted(round(b, 9) for b in bounds)


def _registry(registry: CollectorRegistry | None) -> CollectorRegistry:
    if registry is None:
        # A start-up guard: prometheus_client loads on first use, not with this module.
        from prometheus_client import REGISTRY

        return REGISTRY
    return registry


def _create(
    factory: Callable[..., M],
    name: str,
    *args: object,
    registry: CollectorRegistry,
    **kwargs: object,
) -> M:
    """A new collector, or the one already registered under `name` (made elsewhere)."""
    try:
        return factory(name, *args, registry=registry, **kwargs)
    except ValueError:  # duplicated timeseries: reuse what the registry holds
        for key in (name, f"{name}_total"):
            existing = getattr(registry, "_names_to_collectors", {}).get(key)
            if existing is not None:
                found: M = existing
                return found
        raise


def dropped_counter(registry: CollectorRegistry | None = None) -> Counter:
    """The `tailbudget_dropped_records_total{sink}` counter of a registry (created once)."""
    # A start-up guard: prometheus_client loads on first use, not with this module.
    from prometheus_client import Counter

    reg = _registry(registry)
    with _lock:
        slot = _metrics.setdefault(id(reg), _Slot(reg))
        if slot.dropped is None:
            slot.dropped = _create(
                Counter,
                names.DROPPED_RECORDS.removesuffix("_total"),
                "Records a full sink queue (or a failing sink) could not take.",
                ["sink"],
                registry=reg,
            )
        return slot.dropped


def request_metrics(
    registry: CollectorRegistry | None = None,
    buckets: list[float] | None = None,
    *,
    by_class: bool = False,
) -> RequestMetrics:
    """Stage/request histograms and the request counter of a registry (created once);
    `by_class`: the request and stage histograms and the request counter are labelled
    with each request's class too (a class's TTFT, the stage `ttft`, its stage objectives
    and its error rate read them)."""
    # A start-up guard: prometheus_client loads on first use, not with this module.
    from prometheus_client import Counter, Histogram

    reg = _registry(registry)
    with _lock:
        slot = _metrics.setdefault(id(reg), _Slot(reg))
        if slot.requests is None:
            b = buckets or list(DEFAULT_BUCKETS_S)
            stage = _create(
                Histogram,
                names.STAGE_DURATION,
                "Time per stage per request.",
                ["service", "stage", "class"] if by_class else ["service", "stage"],
                buckets=b,
                registry=reg,
            )
            request = _create(
                Histogram,
                names.REQUEST_DURATION,
                "End-to-end time of each request.",
                ["service", "route", "class"] if by_class else ["service", "route"],
                buckets=b,
                registry=reg,
            )
            requests = _create(
                Counter,
                names.REQUESTS_TOTAL.removesuffix("_total"),
                "Requests recorded, by outcome.",
                ["service", "route", "outcome", "class"]
                if by_class
                else ["service", "route", "outcome"],
                registry=reg,
            )
            shed = _create(
                Counter,
                names.SHED_TOTAL.removesuffix("_total"),
                "Requests refused by backpressure.",
                ["reason"],
                registry=reg,
            )
            slot.requests = RequestMetrics(stage, request, requests, shed)
        return slot.requests


class PrometheusSink(Sink):
    """Observes each request into `tailbudget_*` histograms and counters.

    Stream timings are observed as the stages `ttft` and `decode`.
    """

    name = "prometheus"

    def __init__(
        self, registry: CollectorRegistry | None = None, *, buckets: list[float] | None = None
    ) -> None:
        self.registry = _registry(registry)
        self._buckets = buckets
        self._service = "service"
        self._m: RequestMetrics | None = None
        self._children: dict[tuple[str, ...], Histogram] = {}
        self._counted: dict[tuple[str, ...], Counter] = {}
        self._class_by: str | None = None
        self._classes: frozenset[str] = frozenset()

    def bind(self, service: str, budget: Budget | None) -> None:
        self._service = service
        if self._buckets is None:
            self._buckets = budget_buckets(budget)
        cs = budget.class_set if budget is not None else None
        if cs is not None:
            # The budget's classes bound the label: any other value is `other`.
            self._class_by, self._classes = cs.by, frozenset(cs.names())

    def _metrics(self) -> RequestMetrics:
        if self._m is None:
            self._m = request_metrics(
                self.registry,
                self._buckets or budget_buckets(None),
                by_class=self._class_by is not None,
            )
        return self._m

    def _class_of(self, fields: Mapping[str, Any]) -> tuple[str, ...]:
        """The request's class label ('' without one), or nothing without classes."""
        if self._class_by is None:
            return ()
        value = fields.get(self._class_by)
        if value is None:
            return ("",)
        return (str(value) if str(value) in self._classes else OTHER,)

    def _child(self, kind: Literal["stage", "request"], *labels: str) -> Histogram:
        key = (kind, *labels)
        child = self._children.get(key)
        if child is None:
            m = self._metrics()
            child = self._children[key] = (m.stage if kind == "stage" else m.request).labels(
                *labels
            )
        return child

    def _count(self, *labels: str) -> Counter:
        """The request counter's child of `labels` (service, route, outcome[, class])."""
        child = self._counted.get(labels)
        if child is None:
            child = self._counted[labels] = self._metrics().requests.labels(*labels)
        return child

    def write(self, batch: Batch) -> None:
        svc = self._service
        for r, row in zip(batch.records, batch.rows, strict=True):
            route = r.fields.get("route")
            route = "" if route is None else str(route)
            label = self._class_of(r.fields)
            self._child("request", svc, route, *label).observe(row["total_ms"] / 1000.0)
            outcome = "error" if row["error"] else "ok"
            self._count(svc, route, outcome, *label).inc()
            sums: dict[str, float] = {}
            for name, t0, t1 in valid_stages(r) if r.stages else ():
                d = t1 - t0
                sums[name] = sums.get(name, 0.0) + (d if d > 0 else 0)
            for stage, ns in sums.items():
                self._child("stage", svc, stage, *label).observe(ns / 1e9)
            for col, stage in (("ttft_ms", "ttft"), ("decode_ms", "decode")):
                value = row.get(col)
                if value is not None and r.extra is not None and r.extra.streams:
                    self._child("stage", svc, stage, *label).observe(value / 1000.0)
