"""Live OpenTelemetry traces for `serve --traces`: OTLP/HTTP bodies in, spans held durably
per trace until it completes, the audit's critical-path attribution out to the stage windows."""
