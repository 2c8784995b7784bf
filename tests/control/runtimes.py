"""A small Runtime for the service tests, and a crash that skips the final snapshot."""

from __future__ import annotations

from tailbudget.budget.policy import Policy, parse_policy
from tailbudget.serve.actions import ActionsConfig
from tailbudget.serve.runtime import Runtime, RuntimeConfig


def policy(window: str = "10s", dry_run: bool = False) -> Policy:
    """One p95 scale-up rule over `window`, evaluated every second, 5 samples to know."""
    return parse_policy(
        {
            "window": window,
            "evaluate_every": "1s",
            "min_samples": 5,
            "dry_run": dry_run,
            "replicas": {"min": 1, "max": 3, "step": 1},
            "rules": [{"name": "scale", "metric": "p95", "threshold": 500, "action": "scale_up"}],
        }
    )


def runtime(tmp_path, window: str = "10s", dry_run: bool = False) -> Runtime:
    """A runtime whose state lives in `tmp_path / "state"` (reopen it with the same path)."""
    config = RuntimeConfig(state_dir=tmp_path / "state", actions=ActionsConfig(log=False))
    return Runtime(policy(window, dry_run), config)


def crash(rt: Runtime) -> None:
    """Drop the runtime like kill -9 would: no final snapshot, files just closed."""
    rt.state.close()
    rt.journal.close()
