"""Start `tailbudget serve`: build the runtime and run uvicorn until SIGTERM/SIGINT."""

from __future__ import annotations

import gc
import importlib
import logging
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tailbudget.budget import load_budget
from tailbudget.budget.policy import resolve_policy
from tailbudget.control.class_shedding import ClassPolicy, class_policies
from tailbudget.errors import TailbudgetError
from tailbudget.serve.actions import load_actions_config
from tailbudget.serve.limits import DECODED_FACTOR, MAX_BODY, BodyLimits
from tailbudget.serve.prometheus_source import PrometheusSource
from tailbudget.serve.runtime import Runtime, RuntimeConfig
from tailbudget.serve.traces.assembler import Limits
from tailbudget.serve.traces.receiver import TraceOptions

if TYPE_CHECKING:
    from tailbudget.budget.model import Budget
    from tailbudget.budget.policy import Policy
    from tailbudget.sim.live import LiveModel

__all__ = ["ServeOptions", "build_runtime", "read_token", "serve", "trace_options"]

log = logging.getLogger("tailbudget.serve")

_TRACE_SWITCH_S = 0.0005
"""The interpreter's thread switch interval with `--traces` (CPython's default: 5 ms)."""


@dataclass(frozen=True)
class ServeOptions:
    """The options of `tailbudget serve`."""

    budget: Path | None = None
    host: str = "127.0.0.1"
    port: int = 9464
    token_file: Path | None = None
    state_dir: Path = Path("tailbudget-state")
    actions: Path | None = None
    prometheus: str | None = None
    service: str | None = None
    metrics: str = "tailbudget"
    """Fleet preset naming the series `--prometheus` reads (tailbudget, vllm, sglang, tgi)."""
    traces: bool = False
    """Accept OTLP/HTTP traces on POST /v1/traces."""
    span_stage: str | None = None
    """What a stage is in traces (operation or service; default: the budget's log block)."""
    trace_grace_s: float = 10.0

    max_decoded_bytes: int = DECODED_FACTOR * MAX_BODY
    """Most bytes a body may decode to (an Arrow IPC stream's buffers, decompressed)."""
    model: Path | None = None
    """The model policy from a model file (`simulate`/`capacity --save-model`)."""
    fit: tuple[str, ...] = ()
    """The model policy from logs fitted at start."""


def trace_options(options: ServeOptions) -> TraceOptions | None:
    """`--traces` settings, with the budget's `log: {span_stage}` and stage slices."""

    if not options.traces:
        if options.span_stage is not None:
            raise TailbudgetError(
                "span_stage applies to traces; turn traces on", param="span_stage"
            )
        return None
    budget = load_budget(options.budget) if options.budget is not None else None
    stage = options.span_stage or (budget.log.span_stage if budget is not None else "operation")
    if stage not in ("operation", "service"):
        raise TailbudgetError(
            f"span_stage must be operation or service, got {stage!r}", param="span_stage"
        )
    if not 0 <= options.trace_grace_s <= 3600:
        raise TailbudgetError(
            f"trace_grace must be 0 to 3600 seconds, got {options.trace_grace_s:g}",
            param="trace_grace",
        )
    slices = stage_slices(budget)
    limits = Limits(grace_s=options.trace_grace_s, timeout_s=max(120.0, 6 * options.trace_grace_s))
    classes = budget.class_set if budget is not None else None
    return TraceOptions(
        span_stage="service" if stage == "service" else "operation",
        limits=limits,
        slices=tuple(slices),
        class_by=classes.by if classes is not None else None,
    )


def stage_slices(budget: Budget | None) -> list[tuple[str, str, float]]:
    """The budget's stage slices as (stage, percentile, ms): /metrics' and /v1/status'
    budget burn."""
    slices = []
    for _, item in budget.stages() if budget is not None else ():
        for pct in ("p50", "p95", "p99"):
            ms = getattr(item.budget, pct, None) if item.budget is not None else None
            if ms is not None:
                slices.append((item.name, pct, float(ms)))
    return slices


def read_token(path: Path) -> str:
    """The bearer token in `path` (surrounding whitespace ignored); must not be empty."""
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise TailbudgetError(f"{path}: cannot read the token file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise TailbudgetError(f"{path}: the token file must be UTF-8 text") from None
    if not token or len(token.split()) != 1:
        raise TailbudgetError(f"{path}: the token file must hold one token (no spaces)")
    return token


def _check_bind(host: str, port: int) -> None:
    """Fail with a one-line error (not uvicorn's exit 1) when the address is taken."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise TailbudgetError(f"host {host!r}: cannot resolve ({exc})", param="host") from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(addr)
        except OSError as exc:
            raise TailbudgetError(
                f"port {port}: cannot listen on {host}:{port} ({exc.strerror}); pick another port",
                param="port",
            ) from None


def build_runtime(options: ServeOptions) -> Runtime:
    """Resolve the budget's policy and open the state dir (replaying its write-ahead log)."""
    budget = load_budget(options.budget) if options.budget is not None else None
    policy = resolve_policy(budget)
    service = options.service or (budget.service if budget is not None else "service")
    source = None
    if options.prometheus:
        source = PrometheusSource(
            options.prometheus,
            service,
            policy.window_s,
            min_samples=policy.min_samples,
            confidence=policy.confidence,
            metrics=options.metrics,
            series=policy.series,
            # Inside one evaluation period, so a slow upstream makes this evaluation
            # unknown rather than making the next one late.
            deadline_s=max(0.5, min(5.0, 0.8 * policy.evaluate_every_s)),
        )
    elif options.metrics != "tailbudget":
        raise TailbudgetError(
            f"metrics {options.metrics} names the series to read from Prometheus; "
            "give prometheus (its URL) too",
            param="metrics",
        )
    classes = tuple(class_policies(budget, dry_run=policy.dry_run))
    config = RuntimeConfig(
        state_dir=options.state_dir,
        service=service,
        actions=load_actions_config(options.actions),
        prometheus=source,
        classes=_classes(budget),
        class_policies=classes,
        class_series_objectives=_class_series_objectives(budget),
        class_prometheus=_class_sources(source, budget, classes),
        objectives=budget.objectives if budget is not None else None,
        slices=tuple(stage_slices(budget)),
        calls=tuple(
            (caller, tuple(tuple(t) for t in terms))
            for caller, terms in (budget.callers() if budget is not None else {}).items()
        ),
    )
    return Runtime(policy, config, model=_live_model(options, budget, policy))


def _class_sources(
    source: PrometheusSource | None, budget: Budget | None, classes: tuple[ClassPolicy, ...]
) -> tuple[tuple[str, PrometheusSource], ...]:
    """Per class, a source reading its series: the label `class` on tailbudget's own
    metrics (PrometheusSink sets it), the budget's `classes.by` on a serving stack's (a
    label the scrape or relabel config gives, e.g. per deployment)."""
    cs = budget.class_set if budget is not None else None
    if source is None or cs is None:
        return ()
    label = "class" if source.preset.name == "tailbudget" else cs.by
    return tuple(
        (
            c.name,
            PrometheusSource(
                source.url, source.service, source.window_s, min_samples=c.policy.min_samples,
                confidence=c.policy.confidence, metrics=source.preset.name,
                series=c.policy.series, labels={label: c.name}, deadline_s=source.deadline_s,
            ),
        )
        for c in classes
    )  # fmt: skip


def _class_series_objectives(
    budget: Budget | None,
) -> tuple[tuple[str, tuple[tuple[str, str, float], ...]], ...]:
    """Per class stating its own objectives, its gated objectives other than end to end
    (TTFT, TPOT, ITL, a stage's) as (metric, percentile, ms)."""
    cs = budget.class_set if budget is not None else None
    if cs is None:
        return ()
    out = []
    for c in cs.classes:
        found = tuple(
            (o.metric, o.percentile, o.target_ms)
            for o in (c.objectives.gated() if c.objectives is not None else ())
            if o.metric != "e2e"
        )
        if found:
            out.append((c.name, found))
    return tuple(out)


def _classes(budget: Budget | None) -> tuple[tuple[str, tuple[tuple[str, float], ...]], ...]:
    """The budget's classes with their gated e2e objectives (percentile, ms)."""
    cs = budget.class_set if budget is not None else None
    if cs is None:
        return ()
    service = budget.objectives if budget is not None else None
    out = []
    for c in cs.classes:
        objs = c.objectives or service
        gated = (
            tuple((o.percentile, o.target_ms) for o in objs.of("e2e") if o.gated) if objs else ()
        )
        out.append((c.name, gated))
    return tuple(out)


def _live_model(options: ServeOptions, budget: Budget | None, policy: Policy) -> LiveModel | None:
    """`--model FILE` or `--fit LOG`: the model policy (a budget's objectives needed)."""
    if options.model is None and not options.fit:
        if policy.mode == "model":
            raise TailbudgetError(
                "the budget's policy is the model policy: give a model file or logs to fit it from",
                param="model",
            )
        return None
    if options.model is not None and options.fit:
        raise TailbudgetError("give a model file or logs to fit, not both", param="model")
    if budget is None:
        raise TailbudgetError(
            "the model policy sizes replicas for the budget's objectives: give a budget",
            param="budget",
        )
    # A start-up guard: ibis loads on first use, not with this module.
    from tailbudget.sim.live import LiveModel, ModelSource

    source = ModelSource(None if options.model is None else str(options.model), options.fit)
    return LiveModel(
        source, budget.objectives, policy.model, headroom=budget.headroom,
        bounds=(policy.replicas.min, policy.replicas.max), every_s=policy.evaluate_every_s,
    )  # fmt: skip


def require_extras(traces: bool) -> None:
    """TailbudgetError naming the extra to install when serve's packages are missing
    (checked first: nothing is opened, and no ImportError traceback reaches the user)."""
    needs = [("tailbudget[serve]", m) for m in ("starlette", "uvicorn", "httptools", "httpx")]
    if traces:
        needs += [
            ("tailbudget[otel]", "opentelemetry.proto"),
            ("tailbudget[otel]", "google.protobuf"),
        ]
    for extra, module in needs:
        try:
            importlib.import_module(module)
        except ImportError:
            raise TailbudgetError(
                f"serve needs {module.split('.')[0]}, which is not installed; "
                f"install it with pip install '{extra}'"
            ) from None


def serve(options: ServeOptions) -> None:
    """Run the service in the foreground; returns after a graceful shutdown."""
    require_extras(options.traces)
    # A start-up guard: uvicorn, starlette and prometheus_client load on first use, not
    # with this module.
    import uvicorn

    from tailbudget.serve.app import create_app
    from tailbudget.serve.connections import (
        BACKLOG,
        connection_cap,
        guarded_protocol,
    )

    if not 0 < options.port < 65536:
        raise TailbudgetError(f"port must be in 1-65535, got {options.port}", param="port")
    if not MAX_BODY <= options.max_decoded_bytes <= 1 << 30:
        raise TailbudgetError(
            f"max_decoded_bytes must be from {MAX_BODY:,} (the body limit) to 1 GiB, "
            f"got {options.max_decoded_bytes:,}",
            param="max_decoded_bytes",
        )
    token = read_token(options.token_file) if options.token_file is not None else None
    _check_bind(options.host, options.port)
    traces = trace_options(options)
    runtime = build_runtime(options)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if options.host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("binding %s: reachable beyond this machine", options.host)
    if token is None:
        log.warning("no token file: anyone who can reach the port may post observations")
    log.info(
        "tailbudget serve on http://%s:%d (state %s, %d observations restored)",
        options.host,
        options.port,
        options.state_dir,
        runtime.observations_total,
    )
    app = create_app(
        runtime,
        token=token,
        traces=traces,
        limits=BodyLimits(max_decoded_bytes=options.max_decoded_bytes),
    )
    # Everything loaded so far lives as long as the process: out of the collector's
    # sight, a full collection (which each parsed batch's containers bring on every
    # few batches) walks only what ingest made, not every module's objects.
    gc.freeze()
    if traces is not None:
        # The trace flusher is a CPU-bound thread; at CPython's 5 ms switch interval each
        # request's hand-offs (event loop, worker thread, after the fsync) wait up to
        # that for the interpreter lock, and acknowledging queued behind attribution.
        sys.setswitchinterval(_TRACE_SWITCH_S)
    cap = connection_cap()
    log.info("at most %d connections; request headers due within 10 s of connecting", cap)
    uvicorn.run(
        app,
        host=options.host,
        port=options.port,
        log_level="warning",
        access_log=False,
        http=guarded_protocol(cap),
        timeout_keep_alive=5,
        backlog=BACKLOG,
    )
