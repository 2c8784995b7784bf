"""Actions that leave the process: a webhook POST and a command run without a shell."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from tailbudget.errors import PolicyError
from tailbudget.serve.journal import DecisionLike, decision_record

__all__ = ["CommandAction", "WebhookAction"]

_RETRYABLE = frozenset({408, 425, 429, 500, 502, 503, 504})


def _filter(actions: Iterable[str] | None) -> frozenset[str] | None:
    return None if actions is None else frozenset(actions)


class WebhookAction:
    """POST each decision as JSON; retry with exponential backoff; send an idempotency key.

    The `Idempotency-Key` header is derived from the decision (rule, action,
    time), so every retry, and a re-send after a restart, carries the same
    key and the receiver can drop duplicates. Retries on connection errors,
    timeouts, 408/425/429 and 5xx; a 4xx otherwise is final.
    """

    def __init__(
        self,
        url: str,
        *,
        retries: int = 3,
        backoff_s: float = 0.5,
        timeout_s: float = 5.0,
        headers: Mapping[str, str] | None = None,
        actions: Iterable[str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise PolicyError(f"webhook url must start with http:// or https://, got {url!r}")
        if retries < 0:
            raise PolicyError(f"webhook retries must be >= 0, got {retries}")
        if backoff_s < 0 or timeout_s <= 0:
            raise PolicyError(
                f"webhook backoff_s must be >= 0 and timeout_s > 0, got {backoff_s}, {timeout_s}"
            )
        self.name = f"webhook {url}"
        self.url = url
        self.retries = retries
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self.headers = dict(headers or {})
        self._actions = _filter(actions)
        self._sleep = sleep

    def handles(self, action: str) -> bool:
        """All actions, or the listed ones."""
        return self._actions is None or action in self._actions

    def execute(self, decision: DecisionLike, key: str) -> str:
        """POST; return the final status, raise after the last failed attempt."""
        # A start-up guard: httpx loads on first use, not with this module.
        import httpx

        body = decision_record(decision)
        headers = {**self.headers, "Idempotency-Key": key, "Content-Type": "application/json"}
        last = ""
        with httpx.Client(timeout=self.timeout_s) as client:
            for attempt in range(self.retries + 1):
                if attempt:
                    self._sleep(self.backoff_s * 2 ** (attempt - 1))
                try:
                    response = client.post(self.url, content=json.dumps(body), headers=headers)
                except httpx.HTTPError as exc:
                    last = f"{type(exc).__name__}: {exc}"
                    continue
                if response.is_success:
                    return f"HTTP {response.status_code} after {attempt + 1} attempt(s)"
                last = f"HTTP {response.status_code}"
                if response.status_code not in _RETRYABLE:
                    break
        raise RuntimeError(f"webhook {self.url} failed: {last}")


_PLACEHOLDERS = ("action", "rule", "metric", "value", "threshold", "id", "reason")


class CommandAction:
    """Run a command (an argv list, never a shell) for each decision, with a timeout.

    Arguments may hold the placeholders {action} {rule} {metric} {value}
    {threshold} {id} {reason}, replaced as whole values (no shell parsing, so
    no injection). The decision also arrives as JSON on stdin and in
    TAILBUDGET_* environment variables.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float = 30.0,
        actions: Iterable[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if isinstance(argv, str) or not argv or not all(isinstance(a, str) for a in argv):
            raise PolicyError(
                f"command must be a non-empty list of strings (argv, no shell), got {argv!r}"
            )
        if timeout_s <= 0:
            raise PolicyError(f"command timeout_s must be > 0, got {timeout_s}")
        self.name = f"command {argv[0]}"
        self.argv = list(argv)
        self.timeout_s = timeout_s
        self.env = dict(env or {})
        self._actions = _filter(actions)

    def handles(self, action: str) -> bool:
        """All actions, or the listed ones."""
        return self._actions is None or action in self._actions

    def execute(self, decision: DecisionLike, key: str) -> str:
        """Run the command; raise on a non-zero exit or a timeout."""
        record = decision_record(decision)
        values = {
            name: "" if record.get(name) is None else str(record[name]) for name in _PLACEHOLDERS
        }
        values["id"] = key
        argv = [self._fill(arg, values) for arg in self.argv]
        env = {
            **os.environ,
            **self.env,
            **{f"TAILBUDGET_{name.upper()}": value for name, value in values.items()},
            "TAILBUDGET_DRY_RUN": "1" if decision.dry_run else "0",
        }
        try:
            done = subprocess.run(  # argv list, shell=False by design
                argv,
                input=json.dumps(record).encode(),
                capture_output=True,
                timeout=self.timeout_s,
                env=env,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{argv[0]} timed out after {self.timeout_s:g} s") from None
        except OSError as exc:
            raise RuntimeError(f"{argv[0]}: cannot run ({exc.strerror})") from None
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} exited {done.returncode}: {tail[0]}")
        return f"{argv[0]} exited 0"

    @staticmethod
    def _fill(arg: str, values: Mapping[str, str]) -> str:
        for name, value in values.items():
            arg = arg.replace("{" + name + "}", value)
        return arg
