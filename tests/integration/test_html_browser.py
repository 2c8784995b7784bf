"""Open the HTML reports in headless Chromium (from disk): no console errors, no network
requests, every chart rendered with its series; screenshots kept in artifacts/screenshots/.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, tuple[Path, dict[str, Any]]]:
    """name -> (HTML file on disk, the dict it was rendered from), from `tailbudget demo`."""
    out = tmp_path_factory.mktemp("demo")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    run = subprocess.run(
        [sys.executable, "-m", "tailbudget", "demo", "--out", str(out), "--rows", "20000"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    audit_html = out / "report.html"
    assert str(audit_html.resolve()) in "".join(run.stdout.split()), "demo prints the report's path"
    audit = json.loads((out / "report.json").read_text())
    replay = json.loads((out / "replay.json").read_text())
    return {"audit": (audit_html, audit), "replay": (out / "replay.html", replay)}


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.skip(
            "/usr/bin/chromium is missing (Debian `chromium`; scripts/install-system-deps.sh)"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        yield b
        b.close()


def _expected(name: str, data: dict[str, Any]) -> dict[str, list[str]]:
    """chart id -> series ids (exact, or prefixes ending in '-') that must be drawn."""
    if name == "replay":
        want = ["tb-replay-p95", "tb-replay-p99"]
        want += [f"tb-replay-decision-{i}" for i, _ in enumerate(data.get("decisions") or [])]
        return {"replay": want} if data.get("timeline") else {}
    exp: dict[str, list[str]] = {}
    slo = data.get("slo") or {}
    if data.get("cdf"):
        exp["cdf"] = ["tb-cdf-curve"] + [
            f"tb-cdf-slo-{p}" for p in ("p50", "p95", "p99") if slo.get(p)
        ]
    stages = data.get("stages") or []
    if stages:
        exp["stages"] = [f"tb-stages-p99-{i}" for i in range(len(stages))]
        if any(s.get("budget") for s in stages):
            exp["stages"].append("tb-stages-budget")
    if (data.get("tail") or {}).get("deltas"):
        exp["delta"] = ["tb-delta-bar-"]
    profiled = [s for s in data.get("shape") or [] if s.get("profile")]
    for i, _ in enumerate([s for s in profiled if s.get("flag")][:4] or profiled[:1]):
        exp[f"shape-{i}"] = [f"tb-shape-{i}-mean"]
    if data.get("cohorts"):
        exp["cohorts"] = ["tb-cohorts-"]
    cold = data.get("cold_start") or {}
    if cold.get("timeline"):
        exp["cold"] = ["tb-cold-p99"] + (["tb-cold-event-"] if cold.get("events") else [])
    return exp


_DRAWN = """(sel) => {
  const els = Array.from(document.querySelectorAll(sel));
  return els.map(e => { const b = e.getBBox(); return b.width + b.height; });
}"""


@pytest.fixture(scope="module")
def opened(browser, reports):
    """Open each report once from disk, recording console errors and every request."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    for old in [*SHOTS.glob("*.png"), *SHOTS.glob("*.pdf")]:  # this run only
        old.unlink()
    pages = {}
    for name, (path, data) in reports.items():
        ctx = browser.new_context(viewport={"width": 1366, "height": 768})
        page = ctx.new_page()
        errors: list[str] = []
        requests: list[str] = []
        page.on(
            "console", lambda m, errors=errors: errors.append(m.text) if m.type == "error" else None
        )
        page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
        ctx.on("request", lambda r, requests=requests: requests.append(r.url))
        page.goto(path.as_uri(), wait_until="load")
        pages[name] = (page, data, errors, requests)
    yield pages
    for page, *_ in pages.values():
        page.context.close()


@pytest.mark.parametrize("name", ["audit", "replay"])
def test_no_console_errors_and_no_network(opened, name):
    _, _, errors, requests = opened[name]
    assert errors == []
    assert requests and all(u.startswith("file://") for u in requests), requests


@pytest.mark.parametrize("name", ["audit", "replay"])
def test_each_chart_rendered_with_its_series(opened, name):
    page, data, _, _ = opened[name]
    expected = _expected(name, data)
    assert expected, "the report has data for at least one chart"
    charts = {f.get_attribute("data-chart"): f for f in page.query_selector_all("figure.chart")}
    assert set(expected) <= set(charts), f"missing charts: {set(expected) - set(charts)}"
    for chart, fig in charts.items():
        fig.scroll_into_view_if_needed()
        fig.screenshot(path=str(SHOTS / f"{name}-{chart}.png"))
        box = fig.query_selector("svg").bounding_box()
        assert box and box["width"] > 300 and box["height"] > 120, chart
        for series in expected.get(chart, []):
            sel = (
                f'figure[data-chart="{chart}"] svg [id^="{series}"]'
                if series.endswith("-")
                else (f'figure[data-chart="{chart}"] svg [id="{series}"]')
            )
            sizes = page.evaluate(_DRAWN, sel)
            assert sizes and all(s > 0 for s in sizes), f"{chart}: series {series} not drawn"
        assert fig.query_selector("p.takeaway").inner_text().strip()


def test_tables_sort_when_a_header_is_clicked(opened):
    page, data, _, _ = opened["audit"]
    if not data.get("stages"):
        pytest.skip("no stage table in this report")
    header = page.locator("section#stages th", has_text="p99 ms").first
    values = (
        'Array.from(document.querySelectorAll("section#stages tbody tr"))'
        ".map(r => parseFloat(r.cells[3].dataset.v))"
    )
    header.click()
    asc = page.evaluate(values)
    header.click()
    desc = page.evaluate(values)
    assert asc == sorted(asc) and desc == sorted(asc, reverse=True)
    assert header.get_attribute("aria-sort") == "descending"


@pytest.mark.parametrize("name", ["audit", "replay"])
def test_readable_at_laptop_width_and_printable(opened, name):
    page, *_ = opened[name]
    assert page.evaluate("document.documentElement.scrollWidth") <= 1366
    page.set_viewport_size({"width": 1024, "height": 700})
    assert page.evaluate("document.documentElement.scrollWidth") <= 1024
    page.emulate_media(media="print")
    assert page.evaluate("getComputedStyle(document.querySelector('nav')).display") == "none"
    pdf = page.pdf(format="A4", print_background=True)
    assert pdf.startswith(b"%PDF") and len(pdf) > 20_000
    (SHOTS / f"{name}-print.pdf").write_bytes(pdf)
    page.emulate_media(media="screen")
    page.set_viewport_size({"width": 1366, "height": 768})
    page.screenshot(path=str(SHOTS / f"{name}-page.png"), full_page=True)
