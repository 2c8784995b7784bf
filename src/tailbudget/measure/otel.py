"""OpenTelemetry bridge: each request becomes a span tree, built off the request path.

Spans are created in the writer thread with the recorded start/end stamps
(`start_time=` / `end_time=`), so the request pays nothing for tracing. LLM
stages carry GenAI semantic-convention attributes (`gen_ai.operation.name`,
`gen_ai.request.model`, `gen_ai.usage.output_tokens`, ...) plus tailbudget's
stream timings; a first-token event marks TTFT on the span.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

from tailbudget._version import __version__
from tailbudget.errors import TailbudgetError
from tailbudget.measure.record import (
    Clock,
    Record,
    StreamStats,
    error_of,
    request_id_of,
    spans_of,
    stats_of,
)
from tailbudget.measure.sinks.base import Batch, Sink

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, TracerProvider
    from opentelemetry.util.types import AttributeValue

    from tailbudget.budget import Budget

_PRIMITIVE = (str, bool, int, float)


def _otel() -> ModuleType:
    try:
        # A start-up guard: opentelemetry loads on first use, not with this module.
        from opentelemetry import trace
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise TailbudgetError(
            "the OpenTelemetry sink needs opentelemetry-sdk: pip install 'tailbudget[otel]'"
        ) from exc
    return trace


def genai_attributes(stream: StreamStats, a: dict[str, Any]) -> dict[str, AttributeValue]:
    """GenAI semantic-convention attributes (and tailbudget timings) of one stream."""
    out: dict[str, AttributeValue] = {"gen_ai.operation.name": str(a.get("operation", "chat"))}
    if "model" in a:
        out["gen_ai.request.model"] = str(a["model"])
    if "response_model" in a:
        out["gen_ai.response.model"] = str(a["response_model"])
    provider = a.get("provider", a.get("system"))
    if provider is not None:
        out["gen_ai.provider.name"] = str(provider)
        out["gen_ai.system"] = str(provider)  # older semconv name, still read by many backends
    if "input_tokens" in a:
        out["gen_ai.usage.input_tokens"] = int(a["input_tokens"])
    out["gen_ai.usage.output_tokens"] = stream.output_tokens
    for key in ("ttft_ms", "decode_ms", "itl_p50_ms", "itl_p95_ms", "tokens_per_s"):
        value = getattr(stream, key)
        if value is not None:
            out[f"tailbudget.{key}"] = float(value)
    return out


class OTelSink(Sink):
    """Exports each request as a span tree through an SDK `TracerProvider`."""

    name = "otel"

    def __init__(
        self, tracer_provider: TracerProvider | None = None, *, root_name: str | None = None
    ) -> None:
        trace = _otel()
        self._trace = trace
        provider = tracer_provider or trace.get_tracer_provider()
        self._tracer = provider.get_tracer("tailbudget.measure", __version__)
        self._provider = tracer_provider
        self._root_name = root_name
        self._service = "service"

    def bind(self, service: str, budget: Budget | None) -> None:
        self._service = service

    def write(self, batch: Batch) -> None:
        for r in batch.records:
            self._request(r, batch.clock, batch.prefix)

    def _root_of(self, r: Record, prefix: str) -> tuple[str, dict[str, AttributeValue]]:
        """The root span's name and attributes: the request id, fields, route, degradations."""
        fields = dict(r.fields)
        route = fields.get("route")
        attrs: dict[str, AttributeValue] = {"tailbudget.request_id": request_id_of(r, prefix)}
        for key, value in fields.items():
            if isinstance(value, _PRIMITIVE):
                attrs[f"tailbudget.{key}"] = value
        if route is not None:
            attrs["http.route"] = str(route)
        if r.extra is not None and r.extra.degraded:
            attrs["tailbudget.degraded"] = list(r.extra.degraded)
        name = self._root_name or (str(route) if route is not None else self._service)
        return name, attrs

    def _llm_spans(
        self, r: Record, clock: Clock, root_ctx: Context, spans: list[Span], index: dict[int, int]
    ) -> list[tuple[Span, int]]:
        """Each LLM stream's GenAI attributes on its stage's span, or on a client span of its
        own (returned with its end time, to end after the stages' spans are complete)."""
        # A start-up guard: opentelemetry loads on first use, not with this module.
        from opentelemetry.trace import SpanKind

        extra, out = r.extra, []
        for stream in extra.streams if extra is not None else ():
            stats = stats_of(stream)
            attrs_llm = genai_attributes(stats, stream.attributes)
            at = index.get(stream.parent_t0) if stream.parent_t0 is not None else None
            if at is not None:
                target = spans[at]
                target.set_attributes(attrs_llm)
            else:
                model = attrs_llm.get("gen_ai.request.model")  # both str, as written above
                op = str(attrs_llm["gen_ai.operation.name"])
                last = stream.token_ns[-1] if stream.token_ns else stream.start_ns
                target = self._tracer.start_span(
                    op + " " + str(model) if model else op,
                    kind=SpanKind.CLIENT,
                    context=root_ctx,
                    start_time=clock.epoch_ns(stream.start_ns),
                    attributes=attrs_llm,
                )
                out.append((target, clock.epoch_ns(last)))
            if stream.token_ns:
                target.add_event("gen_ai.first_token", timestamp=clock.epoch_ns(stream.token_ns[0]))
        return out

    def _request(self, r: Record, clock: Clock, prefix: str) -> None:
        trace = self._trace
        # A start-up guard: opentelemetry loads on first use, not with this module.
        from opentelemetry.trace import SpanKind, Status, StatusCode

        name, attrs = self._root_of(r, prefix)
        root = self._tracer.start_span(
            name, kind=SpanKind.SERVER, start_time=clock.epoch_ns(r.start_ns), attributes=attrs
        )
        root_ctx = trace.set_span_in_context(root)
        stamps, index = spans_of(r, clock)
        spans: list[Span] = []
        for sp in stamps:
            parent_ctx = (
                root_ctx if sp.parent is None else trace.set_span_in_context(spans[sp.parent])
            )
            span = self._tracer.start_span(
                sp.name.rsplit("/", 1)[-1],
                context=parent_ctx,
                start_time=sp.start_ns,
                attributes={"tailbudget.stage": sp.name},
            )
            if sp.error is not None:
                span.set_status(Status(StatusCode.ERROR, sp.error))
                span.set_attribute("error.type", sp.error)
            spans.append(span)
        extra_spans = self._llm_spans(r, clock, root_ctx, spans, index)
        for span, end in extra_spans:
            span.end(end_time=end)
        for span, sp in zip(reversed(spans), reversed(stamps), strict=True):
            span.end(end_time=sp.end_ns)
        err = error_of(r)
        if err is not None:
            root.set_status(Status(StatusCode.ERROR, err))
            root.set_attribute("error.type", err)
        root.end(end_time=clock.epoch_ns(max(r.start_ns, r.end_ns)))

    def flush(self) -> None:
        if self._provider is not None and hasattr(self._provider, "force_flush"):
            self._provider.force_flush()
