"""Prometheus as the controller's source at fleet scale: window stats from PromQL.

With the `tailbudget` preset it reads the Measure layer's metrics (see
`tailbudget._metric_names`): quantiles by `histogram_quantile` over the rate of
`tailbudget_request_duration_seconds` buckets across every replica, and
request/error counts from `tailbudget_requests_total`. With `vllm`, `sglang` or
`tgi` it reads that server's own histograms (`tailbudget._fleet`) for every
series a rule names: `ttft.p95` becomes a quantile of
`vllm:time_to_first_token_seconds` scoped by `model_name`. Anything short of a
full answer (server down, timeout, no series yet, NaN quantiles, a metric the
preset has no series for) is `known=False`: unknown is neither healthy nor
breached, and the controller never acts on it.

Every read runs under one total deadline (`deadline_s`; the HTTP client's own
timeout is per socket read, which a server dripping a byte a second never
trips), reads each answer with a cap on its decoded size, and checks each
answer's shape and figure (`prometheus_answer`): a list, a string, a null, an
overflow to 1e306 s is an unknown window with the reason in `last_error`, never
an exception in the evaluation and never a number in the state.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any

from tailbudget._fleet import BucketCheck, FleetPreset, check_target, preset
from tailbudget._metric_names import REQUEST_DURATION, STAGE_DURATION
from tailbudget._units import MetricKey, parse_duration_s, percentile_name
from tailbudget.control.stats import wilson, z_of
from tailbudget.control.windows import UNKNOWN, WindowStats
from tailbudget.errors import PolicyError
from tailbudget.serve.prometheus_answer import MAX_ANSWER_BYTES, AnswerError, figure

__all__ = ["PrometheusSource"]

# Named as before serve/ left control/: a logging config may filter on it.
log = logging.getLogger("tailbudget.control.prometheus_source")


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


class PrometheusSource:
    """`stats(now_s)` -> WindowStats over the last `window` for one service, via PromQL."""

    def __init__(
        self,
        url: str,
        service: str,
        window: str | float = "60s",
        *,
        min_samples: int = 1,
        confidence: float = 0.975,
        timeout_s: float = 2.0,
        deadline_s: float = 5.0,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        metrics: str = "tailbudget",
        series: Mapping[str, Iterable[float]] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        """`metrics` names the fleet preset; `series` the quantiles each rule series needs;
        `labels` further matchers every query carries (a class: `class="premium"`).

        `timeout_s` bounds each read from the socket, `deadline_s` the whole read of
        every query; `max_answer_bytes` each answer's decoded size."""
        if not url.startswith(("http://", "https://")):
            raise PolicyError(f"prometheus url must start with http:// or https://, got {url!r}")
        self.url = url.rstrip("/")
        self.service = service
        self.window_s = parse_duration_s(window, field="prometheus window")
        if self.window_s < 1:
            raise PolicyError(f"prometheus window must be at least 1s, got {window!r}")
        self.min_samples = max(1, int(min_samples))
        self.z = z_of(confidence)
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s
        self.max_answer_bytes = max_answer_bytes
        self.last_error: str | None = None
        self.last_error_kind: str | None = None
        self.preset: FleetPreset = preset(metrics)
        self.series = {k: sorted(set(v)) for k, v in (series or {}).items() if k != "e2e"}
        self.e2e_qs = sorted({0.5, 0.95, 0.99} | set((series or {}).get("e2e", ())))
        self.labels = dict(labels or {})
        self._matchers = ",".join(f'{k}="{_label(v)}"' for k, v in self.labels.items())

    def _histogram(self, name: str) -> tuple[str, str] | None:
        """(histogram name, extra label matchers) of a series, or None when unmapped."""
        found = self.preset.of(name)
        if found is not None:
            return found.histogram, ""
        if self.preset.name == "tailbudget" and name not in ("ttft", "tpot", "itl"):
            return STAGE_DURATION, f'stage="{_label(name)}"'
        return None

    def _sel(self, extra: str = "") -> str:
        parts = (self.preset.selector(self.service), self._matchers, extra)
        return ",".join(x for x in parts if x)

    def queries(self) -> dict[str, str]:
        """The PromQL this source runs, by field (shown in status, handy for dashboards)."""
        rng = f"[{round(self.window_s)}s]"
        out: dict[str, str] = {}
        hist = self._histogram("e2e")
        name = hist[0] if hist else REQUEST_DURATION
        sel = self._sel()
        buckets = f"sum by (le) (rate({name}_bucket{{{sel}}}{rng}))"
        for q in self.e2e_qs:
            out[percentile_name(q)] = f"histogram_quantile({q:g}, {buckets})"
        # A class's requests: its histogram's count (the request counters carry no class).
        counter = self.preset.requests if not self.labels else None
        if counter is None:
            out["count"] = f"sum(increase({name}_count{{{sel}}}{rng}))"
        else:
            out["count"] = f"sum(increase({_with(counter, sel)}{rng}))"
        if self.preset.errors is not None and not self.labels:
            out["errors"] = f"sum(increase({_with(self.preset.errors, sel)}{rng}))"
        for series, qs in sorted(self.series.items()):
            found = self._histogram(series)
            if found is None:
                continue
            hname, extra = found
            ssel = self._sel(extra)
            sb = f"sum by (le) (rate({hname}_bucket{{{ssel}}}{rng}))"
            for q in qs:
                out[f"{series}.{percentile_name(q)}"] = f"histogram_quantile({q:g}, {sb})"
            out[f"{series}.count"] = f"sum(increase({hname}_count{{{ssel}}}{rng}))"
        return out

    def buckets(self, targets: Mapping[str, float]) -> dict[str, BucketCheck]:
        """Where each target (ms, by metric name like `ttft.p95`) falls in its histogram."""
        out: dict[str, BucketCheck] = {}
        for metric, target in targets.items():
            parts = MetricKey.split(metric)
            series = (parts[0] if parts else None) or "e2e"
            found = self.preset.of(series)
            if found is not None:
                out[metric] = check_target(found, target, metric)
        return out

    async def _query(
        self, client: Any, name: str, promql: str, now_s: float | None
    ) -> float | None:
        params: dict[str, str] = {"query": promql}
        if now_s is not None:
            params["time"] = f"{now_s:.3f}"
        async with client.stream("GET", f"{self.url}/api/v1/query", params=params) as response:
            raw = bytearray()
            # Read with a cap on the decoded bytes (httpx undoes any gzip first), so a
            # huge or endless answer costs at most MAX_ANSWER_BYTES of memory.
            async for chunk in response.aiter_bytes():
                raw += chunk
                if len(raw) > self.max_answer_bytes:
                    raise AnswerError(
                        f"the answer to {name} passed {self.max_answer_bytes:,} bytes; "
                        "an instant query of one series is far smaller"
                    )
        if response.status_code >= 400 and not raw.lstrip().startswith(b"{"):
            raise AnswerError(f"HTTP {response.status_code} for {name}")
        return figure(bytes(raw), name)

    async def _read_all(self, now_s: float | None) -> dict[str, float | None]:
        # A start-up guard: httpx loads on first use, not with this module.
        import httpx

        queries = self.queries()
        # The client's timeout is per read: a server dripping a byte a second never
        # trips it, so the whole read runs under one deadline as well.
        async with asyncio.timeout(self.deadline_s):
            async with httpx.AsyncClient(timeout=self.timeout_s) as client:
                found = await asyncio.gather(
                    *(self._query(client, name, q, now_s) for name, q in queries.items())
                )
        return dict(zip(queries, found, strict=True))

    def stats(self, now_s: float | None = None) -> WindowStats:
        """End-to-end window stats at `now_s` (default: the server's now); unknown on failure."""
        return self.read(now_s)[0]

    def read(self, now_s: float | None = None) -> tuple[WindowStats, dict[str, WindowStats]]:
        """End-to-end stats and each rule series' stats (`ttft`, a stage), all from one read.

        Any failure makes everything unknown (the reason in `last_error`, its kind in
        `last_error_kind`); a series the preset has no histogram for is simply absent
        (the rules on it are unknown). Never raises.
        """
        try:
            values = _run(self._read_all(now_s))
        except Exception as exc:  # whatever the upstream does, the answer is "unknown"
            self.last_error_kind, self.last_error = _describe(exc, self.deadline_s)
            log.warning("prometheus %s: %s", self.url, self.last_error)
            return UNKNOWN, {}
        self.last_error = self.last_error_kind = None
        e2e = self._stats(values, "", errors=values.get("errors"))
        series = {
            name: self._stats(values, f"{name}.", errors=None)
            for name in self.series
            if f"{name}.count" in values
        }
        return e2e, series

    def _stats(
        self, values: Mapping[str, float | None], prefix: str, errors: float | None
    ) -> WindowStats:
        count = values.get(f"{prefix}count") or 0.0
        qs = self.e2e_qs if not prefix else self.series[prefix[:-1]]
        ms = {q: _ms(values.get(f"{prefix}{percentile_name(q)}")) for q in qs}
        known = count >= self.min_samples and all(v is not None for v in ms.values())
        bad = errors or 0.0
        bounds = wilson(bad, count, self.z) if known and errors is not None else None
        extra: dict[float, tuple[float, float | None, float | None]] = {
            q: (v, None, None) for q, v in ms.items() if v is not None
        }
        return WindowStats(
            count=round(count),
            errors=round(bad),
            p50=ms.get(0.5),
            p95=ms.get(0.95),
            p99=ms.get(0.99),
            known=known,
            error_rate_upper=bounds[1] if bounds else None,
            error_rate_lower=bounds[0] if bounds else None,
            window_s=self.window_s,
            source=f"prometheus ({self.preset.name})",
            quantiles=extra,
        )


def _run(work: Coroutine[Any, Any, dict[str, float | None]]) -> dict[str, float | None]:
    """Run `work` on an event loop of its own (in another thread when this one has a loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(work)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, work).result()


def _describe(exc: BaseException, deadline_s: float) -> tuple[str, str]:
    """(kind, one line) of a failed read, for the status and the error counts."""
    # A start-up guard: httpx loads on first use, not with this module.
    import httpx

    if isinstance(exc, TimeoutError):
        return "deadline", f"no full answer within the {deadline_s:g} s deadline"
    if isinstance(exc, httpx.TimeoutException):
        return "timeout", f"{type(exc).__name__}: the server stopped answering"
    if isinstance(exc, httpx.HTTPError):
        return "unreachable", f"{type(exc).__name__}: {exc}"
    if isinstance(exc, AnswerError):
        return exc.kind, str(exc)
    return "internal", f"{type(exc).__name__}: {exc}"


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1000.0


def _with(counter: str, sel: str) -> str:
    """`counter` with the selector's matchers added (it may carry its own `{...}`)."""
    if not sel:
        return counter
    if counter.endswith("}"):
        return f"{counter[:-1]},{sel}}}"
    return f"{counter}{{{sel}}}"
