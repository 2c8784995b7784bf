"""`tailbudget serve` under the faults a production box sees: nothing acknowledged is lost.

Each test runs a real server (uvicorn on loopback, in a subprocess) and breaks
something under it: a torn log tail, a second server, a full disk, slow clients.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.test_serve import TOKEN, Server, _files, _obs

pytestmark = pytest.mark.integration

SRC = Path(__file__).resolve().parents[2] / "src"
WAL = "observations.wal"


def _post_all(srv: Server, batches: int, size: int) -> int:
    acked = 0
    for _ in range(batches):
        r = srv.post(_obs(size))
        assert r.status_code == 200, r.text
        acked += int(r.json()["accepted"])
    return acked


def test_a_torn_tail_is_cut_so_later_batches_survive_kill_9(tmp_path):
    token, budget = _files(tmp_path)
    state = tmp_path / "state"
    srv = Server(state, token_file=token, budget=budget).start()
    acked = _post_all(srv, 5, 20)
    srv.stop(signal.SIGKILL)
    # kill -9 in the middle of a write: the first part of a record, never acknowledged
    log = state / WAL
    record = log.read_bytes()
    assert record, "the batches should be in the log before any compaction"
    with open(log, "ab") as fh:
        fh.write(record[:50])
    srv = Server(state, token_file=token, budget=budget).start()
    acked += _post_all(srv, 10, 100)  # 1,000 observations acknowledged after the tear
    srv.stop(signal.SIGKILL)
    srv = Server(state, token_file=token, budget=budget).start()
    try:
        assert srv.status()["observations_total"] == acked == 1100
        assert "cut a torn record" in srv.log.read_text()
    finally:
        srv.stop()


def test_a_flipped_byte_mid_log_is_reported_and_the_rest_kept(tmp_path):
    token, budget = _files(tmp_path)
    state = tmp_path / "state"
    srv = Server(state, token_file=token, budget=budget).start()
    acked = _post_all(srv, 10, 100)
    srv.stop(signal.SIGKILL)
    data = bytearray((state / WAL).read_bytes())
    data[len(data) // 10 * 2 + 40] ^= 0xFF  # inside the third batch's payload
    (state / WAL).write_bytes(bytes(data))
    srv = Server(state, token_file=token, budget=budget).start()
    try:
        status = srv.status()
        assert status["observations_total"] == acked - 100  # one batch lost, nine kept
        (note,) = [n for n in status["notes"] if "corrupt bytes" in n]
        assert "1 acknowledged batch(es) lost" in note and "after batch 2" in note
        assert "corrupt bytes" in srv.log.read_text()
    finally:
        srv.stop()


def test_a_second_server_on_the_same_state_dir_is_refused(tmp_path):
    token, budget = _files(tmp_path)
    state = tmp_path / "state"
    first = Server(state, token_file=token, budget=budget).start()
    try:
        acked = _post_all(first, 3, 10)
        argv = [sys.executable, "-m", "tailbudget", "serve", "--state-dir", str(state)]
        argv += ["--port", str(_free_port()), "--budget", str(budget)]
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        try:
            second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("a second server on the same state dir ran instead of exiting 2")
        assert second.returncode == 2
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and "in use by another tailbudget serve" in lines[0]
        assert first.proc is not None and f"(pid {first.proc.pid})" in lines[0]
        assert first.status()["observations_total"] == acked
    finally:
        first.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a full disk needs a small tmpfs, and mounting one needs root")
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(disk: Path) -> Path:
    """Fill the file system to the last byte (bounded: tmpfs is a few MB)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for size in (1 << 16, 1 << 10, 1):
            for _ in range(100_000):
                try:
                    if os.write(fd, b"\0" * size) < size:
                        break
                except OSError:
                    break
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_during_a_snapshot_is_a_503_and_loses_nothing(tmp_path):
    token, budget = _files(tmp_path)
    with _small_tmpfs(tmp_path / "disk", "4m") as disk:
        state = disk / "state"
        srv = Server(state, token_file=token, budget=budget).start()
        try:
            acked = _post_all(srv, 20, 100)
            snapshot = (state / "snapshot.json").read_bytes()
            filler = _fill(disk)
            headers = {"Authorization": f"Bearer {TOKEN}"}
            r = httpx.post(
                f"{srv.url}/v1/baseline", json={"p99_ms": 900}, headers=headers, timeout=30
            )
            assert r.status_code == 503 and "cannot store the baseline" in r.json()["error"]
            # the old snapshot and the whole log are still there
            assert (state / "snapshot.json").read_bytes() == snapshot
            assert (state / WAL).stat().st_size > 0
            # Batches go on while the log has room (a page it already has), then 503:
            # not durable, so not acknowledged.
            codes = []
            for _ in range(50):
                r = srv.post(_obs(100))
                codes.append(r.status_code)
                acked += int(r.json()["accepted"]) if r.status_code == 200 else 0
            assert set(codes) <= {200, 503} and codes[-1] == 503
            status = srv.status()
            assert status["snapshot"]["error"].startswith("cannot write the snapshot")
            assert status["observations_total"] == acked
        finally:
            srv.stop(signal.SIGKILL)
        filler.unlink()
        srv = Server(state, token_file=token, budget=budget).start()
        try:
            assert srv.status()["observations_total"] == acked >= 2000
        finally:
            srv.stop()


def _half_open(port: int, count: int) -> list[socket.socket]:
    """`count` connections that each send half a request's headers, then nothing."""
    held = []
    for _ in range(count):
        s = socket.socket()
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", port))
            s.sendall(b"POST /v1/observations HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        except OSError:
            s.close()
            continue
        held.append(s)
    return held


def test_slow_clients_do_not_starve_the_others(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1300:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    token, budget = _files(tmp_path)
    # A server with the common default of 1,024 open files, below the slow clients' 1,100.
    srv = Server(tmp_path / "state", token_file=token, budget=budget, open_files=1024).start()
    port = int(srv.url.rsplit(":", 1)[1])
    held: list[socket.socket] = []
    try:
        held = _half_open(port, 1100)
        assert len(held) >= 1000
        answered = []
        deadline = time.monotonic() + 10
        for _ in range(40):  # bounded: stops by itself after ~10 s
            if time.monotonic() >= deadline:
                break
            start = time.monotonic()
            with httpx.Client(timeout=5) as client:  # a new connection each time
                r = client.get(f"{srv.url}/v1/status")
            answered.append(time.monotonic() - start)
            assert r.status_code == 200
            time.sleep(0.25)
        # Starved, a request would time out (httpx raises): every one answered is the
        # check, not how fast (a loaded machine makes any time bound flaky).
        assert len(answered) >= 10, answered
    finally:
        for s in held:
            s.close()
        srv.stop()


def test_hostile_bodies_are_refused_in_bounded_memory(tmp_path):
    from tests.control.test_service_limits import gaps_table, zstd_stream

    token, budget = _files(tmp_path)
    state = tmp_path / "state"
    srv = Server(state, token_file=token, budget=budget).start()
    try:
        acked = _post_all(srv, 2, 10)
        table = gaps_table(10_000_000)  # 80 MB of gaps: 3 KiB of zstd per copy
        arrow = "application/vnd.apache.arrow.stream"
        for copies in (1, 3, 6):  # 3, 9 and 18 KiB bodies
            body = zstd_stream(table, copies)
            r = srv.post(body, content_type=arrow)
            assert r.status_code == 413, r.text
            assert "past the server's max_decoded_bytes 8,388,608" in r.json()["error"]
        hostile = [
            (b'[{"total_ms": 5, "itl_ms": {"p50": 50, "p99": 10}}]', "itl_ms.p50"),
            (b'[{"total_ms": 5, "itl_ms": {"p50": "junk", "p99": 10}}]', "itl_ms.p50"),
            (b'[{"total_ms": 5, "output_tokens": 1' + b"0" * 30 + b"}]", "output_tokens"),
        ]
        for raw, field in hostile:
            r = srv.post(raw)
            assert r.status_code == 400 and field in r.json()["error"], r.text
        auth = {"Authorization": f"Bearer {TOKEN}"}
        for value, field in [
            ({"baselines": {"nosuch.p99": 5}}, "baselines.nosuch.p99"),
            ({"baselines": {f"s{i}.p99": 5 for i in range(3_000)}}, "3,000 keys; at most 64"),
            ({"p99_ms": 850, "baselines": {"ttft.p99": 400}}, "not both"),
        ]:
            r = httpx.post(f"{srv.url}/v1/baseline", json=value, headers=auth, timeout=10)
            assert r.status_code == 400 and field in r.json()["error"], r.text
        many = {"baselines": {f"s{i}.p99": 5 for i in range(10_000)}}  # 10,000 keys: 140 KB
        r = httpx.post(f"{srv.url}/v1/baseline", json=many, headers=auth, timeout=10)
        assert r.status_code == 413 and "64 KiB" in r.json()["error"]
        # Just under the limit: 200,000 observations of 3 gaps each, 7.2 MB decoded.
        import numpy as np
        import pyarrow as pa

        n = 200_000
        offsets = pa.array(np.arange(0, 3 * n + 1, 3, dtype=np.int32))
        gaps = pa.ListArray.from_arrays(offsets, pa.array(np.full(3 * n, 20.0)))
        table = pa.table({"total_ms": pa.array(np.full(n, 100.0)), "itl_ms": gaps})
        r = srv.post(zstd_stream(table), content_type=arrow)
        assert r.status_code == 200, r.text
        acked += n
        assert srv.peak_rss_mib() < 256
        assert srv.status()["observations_total"] == acked
        srv.stop(signal.SIGKILL)
        srv = Server(state, token_file=token, budget=budget).start()
        assert srv.status()["observations_total"] == acked  # restart clean, nothing lost
    finally:
        srv.stop()
