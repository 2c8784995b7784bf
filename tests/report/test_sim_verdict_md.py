"""`simulate` and `capacity` markdown open with the verdict their HTML pages open with
(issue 26 item 6: they opened with the arrivals, the verdict nowhere)."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailbudget.cli import app
from tests.sim.synth import doubling_log

runner = CliRunner()


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return doubling_log(tmp_path_factory.mktemp("verdict") / "doubling.parquet")


def both(args: list[str], tmp_path: Path) -> tuple[str, str]:
    md = runner.invoke(app, [*args, "--format", "md"])
    assert md.exit_code == 0, md.output
    out = tmp_path / "page.html"
    page = runner.invoke(app, [*args, "--format", "html", "-o", str(out)])
    assert page.exit_code == 0, page.output
    return md.output, out.read_text()


def html_verdict(page: str) -> str:
    section = page.split('<section id="verdict">', 1)[1]
    found = re.search(r'<p class="verdict [a-z]+"><strong>(.*?)</strong>', section)
    assert found is not None
    return html.unescape(found.group(1))


def test_simulate_md_opens_with_the_html_verdict(log: Path, tmp_path: Path) -> None:
    args = ["simulate", str(log), "--slo", "p95=1000", "--concurrency", "4", "--replicas", "2",
            "--duration", "10m", "--policy", "budget", "--policy", "fixed"]  # fmt: skip
    md, page = both(args, tmp_path)
    first = md.split("\n\n")[1]
    assert first == f"**Verdict: {html_verdict(page)}.**"
    assert "meets every gated objective" in first or "No policy meets every gated" in first


def test_a_breaching_best_says_none_meets_and_why_and_an_unmet_floor_is_not_1x(
    log: Path, tmp_path: Path
) -> None:
    # p95 under the requests' own work: no replica count meets it, the floor included
    args = ["simulate", str(log), "--slo", "p95=60", "--concurrency", "4", "--replicas", "2",
            "--duration", "5m", "--policy", "budget", "--policy", "fixed"]  # fmt: skip
    md, page = both(args, tmp_path)
    first = md.split("\n\n")[1]
    assert first.startswith("**Verdict: No policy meets every gated objective; the fewest")
    assert "no replica count meets them in" in first and "(the floor is not met either)" in first
    floor_row = next(ln for ln in md.splitlines() if ln.startswith("| floor (hindsight)"))
    assert "| not met |" in floor_row and "| 1x |" not in floor_row
    assert "not met" in page and "no policy meets every gated objective" in page
    # no policy is quoted against a floor that is not met: its ratio is no yardstick
    runs = [ln for ln in md.splitlines() if ln.startswith(("| budget |", "| fixed")) and "(" in ln]
    assert runs and all("| n/a |" in ln and "x |" not in ln for ln in runs), runs
    assert "No ratio to the floor is given" in md and "No ratio to the floor is given" in page


def test_capacity_md_opens_with_the_html_verdict(log: Path, tmp_path: Path) -> None:
    args = ["capacity", str(log), "--slo", "p95=1000", "--concurrency", "4", "--load", "1,2",
            "--duration", "10m"]  # fmt: skip
    md, page = both(args, tmp_path)
    first = md.split("\n\n")[1]
    assert first == f"**Verdict: {html_verdict(page)}.**"
    assert "every gated objective at 1x the log's load; scale before" in first
