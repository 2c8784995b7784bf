"""The real recorded logs the API tests read (in tests/_data.DATA)."""

from __future__ import annotations

from tests._data import DATA

DELAG = DATA / "delag_eshopper_000.csv"
NEZHA = DATA / "nezha_trainticket_baseline_spans.csv"
VLLM_01 = DATA / "vllm_grid" / "vllm_llama33-70b_04_tp4_pp2_IB_qps_01.json"
