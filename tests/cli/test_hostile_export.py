"""Export refuses names and URLs its targets would refuse, quoting the target's rule."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from tailbudget.cli import app
from tailbudget.errors import TailbudgetError
from tailbudget.export.common import ExportOptions

runner = CliRunner()

BUDGET = """\
service: svc
slo: {p50: 300, p95: 800, p99: 1500}
pipeline:
  - stage: db
    budget: {p50: 50, p95: 150, p99: 300}
"""


@pytest.fixture
def budget(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text(BUDGET)
    return path


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--scale-target", "web\nx"], ["--scale-target 'web\\nx'", "RFC 1123 subdomain"]),
        (["--scale-target", "Web_App"], ["--scale-target 'Web_App'", "regex used for validation"]),
        (["--scale-target", "a" * 254], ["at most 253 characters"]),
        (["--namespace", "Prod"], ["--namespace 'Prod'", "RFC 1123 label"]),
        (["--namespace", "a.b"], ["RFC 1123 label"]),
        (["--verdict-url", "ftp://x"], ["--verdict-url 'ftp://x'", "http:// or https://"]),
        (["--prometheus-url", "http://a\nb"], ["--prometheus-url", "control characters"]),
        (["--prometheus-url", "http://prom:99999"], ["--prometheus-url"]),
        (["--prometheus-url", "prometheus:9090"], ["absolute http://"]),
    ],
)
@pytest.mark.parametrize("target", ["keda", "argo-rollouts", "flagger"])
def test_names_and_urls_the_target_refuses_are_one_line(budget, args, needles, target):
    result = runner.invoke(app, ["export", str(budget), "--to", target, *args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_valid_names_are_written_as_given(budget):
    result = runner.invoke(
        app,
        ["export", str(budget), "--to", "keda", "--scale-target", "web.app-1",
         "--namespace", "prod-2"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = next(d for d in yaml.safe_load_all(result.output) if d)
    assert doc["spec"]["scaleTargetRef"]["name"] == "web.app-1"
    assert doc["metadata"]["namespace"] == "prod-2"


def test_the_api_names_its_parameter():
    with pytest.raises(TailbudgetError, match="scale_target 'x y'") as err:
        ExportOptions(target_name="x y")
    assert err.value.param == "scale_target"
