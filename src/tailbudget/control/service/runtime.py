"""The service's state machine: durable ingest, periodic evaluation, actions, snapshots.

Independent of HTTP so it can be embedded in an application and tested
directly. One lock guards the controller, the stage windows and the counters.
Batches reach them through a group commit (`tailbudget.control.groupcommit`):
concurrent batches share one fsync, and each is applied (under the lock) only
once durable, in sequence-number order. Compaction holds the group commit off
first and takes the lock second (the order a commit takes them in), so the
sequence numbers in the log and the snapshot always agree.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tailbudget.budget.policy import Policy
from tailbudget.control.actions import (
    Action,
    ActionsConfig,
    CommandAction,
    Dispatcher,
    ReplicasAction,
    ShedAction,
    WebhookAction,
    build_actions,
)
from tailbudget.control.backpressure import PriorityShedder, TokenBucket
from tailbudget.control.engine import Controller, Decision
from tailbudget.control.groupcommit import GroupCommit
from tailbudget.control.journal import Journal
from tailbudget.control.prometheus_source import PrometheusSource
from tailbudget.control.service import views
from tailbudget.control.service.ingest import BadBatch
from tailbudget.control.stage_windows import MAX_STAGES, StageWindows
from tailbudget.control.state import StateDir
from tailbudget.control.wal import Batch, StageColumn
from tailbudget.control.windows import WindowStats
from tailbudget.errors import PolicyError, TailbudgetError

__all__ = ["Runtime", "RuntimeConfig"]

log = logging.getLogger(__name__)

SNAPSHOT_VERSION = 3
"""2 added per-stage windows (`stages`) and log records with stage times (TBW2); 3 the
LLM series windows (in the controller state) and records with ttft/tpot/itl (TBW3).
An older tailbudget reading this state dir stops at its version check instead of
replaying a log it would cut short at the first record it does not know."""
_READABLE_VERSIONS = (1, 2, 3)  # older snapshots load with no stage / series windows
_LAST_DECISIONS = 50


@dataclass(frozen=True)
class RuntimeConfig:
    """Everything the runtime needs besides the policy."""

    state_dir: Path
    service: str = "service"
    actions: ActionsConfig = field(default_factory=ActionsConfig)
    prometheus: PrometheusSource | None = None
    compact_every_s: float = 60.0
    compact_wal_bytes: int = 64 * 1024 * 1024


class Runtime:
    """Controller + state dir + journal + actions, behind one lock."""

    def __init__(
        self,
        policy: Policy,
        config: RuntimeConfig,
        *,
        extra_actions: Sequence[Action] = (),
        shedder: PriorityShedder | None = None,
        limiter: TokenBucket | None = None,
    ) -> None:
        """Open the state dir and resume from it.

        An application embedding the runtime passes the backpressure gates its
        middleware uses (`shedder`, `limiter`), so shed_load acts on them, and
        any further executors in `extra_actions`.
        """
        self.policy = policy
        self.config = config
        self.state = StateDir(config.state_dir)
        self.journal = Journal(self.state.journal_path)
        actions, shed, _ = build_actions(config.actions, shedder=shedder, limiter=limiter)
        self.shed: ShedAction | None = shed
        self.replicas = ReplicasAction(
            minimum=policy.replicas.min, maximum=policy.replicas.max, step=policy.replicas.step
        )
        # In-process actions run inline (cheap, and the snapshot then reflects them);
        # webhooks and commands run on the action thread.
        remote = [a for a in actions if isinstance(a, WebhookAction | CommandAction)]
        local = [a for a in actions if a not in remote]
        self.dispatcher = Dispatcher(self.journal, [*local, self.replicas, *extra_actions])
        self.remote = Dispatcher(self.journal, remote)
        self.lock = threading.RLock()
        """Guards the controller, the windows and the counters (taken after the group commit)."""
        self._actions = concurrent.futures.ThreadPoolExecutor(1, "tailbudget-actions")
        self._pending: list[concurrent.futures.Future[Any]] = []
        self.seq = 0
        self.observations_total = 0
        self.errors_total = 0
        self.stage_observations: Counter[str] = Counter()
        self.decisions_total: Counter[tuple[str, str]] = Counter()
        self.last_decisions: deque[dict[str, Any]] = deque(maxlen=_LAST_DECISIONS)
        self.last_stats: WindowStats | None = None
        self.last_evaluated_s: float | None = None
        self.started_s = time.time()
        self.notes: list[str] = []
        self._last_compact = time.monotonic()
        try:
            self.controller = self._load_snapshot()
            self._replay()
        except BaseException:
            self._actions.shutdown(wait=False)
            self.state.close()
            self.journal.close()
            raise
        self.commits = GroupCommit(self.state.wal, self._apply, self.seq)
        if not self._resumed:
            # Mark the state dir with this snapshot version from the first start: an
            # older tailbudget then stops at its version check, rather than replaying a
            # log whose stage records (TBW2) it would take for the end of the log.
            self.compact()

    # --- start-up -------------------------------------------------------------

    def _load_snapshot(self) -> Controller:
        snap = self.state.load_snapshot()
        self._resumed = snap is not None
        if snap is not None and snap.get("version") not in _READABLE_VERSIONS:
            raise TailbudgetError(
                f"{self.state.root}: snapshot version {snap.get('version')!r} is not "
                f"{SNAPSHOT_VERSION}; use the tailbudget that wrote it, or another --state-dir"
            )
        if snap is not None:
            try:
                controller = Controller.from_state(self.policy, snap["controller"])
            except PolicyError as exc:
                # The budget's policy changed incompatibly (e.g. another window): keep
                # every count, start the rules afresh, and say so in the status.
                log.warning("controller state not resumed: %s", exc)
                self.notes.append("policy changed since the snapshot: rule state restarted")
                controller = Controller(self.policy)
            self.seq = int(snap["seq"])
            self.observations_total = int(snap["observations_total"])
            self.errors_total = int(snap["errors_total"])
            self.stage_observations.update(snap.get("stage_observations", {}))
            self._load_stage_windows(controller, snap.get("stages", {}))
            self.replicas.restore(int(snap.get("desired_replicas", 0)))
            shed = snap.get("shed")
            if self.shed is not None and isinstance(shed, dict):
                rate = shed.get("rate_per_s")
                self.shed.restore(float(shed.get("fraction", 0.0)), rate and float(rate))
        else:
            controller = Controller(self.policy)
        return controller

    @property
    def stage_windows(self) -> StageWindows:
        """The per-stage windows (the controller's: stage rules read them)."""
        return self.controller.stages

    def _load_stage_windows(self, controller: Controller, state: Any) -> None:
        try:
            controller.stages.load_state(dict(state))
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            # Stage windows are a report, not a rule input: start them afresh, say so.
            log.warning("stage windows not resumed: %s", exc)
            self.notes.append("stage windows in the snapshot were unreadable: restarted")
            controller.stages = StageWindows(self.policy.window_s, self.policy.sub_windows)

    def _replay(self) -> None:
        # The same `_apply` the live ingest runs, batch by batch in sequence order:
        # the state after a crash is the state before it.
        replayed = 0
        for batch in self.state.pending(self.seq):
            self._apply([batch])
            replayed += len(batch)
        for record in self.journal.records():
            if record.get("kind") == "decision":
                self.decisions_total[(str(record.get("action")), str(record.get("rule")))] += 1
                self.last_decisions.append(record)
        if replayed:
            log.info("replayed %d acknowledged observations from the write-ahead log", replayed)

    # --- ingest ----------------------------------------------------------------

    def ingest(
        self,
        ts: npt.NDArray[np.float64],
        total_ms: npt.NDArray[np.float64],
        error: npt.NDArray[np.bool_],
        stages: Mapping[str, StageColumn] | None = None,
        series: Mapping[str, StageColumn] | None = None,
    ) -> int:
        """Make a batch durable, then feed it to the windows; returns the count accepted.

        Blocks until the fsync covering the batch returned (shared with the batches
        that arrived meanwhile) and the batch is applied. Never call it holding
        `lock`: the leader of the group needs the lock to apply it.
        """
        if stages:
            self._check_stage_room(ts, stages)
        self.commits.commit(ts, total_ms, error, stages, series)
        return int(ts.shape[0])

    def _check_stage_room(
        self, ts: npt.NDArray[np.float64], stages: Mapping[str, StageColumn]
    ) -> None:
        # Checked before the write (an acknowledged batch is always applied); batches
        # in flight together may pass it at once, so the bound is MAX_STAGES plus a few.
        with self.lock:
            tracked = self.stage_windows.tracked_after(ts, stages)
        if tracked > MAX_STAGES:
            raise BadBatch(
                f"the batch would make {tracked} stages in the window; at most {MAX_STAGES} "
                "are tracked, so name stages by pipeline step, not per request"
            )

    def _apply(self, batches: Sequence[Batch]) -> None:
        """Feed durable batches to the windows and counters (live and on replay alike)."""
        with self.lock:
            for batch in batches:
                self.controller.observe_columns(
                    batch.ts, batch.total_ms, batch.error, batch.series, batch.stages
                )
                self.seq = batch.seq
                self.observations_total += len(batch)
                self.errors_total += int(batch.error.sum())
                for name, col in batch.stages.items():
                    self.stage_observations[name] += len(col)

    # --- evaluation --------------------------------------------------------------

    def evaluate(self, now_s: float | None = None) -> list[Decision]:
        """Evaluate the policy once; journal and execute the decisions; snapshot if any."""
        now = time.time() if now_s is None else now_s
        stats = series = None
        if self.config.prometheus is not None:
            stats, series = self.config.prometheus.read(now)
        with self.lock:
            decisions = list(self.controller.evaluate(now, stats, series))
            self.last_stats = stats
            self.last_evaluated_s = now
        for decision in decisions:
            # Journaled here, durably, before anything runs; webhooks and commands
            # run on the action thread so a slow one never delays the next evaluation.
            key = self.dispatcher.record(decision)
            with self.lock:
                self.decisions_total[(decision.action, decision.rule)] += 1
                self.last_decisions.append(self.journal_record(decision))
            self.dispatcher.execute(decision, key)
            if self.remote.actions and not decision.dry_run:
                self._pending = [f for f in self._pending if not f.done()]
                self._pending.append(self._actions.submit(self.remote.execute, decision, key))
        if decisions or self._compaction_due():
            self.compact()
        return decisions

    def wait_for_actions(self, timeout_s: float | None = None) -> None:
        """Block until the actions submitted so far have run (tests, shutdown)."""
        pending, self._pending = self._pending, []
        concurrent.futures.wait(pending, timeout=timeout_s)

    @staticmethod
    def journal_record(decision: Decision) -> dict[str, Any]:
        """The decision as the status shows it."""
        from tailbudget.control.journal import decision_record

        return {"kind": "decision", **decision_record(decision)}

    def _compaction_due(self) -> bool:
        return (
            time.monotonic() - self._last_compact >= self.config.compact_every_s
            or self.state.wal.size() >= self.config.compact_wal_bytes
        )

    # --- views (built in views.py, read under the lock) ------------------------------

    def verdict(self, now_s: float | None = None) -> dict[str, Any]:
        """healthy | rollback | unknown, for Argo Rollouts (jsonPath `{$.verdict}`) or Flagger."""
        return views.verdict(self, time.time() if now_s is None else now_s)

    def status(self, now_s: float | None = None) -> dict[str, Any]:
        """The JSON of `GET /v1/status`."""
        return views.status(self, time.time() if now_s is None else now_s)

    def metrics_view(self) -> dict[str, Any]:
        """The figures `/metrics` exports, read under the lock."""
        return views.metrics_view(self, time.time())

    # --- baseline, snapshots ------------------------------------------------------

    def set_baseline(self, p99_ms: float) -> None:
        """Set the baseline p99 (enables the p99-vs-baseline rollback rule); durable at once."""
        with self.lock:
            self.controller.set_baseline(p99_ms)
        self.compact()

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to restart exactly here (caller holds the lock)."""
        return {
            "version": SNAPSHOT_VERSION,
            "seq": self.seq,
            "written_at": time.time(),
            "observations_total": self.observations_total,
            "errors_total": self.errors_total,
            "stage_observations": dict(self.stage_observations),
            "desired_replicas": self.replicas.desired,
            "shed": None
            if self.shed is None
            else {"fraction": self.shed.current_fraction, "rate_per_s": self.shed.current_rate},
            "controller": self.controller.to_state(),
            "stages": self.stage_windows.to_state(),
        }

    def compact(self) -> None:
        """Write a snapshot and empty the write-ahead log."""
        # Group commit first, lock second, as a commit takes them: no batch is then
        # written but not yet applied, which the truncation would lose.
        with self.commits.exclusive(), self.lock:
            self._compact()

    def _compact(self) -> None:
        self.state.compact(self.snapshot())
        self._last_compact = time.monotonic()

    def close(self) -> None:
        """Run the queued actions, final snapshot (graceful SIGTERM), close the files."""
        self.wait_for_actions(timeout_s=30.0)
        self._actions.shutdown(wait=False, cancel_futures=True)
        with self.commits.exclusive(), self.lock:
            self._compact()
            self.state.close()
            self.journal.close()
