"""vLLM and LLMPerf results with failures, short outputs and damaged arrays."""

from __future__ import annotations

import json

import pytest

from tailbudget.errors import LogError
from tailbudget.logs import read_log


def test_vllm_failed_request_and_single_token(tmp_path):
    doc = {
        "ttfts": [0.2, 0.0, 0.1],
        "itls": [[0.05, 0.05, 0.1], [], []],
        "input_lens": [10, 20, 30],
        "output_lens": [4, 0, 1],
        "errors": ["", "Bad Gateway", ""],
    }
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(doc))
    log = read_log(str(path))
    assert log.format == "vllm"
    # The failed request has no latency: counted as a failed request with its reason,
    # never silently dropped (and not "rejected": it is an error, not bad data).
    assert log.rows.total == 3 and log.rows.rejected == 0
    assert log.rows.failed == 1 and log.rows.failed_reasons == {"Bad Gateway": 1}
    df = log.table.order_by("request_id").execute()
    assert df.request_id.tolist() == ["0", "2"]
    assert df.total_ms.tolist() == pytest.approx([400.0, 100.0])
    assert df.decode_ms.tolist() == pytest.approx([200.0, 0.0])
    assert df.tpot_ms.iloc[0] == pytest.approx(200.0 / 3)
    assert df.tpot_ms.isna().iloc[1]  # one output token: TPOT undefined
    assert df.itl_p95_ms.iloc[0] == pytest.approx(95.0)


def test_vllm_e2els_preferred_when_present(tmp_path):
    doc = {"ttfts": [0.1], "itls": [[0.1]], "e2els": [0.5], "input_lens": [1], "output_lens": [2]}
    (tmp_path / "v.json").write_text(json.dumps(doc))
    df = read_log(str(tmp_path / "v.json")).table.execute()
    assert df.total_ms.item() == pytest.approx(500.0)
    assert df.tpot_ms.item() == pytest.approx(400.0)


def test_vllm_damaged_arrays(tmp_path):
    doc = {"ttfts": [0.1, 0.2], "itls": [[0.1]], "input_lens": [1, 2], "output_lens": [2, 2]}
    (tmp_path / "v.json").write_text(json.dumps(doc))
    with pytest.raises(LogError, match="'itls' has 1 entries"):
        read_log(str(tmp_path / "v.json"))


def test_llmperf_errors_and_text_latencies(tmp_path):
    records = [
        {
            "ttft_s": 0.1,
            "end_to_end_latency_s": 1.1,
            "number_input_tokens": 5,
            "number_output_tokens": 11,
            "inter_token_latency_s": 0.1,
            "error_code": None,
        },
        {
            "ttft_s": 0.2,
            "end_to_end_latency_s": 0.9,
            "number_input_tokens": 5,
            "number_output_tokens": 8,
            "inter_token_latency_s": 0.1,
            "error_code": 500,
            "error_msg": "upstream",
        },
        {
            "ttft_s": "soon",
            "end_to_end_latency_s": 1.0,
            "number_input_tokens": 5,
            "number_output_tokens": 8,
            "error_code": None,
        },
    ]
    (tmp_path / "p.json").write_text(json.dumps(records))
    log = read_log(str(tmp_path / "p.json"))
    assert log.format == "llmperf"
    assert log.rows.rejected_reasons == {"non_numeric": 1}
    df = log.table.order_by("request_id").execute()
    assert df.error.tolist() == [False, True]
    assert df.tpot_ms.iloc[0] == pytest.approx(100.0)
    assert df.decode_ms.tolist() == pytest.approx([1000.0, 700.0])


def test_engine_url_table_and_query(tmp_path):
    import duckdb

    db = tmp_path / "logs.duckdb"
    con = duckdb.connect(str(db))
    con.execute(
        "CREATE TABLE requests AS SELECT range AS i, 10.0 + range AS total_ms FROM range(5)"
    )
    con.close()
    url = f"duckdb://{db}"
    by_name = read_log("requests", engine=url)
    assert by_name.format == "engine" and by_name.rows.used == 5
    from tailbudget.logs import ReadOptions

    by_sql = read_log(None, ReadOptions(query="SELECT * FROM requests WHERE i < 3"), engine=url)
    assert by_sql.table.total_ms.sum().execute() == pytest.approx(33.0)
