"""Action executors: webhook (real uvicorn receiver), command (argv), logging, shed, replicas."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tailbudget.control.backpressure import PriorityShedder, TokenBucket
from tailbudget.control.engine import Decision
from tailbudget.errors import PolicyError
from tailbudget.serve.actions import (
    CommandAction,
    Dispatcher,
    LoggingLevelAction,
    ReplicasAction,
    ShedAction,
    WebhookAction,
    load_actions_config,
)
from tailbudget.serve.journal import DecisionLike, Journal, decision_key
from tests._net import free_port, serve_in_thread


def _decision(action: str = "rollback", t_s: float = 1000.0, dry_run: bool = False) -> Decision:
    return Decision(
        t_s=t_s,
        action=action,
        metric="error_rate",
        value=0.05,
        threshold=0.01,
        rule="rollback_error_rate",
        reason="error rate upper bound 5% > 1%",
        dry_run=dry_run,
    )


class Receiver:
    """A real HTTP receiver: fails the first `fail_first` posts of each key with 503."""

    def __init__(self, fail_first: int = 0, status: int = 503) -> None:
        self.fail_first = fail_first
        self.status = status
        self.posts: list[tuple[str, dict[str, object]]] = []

    async def hook(self, request: Request) -> JSONResponse:
        key = request.headers.get("idempotency-key", "")
        self.posts.append((key, json.loads(await request.body())))
        if sum(1 for k, _ in self.posts if k == key) <= self.fail_first:
            return JSONResponse({"error": "try later"}, status_code=self.status)
        return JSONResponse({"ok": True})


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    rec = Receiver()
    port = free_port()
    app = Starlette(routes=[Route("/hook", rec.hook, methods=["POST"])])
    with serve_in_thread(app, port, "receiver"):
        yield rec, f"http://127.0.0.1:{port}/hook"


def test_webhook_retries_with_backoff_and_a_stable_idempotency_key(receiver):
    rec, url = receiver
    rec.fail_first = 2
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        time.sleep(seconds)

    hook = WebhookAction(url, retries=3, backoff_s=0.01, sleep=sleep)
    decision = _decision()
    detail = hook.execute(decision, decision_key(decision))
    assert "after 3 attempt" in detail
    keys = [k for k, _ in rec.posts]
    assert len(keys) == 3 and len(set(keys)) == 1 and keys[0] == decision_key(decision)
    assert sleeps == [0.01, 0.02]  # exponential backoff
    body = rec.posts[-1][1]
    assert body["action"] == "rollback" and body["value"] == 0.05 and body["threshold"] == 0.01


def test_webhook_gives_up_after_retries_and_does_not_retry_a_4xx(receiver):
    rec, url = receiver
    rec.fail_first = 10
    hook = WebhookAction(url, retries=2, backoff_s=0.0)
    with pytest.raises(RuntimeError, match="HTTP 503"):
        hook.execute(_decision(), "k1")
    assert len(rec.posts) == 3
    rec.status = 400
    with pytest.raises(RuntimeError, match="HTTP 400"):
        hook.execute(_decision(t_s=5.0), "k2")
    assert sum(1 for k, _ in rec.posts if k == "k2") == 1


def test_webhook_unreachable_is_a_failed_outcome_in_the_journal(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens
    journal = Journal(tmp_path / "journal.jsonl")
    outcomes = Dispatcher(journal, [WebhookAction(url, retries=1, backoff_s=0.0)]).dispatch(
        _decision()
    )
    assert len(outcomes) == 1 and not outcomes[0].ok
    kinds = [(r["kind"], r.get("ok")) for r in journal.records()]
    assert kinds == [("decision", None), ("outcome", False)]


def test_dispatcher_journals_before_executing_and_skips_dry_run(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl")
    seen_records: list[int] = []

    class Probe:
        name = "probe"

        def handles(self, action: str) -> bool:
            return True

        def execute(self, decision: DecisionLike, key: str) -> str:
            seen_records.append(len(list(journal.records())))
            return "ran"

    dispatcher = Dispatcher(journal, [Probe()])
    dispatcher.dispatch(_decision())
    assert seen_records == [1]  # the decision was on disk when the action ran
    dispatcher.dispatch(_decision(dry_run=True, t_s=2000.0))
    assert seen_records == [1]  # dry run: journaled, not executed
    records = list(journal.records())
    assert records[-2]["kind"] == "decision" and records[-2]["dry_run"] is True
    assert "dry run" in records[-1]["detail"]


def test_command_runs_an_argv_list_without_a_shell(tmp_path):
    out = tmp_path / "out.json"
    script = (
        "import json, os, sys; d = json.load(sys.stdin); "
        "json.dump({'argv': sys.argv[1:], 'stdin': d, 'env': os.environ['TAILBUDGET_ACTION']}, "
        f"open({str(out)!r}, 'w'))"
    )
    cmd = CommandAction([sys.executable, "-c", script, "{action}", "$(touch pwned); {rule}"])
    decision = _decision()
    assert "exited 0" in cmd.execute(decision, decision_key(decision))
    got = json.loads(out.read_text())
    assert got["argv"] == ["rollback", "$(touch pwned); rollback_error_rate"]
    assert got["stdin"]["id"] == decision_key(decision) and got["env"] == "rollback"
    assert not (tmp_path / "pwned").exists()


def test_command_failure_and_timeout_are_errors():
    with pytest.raises(RuntimeError, match="exited 3"):
        CommandAction([sys.executable, "-c", "raise SystemExit(3)"]).execute(_decision(), "k")
    slow = CommandAction([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.5)
    with pytest.raises(RuntimeError, match="timed out"):
        slow.execute(_decision(), "k")
    with pytest.raises(PolicyError, match="list of strings"):
        CommandAction("rm -rf /")


def test_logging_trim_and_restore_exactly():
    names = ("tb.test.a", "tb.test.b")
    logging.getLogger(names[0]).setLevel(logging.DEBUG)
    logging.getLogger(names[1]).setLevel(logging.ERROR)  # already stricter: left alone
    action = LoggingLevelAction(names, "WARNING")
    action.execute(_decision("trim_logging"), "k")
    assert logging.getLogger(names[0]).level == logging.WARNING
    assert logging.getLogger(names[1]).level == logging.ERROR
    action.execute(_decision("trim_logging", t_s=2.0), "k")  # idempotent
    assert action.trimmed
    action.execute(_decision("restore_logging"), "k")
    assert logging.getLogger(names[0]).level == logging.DEBUG
    assert logging.getLogger(names[1]).level == logging.ERROR
    assert not action.trimmed
    with pytest.raises(PolicyError, match="logging level"):
        LoggingLevelAction(trim_level="LOUD")


def test_shed_drives_the_real_backpressure_gates():
    shedder = PriorityShedder()
    limiter = TokenBucket(500.0, burst=100.0)
    shed = ShedAction(fraction=0.3, rate_per_s=50.0, shedder=shedder, limiter=limiter)
    shed.execute(_decision("shed_load"), "k")
    assert (shed.current_fraction, shed.current_rate) == (0.3, 50.0)
    assert shedder.fraction == 0.3 and limiter.rate_per_s == 50.0
    refused = sum(not shedder.try_acquire(priority=0).allowed for _ in range(1000))
    assert 200 <= refused <= 400  # about 30% of one priority class shed
    shed.execute(_decision("stop_shedding"), "k")
    assert shedder.fraction == 0.0 and (limiter.rate_per_s, limiter.burst) == (500.0, 100.0)
    assert all(shedder.try_acquire().allowed for _ in range(100))
    with pytest.raises(PolicyError):
        ShedAction(fraction=1.5)


def test_replicas_step_within_bounds():
    replicas = ReplicasAction(minimum=2, maximum=5, step=2)
    assert replicas.desired == 2
    details = [replicas.execute(_decision("scale_up"), "k") for _ in range(3)]
    assert replicas.desired == 5 and "held at max 5" in details[-1]
    for _ in range(4):
        replicas.execute(_decision("scale_down"), "k")
    assert replicas.desired == 2
    with pytest.raises(PolicyError):
        ReplicasAction(minimum=4, maximum=3)


def test_actions_file_is_validated(tmp_path):
    good = tmp_path / "actions.yaml"
    good.write_text("webhooks:\n  - url: http://127.0.0.1:1/x\n    actions: [rollback]\n")
    assert load_actions_config(good).webhooks[0].actions == ["rollback"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("commands:\n  - argv: []\n")
    with pytest.raises(PolicyError, match=r"commands\.0\.argv"):
        load_actions_config(bad)
