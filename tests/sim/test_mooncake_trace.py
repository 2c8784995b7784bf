"""The Mooncake trace format as `--arrivals` (issue 34): JSON lines, timestamps in ms."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailbudget.errors import TailbudgetError
from tailbudget.sim.arrivals import parse_arrivals, read_trace
from tests.conftest import SHARED_DATA

MOONCAKE = SHARED_DATA / "mooncake_synthetic_trace.jsonl"


def test_the_shared_mooncake_trace_reads_as_arrivals_with_tokens() -> None:
    if not MOONCAKE.is_file():
        pytest.skip(f"real data file not found: {MOONCAKE}")
    t = read_trace(str(MOONCAKE))
    assert t.t_s.size == 3993 and t.t_s[0] == 0.0
    assert 16 * 60 < t.t_s[-1] < 18 * 60  # 17 minutes, as the data README says
    assert t.input_tokens is not None and t.output_tokens is not None
    assert round(float(t.input_tokens.mean())) == 15325
    assert round(float(t.output_tokens.mean())) == 149
    assert parse_arrivals(str(MOONCAKE)).kind == "trace"


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("{not json", "line 2: not a JSON object"),
        ('{"timestamp": 5}', "line 2: a Mooncake trace line has timestamp (ms)"),
        ('{"timestamp": -1, "input_length": 3, "output_length": 4}', "must be numbers >= 0"),
        ('{"timestamp": true, "input_length": 3, "output_length": 4}', "must be numbers >= 0"),
    ],
)
def test_a_bad_line_is_one_error_naming_it(tmp_path: Path, line: str, said: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2}\n' + line + "\n")
    with pytest.raises(TailbudgetError, match=said.replace("(", r"\(").replace(")", r"\)")):
        read_trace(str(path))


def test_block_hashes_give_prefix_hits_through_an_lru_per_replica() -> None:
    # hash_ids (512-token blocks) are read; on one replica, a request's leading blocks seen
    # before are not computed again: the engine's hit share is the LRU's
    from collections import OrderedDict

    import numpy as np

    from tailbudget.logs import ReadOptions
    from tailbudget.sim.arrivals import ArrivalSpec, make_arrivals
    from tailbudget.sim.batch_engine import BLOCK_TOKENS, run_batching
    from tailbudget.sim.fit import ModelOptions
    from tailbudget.sim.fitting import fit_logs
    from tailbudget.sim.policies import FixedPolicy

    vllm = SHARED_DATA / "vllm_llama33-70b_tp8_sharegpt_qps_inf.json"
    if not MOONCAKE.is_file() or not vllm.is_file():
        pytest.skip("real data not found")
    trace = read_trace(str(MOONCAKE))
    assert trace.blocks is not None and len(trace.blocks) == 3993
    assert len(set().union(*trace.blocks)) == 43924  # distinct blocks, as the README counts
    model = fit_logs([str(vllm)], ReadOptions(), ModelOptions()).model
    assert model.llm is not None
    size = int(model.llm.prefix_cache_blocks.value)
    assert size == 2048 and model.llm.prefix_cache_blocks.source == "default"
    arr, _ = make_arrivals(
        ArrivalSpec("trace", trace=trace), pool=model.samples.size, load=1.0, duration_s=60.0,
        max_requests=None, low_share=0.0, rng=np.random.default_rng(0),
    )  # fmt: skip
    assert arr.blocks is not None and arr.input_tokens is not None
    got = run_batching(model, arr, FixedPolicy(1), replicas=1, end_s=60.0).prefix_hits
    lru: OrderedDict[int, None] = OrderedDict()
    hit = total = 0.0
    for ids, n in zip(arr.blocks, arr.input_tokens.tolist(), strict=True):
        k = 0
        while k < len(ids) and ids[k] in lru:
            k += 1
        for b in ids:
            lru[b] = None
            lru.move_to_end(b)
        while len(lru) > size:
            lru.popitem(last=False)
        hit += min(k * BLOCK_TOKENS, max(n, 1.0) - 1.0)
        total += max(n, 1.0)
    assert got is not None and got == pytest.approx(hit / total) and got > 0.02


def test_the_prefix_cache_size_is_a_stated_option_and_a_model_parameter() -> None:
    # --prefix-cache-blocks / prefix_cache_blocks= sizes each replica's LRU: a smaller cache
    # evicts more of the trace's shared prefixes, so fewer prompt tokens hit; the model
    # lists the size with its source, and the note says which size ran
    import json

    import tailbudget as tb

    vllm = SHARED_DATA / "vllm_llama33-70b_tp8_sharegpt_qps_inf.json"
    if not MOONCAKE.is_file() or not vllm.is_file():
        pytest.skip("real data not found")
    kw = {"arrivals": str(MOONCAKE), "duration": "60s", "policy": "fixed:1"}
    default = json.loads(tb.simulate(str(vllm), "ttft.p95=3000", **kw).to_json())
    small = json.loads(
        tb.simulate(str(vllm), "ttft.p95=3000", prefix_cache_blocks=64, **kw).to_json()
    )
    params = {p["name"]: p for p in small["model"]["parameters"]}
    assert params["prefix_cache_blocks"]["value"] == 64
    assert params["prefix_cache_blocks"]["source"] == "stated"
    stock = {p["name"]: p for p in default["model"]["parameters"]}["prefix_cache_blocks"]
    assert stock["value"] == 2048 and stock["source"] == "default"

    def share(doc: dict[str, object]) -> float:
        note = next(n for n in doc["notes"] if "block hashes" in n)  # type: ignore[attr-defined]
        return float(note.split("): ", 1)[1].split("%", 1)[0])

    assert share(small) < share(default)
    assert "LRU of 64 blocks per replica, stated" in " ".join(small["notes"])


@pytest.mark.parametrize("bad", [0, -3, 1.5, True])
def test_a_bad_prefix_cache_size_is_one_error_naming_it(bad: object) -> None:
    import tailbudget as tb

    vllm = SHARED_DATA / "vllm_llama33-70b_tp8_sharegpt_qps_inf.json"
    if not vllm.is_file():
        pytest.skip("real data not found")
    with pytest.raises(TailbudgetError, match="prefix_cache_blocks is a whole number") as err:
        tb.simulate(str(vllm), slo="ttft.p95=3000", prefix_cache_blocks=bad)  # type: ignore[arg-type]
    assert err.value.param == "prefix_cache_blocks"
