"""Prometheus as the controller's source at fleet scale: window stats from PromQL.

Reads the Measure layer's metrics (see `tailbudget._metric_names`): quantiles
by `histogram_quantile` over the rate of `tailbudget_request_duration_seconds`
buckets across every replica, and request/error counts from
`tailbudget_requests_total`. Anything short of a full answer (server down,
timeout, no series yet, NaN quantiles) is `known=False`: unknown is neither
healthy nor breached, and the controller never acts on it.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from tailbudget._metric_names import REQUEST_DURATION, REQUESTS_TOTAL
from tailbudget._units import parse_duration_s
from tailbudget.control.stats import wilson, z_of
from tailbudget.control.windows import UNKNOWN, WindowStats
from tailbudget.errors import PolicyError

__all__ = ["PrometheusSource"]

log = logging.getLogger(__name__)


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
    ) -> None:
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
        self.last_error: str | None = None

    def queries(self) -> dict[str, str]:
        """The PromQL this source runs, by field (shown in status, handy for dashboards)."""
        sel = f'service="{_label(self.service)}"'
        rng = f"[{round(self.window_s)}s]"
        buckets = f"sum by (le) (rate({REQUEST_DURATION}_bucket{{{sel}}}{rng}))"
        out = {f"p{q}": f"histogram_quantile(0.{q}, {buckets})" for q in ("50", "95", "99")}
        out["count"] = f"sum(increase({REQUESTS_TOTAL}{{{sel}}}{rng}))"
        out["errors"] = f'sum(increase({REQUESTS_TOTAL}{{{sel},outcome="error"}}{rng}))'
        return out

    def _query(self, client: Any, promql: str, now_s: float | None) -> float | None:
        params: dict[str, str] = {"query": promql}
        if now_s is not None:
            params["time"] = f"{now_s:.3f}"
        response = client.get(f"{self.url}/api/v1/query", params=params)
        response.raise_for_status()
        body = response.json()
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus said {body.get('error', body.get('status'))}")
        result = body["data"]["result"]
        if not result:
            return None
        value = float(result[0]["value"][1])
        return None if math.isnan(value) or math.isinf(value) else value

    def stats(self, now_s: float | None = None) -> WindowStats:
        """Window stats at `now_s` (default: the server's now); unknown on any failure."""
        import httpx

        values: dict[str, float | None] = {}
        try:
            with httpx.Client(timeout=self.timeout_s) as client:
                for name, promql in self.queries().items():
                    values[name] = self._query(client, promql, now_s)
        except (httpx.HTTPError, RuntimeError, ValueError, KeyError, IndexError) as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("prometheus %s unreachable or bad answer: %s", self.url, exc)
            return UNKNOWN
        self.last_error = None
        count = values["count"] or 0.0
        errors = values["errors"] or 0.0
        ms: dict[str, float | None] = {}
        for k in ("p50", "p95", "p99"):
            v = values[k]
            ms[k] = None if v is None else v * 1000.0
        known = count >= self.min_samples and all(v is not None for v in ms.values())
        bounds = wilson(errors, count, self.z) if known else None
        return WindowStats(
            count=round(count),
            errors=round(errors),
            p50=ms["p50"],
            p95=ms["p95"],
            p99=ms["p99"],
            known=known,
            error_rate_upper=bounds[1] if bounds else None,
            error_rate_lower=bounds[0] if bounds else None,
            window_s=self.window_s,
            source="prometheus",
        )
