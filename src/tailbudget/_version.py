"""The package version, below every layer: provenance, `--version` and the OpenTelemetry
tracer read it here, not from the package root."""

__version__ = "0.1.0"
