"""`tailbudget export`: the budget as Prometheus, KEDA, Argo, Flagger, OpenSLO or Grafana config."""

from __future__ import annotations

from pathlib import Path

import typer

from tailbudget.cli._common import clean_errors, emit

# Spelled out rather than imported, so `--help` need not load the exporters (YAML,
# pydantic, the policy); tests/cli/test_startup.py checks they match tailbudget.export.
TARGET_NAMES = ("prometheus-rules", "keda", "argo-rollouts", "flagger", "openslo", "grafana")
PROMETHEUS_URL = "http://prometheus.monitoring.svc:9090"
VERDICT_URL = "http://tailbudget.monitoring.svc:9464/v1/verdict"


@clean_errors
def export_command(
    budget: Path = typer.Argument(..., help="Budget file (YAML); see `tailbudget init`."),
    # A plain string, checked by `export`, so a bad target is a one-line error (exit 2).
    to: str = typer.Option(..., "--to", help=f"What to generate: {', '.join(TARGET_NAMES)}."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write here, not stdout."),
    prometheus_url: str = typer.Option(
        PROMETHEUS_URL,
        "--prometheus-url",
        help="Prometheus as KEDA/Argo/Flagger reach it.",
    ),
    verdict_url: str = typer.Option(
        VERDICT_URL, "--verdict-url", help="`tailbudget serve`'s /v1/verdict URL (Argo)."
    ),
    namespace: str | None = typer.Option(None, "--namespace", "-n", help="Kubernetes namespace."),
    target_name: str | None = typer.Option(
        None, "--scale-target", help="Deployment KEDA scales (default: the service name)."
    ),
    metrics: str = typer.Option(
        "tailbudget",
        "--metrics",
        help="Whose histograms every target reads: tailbudget, vllm, sglang or tgi.",
    ),
    burn: str | None = typer.Option(
        None,
        "--burn",
        help="Burn-rate window pairs, e.g. '1h/5m:14.4,6h/30m:6,3d/6h:1' (the default).",
    ),
) -> None:
    """Generate configuration for the tools that enforce the budget at fleet scale."""
    # Deferred (start-up): keeps `tailbudget --help` fast (bench/startup.py); every
    # import inside a function in this module is deferred for the same reason.
    from tailbudget._api.budgets import export

    text = export(
        budget, to, metrics=metrics, prometheus_url=prometheus_url, verdict_url=verdict_url,
        namespace=namespace, scale_target=target_name, burn=burn,
    )  # fmt: skip
    emit(text, output)
