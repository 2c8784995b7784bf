"""Audit: find what drives the tail of a latency log, on the log's own engine."""

from tailbudget.audit.config import AuditConfig, parse_slo
from tailbudget.audit.report import AuditReport
from tailbudget.audit.run import run_audit

__all__ = ["AuditConfig", "AuditReport", "parse_slo", "run_audit"]
