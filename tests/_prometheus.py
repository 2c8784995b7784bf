"""A real Prometheus server on loopback for the integration tests (Debian package `prometheus`)."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests._net import free_port

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def require(*tools: str) -> None:
    """Skip the test, naming the package, when a Prometheus binary is missing."""
    for tool in tools or (PROMETHEUS,):
        if not Path(tool).exists():
            pytest.skip(f"{tool} is missing (Debian package `prometheus`)")


@contextmanager
def running_prometheus(folder: Path, config: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """Prometheus with `config` (YAML text), ready to answer; (its process, its URL).

    Its log goes to folder/prometheus.log, quoted when it exits before it is ready.
    """
    require()
    (folder / "prometheus.yml").write_text(config)
    port = free_port()
    log = folder / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=error",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _ready(proc, url, log)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


def _ready(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"prometheus exited: {log.read_text(errors='replace')[-500:]}")
        try:
            if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    pytest.fail("prometheus did not become ready in 60 s")
