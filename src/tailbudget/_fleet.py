"""Fleet presets: each serving stack's own Prometheus histograms for each objective metric.

`--metrics tailbudget|vllm|sglang|tgi` picks one. A preset maps the objective
metrics (e2e, ttft, tpot, itl, and the `queue` stage) to the histogram that
server exports, the label that scopes it to one model (`model_name` for vLLM
and SGLang; TGI serves one model per server and has none), and the bucket
bounds it ships with, in seconds. Bucket bounds are part of the answer:
`histogram_quantile` interpolates inside a bucket, so a target below the first
bound, or between two bounds far apart, cannot be judged precisely, and a
burn-rate SLI can only count requests under a bound that exists.

Bounds are those the servers' own code registers (vLLM `vllm/v1/metrics/loggers.py`,
SGLang `srt/metrics/collector.py`, TGI's router: 35 bounds from 0.15 ms growing 1.5x).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tailbudget import _metric_names as names
from tailbudget._names import promql_string
from tailbudget.errors import PolicyError

__all__ = ["PRESETS", "BucketCheck", "FleetPreset", "FleetSeries", "check_target", "preset"]


@dataclass(frozen=True, slots=True)
class FleetSeries:
    """One histogram: its name (without `_bucket`), its bounds (s), and a caveat."""

    histogram: str
    buckets: tuple[float, ...]
    note: str = ""


@dataclass(frozen=True, slots=True)
class FleetPreset:
    """A serving stack's series per objective metric, its scoping label and counters."""

    name: str
    series: dict[str, FleetSeries]
    label: str | None
    """Label naming the model/service (`model_name`), or None when the server has none."""
    requests: str | None = None
    """PromQL counter of requests (its increase counts them); None: the e2e histogram's count."""
    errors: str | None = None
    """PromQL counter of failed requests; None: error-rate rules are unknown."""
    notes: tuple[str, ...] = field(default_factory=tuple)

    def selector(self, service: str) -> str:
        """The label matcher scoping a query to the service (empty without a label)."""
        if self.label is None:
            return ""
        return f'{self.label}="{promql_string(service)}"'

    def of(self, metric: str) -> FleetSeries | None:
        """The series of an objective metric (`e2e`, `ttft`, a stage), or None."""
        return self.series.get(metric)


_VLLM_TTFT = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
_VLLM_TOKEN = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
_VLLM_REQUEST = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
_SGLANG_TTFT = (
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
    4.0,
    6.0,
    8.0,
    10.0,
    20.0,
    40.0,
    60.0,
    80.0,
    100.0,
    200.0,
    400.0,
)
_SGLANG_E2E = (*_SGLANG_TTFT, 600.0, 1200.0, 1800.0, 2400.0)
_SGLANG_ITL = (
    0.002,
    0.004,
    0.006,
    0.008,
    0.010,
    0.015,
    0.020,
    0.025,
    0.030,
    0.035,
    0.040,
    0.060,
    0.080,
    0.100,
    0.200,
    0.400,
    0.600,
    0.800,
    1.0,
    2.0,
    4.0,
    6.0,
    8.0,
)


def _tgi_bounds() -> tuple[float, ...]:
    # TGI's router multiplies by 1.5 35 times from 0.1 ms: the same floats, bit for bit,
    # so the `le` labels it writes match ours
    value, out = 0.0001, []
    for _ in range(35):
        value *= 1.5
        out.append(value)
    return tuple(out)


_TGI = _tgi_bounds()
_TAILBUDGET = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

PRESETS: dict[str, FleetPreset] = {
    "tailbudget": FleetPreset(
        "tailbudget",
        {"e2e": FleetSeries(names.REQUEST_DURATION, _TAILBUDGET)},
        "service",
        requests=names.REQUESTS_TOTAL,
        errors=f'{names.REQUESTS_TOTAL}{{outcome="error"}}',
        notes=("bounds: the Measure layer's default ladder plus every latency the budget names",),
    ),
    "vllm": FleetPreset(
        "vllm",
        {
            "e2e": FleetSeries("vllm:e2e_request_latency_seconds", _VLLM_REQUEST),
            "ttft": FleetSeries("vllm:time_to_first_token_seconds", _VLLM_TTFT),
            "tpot": FleetSeries(
                "vllm:request_time_per_output_token_seconds",
                _VLLM_TOKEN,
                "older vLLM: vllm:time_per_output_token_seconds",
            ),
            "itl": FleetSeries("vllm:inter_token_latency_seconds", _VLLM_TOKEN),
            "queue": FleetSeries("vllm:request_queue_time_seconds", _VLLM_REQUEST),
        },
        "model_name",
        notes=("vLLM counts no failed requests: error-rate rules stay unknown on this preset",),
    ),
    "sglang": FleetPreset(
        "sglang",
        {
            "e2e": FleetSeries("sglang:e2e_request_latency_seconds", _SGLANG_E2E),
            "ttft": FleetSeries("sglang:time_to_first_token_seconds", _SGLANG_TTFT),
            "itl": FleetSeries("sglang:inter_token_latency_seconds", _SGLANG_ITL),
        },
        "model_name",
        requests="sglang:num_requests_total",
        errors="sglang:num_aborted_requests_total",
        notes=(
            "SGLang exports no per-request TPOT histogram: tpot rules stay unknown",
            "aborted requests count as errors",
        ),
    ),
    "tgi": FleetPreset(
        "tgi",
        {
            "e2e": FleetSeries("tgi_request_duration", _TGI),
            "tpot": FleetSeries("tgi_request_mean_time_per_token_duration", _TGI),
            "queue": FleetSeries("tgi_request_queue_duration", _TGI),
        },
        None,
        requests="tgi_request_count",
        errors="tgi_request_failure",
        notes=(
            "TGI exports no time-to-first-token histogram: ttft rules stay unknown "
            "(tgi_request_queue_duration is the queueing part of it, as the `queue` stage)",
            "TGI has no model label: scope the scrape job to one model",
        ),
    ),
}
"""The presets by `--metrics` name."""


def preset(name: str) -> FleetPreset:
    """The preset named `name`; PolicyError listing the names when unknown."""
    try:
        return PRESETS[name]
    except KeyError:
        raise PolicyError(
            f"metrics must be one of {', '.join(PRESETS)}, got {name!r}", param="metrics"
        ) from None


@dataclass(frozen=True, slots=True)
class BucketCheck:
    """Where a target falls among a histogram's bounds."""

    target_s: float
    below: float | None
    """The largest bound <= target (None: the target is below the first bound)."""
    above: float | None
    """The smallest bound >= target (None: above the last finite bound)."""
    warning: str | None
    """Why the target cannot be judged precisely, or None."""

    @property
    def nearest(self) -> float | None:
        """The existing bound nearest the target (what a burn-rate SLI can count under)."""
        options = [b for b in (self.below, self.above) if b is not None]
        return min(options, key=lambda b: abs(b - self.target_s)) if options else None

    @property
    def exact(self) -> bool:
        """True when a bound equals the target."""
        return self.below is not None and abs(self.below - self.target_s) < 1e-9


FAR_APART = 2.0
"""Bounds more than this ratio apart around a target make its percentile a coarse guess."""


def check_target(series: FleetSeries, target_ms: float, what: str) -> BucketCheck:
    """The bounds around `target_ms` on `series`, with a warning when it cannot be measured."""
    t = target_ms / 1000.0
    below = max((b for b in series.buckets if b <= t + 1e-12), default=None)
    above = min((b for b in series.buckets if b >= t - 1e-12), default=None)
    warning = None
    first = series.buckets[0]
    if below is None:
        warning = (
            f"{what} target {target_ms:g} ms is below the first bucket of {series.histogram} "
            f"(le={first:g} s): it cannot be measured there; a percentile under "
            f"{first * 1000:g} ms is interpolated from 0"
        )
    elif above is None:
        warning = (
            f"{what} target {target_ms:g} ms is above the last bucket of {series.histogram} "
            f"(le={series.buckets[-1]:g} s): breaches read as +Inf"
        )
    elif above / below > FAR_APART and not abs(below - t) < 1e-9:
        warning = (
            f"{what} target {target_ms:g} ms falls between buckets le={below:g} s and "
            f"le={above:g} s of {series.histogram}: its percentile is interpolated "
            f"across a {above / below:.1f}x gap"
        )
    return BucketCheck(t, below, above, warning)
