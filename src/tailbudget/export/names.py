"""What the targets accept: Kubernetes object names and namespaces (RFC 1123, as the API
server validates them) and the URLs Prometheus, KEDA, Argo and Flagger are given.

A value the target would refuse is refused here with the target's own rule quoted, rather
than written into a manifest that `kubectl apply` rejects (or, with a line break, into a
YAML block scalar that names a different object).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from tailbudget.errors import TailbudgetError

__all__ = ["check_label", "check_subdomain", "check_url"]

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

LABEL_RULE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name', or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?'), at most 63 characters"
)
"""Kubernetes' own message for a namespace (k8s.io/apimachinery validation)."""
SUBDOMAIN_RULE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    r"regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*"
    r"[a-z0-9])?)*'), at most 253 characters"
)
"""Kubernetes' own message for an object name such as a Deployment's."""


def _shown(value: str) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_label(value: str, param: str, what: str) -> str:
    """`value` when Kubernetes accepts it as a namespace (an RFC 1123 label)."""
    if len(value) > 63 or not _LABEL.fullmatch(value):
        raise TailbudgetError(
            f"{param} {_shown(value)} is not a valid {what}: {LABEL_RULE}", param=param
        )
    return value


def check_subdomain(value: str, param: str, what: str) -> str:
    """`value` when Kubernetes accepts it as an object name (an RFC 1123 subdomain)."""
    if len(value) > 253 or not _SUBDOMAIN.fullmatch(value):
        raise TailbudgetError(
            f"{param} {_shown(value)} is not a valid {what}: {SUBDOMAIN_RULE}", param=param
        )
    return value


def check_url(value: str, param: str) -> str:
    """`value` when it is an absolute http(s) URL with a host, no spaces or control
    characters (what Prometheus' and the controllers' HTTP clients take)."""
    bad = next((c for c in value if c.isspace() or ord(c) < 32 or ord(c) == 127), None)
    try:
        parts = urlsplit(value)
        host = parts.hostname
        parts.port  # noqa: B018  (a port outside 0-65535 raises here)
    except ValueError:
        host = None
    if bad is not None or parts.scheme not in ("http", "https") or not host:
        raise TailbudgetError(
            f"{param} {_shown(value)} is not a URL the target can call: give an absolute "
            "http:// or https:// URL with a host and no spaces or control characters, "
            "e.g. http://prometheus.monitoring.svc:9090",
            param=param,
        )
    return value
