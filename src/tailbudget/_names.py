"""Names from budgets and logs, written where another system reads them.

A service or stage name is text a person chose (or a log gave): it travels into PromQL
string literals, Prometheus alert labels and annotations (Go templates), Flagger queries
(Go templates), Argo Rollouts queries (`{{args.x}}` substitution), Grafana panels
(`$var`, `${var}`, `[[var]]` interpolation) and Markdown reports (raw HTML). Every
target escapes through this one module, so a name is shown as written and never runs as
code downstream; a name no target can carry faithfully is refused at the budget's load.

The rule (`name_problem`): a name holds no control character (C0, DEL, C1 including
NEL), no line or paragraph separator (U+2028, U+2029: YAML folds them, so a rule would
match another name), no surrogate (not UTF-8), no noncharacter (YAML cannot hold one
unescaped) and no bidirectional control (it makes a reviewed file read differently from
what it holds). Everything else (quotes, backslashes, braces, `$`, markup, any script)
is accepted and escaped by the writer of each target.

This module imports nothing from tailbudget: every layer may use it.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable
from typing import ParamSpec

P = ParamSpec("P")

__all__ = [
    "go_template_text",
    "grafana_text",
    "markdown_safe",
    "name_problem",
    "promql_string",
    "safe_markdown_renderer",
]

_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_KINDS = {
    "Cc": "a control character",
    "Cs": "a surrogate, which UTF-8 cannot hold",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
}


def _is_noncharacter(c: str) -> bool:
    code = ord(c)
    return 0xFDD0 <= code <= 0xFDEF or (code & 0xFFFE) == 0xFFFE


_CONTROL_NAMES = {0: "NUL", 9: "TAB", 10: "LINE FEED", 13: "CARRIAGE RETURN", 0x85: "NEL"}


def _char_name(c: str) -> str:
    name = unicodedata.name(c, "") or _CONTROL_NAMES.get(ord(c), "")
    return f"U+{ord(c):04X}" + (f" {name}" if name else "")


def name_problem(text: str) -> str | None:
    """Why `text` cannot be a service or stage name (naming the character), or None."""
    for c in text:
        kind = _KINDS.get(unicodedata.category(c))
        if kind is None and c in _BIDI:
            kind = "a bidirectional control, which makes the name read as another"
        if kind is None and _is_noncharacter(c):
            kind = "a Unicode noncharacter"
        if kind is not None:
            return f"holds {_char_name(c)}, {kind}"
    return None


_PROMQL_ESCAPE = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_TEMPLATE_CHARS = frozenset("{}$[]`'")
"""Braces (Go templates, Argo's `{{args}}`), `$` and brackets (Grafana variables), quotes:
written as `\\x..` escapes inside a PromQL string, so no template engine sees them."""


def promql_string(text: str) -> str:
    """`text` as the inside of a PromQL double-quoted string literal (a label value).

    Quotes and backslashes are escaped; braces, `$`, brackets and the other quote marks
    become `\\x..` escapes (PromQL reads them as the same characters), so a query that
    Flagger or Argo runs as a template, or Grafana interpolates, holds no delimiter;
    anything not printable becomes a `\\u` escape.
    """
    out: list[str] = []
    for c in text:
        if c in _PROMQL_ESCAPE:
            out.append(_PROMQL_ESCAPE[c])
        elif c in _TEMPLATE_CHARS:
            out.append(f"\\x{ord(c):02x}")
        elif not c.isprintable():
            out.append(f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}")
        else:
            out.append(c)
    return "".join(out)


def go_template_text(text: str) -> str:
    """`text` inside a Go template (Prometheus alert labels and annotations): each brace
    becomes an action printing it (`{{ "{" }}`), so no name opens or closes an action."""
    if "{" not in text and "}" not in text:
        return text
    return re.sub(r"[{}]", lambda m: '{{ "' + m.group() + '" }}', text)


def grafana_text(text: str) -> str:
    """`text` in a Grafana title or legend, which interpolates `$var`, `${var}`, `[[var]]`
    and `{{label}}`: `$` is written as the full-width sign, doubled brackets and braces
    apart, so Grafana shows the name and expands nothing in it."""
    out = text.replace("$", "\uff04")
    for pair, apart in (("[[", "[ ["), ("]]", "] ]"), ("{{", "{ {"), ("}}", "} }")):
        while pair in out:
            out = out.replace(pair, apart)
    return out


_CODE_RUN = re.compile(r"`+")
_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")
_LINK = re.compile(r"\]\(")


def _prose(text: str) -> str:
    # `<` before a letter, `/`, `!` or `?` is how CommonMark starts raw HTML (a tag, a
    # comment, a declaration) or an autolink; `](` is how it starts a link's target.
    return _LINK.sub("]\\(", _TAG_START.sub("&lt;", text))


def markdown_safe(doc: str) -> str:
    """A Markdown document with no raw HTML and no link outside code spans.

    tailbudget's Markdown writes neither, so what this neutralises came from a name (a
    budget's service or stage, a log's column or value): `<img src=x onerror=...>` shows
    as text. Code spans are kept as CommonMark reads them (a run of n backticks closes at
    the next run of exactly n); an unmatched run is plain text, so a name holding a
    backtick cannot open a span that swallows the escaping.
    """
    out: list[str] = []
    pos = 0
    plain_from = 0
    while True:
        m = _CODE_RUN.search(doc, pos)
        if m is None:
            break
        run = m.group()
        close = re.compile(r"(?<!`)" + run + r"(?!`)")
        end = close.search(doc, m.end())
        if end is None:
            pos = m.end()
            continue
        out.append(_prose(doc[plain_from : m.start()]))
        out.append(doc[m.start() : end.end()])
        pos = plain_from = end.end()
    out.append(_prose(doc[plain_from:]))
    return "".join(out)


def safe_markdown_renderer(render: Callable[P, str]) -> Callable[P, str]:
    """A Markdown renderer whose output passes through `markdown_safe` (one decorator on
    every report's renderer, so no report can embed a name's HTML)."""

    @functools.wraps(render)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> str:
        return markdown_safe(render(*args, **kwargs))

    return wrapped
