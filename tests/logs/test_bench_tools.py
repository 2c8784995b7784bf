"""guidellm, SGLang and vLLM (detailed) results made by the real tools on loopback
(tests/logs/data/, see scripts/llm_bench_fixtures.py), and the aggregate files refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from tailbudget.cli import app
from tailbudget.errors import LogError
from tailbudget.logs import detect_format, read_log

HERE = Path(__file__).parent / "data"
GUIDELLM = HERE / "guidellm_benchmarks.json"
SGLANG = HERE / "sglang_details.jsonl"
SGLANG_SUMMARY = HERE / "sglang_summary.jsonl"


def test_guidellm_report_every_request_with_its_run():
    data = json.loads(GUIDELLM.read_text())
    log = read_log(str(GUIDELLM))
    assert log.format == "guidellm" and log.has_timestamp and log.cohorts == ("run",)
    groups = [b["requests"] for b in data["benchmarks"]]
    ok = [r for g in groups for r in g["successful"]]
    errored = [r for g in groups for r in g["errored"]]
    assert log.rows.used == len(ok) and log.rows.failed == len(errored) > 0
    assert log.rows.total == len(ok) + len(errored) + sum(len(g["incomplete"]) for g in groups)
    # The reason is the error's first line, without the loopback URL.
    (reason,) = log.rows.failed_reasons
    assert reason.startswith("HTTPStatusError") and "500" in reason and "127.0.0.1" not in reason
    df = log.table.execute().set_index("request_id")
    for rec in ok[:5]:
        row = df.loc[rec["request_id"]]
        timings = rec["info"]["timings"]
        assert row.total_ms == pytest.approx(rec["request_latency"] * 1000)
        assert row.ttft_ms == pytest.approx(rec["time_to_first_token_ms"])
        assert row.itl_mean_ms == pytest.approx(rec["inter_token_latency_ms"])
        assert row.output_tokens == rec["output_tokens"]
        assert row.ts.timestamp() == pytest.approx(timings["request_start"], abs=1e-5)
    # Two load levels: one cohort each, named by guidellm's strategy.
    runs = sorted(df.run.unique())
    assert len(runs) == len(data["benchmarks"]) and all("constant@" in r for r in runs)
    for k, bench in enumerate(data["benchmarks"]):
        ttft = [r["time_to_first_token_ms"] for r in bench["requests"]["successful"]]
        mine = df[df.run.str.startswith(f"{k}:")].ttft_ms
        assert np.median(mine) == pytest.approx(np.median(ttft), rel=1e-9)


def test_sglang_details_equal_its_own_summary():
    doc = json.loads(SGLANG.read_text().splitlines()[0])
    log = read_log(str(SGLANG))
    assert log.format == "sglang" and not log.has_timestamp
    failed = [e for e in doc["errors"] if e]
    assert log.rows.used == doc["completed"] and log.rows.failed == len(failed)
    df = log.table.execute()
    assert df.ttft_ms.median() == pytest.approx(doc["median_ttft_ms"], rel=1e-9)
    assert df.total_ms.mean() == pytest.approx(doc["mean_e2e_latency_ms"], rel=1e-3)
    gaps = np.sort(log.table.itl_ms.unnest().execute().to_numpy(dtype=float))
    assert np.percentile(gaps, 99) == pytest.approx(doc["p99_itl_ms"], rel=1e-9)


@pytest.mark.parametrize(
    ("doc", "name", "hint"),
    [
        (None, "sglang_summary.jsonl", "--output-details"),
        ({"request_latency": {"unit": "ms", "avg": 5.0, "p99": 9.0}}, "x.json", "profile_export"),
        ({"ttft": {"unit": "ms", "avg": 5.0, "p99": 9.0}}, "run_aiperf.json", "profile_export"),
        ({"anything": 1}, "profile_export_genai_perf.json", "profile_export.jsonl"),
        ({"benchmarks": [{"scheduler_metrics": {}, "requests": {}}]}, "b.json", "guidellm"),
        ({"completed": 10, "mean_ttft_ms": 5.0, "duration": 2.0}, "v.json", "--save-detailed"),
    ],
)
def test_aggregate_files_are_refused_with_the_file_to_pass(tmp_path, doc, name, hint):
    path = SGLANG_SUMMARY if doc is None else tmp_path / name
    if doc is not None:
        path.write_text(json.dumps(doc))
    with pytest.raises(LogError, match=hint):
        read_log(str(path))
    result = CliRunner().invoke(app, ["audit", str(path), "--slo", "p99=100"])
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and hint in lines[0] and "Traceback" not in result.output


def test_vllm_detailed_start_times_become_request_times(tmp_path):
    # vLLM >= 0.10 writes start_times (time.perf_counter(), seconds) with --save-detailed.
    doc = {
        "start_times": [1000.5, 1000.0, 1000.25],
        "ttfts": [0.1, 0.2, 0.0],
        "itls": [[0.01, 0.02], [0.03], []],
        "input_lens": [10, 20, 30],
        "output_lens": [3, 2, 0],
        "errors": ["", "", "Traceback (most recent call last):\nTimeoutError: read timed out"],
    }
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(doc))
    assert detect_format(str(path)) == "vllm"
    log = read_log(str(path))
    assert log.has_timestamp
    assert log.rows.failed_reasons == {"TimeoutError: read timed out": 1}
    df = log.table.order_by("ts").execute()
    offsets = (df.ts - df.ts.iloc[0]).dt.total_seconds().tolist()
    assert df.request_id.tolist() == ["1", "0"] and offsets == pytest.approx([0.0, 0.5])
    assert [list(v) for v in df.itl_ms] == [pytest.approx([30.0]), pytest.approx([10.0, 20.0])]
    assert any("monotonic clock" in n for n in log.notes)


def test_every_request_failed_is_one_line(tmp_path):
    path = tmp_path / "v.json"
    path.write_text(json.dumps({"ttfts": [0.0], "itls": [[]], "errors": ["refused"]}))
    with pytest.raises(LogError, match=r"no request with a latency \(refused: 1\)"):
        read_log(str(path))


def test_vllm_detailed_real_output_uses_start_times_and_latencies():
    doc = json.loads((HERE / "vllm_detailed.json").read_text())
    log = read_log(str(HERE / "vllm_detailed.json"))
    assert log.format == "vllm" and log.has_timestamp
    assert log.rows.used == doc["completed"] and log.rows.failed == doc["failed"] > 0
    df = log.table.execute().set_index("request_id")
    ok = [i for i, e in enumerate(doc["errors"]) if not e]
    starts = np.array(doc["start_times"])
    for i in ok[:5]:
        row = df.loc[str(i)]
        assert row.total_ms == pytest.approx(doc["latencies"][i] * 1000)
        # ts counts from the first start (a monotonic clock has no epoch).
        offset = (row.ts - pd.Timestamp(0)).total_seconds()
        assert offset == pytest.approx(starts[i] - starts.min(), abs=2e-6)
    # The file's own summary, recomputed from our rows.
    assert df.ttft_ms.median() == pytest.approx(doc["median_ttft_ms"], rel=1e-9)
    assert df.tpot_ms.mean() == pytest.approx(doc["mean_tpot_ms"], rel=1e-6)
    gaps = np.sort(log.table.itl_ms.unnest().execute().to_numpy(dtype=float))
    assert np.percentile(gaps, 99) == pytest.approx(doc["p99_itl_ms"], rel=1e-9)


def test_vllm_real_summary_is_refused():
    result = CliRunner().invoke(app, ["audit", str(HERE / "vllm_summary.json"), "--slo", "p99=9"])
    assert result.exit_code == 2 and "--save-detailed" in result.output
