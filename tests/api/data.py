"""Where the real recorded logs are (../shared/data; a git worktree sits one folder deeper)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = next(
    (
        p
        for p in (ROOT / ".." / "shared" / "data", ROOT / ".." / ".." / "shared" / "data")
        if p.is_dir()
    ),
    ROOT / ".." / "shared" / "data",
)
DELAG = DATA / "delag_eshopper_000.csv"
NEZHA = DATA / "nezha_trainticket_baseline_spans.csv"
VLLM_01 = DATA / "vllm_grid" / "vllm_llama33-70b_04_tp4_pp2_IB_qps_01.json"
