"""An all-at-once benchmark run (vLLM `qps_inf`, no max concurrency) says who decoded
together: TPOT is attributed to decode batching from the batch each request ran in."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tailbudget.audit import AuditConfig, run_audit
from tailbudget.budget.objectives import parse_objectives
from tailbudget.logs import read_log
from tailbudget.logs.bench_rows import DECODE_BATCH, with_decode_batch
from tests.conftest import SHARED_DATA

QPS_INF = SHARED_DATA / "vllm_llama33-70b_tp8_sharegpt_qps_inf.json"


def test_the_batch_is_the_time_average_of_the_other_decodes():
    # a decodes 0-10 ms; b 0-5 (beside a for half of a's span); c 5-10; d alone later
    rows = [
        {"ttft_ms": 0.0, "total_ms": 10.0},
        {"ttft_ms": 0.0, "total_ms": 5.0},
        {"ttft_ms": 5.0, "total_ms": 10.0},
        {"ttft_ms": 20.0, "total_ms": 30.0},
    ]
    with_decode_batch(rows)
    assert [r[DECODE_BATCH] for r in rows] == pytest.approx([1.0, 1.0, 1.0, 0.0])


def test_the_batch_agrees_with_a_pairwise_count():
    rng = np.random.default_rng(5)
    begin = rng.uniform(0, 500, 300)
    end = begin + rng.uniform(1, 5000, 300)
    rows = [{"ttft_ms": float(a), "total_ms": float(b)} for a, b in zip(begin, end, strict=True)]
    with_decode_batch(rows)
    overlap = np.clip(np.minimum(end[:, None], end) - np.maximum(begin[:, None], begin), 0, None)
    np.fill_diagonal(overlap, 0)
    want = overlap.sum(axis=1) / (end - begin)
    assert [r[DECODE_BATCH] for r in rows] == pytest.approx(list(want), rel=1e-9, abs=1e-9)


@pytest.mark.skipif(not QPS_INF.exists(), reason="../shared/data is missing")
def test_the_qps_inf_tpot_breach_is_decode_batching_with_a_fix():
    log = read_log(str(QPS_INF))
    assert any("sent at once" in n for n in log.notes)
    slo = parse_objectives("ttft.p95=500,tpot.p99=60,e2e.p99=20000")
    report = run_audit(log, AuditConfig(slo))
    cause = next(h for h in report.hypotheses if h.objective == "tpot.p99")
    assert cause.kind == "llm_decode_contention", cause.evidence
    assert "decode batch" in cause.evidence
    assert "cannot be measured" not in json.dumps(report.model_dump(mode="json"))
    # the batch the file implies: about 120 others decoding beside each request
    assert 80 < cause.figures["decoders_mean"] < 160
    rec = report.recommendation
    assert rec.choice != "none" and "tpot.p99" in rec.text and "limit_decode_batch" in rec.text
