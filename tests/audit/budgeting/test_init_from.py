"""`tailbudget init --from LOG`: budgets measured from the demo log and real files."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from tailbudget.audit.profile import profile_of
from tailbudget.budget.load import load_budget
from tailbudget.budget.plan import make_plan
from tailbudget.budgeting.options import composed
from tailbudget.budgeting.proposal import with_unattributed
from tailbudget.cli import app
from tailbudget.logs import ReadOptions, read_log

runner = CliRunner()

DELAG = ("delag_eshopper_000.csv", ["--total", "Latency", "--stages", "*Controller*,Gateway*"])
VLLM = ("vllm_grid/vllm_llama33-70b_04_tp4_pp2_IB_qps_04.json", [])


@pytest.fixture(scope="module")
def demo_log(tmp_path_factory):
    from tailbudget.demo.generate import generate

    return generate(tmp_path_factory.mktemp("demo"), rows=20_000, seed=3).log


def init_from(path, args, tmp_path):
    target = tmp_path / "measured.yaml"
    result = runner.invoke(app, ["init", "--from", str(path), *args, "-o", str(target)])
    assert result.exit_code == 0, result.output
    return load_budget(target)


def check_reproduces(budget, path):
    log = read_log(str(path), ReadOptions.from_budget(budget))
    profile = with_unattributed(budget, profile_of(log))
    for _, stage in budget.stages():
        assert stage.budget is not None
        for p, ms in stage.budget.given().items():
            assert ms == pytest.approx(profile.quantile(stage.name, p), rel=0.01, abs=0.01)
    e2e = composed(budget, profile, profile.times)
    assert np.quantile(e2e, 0.99) == pytest.approx(profile.quantile("total", "p99"), rel=0.05)
    make_plan(budget, samples=20_000)  # plan accepts it (no validation error)
    return profile


def test_delag_nesting_is_not_added_twice(shared_data, tmp_path):
    name, args = DELAG
    budget = init_from(shared_data / name, args, tmp_path)
    # Issue 36: every call the audit finds inside the gateway (`nesting[]`) nests under it,
    # and the gateway's slice is its own time (its column less theirs): none counted twice.
    calls = budget.callers()
    assert set(calls) == {"GatewayGet"}
    inside = {s for term in calls["GatewayGet"] for s in term}
    assert inside == {
        "CategoriesControllerGetcategory",
        "ItemsControllerFindfeaturesitemrandom",
        "ItemsControllerFinditemrandom",
        "ItemsControllerFinditemsrandombyidproduct",
        "ProductsControllerFindproduct",
        "ProductsControllerFindproductrandom",
    }
    text = (tmp_path / "measured.yaml").read_text()
    assert "calls:   # run inside GatewayGet" in text
    profile = check_reproduces(budget, shared_data / name)
    gateway = budget.stage("GatewayGet")
    assert gateway is not None and gateway.budget is not None
    assert gateway.budget.p99 is not None and gateway.budget.p99 < 100  # own time, not 363 ms
    assert float(np.max(profile.times["GatewayGet"])) < 150


def test_vllm_llm_block_from_the_log(shared_data, tmp_path):
    name, args = VLLM
    budget = init_from(shared_data / name, args, tmp_path)
    decode = budget.stage("decode")
    assert decode is not None and decode.llm is not None
    profile = check_reproduces(budget, shared_data / name)
    assert decode.llm.ttft_ms == pytest.approx(float(np.median(profile.times["ttft"])), rel=0.01)
    assert budget.stage("unattributed") is None  # ttft + decode is the whole request


def test_demo_log_with_objectives_says_whether_it_fits(demo_log, tmp_path):
    target = tmp_path / "b.yaml"
    result = runner.invoke(
        app, ["init", "--from", str(demo_log), "--slo", "p95=2800,p99=20000", "-o", str(target)]
    )
    assert result.exit_code == 0, result.output
    assert "the measured service" in result.output
    budget = load_budget(target)
    assert budget.slo.given() == {"p95": 2800.0, "p99": 20000.0}
    check_reproduces(budget, demo_log)


def test_stated_parallel_group(demo_log, tmp_path):
    budget = init_from(demo_log, ["--parallel", "embedding,retrieval"], tmp_path)
    text = (tmp_path / "measured.yaml").read_text()
    assert "- parallel:" in text
    assert {s.name for _, s in budget.stages()} >= {"embedding", "retrieval", "llm"}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--parallel", "embedding,nope"], "--parallel"),
        (["--slo", "ttft.p100=5"], "p100"),
        (["--slo", "nostage.p99=5"], "nostage"),
    ],
)
def test_bad_input_is_one_line(demo_log, args, needle):
    result = runner.invoke(app, ["init", "--from", str(demo_log), *args])
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0]


def test_a_measured_slo_says_which_figure_is_the_logs_own(shared_data, tmp_path):
    # LLMPerf: TTFT and decode medians add to 2,206 ms, the log's median request takes
    # 2,260; the p50 objective is the log's figure, and the comment no longer calls every
    # objective "the measured slices' sum".
    init_from(shared_data / "llmperf_anyscale_70b.json", [], tmp_path)
    (line,) = [t for t in (tmp_path / "measured.yaml").read_text().splitlines() if t[:4] == "slo:"]
    assert "p50: 2259.534" in line  # seven digits: the audit prints 2,260
    assert "the measured slices' sum (p50: the log's own figure, above the sum)" in line
