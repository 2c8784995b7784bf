"""No record lost: N requests in, N records out, across close, errors, threads and tasks."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tailbudget import Recorder


def _check(rows, expected_ids, stages):
    ids = [r["request_id"] for r in rows]
    assert len(ids) == len(set(ids))
    assert set(ids) == expected_ids
    for r in rows:
        for s in stages:
            assert f"{s}_ms" in r, (s, r)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_many_threads_no_record_lost(tmp_path, registry, fmt, read_jsonl, read_parquet):
    path = tmp_path / f"r.{fmt}"
    # Small batches and a short interval: the writer drains while threads still write.
    rec = Recorder(sink=path, registry=registry, batch_size=64, flush_interval_s=0.01)
    n_threads, per_thread = 8, 400
    barrier = threading.Barrier(n_threads)
    errors = 0

    def worker(t: int) -> None:
        nonlocal errors
        barrier.wait()
        for i in range(per_thread):
            try:
                with rec.request(request_id=f"t{t}-{i}", worker=t) as req:
                    with req.stage("embed"):
                        pass
                    with req.stage("llm"):
                        if i % 50 == 0:
                            raise ValueError("boom")
            except ValueError:
                errors += 1

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    rec.close()
    rows = read_jsonl(path) if fmt == "jsonl" else read_parquet(path)
    expected = {f"t{t}-{i}" for t in range(n_threads) for i in range(per_thread)}
    _check(rows, expected, ["embed", "llm"])
    assert rec.dropped == 0
    assert errors == sum(1 for r in rows if r["error"]) == n_threads * per_thread // 50


def test_many_asyncio_tasks_no_record_lost_and_parallel_stages_not_nested(
    tmp_path, registry, read_parquet
):
    path = tmp_path / "r.parquet"
    rec = Recorder(sink=path, registry=registry, batch_size=50, flush_interval_s=0.01)
    n = 600

    async def one(i: int) -> None:
        async with rec.request(request_id=f"a{i}", route="rag") as req:
            async with req.stage("embedding"):
                await asyncio.sleep(0)

            async def branch(name: str, hops: int) -> None:
                async with req.stage(name):
                    for _ in range(hops):
                        await asyncio.sleep(0)
                    async with req.stage("io"):
                        await asyncio.sleep(0)

            # Two stages of one request at once: each task sees its own parent.
            await asyncio.gather(branch("retrieval", 3), branch("keyword_search", 1))
            if i % 100 == 7:
                raise KeyError(i)

    async def main() -> None:
        results = await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)
        assert sum(isinstance(r, KeyError) for r in results) == 6

    asyncio.run(main())
    rec.close()
    rows = read_parquet(path)
    _check(
        rows,
        {f"a{i}" for i in range(n)},
        ["embedding", "retrieval", "keyword_search", "retrieval/io", "keyword_search/io"],
    )
    assert not any(k.startswith(("retrieval/keyword", "keyword_search/retrieval")) for k in rows[0])
    assert sum(r["error"] for r in rows) == 6


def test_close_flushes_everything_queued(tmp_path, registry, read_jsonl):
    # A long interval and huge batches: nothing is written until close drains.
    rec = Recorder(
        sink=tmp_path / "r.jsonl", registry=registry, flush_interval_s=3600, batch_size=10**6
    )
    for i in range(1000):
        with rec.request(request_id=str(i)) as req, req.stage("s"):
            pass
    assert not (tmp_path / "r.jsonl").read_text()
    rec.close()
    assert len(read_jsonl(tmp_path / "r.jsonl")) == 1000
    assert rec.written == 1000 and rec.dropped == 0


def test_flush_makes_records_visible_without_closing(tmp_path, registry, read_jsonl):
    rec = Recorder(sink=tmp_path / "r.jsonl", registry=registry, flush_interval_s=3600)
    for _ in range(10):
        with rec.request():
            pass
    rec.flush()
    assert len(read_jsonl(tmp_path / "r.jsonl")) == 10
    rec.close()
