"""`tailbudget serve`: the live controller over HTTP (ingest, metrics, status, verdict)."""

from __future__ import annotations

from pathlib import Path

import typer

from tailbudget.cli._common import clean_errors


@clean_errors
def serve_command(
    budget: Path | None = typer.Option(
        None,
        "--budget",
        "-b",
        help="Budget file whose policy runs (without one: the default rules).",
    ),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Interface to bind (loopback by default)."
    ),
    port: int = typer.Option(9464, "--port", help="TCP port."),
    token_file: Path | None = typer.Option(
        None, "--token-file", help="File holding the bearer token that POSTs must carry."
    ),
    state_dir: Path = typer.Option(
        Path("tailbudget-state"), "--state-dir", help="Snapshot, write-ahead log and journal."
    ),
    actions: Path | None = typer.Option(
        None, "--actions", help="Actions file (YAML): webhooks, commands, logging trim, shedding."
    ),
    prometheus: str | None = typer.Option(
        None, "--prometheus", help="Read window stats from this Prometheus (fleet scale)."
    ),
    service: str | None = typer.Option(
        None,
        "--service",
        help="Service (or, for vllm/sglang, model_name) label in Prometheus "
        "(default: the budget's service).",
    ),
    metrics: str = typer.Option(
        "tailbudget",
        "--metrics",
        help="Whose histograms --prometheus reads: tailbudget, vllm, sglang or tgi.",
    ),
    traces: bool = typer.Option(
        False, "--traces", help="Accept OpenTelemetry traces (OTLP/HTTP) on POST /v1/traces."
    ),
    span_stage: str | None = typer.Option(
        None,
        "--span-stage",
        help="With --traces: a stage is a span's operation or its service "
        "(default: the budget's log: {span_stage}, else operation).",
    ),
    trace_grace: str = typer.Option(
        "10s",
        "--trace-grace",
        help="With --traces: how long after its root span a trace is held for late spans.",
    ),
    model: Path | None = typer.Option(
        None, "--model", help="Model policy: a model file from simulate/capacity --save-model."
    ),
    fit: list[str] = typer.Option(
        [], "--fit", help="Model policy: fit the model from this LOG at start (repeatable)."
    ),
    max_decoded_bytes: int = typer.Option(
        8 * 1024 * 1024,
        "--max-decoded-bytes",
        help="Most bytes a body may decode to (Arrow buffers, decompressed); past it, 413.",
    ),
) -> None:
    """Run the policy live: POST observations, scrape /metrics, ask /v1/verdict."""
    # Deferred (start-up): keeps `tailbudget --help` fast (bench/startup.py); every
    # import inside a function in this module is deferred for the same reason.
    from tailbudget.serve.runner import ServeOptions, serve

    serve(
        ServeOptions(
            budget=budget,
            host=host,
            port=port,
            token_file=token_file,
            state_dir=state_dir,
            actions=actions,
            prometheus=prometheus,
            service=service,
            metrics=metrics,
            traces=traces,
            span_stage=span_stage,
            trace_grace_s=_seconds(trace_grace),
            max_decoded_bytes=max_decoded_bytes,
            model=model,
            fit=tuple(fit),
        )
    )


def _seconds(text: str) -> float:
    from tailbudget._units import parse_duration_s

    return parse_duration_s(text, field="--trace-grace")
