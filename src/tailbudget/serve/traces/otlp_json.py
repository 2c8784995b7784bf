"""OTLP/HTTP JSON trace bodies, checked field by field as OTLP's JSON encoding types them.

The file reader (`logs.traces.otlp_spans`) is lenient: a field of the wrong type
reads as missing. A receiver cannot be: an exporter sending `"spans": "x"` or a
start time as an object must hear so, not get 200 `{}` with nothing kept. So:

- a container of the wrong type (the document, `resourceSpans`, a resource,
  `scopeSpans`, `spans`, a span) is a 400 naming the field
  (`resourceSpans[0].scopeSpans[1].spans must be a list, got str`);
- a span field of the wrong type (ids, name and kind, times, status) rejects that
  span, counted as `wrong_type`, and the partial success names the first such
  field.

Types, as OTLP's JSON mapping writes them: ids hex strings; `name` a string; `kind` an
integer or the enum's name; times an integer or a decimal string (fixed64 are strings
in proto3 JSON); `status` an object whose `code` is an integer or the enum's name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tailbudget.logs.span_model import SpanRow

__all__ = ["WrongType", "json_spans"]


class WrongType(ValueError):
    """A container of the wrong type: the whole body is refused (400 naming the field)."""


def _type(value: Any) -> str:
    names = {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _field(obj: dict[str, Any], *keys: str) -> tuple[str, Any]:
    """The first of `keys` present (camelCase or snake_case), and its value."""
    for key in keys:
        if key in obj:
            return key, obj[key]
    return keys[0], None


def _items(obj: dict[str, Any], where: str, *keys: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each object of the list field `keys` (absent or null: none), with its path."""
    key, value = _field(obj, *keys)
    if value is None:
        return
    if not isinstance(value, list):
        raise WrongType(f"{where}{key} must be a list, got {_type(value)}")
    for i, item in enumerate(value):
        path = f"{where}{key}[{i}]"
        if not isinstance(item, dict):
            raise WrongType(f"{path} must be an object, got {_type(item)}")
        yield path, item


def _service(resource: Any, where: str) -> str:
    if resource is None:
        return "unknown"
    if not isinstance(resource, dict):
        raise WrongType(f"{where}resource must be an object, got {_type(resource)}")
    for path, attr in _items(resource, f"{where}resource.", "attributes"):
        if attr.get("key") != "service.name":
            continue
        value = attr.get("value")
        text = (
            value.get("stringValue", value.get("string_value")) if isinstance(value, dict) else None
        )
        if not isinstance(text, str):
            raise WrongType(f"{path}.value.stringValue (service.name) must be a string")
        return text or "unknown"
    return "unknown"


def json_spans(
    doc: Any, class_key: str | None = None
) -> Iterator[tuple[SpanRow | None, str | None]]:
    """(row, None) for each span whose fields have their types, (None, why) for one
    that has not; raises WrongType for a container of the wrong type."""
    if not isinstance(doc, dict):
        raise WrongType(f"the body must be an OTLP JSON object, got {_type(doc)}")
    for where, rs in _items(doc, "", "resourceSpans", "resource_spans"):
        service = _service(rs.get("resource"), where + ".")
        scopes = list(_items(rs, where + ".", "scopeSpans", "scope_spans"))
        if not scopes:
            legacy = ("instrumentationLibrarySpans", "instrumentation_library_spans")
            scopes = list(_items(rs, where + ".", *legacy))
        for scope_path, scope in scopes:
            for path, span in _items(scope, scope_path + ".", "spans"):
                yield _span(span, path, service, class_key)


def _span(
    span: dict[str, Any], path: str, service: str, class_key: str | None = None
) -> tuple[SpanRow | None, str | None]:
    try:
        ids = [_text(span, path, *k) for k in _ID_KEYS]
        start = _nanos(span, path, "startTimeUnixNano", "start_time_unix_nano")
        end = _nanos(span, path, "endTimeUnixNano", "end_time_unix_nano")
        kind = _enum(span, path, "kind")
        status = span.get("status")
        if status is not None and not isinstance(status, dict):
            raise WrongType(f"{path}.status must be an object, got {_type(status)}")
        code = _enum(status or {}, f"{path}.status", "code")
        name = _text(span, path, "name")
    except WrongType as exc:
        return None, str(exc)
    trace, sid, parent = (i.lower() for i in ids)
    root = not parent or set(parent) == {"0"}
    return SpanRow(
        trace,
        sid,
        "" if set(parent) == {"0"} else parent,
        name or "unknown",
        service,
        start,
        end,
        code in ("2", "status_code_error", "error"),
        _KIND_NUMBERS.get(kind, kind or "0"),
        _json_label(span, class_key) if class_key and root else "",
    ), None


def _json_label(span: dict[str, Any], key: str) -> str:
    """A root span's class: its attribute `key` as text ("" when absent or not a
    string, number or boolean)."""
    attrs = span.get("attributes")
    for attr in attrs if isinstance(attrs, list) else ():
        if not isinstance(attr, dict) or attr.get("key") != key:
            continue
        value = attr.get("value")
        if not isinstance(value, dict):
            return ""
        for name in ("stringValue", "string_value", "intValue", "int_value"):
            got = value.get(name)
            if isinstance(got, str | int) and not isinstance(got, bool):
                return str(got)
        got = value.get("boolValue", value.get("bool_value"))
        return str(got).lower() if isinstance(got, bool) else ""
    return ""


_ID_KEYS = (
    ("traceId", "trace_id"),
    ("spanId", "span_id"),
    ("parentSpanId", "parent_span_id"),
)
_KIND_NUMBERS = {
    "span_kind_internal": "1",
    "span_kind_server": "2",
    "span_kind_client": "3",
    "span_kind_producer": "4",
    "span_kind_consumer": "5",
}


def _text(obj: dict[str, Any], path: str, *keys: str) -> str:
    key, value = _field(obj, *keys)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise WrongType(f"{path}.{key} must be a string, got {_type(value)}")
    return value.strip()


def _nanos(obj: dict[str, Any], path: str, *keys: str) -> int:
    key, value = _field(obj, *keys)
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit() and len(value) <= 30:
        return int(value)
    raise WrongType(f"{path}.{key} must be an integer or a decimal string (ns), got {_type(value)}")


def _enum(obj: dict[str, Any], path: str, key: str) -> str:
    """An enum as OTLP JSON writes it: its number or its name (lower case here)."""
    value = obj.get(key)
    if value is None:
        return ""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str):
        return value.strip().lower()
    raise WrongType(f"{path}.{key} must be an integer or an enum name, got {_type(value)}")
