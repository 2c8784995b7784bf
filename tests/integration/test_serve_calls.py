"""serve judges a caller on its own time (a budget's `calls:`), as init --from and plan
do: a client reports the caller's time with its calls inside (issue 36)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.integration.test_serve import TOKEN, Server

pytestmark = pytest.mark.integration

BUDGET = """\
service: shop
slo: {p95: 800}
pipeline:
  - stage: gateway
    budget: {p95: 60}
    calls:
      - stage: auth
        budget: {p95: 100}
      - parallel:
          - stage: catalog
            budget: {p95: 200}
          - stage: cart
            budget: {p95: 150}
  - stage: render
    budget: {p95: 100}
policy:
  window: 30s
  evaluate_every: 1s
  min_samples: 5
"""


def _obs(n: int) -> list[dict[str, object]]:
    # gateway's own time 40 ms; its reported time holds auth 80 and the slower of
    # catalog 150 and cart 100: 270 ms, 4.5x its 60 ms slice if judged whole
    now = time.time()
    return [
        {"ts": now, "total_ms": 330.0 + i % 3,
         "stages": {"gateway": 270.0 + i % 3, "auth": 80.0, "catalog": 150.0, "cart": 100.0,
                    "render": 60.0}}
        for i in range(n)
    ]  # fmt: skip


def test_a_caller_is_judged_on_its_own_time_across_kill_9(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(TOKEN + "\n")
    budget = tmp_path / "budget.yaml"
    budget.write_text(BUDGET)
    state = tmp_path / "state"
    srv = Server(state, token_file=tmp_path / "token", budget=budget).start()
    try:
        assert srv.post(_obs(60)).json() == {"accepted": 60}
        gateway = srv.status()["stages"]["gateway"]
        assert 40.0 <= gateway["p95"] <= 43.0, gateway  # its own time, not 270
        assert gateway["budget"] == {"p95": 60.0} and gateway["burn"]["p95"] < 1.0
        # the calls and the other stages are as reported
        stages = srv.status()["stages"]
        assert stages["auth"]["p95"] == pytest.approx(80.0)
        assert stages["catalog"]["p95"] == pytest.approx(150.0)
        srv.stop(signal.SIGKILL)
        again = Server(state, token_file=tmp_path / "token", budget=budget).start()
        try:
            after = again.status()["stages"]["gateway"]
            assert after["p95"] == pytest.approx(gateway["p95"]), after
        finally:
            again.stop()
    finally:
        srv.stop()
