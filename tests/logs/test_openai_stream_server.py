"""The loopback server the benchmark test files were made with streams what it says."""

from __future__ import annotations

import json
import time

import httpx

from tests.logs.openai_stream_server import Timing, serve_in_thread


def test_streams_max_tokens_with_usage_and_injected_failures():
    timing = Timing(ttft_ms=30, prefill_ms_per_token=0, queue_ms=0, itl_ms=5, fail_every=2)
    body = {"model": "m", "stream": True, "max_tokens": 6, "messages": [{"content": "a b c"}]}
    with serve_in_thread(timing) as url, httpx.Client(base_url=url, timeout=10) as client:
        assert client.get("/v1/models").json()["data"][0]["id"]
        start = time.perf_counter()
        first = None
        chunks = []
        with client.stream("POST", "/v1/chat/completions", json=body) as resp:
            assert resp.status_code == 200
            for line in resp.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                doc = json.loads(line.removeprefix("data: "))
                if doc["choices"]:
                    first = first or time.perf_counter()
                chunks.append(doc)
        assert (first - start) * 1000 >= 30
        assert sum(1 for c in chunks if c["choices"]) == 6
        assert chunks[-1]["usage"] == {
            "prompt_tokens": 3,
            "completion_tokens": 6,
            "total_tokens": 9,
        }
        # The second request is the injected failure.
        assert client.post("/v1/chat/completions", json=body).status_code == 500
