"""The vLLM, DeLag, capacity and simulate HTML reports as a person sees them in Chromium:
the first section is the verdict, and every chart's tick labels are plain numbers (ms with
thousands separators, percentiles as p50/p99.9), at least four on each numeric axis, and
whole numbers on a replica axis. Screenshots land in artifacts/screenshots/."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM = Path("/usr/bin/chromium")
DATA = next(
    (
        p
        for p in (ROOT / ".." / "shared" / "data", ROOT / ".." / ".." / "shared" / "data")
        if p.is_dir()
    ),
    ROOT / ".." / "shared" / "data",
)
GRID = str(DATA / "vllm_grid" / "vllm_llama33-70b_04_tp4_pp2_IB_qps_{}.json")
LLM_SLO = "ttft.p95=500,tpot.p99=60"
REPORTS = {
    "vllm": [
        "audit",
        str(DATA / "vllm_llama33-70b_tp8_sharegpt_qps_inf.json"),
        "--slo",
        f"{LLM_SLO},e2e.p99=20000",
    ],
    "delag": [
        "audit",
        str(DATA / "delag_eshopper_000.csv"),
        "--slo",
        "p99=400",
        "--stages",
        "*Controller*,GatewayGet",
        "--unit",
        "ms",
    ],
    "capacity": ["capacity", GRID.format("01"), GRID.format("04"), "--slo", LLM_SLO],
    "simulate": ["simulate", GRID.format("04"), "--slo", LLM_SLO, "--duration", "20m"],
}
PLAIN = re.compile(r"^(p\d+(\.\d+)?|[-\u2212]?\d{1,3}(,\d{3})*(\.\d+)?%?)$")
"""A tick label a person reads as is: 12,500 / 2.5 / 40% / p99.9."""

_TICKS = """() => Array.from(document.querySelectorAll('figure.chart svg')).map(svg => ({
  chart: svg.closest('figure').dataset.chart,
  axes: Array.from(svg.querySelectorAll('g[id*="matplotlib.axis"]')).map(axis => ({
    id: axis.id,
    labels: Array.from(axis.querySelectorAll(':scope > g[id*="tick_"] text'))
      .map(t => t.textContent.trim()).filter(t => t.length > 0),
  })),
}))"""


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is missing (Debian `chromium`)")
    if not DATA.is_dir():
        pytest.skip("../shared/data is missing")
    out = tmp_path_factory.mktemp("screens")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    files = {}
    for name, args in REPORTS.items():
        path = out / f"{name}.html"
        run = subprocess.run(
            [sys.executable, "-m", "tailbudget", *args, "--format", "html", "-o", str(path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        files[name] = path
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"],
            headless=True,
        )
        opened = {}
        for name, path in files.items():
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(path.as_uri(), wait_until="load")
            page.screenshot(path=str(SHOTS / f"report-{name}.png"), full_page=True)
            opened[name] = page
        yield opened
        browser.close()


@pytest.mark.parametrize("name", list(REPORTS))
def test_the_first_section_is_the_verdict(pages, name):
    page = pages[name]
    first = page.query_selector("main section")
    assert first.get_attribute("id") == "verdict"
    text = first.inner_text()
    assert "Verdict" in text and len(text.split()) > 6
    top = first.bounding_box()
    assert top and top["y"] < 400, "the verdict is on the first screen"
    if name in ("vllm", "delag"):
        assert first.query_selector(".rec"), "the recommendation sits with the verdict"


@pytest.mark.parametrize("name", list(REPORTS))
def test_tick_labels_are_plain_numbers_four_to_an_axis(pages, name):
    charts = pages[name].evaluate(_TICKS)
    assert charts, "the report draws at least one chart"
    numeric_axes = 0
    for chart in charts:
        for axis in chart["axes"]:
            labels = axis["labels"]
            numbers = [t for t in labels if re.search(r"\d", t)]
            if not numbers:  # stage names, or tick labels a shared axis hides
                continue
            numeric_axes += 1
            where = f"{name}/{chart['chart']}/{axis['id']}"
            assert all(PLAIN.match(t) for t in numbers), f"{where}: {numbers}"
            assert len(numbers) >= 4, f"{where}: {numbers}"
    assert numeric_axes >= 2


def test_the_replica_axis_counts_whole_replicas(pages):
    charts = {c["chart"]: c for c in pages["capacity"].evaluate(_TICKS)}
    y = charts["capacity"]["axes"][1]["labels"]
    assert y and all(re.fullmatch(r"\d+", t) for t in y), y
