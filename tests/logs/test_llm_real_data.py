"""LLM benchmark readers on real files: figures recomputed here from the raw records."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tailbudget.errors import LogError
from tailbudget.logs import read_log
from tests.logs.test_real_data import DATA

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data is not here")

AIPERF = DATA / "aiperf_profile_export.jsonl"
VLLM_GRID = sorted((DATA / "vllm_grid").glob("*.json"))
VLLM_INF = DATA / "vllm_llama33-70b_tp8_sharegpt_qps_inf.json"


def _records() -> list[dict]:
    return [json.loads(line) for line in AIPERF.read_text().splitlines() if line.strip()]


def _itls(log) -> np.ndarray:
    """Every inter-token gap in the table, as the audit gets them (unnested on the engine)."""
    return np.sort(log.table.itl_ms.unnest().execute().to_numpy(dtype=float))


def test_aiperf_counts_cancelled_requests_as_failed_with_reason():
    recs = _records()
    log = read_log(str(AIPERF))
    assert log.format == "aiperf" and log.stages == ("ttft", "decode")
    cancelled = [r for r in recs if r.get("error")]
    assert len(recs) == 100 and len(cancelled) == 11
    assert log.rows.used == 89 and log.rows.rejected == 0
    assert log.rows.failed == 11 and log.rows.total == 100
    assert log.rows.failed_reasons == {"499 RequestCancellationError": 11}
    assert any("11 requests failed without a latency" in n for n in log.notes)


def test_aiperf_figures_equal_those_from_the_records():
    recs = [r for r in _records() if not r.get("error")]
    m = [r["metrics"] for r in recs]
    log = read_log(str(AIPERF))
    df = log.table.execute().set_index("request_id")
    ttft = np.array([x["ttft"]["value"] for x in m])
    e2e = np.array([x["request_latency"]["value"] for x in m])
    for q in (50, 90, 95, 99):
        assert np.percentile(df.ttft_ms, q) == pytest.approx(np.percentile(ttft, q), rel=1e-12)
        assert np.percentile(df.total_ms, q) == pytest.approx(np.percentile(e2e, q), rel=1e-12)
    gaps = np.sort(np.concatenate([x["inter_chunk_latency"]["value"] for x in m]))
    got = _itls(log)
    assert got.size == gaps.size
    for q in (50, 95, 99, 99.9):
        assert np.percentile(got, q) == pytest.approx(np.percentile(gaps, q), rel=1e-12)
    # Per request, our TPOT is AIPerf's own inter_token_latency (same definition).
    first = recs[0]
    row = df.loc[first["metadata"]["x_request_id"]]
    assert row.tpot_ms == pytest.approx(first["metrics"]["inter_token_latency"]["value"])
    assert row.output_tokens == first["metrics"]["output_sequence_length"]["value"]
    assert row.input_tokens == first["metrics"]["input_sequence_length"]["value"]
    # ns epoch timestamps become the request start, to the microsecond.
    start_ns = first["metadata"]["timestamp_ns"]
    assert row.ts.value // 1000 == start_ns // 1000


def test_aiperf_audit_counts_the_cancelled_as_errors(tmp_path):
    from typer.testing import CliRunner

    from tailbudget.cli import app

    out = tmp_path / "a.json"
    args = ["audit", str(AIPERF), "--slo", "p99=9000", "--format", "json", "-o", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["rows"]["failed"] == 11 and report["rows"]["used"] == 89
    assert report["goodput"]["error_share"] == pytest.approx(0.11)


@pytest.mark.parametrize("path", [VLLM_INF, *VLLM_GRID], ids=lambda p: p.name)
def test_vllm_itl_array_equals_the_raw_arrays(path):
    data = json.loads(path.read_text())
    log = read_log(str(path))
    raw = np.sort(np.concatenate([np.asarray(g, dtype=float) for g in data["itls"]]) * 1000)
    got = _itls(log)
    assert got.size == raw.size
    # vLLM's own summary of the same gaps.
    assert np.percentile(got, 99) == pytest.approx(data["p99_itl_ms"], rel=1e-9)
    assert got.mean() == pytest.approx(data["mean_itl_ms"], rel=1e-9)
    # These runs predate start_times: no arrival times, and the reader does not invent them.
    assert "start_times" not in data and not log.has_timestamp


def test_vllm_summary_without_arrays_is_refused(tmp_path):
    data = json.loads(VLLM_INF.read_text())
    for key in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"):
        data.pop(key)
    path = tmp_path / "vllm-summary.json"
    path.write_text(json.dumps(data))
    with pytest.raises(LogError, match="--save-detailed") as err:
        read_log(str(path))
    assert "\n" not in str(err.value) and math.isfinite(len(str(err.value)))
