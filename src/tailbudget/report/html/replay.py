"""The replay report (a policy run over a recorded log) as one self-contained HTML page."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tailbudget.report import fmt
from tailbudget.report.html import page, takeaways
from tailbudget.report.html.page import (
    Cell,
    cell,
    esc,
    figure,
    is_num,
    kv,
    not_available,
    table,
)
from tailbudget.report.html.timelines import replay_chart

_SKIP = {"decisions", "timeline", "policy", "thresholds", "provenance", "notes"}


def _label(key: str) -> str:
    # The unit is in the value ("60 s", "4,613 ms"), not in the label.
    return re.sub(r"_(ms|s)$", "", key).replace("_", " ")


def _value(key: str, v: Any) -> str:
    """A summary field in its unit: ms, seconds, counts, or a dict of them in words."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if is_num(v):
        if key.endswith("_ms"):
            return f"{fmt.ms(v)} ms"
        if key.endswith("_s"):
            return fmt.seconds(v)
        return fmt.count(v) if float(v).is_integer() else fmt.number(v)
    if isinstance(v, Mapping):
        if key == "summary":  # decisions per action
            return ", ".join(f"{k} x{fmt.count(x)}" for k, x in v.items()) or "none"
        return ", ".join(
            f"{k} {_value(str(k), x)}" for k, x in v.items() if not isinstance(x, Mapping)
        )
    if isinstance(v, list):
        return ", ".join(str(x) for x in v) or "none"
    return str(v)


def _summary(rep: Mapping[str, Any]) -> str:
    prov = rep.get("provenance") if isinstance(rep.get("provenance"), Mapping) else {}
    assert isinstance(prov, Mapping)
    pairs = [(k, str(v)) for k, v in prov.items() if k != "notes" and v is not None]
    # Top-level fields (source, rows, baseline_p99_ms, summary, ...) as they are.
    pairs += [(_label(k), _value(k, v)) for k, v in rep.items() if k not in _SKIP]
    timeline = [w for w in rep.get("timeline") or [] if isinstance(w, Mapping)]
    if timeline:
        known = sum(1 for w in timeline if w.get("known", True) is not False)
        pairs.append(
            (
                "windows evaluated",
                f"{fmt.count(len(timeline))} ({fmt.count(known)} with enough samples)",
            )
        )
    if not pairs:
        return not_available("the replay carries no summary fields")
    notes = [str(n) for n in (*(prov.get("notes") or []), *(rep.get("notes") or []))]
    # Open loop is the one caveat every reader needs before the decisions: shown first.
    loop = "".join(
        f'<p class="rec" id="open-loop">{esc(n)}</p>' for n in notes if n.startswith("open loop")
    )
    items = "".join(f"<li>{esc(n)}</li>" for n in notes if not n.startswith("open loop"))
    return loop + kv(pairs) + (f"<ul>{items}</ul>" if items else "")


def _policy(rep: Mapping[str, Any]) -> str:
    pol = rep.get("policy")
    rules = pol.get("rules") if isinstance(pol, Mapping) else rep.get("thresholds")
    if not isinstance(rules, list) or not rules:
        return not_available("the replay does not list its policy rules")
    head = ""
    if isinstance(pol, Mapping):
        head = kv(
            (_label(k), _value(k, v))
            for k, v in pol.items()
            if k != "rules" and not isinstance(v, list)
        )
    return head + table(
        ["rule", "metric", "op", "threshold", "for (s)", "action", "cooldown (s)", "clear below"],
        [
            [
                cell(r.get("name")),
                cell(r.get("metric")),
                cell(r.get("op", ">")),
                _threshold(r, "threshold"),
                cell(r.get("for_s"), "num"),
                cell(r.get("action")),
                cell(r.get("cooldown_s"), "num"),
                _threshold(r, "clear_threshold"),
            ]
            for r in rules
            if isinstance(r, Mapping)
        ],
        numeric=[3, 4, 6, 7],
    )


def _threshold(entry: Mapping[str, Any], key: str) -> Cell:
    """A threshold in its metric's unit (0.005 of error rate reads 0.5%, not 0.01)."""
    v = entry.get(key)
    if not is_num(v):
        return cell(None)
    return Cell(fmt.threshold(str(entry.get("metric", "")), v), float(v), "num")


def _timeline(rep: Mapping[str, Any]) -> str:
    if not rep.get("timeline"):
        return (
            f'<p class="takeaway"><strong>{esc(takeaways.replay(rep))}</strong></p>'
            + not_available("the replay has no window timeline")
        )
    return figure("replay", takeaways.replay(rep), replay_chart(rep), "replay timeline")


def _decisions(rep: Mapping[str, Any]) -> str:
    rows = [d for d in rep.get("decisions") or [] if isinstance(d, Mapping)]
    if not rows:
        return not_available("the policy took no action over this log")
    return table(
        ["time", "offset (s)", "action", "rule", "metric", "value", "threshold", "reason"],
        [
            [
                cell(d.get("t")),
                cell(d.get("t_offset_s"), "num"),
                cell(d.get("action")),
                cell(d.get("rule") or "-"),
                cell(d.get("metric")),
                _threshold(d, "value"),
                _threshold(d, "threshold"),
                cell(d.get("reason"), "long"),
            ]
            for d in rows
        ],
        numeric=[1, 5, 6],
    )


def render_replay_html(replay: Mapping[str, Any]) -> str:
    """Render a replay dict (the replay JSON contract plus `timeline`) as one HTML page."""
    sections = page.render_sections(
        replay,
        (
            ("summary", "Replay", _summary),
            ("timeline", "Timeline", _timeline),
            ("decisions", "Decisions", _decisions),
            ("policy", "Policy", _policy),
        ),
    )
    name = replay.get("service") or replay.get("source") or "latency log"
    return page.document(
        f"Policy replay: {name}", "What the controller would have done, window by window", sections
    )
