"""The real logs in ../shared/data read, with facts computed independently here."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import pytest

from tailbudget.errors import LogError
from tailbudget.logs import ReadOptions, read_log
from tests._data import DATA

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data is not here")

DELAG = DATA / "delag_eshopper_000.csv"
VLLM = DATA / "vllm_llama33-70b_tp8_sharegpt_qps_inf.json"
LLMPERF = DATA / "llmperf_anyscale_70b.json"
NEZHA = DATA / "nezha_trainticket_baseline_spans.csv"


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_delag_with_mapping():
    raw = _csv(DELAG)
    rpcs = [c for c in raw[0] if c not in ("Latency", "anomaly")]
    # The mapping this log needs: the total column and its per-RPC columns as stages.
    log = read_log(
        str(DELAG), ReadOptions(total="Latency", stages=tuple(rpcs), cohorts=("anomaly",))
    )
    assert log.stages == tuple(rpcs)
    assert log.rows.total == len(raw) and log.rows.rejected == 0
    assert log.table.total_ms.sum().execute() == pytest.approx(
        sum(float(r["Latency"]) for r in raw)
    )
    for rpc in rpcs:
        got = log.table[log.stage_column(rpc)].sum().execute()
        assert got == pytest.approx(sum(float(r[rpc]) for r in raw))
    counts = log.table.anomaly.value_counts().execute()
    assert dict(zip(counts.anomaly, counts.iloc[:, 1], strict=True)) == {
        k: sum(r["anomaly"] == k for r in raw) for k in {r["anomaly"] for r in raw}
    }
    # Nested RPCs: the stage sum exceeds the total on some requests, as the README says.
    over = sum(sum(float(r[c]) for c in rpcs) > float(r["Latency"]) for r in raw)
    df = log.table.execute()
    assert over > 0
    assert int((df[[log.stage_column(c) for c in rpcs]].sum(axis=1) > df.total_ms).sum()) == over


def test_delag_glob_and_auto_detection():
    rpcs = [c for c in _csv(DELAG)[0] if c not in ("Latency", "anomaly")]
    by_glob = read_log(
        str(DELAG), ReadOptions(total="Latency", stages_glob="*Controller*,Gateway*")
    )
    assert sorted(by_glob.stages) == sorted(rpcs)
    auto = read_log(str(DELAG))
    # Plain auto-detection: total found, no stages guessed, and the notes say how to map them.
    assert auto.stages == () and auto.rows.used == by_glob.rows.used
    assert any("'Latency'" in n for n in auto.notes)
    assert any("stages" in n and rpcs[0] in n for n in auto.notes)


def test_vllm_result():
    data = json.loads(VLLM.read_text())
    log = read_log(str(VLLM))
    assert log.format == "vllm"
    assert log.stages == ("ttft", "decode")
    assert log.shape == ("input_tokens", "output_tokens")
    n_errors = sum(bool(e) for e in data["errors"])
    assert log.rows.total == len(data["ttfts"])
    df = log.table.execute().set_index("request_id")
    assert int(df.error.sum()) == n_errors
    ttft0, itl0, out0 = data["ttfts"][0], data["itls"][0], data["output_lens"][0]
    e2e0 = ttft0 + sum(itl0)
    row = df.loc["0"]
    assert row.ttft_ms == pytest.approx(ttft0 * 1000)
    assert row.total_ms == pytest.approx(e2e0 * 1000)
    assert row.decode_ms == pytest.approx(sum(itl0) * 1000)
    assert row.tpot_ms == pytest.approx((e2e0 - ttft0) / (out0 - 1) * 1000)
    assert row.input_tokens == data["input_lens"][0] and row.output_tokens == out0
    assert row.itl_p50_ms == pytest.approx(sorted(itl0)[len(itl0) // 2] * 1000, rel=0.05)
    # vLLM's own summary agrees with our per-request TPOT and TTFT.
    assert df.tpot_ms.mean() == pytest.approx(data["mean_tpot_ms"], rel=1e-4)
    assert df.ttft_ms.median() == pytest.approx(data["median_ttft_ms"], rel=1e-9)


def test_llmperf_result():
    records = json.loads(LLMPERF.read_text())
    log = read_log(str(LLMPERF))
    assert log.format == "llmperf"
    assert log.rows.total == len(records)
    df = log.table.execute().set_index("request_id")
    r0 = records[0]
    row = df.loc["0"]
    assert row.total_ms == pytest.approx(r0["end_to_end_latency_s"] * 1000)
    assert row.ttft_ms == pytest.approx(r0["ttft_s"] * 1000)
    assert row.tpot_ms == pytest.approx(
        (r0["end_to_end_latency_s"] - r0["ttft_s"]) / (r0["number_output_tokens"] - 1) * 1000
    )
    assert row.itl_mean_ms == pytest.approx(r0["inter_token_latency_s"] * 1000)
    assert int(df.error.sum()) == sum(r["error_code"] is not None for r in records)


@pytest.fixture(scope="module")
def nezha():
    return read_log(str(NEZHA))


def test_nezha_spans_one_request_per_trace(nezha):
    raw = _csv(NEZHA)
    traces = {r["TraceID"] for r in raw}
    roots = {r["TraceID"]: r for r in raw if r["ParentID"] == "root"}
    log = nezha
    assert log.format == "spans"
    assert log.rows.total == len(traces)
    assert log.rows.used == len(roots)
    assert log.rows.rejected_reasons.get("missing_total", 0) == len(traces) - len(roots)
    # At least the top 12 stay stages; only negligible operations are folded.
    assert len(log.stages) >= 13 and log.stages[-1] == "other"
    assert any("summed into stage 'other'" in n for n in log.notes)
    df = log.table.execute().set_index("request_id")
    for tid, root in roots.items():
        assert df.loc[tid, "total_ms"] == pytest.approx(float(root["Duration"]) / 1000, abs=1e-3)
    spans_per_trace = defaultdict(int)
    for r in raw:
        spans_per_trace[r["TraceID"]] += 1
    assert df.n_spans.to_dict() == {t: spans_per_trace[t] for t in roots}
    # Self times are never negative and, within a trace, never exceed the summed span time.
    stage_cols = [log.stage_column(s) for s in log.stages]
    assert (df[stage_cols] >= 0).all().all()
    busy = defaultdict(float)
    for r in raw:
        busy[r["TraceID"]] += (int(r["EndTimeUnixNano"]) - int(r["StartTimeUnixNano"])) / 1e6
    assert all(df.loc[t, stage_cols].sum() <= busy[t] + 1e-6 for t in roots)
    # Critical-path time counts each ms once: the stages add up to the total.
    assert (df[stage_cols].sum(axis=1) - df.total_ms).abs().max() < 1e-6


def test_nezha_by_service(nezha):
    raw = _csv(NEZHA)
    log = read_log(str(NEZHA), ReadOptions(span_stage="service", max_stages=40))
    services = {r["PodName"].rsplit("-", 2)[0] for r in raw}
    assert {s.replace("_", "-") for s in log.stages} == services
    by_op = nezha  # by operation, top 12 + other
    # Grouping changes the split, not the sum of self time per trace.
    a = log.table.execute().set_index("request_id")
    b = by_op.table.execute().set_index("request_id")
    sa = a[[log.stage_column(s) for s in log.stages]].sum(axis=1)
    sb = b[[by_op.stage_column(s) for s in by_op.stages]].sum(axis=1)
    assert (sa - sb.loc[sa.index]).abs().max() < 1e-6


def test_clear_error_for_a_wrong_mapping_on_real_data():
    with pytest.raises(LogError, match=r"'latency_total'.*Latency"):
        read_log(str(DELAG), ReadOptions(total="latency_total"))
