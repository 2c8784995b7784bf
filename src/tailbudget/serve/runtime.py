"""The service's state machine: durable ingest, periodic evaluation, actions, snapshots.

Independent of HTTP so it can be embedded in an application and tested
directly. One lock guards the controller, the stage windows and the counters.
Batches reach them through a group commit (`tailbudget.serve.groupcommit`):
concurrent batches share one fsync, and each is applied (under the lock) only
once durable, in sequence-number order. Compaction holds the group commit off
first and takes the lock second (the order a commit takes them in), so the
sequence numbers in the log and the snapshot always agree.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tailbudget.budget.objectives import Objectives
from tailbudget.budget.policy import Policy
from tailbudget.control.backpressure import PriorityShedder, TokenBucket
from tailbudget.control.class_shedding import (
    SERVICE,
    ClassPolicy,
    ShedOrder,
    class_rows,
    shed_order,
    shed_rules_only,
    tagged,
)
from tailbudget.control.engine import Controller, Decision
from tailbudget.control.stage_windows import MAX_STAGES, StageWindows
from tailbudget.control.windows import UNKNOWN, WindowStats, unusable
from tailbudget.errors import PolicyError, TailbudgetError
from tailbudget.serve import views
from tailbudget.serve.actions import (
    Action,
    ActionsConfig,
    CommandAction,
    Dispatcher,
    ReplicasAction,
    ShedAction,
    WebhookAction,
    build_actions,
)
from tailbudget.serve.batch import BadBatch, Batch
from tailbudget.serve.classes import PREFIX as CLASS_PREFIX
from tailbudget.serve.classes import class_columns, split_classes
from tailbudget.serve.groupcommit import GroupCommit
from tailbudget.serve.heartbeat import Heartbeat
from tailbudget.serve.journal import Journal, decision_record
from tailbudget.serve.prometheus_source import PrometheusSource
from tailbudget.serve.snapshot import SNAPSHOT_VERSION, check_snapshot
from tailbudget.serve.state import StateDir
from tailbudget.serve.view_records import StatusView, VerdictView
from tailbudget.serve.wal import Batch as LoggedBatch
from tailbudget.serve.wal import StageColumn, Unwritable

if TYPE_CHECKING:
    from tailbudget.sim.live import LiveModel

__all__ = ["SNAPSHOT_VERSION", "Runtime", "RuntimeConfig"]

# Named as before serve/ left control/: a logging config may filter on it.
log = logging.getLogger("tailbudget.control.service.runtime")

_READABLE_VERSIONS = (1, 2, 3, 4, 5)  # older snapshots load with no stage / series windows
_LAST_DECISIONS = 50
_STAGE_NAMES = 2 * MAX_STAGES
"""All-time stage counters kept; past it, names no longer in any window are forgotten, so
the set is bounded over time as the windows are (a client naming stages per request
cannot grow it without end)."""
_RESTORE_ERRORS = (TypeError, ValueError, KeyError, AttributeError, OverflowError)


@dataclass(frozen=True)
class RuntimeConfig:
    """Everything the runtime needs besides the policy."""

    state_dir: Path
    service: str = "service"
    actions: ActionsConfig = field(default_factory=ActionsConfig)
    prometheus: PrometheusSource | None = None
    compact_every_s: float = 60.0
    compact_wal_bytes: int = 64 * 1024 * 1024
    classes: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()
    """The budget's classes, each with its gated e2e objectives ((percentile, ms), ...):
    observations' class labels are tracked for these, others fold into `other`."""
    class_policies: tuple[ClassPolicy, ...] = ()
    """Each listed class's policy (its objectives' rules): its shed_load rules run on the
    class's observations, and every shed_load sheds the lowest-priority class first."""
    class_series_objectives: tuple[tuple[str, tuple[tuple[str, str, float], ...]], ...] = ()
    """Per class, its gated TTFT/TPOT/ITL and stage objectives ((metric, percentile, ms),
    ...): /v1/status judges them on the class rules' windows of those series."""
    class_prometheus: tuple[tuple[str, PrometheusSource], ...] = ()
    """With `prometheus`: per class, the source reading its series (its class label), which
    the class's rules judge instead of the posted observations."""
    objectives: Objectives | None = None
    """The budget's objectives: /v1/status judges the gated ones on the windows."""
    slices: tuple[tuple[str, str, float], ...] = ()
    """The budget's stage slices (stage, percentile, ms): each stage's burn in status."""
    calls: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = ()
    """The budget's callers and their calls (`calls:`): an observed caller's stage time
    is judged as its own time, its calls' taken out (serve/own_time.py)."""


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
        model: LiveModel | None = None,
    ) -> None:
        """Open the state dir and resume from it.

        An application embedding the runtime passes the backpressure gates its
        middleware uses (`shedder`, `limiter`), so shed_load acts on them, and
        any further executors in `extra_actions`.
        """
        self.policy = policy
        self.config = config
        self.model = model
        """The model policy (serve --model / --fit): it sizes replicas; the rules guard drift."""
        self.state = StateDir(config.state_dir)
        self.journal = Journal(self.state.journal_path)
        self._wire_actions(policy, config, shedder, limiter, extra_actions)
        self.lock = threading.RLock()
        """Guards the controller, the windows and the counters (taken after the group commit)."""
        self._actions = concurrent.futures.ThreadPoolExecutor(1, "tailbudget-actions")
        self._pending: list[concurrent.futures.Future[Any]] = []
        self.seq = 0
        self.observations_total = 0
        self.errors_total = 0
        self.stage_observations: Counter[str] = Counter()
        self._init_classes(policy)
        self.decisions_total: Counter[tuple[str, str]] = Counter()
        self.last_decisions: deque[dict[str, Any]] = deque(maxlen=_LAST_DECISIONS)
        self.last_stats: WindowStats | None = None
        self.last_evaluated_s: float | None = None
        self.started_s = time.time()
        self.heartbeat = Heartbeat(policy.evaluate_every_s, self.started_s)
        self.notes: list[str] = []
        self.snapshot_error: str | None = None
        """Why the last snapshot could not be written (None once one is written)."""
        self.snapshot_written_s: float | None = None
        self._last_compact = time.monotonic()
        try:
            self.controller = self._load_snapshot()
            damaged = self._replay()
            self.commits = GroupCommit(self.state.wal, self._apply, self.seq)
            if not self._resumed or damaged or self._older:
                # A first start marks the state dir with this snapshot version (an older
                # tailbudget then stops at its version check rather than misreading the
                # log), and so does the first start on a dir an older one wrote (the log
                # is about to get records it cannot read); after damage, a snapshot means
                # it is reported once, not per start.
                self._first_compact()
        except BaseException:
            self._actions.shutdown(wait=False)
            self.state.close()
            self.journal.close()
            raise

    # --- start-up -------------------------------------------------------------

    def _wire_actions(
        self,
        policy: Policy,
        config: RuntimeConfig,
        shedder: PriorityShedder | None,
        limiter: TokenBucket | None,
        extra_actions: Sequence[Action],
    ) -> None:
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

    def _load_snapshot(self) -> Controller:
        snap = self.state.load_snapshot()
        for message in self.state.snapshot_notes:
            log.error("%s", message)
            self.notes.append(message)
        self._resumed = snap is not None
        self._older = snap is not None and snap.get("version") != SNAPSHOT_VERSION
        if snap is None:
            return Controller(self.policy)
        path = self.state.root / self.state.SNAPSHOT
        if snap.get("version") not in _READABLE_VERSIONS:
            raise TailbudgetError(
                f"{path}: snapshot version {snap.get('version')!r} is not "
                f"{SNAPSHOT_VERSION}; use the tailbudget that wrote it, or another state_dir",
                param="state_dir",
            )
        check_snapshot(path, snap)
        try:
            return self._restore(snap)
        except _RESTORE_ERRORS as exc:
            raise TailbudgetError(
                f"{path}: the state snapshot is malformed ({type(exc).__name__}: {exc}); "
                "move it away (and the log beside it) to start fresh"
            ) from None

    def _restore(self, snap: dict[str, Any]) -> Controller:
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
        self._load_classes(snap.get("classes"))
        self.replicas.restore(int(snap.get("desired_replicas", 0)))
        shed = snap.get("shed")
        if self.shed is not None and isinstance(shed, dict):
            rate = shed.get("rate_per_s")
            fraction = float(shed.get("fraction", 0.0))
            self.shed.restore(fraction, rate and float(rate), tuple(self.shed_order.shed))
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

    def _init_classes(self, policy: Policy) -> None:
        self.class_observations: Counter[str] = Counter()
        self.class_windows = StageWindows(policy.window_s, policy.sub_windows)
        """One rolling window per class (end-to-end ms of the class's observations)."""
        policies = self.config.class_policies
        self.class_controllers = {c.name: Controller(shed_rules_only(c.policy)) for c in policies}
        """Per listed class, the Controller replay runs, with the class's shed_load rules."""
        self.shed_order = ShedOrder(shed_order(policies))
        """Which class each controller's shed_load holds (replay's rule, live)."""

    @property
    def class_names(self) -> tuple[str, ...]:
        """The budget's class names (labels outside them fold into `other`)."""
        return tuple(name for name, _ in self.config.classes)

    def _load_classes(self, state: Any) -> None:
        if not isinstance(state, dict):
            return
        try:
            self.class_windows.load_state(dict(state.get("windows", {})))
            self.class_observations.update(
                {str(k): int(v) for k, v in dict(state.get("observations", {})).items()}
            )
        except _RESTORE_ERRORS as exc:
            log.warning("class windows not resumed: %s", exc)
            self.notes.append("class windows in the snapshot were unreadable: restarted")
            self.class_windows = StageWindows(self.policy.window_s, self.policy.sub_windows)
        self._load_class_rules(state)

    def _load_class_rules(self, state: dict[str, Any]) -> None:
        """The class controllers and the shed toggles, as the snapshot left them."""
        try:
            saved = dict(state.get("controllers", {}))
            for name, c in list(self.class_controllers.items()):
                if name in saved:
                    self.class_controllers[name] = Controller.from_state(c.policy, saved[name])
            self.shed_order.load_state(dict(state.get("shed", {})))
        except (PolicyError, *_RESTORE_ERRORS) as exc:
            log.warning("class rules not resumed: %s", exc)
            self.notes.append(f"class rules in the snapshot were not resumed ({exc}): restarted")
            self._init_class_rules()

    def _init_class_rules(self) -> None:
        for name, c in self.class_controllers.items():
            self.class_controllers[name] = Controller(c.policy)
        self.shed_order = ShedOrder(self.shed_order.order)

    def _replay(self) -> bool:
        """Apply the log's batches newer than the snapshot; True when damage was skipped."""
        # The same `_apply` the live ingest runs, batch by batch in sequence order:
        # the state after a crash is the state before it.
        found = self.state.read_log()
        replayed = 0
        for batch in found.batches:
            if batch.seq > self.seq:
                self._apply([batch])
                replayed += len(batch)
        for damage in found.corruption:
            message = damage.describe(self.state.wal.path)
            log.error("%s", message)
            self.notes.append(message)
        if found.torn_bytes:
            # A record cut short by a crash was never acknowledged; cut it off now, or
            # new records would follow it and be lost behind it at the next start.
            log.warning(
                "cut a torn record (%d bytes, never acknowledged) off the end of %s",
                found.torn_bytes,
                self.state.wal.path.name,
            )
            self.state.wal.cut(found.intact_end)
        for record in self.journal.records():
            if record.get("kind") == "decision":
                self.decisions_total[(str(record.get("action")), str(record.get("rule")))] += 1
                self.last_decisions.append(record)
        if self.journal.skipped_nonfinite:
            message = (
                f"{self.journal.path}: skipped {self.journal.skipped_nonfinite} record(s) "
                "holding NaN or Infinity (not JSON); the rest of the journal is read"
            )
            log.error("%s", message)
            self.notes.append(message)
        if replayed:
            log.info("replayed %d acknowledged observations from the write-ahead log", replayed)
        return bool(found.corruption)

    def _first_compact(self) -> None:
        try:
            self.compact()
        except OSError as exc:
            if self._resumed:  # the log still holds everything: run on, and say so
                log.error("cannot write a snapshot after replay: %s", exc)
                return
            raise TailbudgetError(
                f"{self.state.root}: cannot write the first snapshot ({exc.strerror or exc}); "
                "free some space or give another state_dir",
                param="state_dir",
            ) from None

    # --- ingest ----------------------------------------------------------------

    def ingest(self, batch: Batch) -> int:
        """Make a batch durable, then feed it to the windows; returns the count accepted.

        Each observation's class (`batch.labels`) becomes a class column, bounded by the
        budget's class list, before the batch is logged. Blocks until the fsync covering
        the batch returned (shared with the batches that arrived meanwhile) and the batch
        is applied. Never call it holding `lock`: the leader of the group needs the lock
        to apply it.
        """
        plain = {k: v for k, v in batch.stages.items() if not k.startswith(CLASS_PREFIX)}
        if plain:
            self._check_stage_room(batch.ts, plain)
        classes = class_columns(batch.labels, batch.total_ms, self.class_names)
        try:
            self.commits.commit(replace(batch, stages=batch.stages | classes, labels=None))
        except Unwritable as exc:
            raise BadBatch(f"the batch cannot be logged: {exc}") from None
        return len(batch)

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

    def _apply(self, batches: Sequence[LoggedBatch]) -> None:
        """Feed durable batches to the windows and counters (live and on replay alike)."""
        with self.lock:
            for batch in batches:
                stages, classes = split_classes(batch.stages)
                self.controller.observe_columns(
                    batch.ts, batch.total_ms, batch.error, batch.series, stages
                )
                if classes:
                    self.class_windows.observe(batch.ts, classes)
                    for name, col in classes.items():
                        self.class_observations[name] += len(col)
                    self._observe_classes(batch, stages, classes)
                if self.model is not None:
                    ttft = batch.series.get("ttft")
                    dense = ttft is not None and ttft.dense and len(ttft) == len(batch)
                    self.model.observe(
                        batch.ts, batch.total_ms, batch.error, ttft.ms if dense and ttft else None
                    )
                self.seq = batch.seq
                self.observations_total += len(batch)
                self.errors_total += int(batch.error.sum())
                for name, col in stages.items():
                    self.stage_observations[name] += len(col)
            if len(self.stage_observations) > _STAGE_NAMES:
                for name in [n for n in self.stage_observations if n not in self.stage_windows]:
                    del self.stage_observations[name]

    def _observe_classes(
        self,
        batch: LoggedBatch,
        stages: Mapping[str, StageColumn],
        classes: Mapping[str, StageColumn],
    ) -> None:
        """Each listed class's rows, with their series and stages, to its controller."""
        for name, col in classes.items():
            controller = self.class_controllers.get(name)
            if controller is None or not len(col):
                continue
            rows = col.index
            controller.observe_columns(
                batch.ts[rows],
                col.ms,
                batch.error[rows],
                class_rows(batch.series, rows),
                class_rows(stages, rows),
            )

    def _class_reads(self, now: float) -> dict[str, tuple[WindowStats, dict[str, WindowStats]]]:
        """Each class's window from its Prometheus source (outside the lock; a failed or
        unusable read is an unknown window: the class's rules do not act on it)."""
        found = self.config.class_prometheus
        if not found:
            return {}
        # At once: each read has the evaluation's deadline, not one after another.
        with concurrent.futures.ThreadPoolExecutor(len(found), "tailbudget-class-read") as pool:
            reads = list(pool.map(lambda named: named[1].read(now), found))
        return {
            name: (UNKNOWN, {}) if unusable(*read) is not None else read
            for (name, _), read in zip(found, reads, strict=True)
        }

    def _class_decisions(
        self,
        now: float,
        service: list[Decision],
        reads: Mapping[str, tuple[WindowStats, dict[str, WindowStats]]],
    ) -> list[Decision]:
        """The service's decisions and each class's, every shed_load given the class it
        sheds (the highest priority number not yet shed). Caller holds the lock."""
        if not self.class_controllers:
            return service
        out: list[Decision] = [tagged(d, SERVICE, self.shed_order) for d in service]
        for name, controller in self.class_controllers.items():
            made = controller.evaluate(now, *reads[name]) if name in reads else None
            made = controller.evaluate(now) if made is None else made
            out += [tagged(d, name, self.shed_order) for d in made]
        return out

    # --- evaluation --------------------------------------------------------------

    def evaluate(self, now_s: float | None = None) -> list[Decision]:
        """Evaluate the policy once; journal and execute the decisions; snapshot if any.

        Never raises: a failure (an exception anywhere in it, an upstream that did not
        answer or answered nonsense) is counted by kind and makes the verdict unknown
        with the reason until an evaluation succeeds."""
        now = time.time() if now_s is None else now_s
        try:
            decisions, failure = self._evaluate(now)
        except Exception as exc:
            log.exception("policy evaluation failed")
            failure = ("internal", f"{type(exc).__name__}: {exc}")
            decisions = []
        with self.lock:
            if failure is None:
                self.heartbeat.good(now)
            else:
                self.heartbeat.failed(*failure)
        return decisions

    def _evaluate(self, now: float) -> tuple[list[Decision], tuple[str, str] | None]:
        stats = series = None
        failure: tuple[str, str] | None = None
        source = self.config.prometheus
        if source is not None:
            stats, series = source.read(now)
            if source.last_error is not None:
                failure = (source.last_error_kind or "upstream", f"prometheus: {source.last_error}")
            bad = unusable(stats, series)
            if bad is not None:  # never a decision or a stored number from it
                stats, series = UNKNOWN, {}
                failure = ("bad_figure", f"prometheus: {bad}")
        reads = self._class_reads(now)
        with self.lock:
            if self.model is not None:  # the rules step from the count the model set
                self.controller.desired_replicas = self.replicas.desired
            decisions = list(self.controller.evaluate(now, stats, series))
            decisions = self._class_decisions(now, decisions, reads)
            self.last_stats = stats
            self.last_evaluated_s = now
        if self.model is not None:  # sizing simulates: outside the lock, ingest goes on
            decisions = self._model_decisions(now, decisions)
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
            # A failure is logged and shown in the status; the log still holds every batch.
            with contextlib.suppress(OSError):
                self.compact()
        return decisions, failure

    def _model_decisions(self, now: float, ruled: list[Decision]) -> list[Decision]:
        """The model's count replaces the rules' scaling; while it drifts, the rules scale up
        (never below the model's count) and nothing scales down."""
        assert self.model is not None
        current = self.replicas.desired
        wanted, sized = self.model.evaluate(now, current)
        drift = [d for d in sized if d.action.startswith("drift")]
        scale = [d for d in sized if d.action in ("scale_up", "scale_down")]
        other = [d for d in ruled if d.action not in ("scale_up", "scale_down")]
        if not self.model.drifting:
            return [*drift, *other, *scale]
        ups = [d for d in ruled if d.action == "scale_up"]
        top = max((d.replicas or current + self.replicas.step for d in ups), default=current)
        if ups and top >= wanted:
            return [*drift, *other, *ups]
        return [*drift, *other, *(d for d in scale if d.action == "scale_up")]

    def refit_model(self) -> str:
        """POST /v1/model/refit: the live model refitted (its logs) or re-centred (a file)."""
        if self.model is None:
            raise TailbudgetError(
                "no model to refit: serve runs the model policy only with a model file or "
                "logs to fit",
                param="model",
            )
        how = self.model.refit()  # waits for a running evaluation, not for ingest
        with self.lock:
            self.notes = [n for n in self.notes if not n.startswith("model: ")]
            self.notes.append(f"model: {how}")
        return how

    def overran(self, running_s: float, deadline_s: float) -> None:
        """The evaluation started `running_s` ago has not finished within its deadline."""
        with self.lock:
            self.heartbeat.failed(
                "deadline",
                f"the evaluation has run {running_s:.0f} s, past its {deadline_s:g} s deadline",
            )

    def wait_for_actions(self, timeout_s: float | None = None) -> None:
        """Block until the actions submitted so far have run (tests, shutdown)."""
        pending, self._pending = self._pending, []
        concurrent.futures.wait(pending, timeout=timeout_s)

    @staticmethod
    def journal_record(decision: Decision) -> dict[str, Any]:
        """The decision as the status shows it."""

        return {"kind": "decision", **decision_record(decision)}

    def _compaction_due(self) -> bool:
        return (
            time.monotonic() - self._last_compact >= self.config.compact_every_s
            or self.state.wal.size() >= self.config.compact_wal_bytes
        )

    # --- views (built in views.py, read under the lock) ------------------------------

    def verdict_view(self, now_s: float | None = None) -> VerdictView:
        """healthy | rollback | unknown, for Argo Rollouts (jsonPath `{$.verdict}`) or Flagger."""
        return views.verdict(self, time.time() if now_s is None else now_s)

    def status_view(self, now_s: float | None = None) -> StatusView:
        """Everything `GET /v1/status` shows, as a record."""
        return views.status(self, time.time() if now_s is None else now_s)

    def verdict(self, now_s: float | None = None) -> dict[str, Any]:
        """The JSON of `GET /v1/verdict` (what a caller indexes: `["verdict"]`)."""
        doc: dict[str, Any] = self.verdict_view(now_s).json_data()
        return doc

    def status(self, now_s: float | None = None) -> dict[str, Any]:
        """The JSON of `GET /v1/status` (`/v1/status` adds the traces block to it)."""
        doc: dict[str, Any] = self.status_view(now_s).json_data()
        return doc

    def metrics_view(self) -> dict[str, Any]:
        """The figures `/metrics` exports, read under the lock."""
        return views.metrics_view(self, time.time())

    # --- baseline, snapshots ------------------------------------------------------

    def set_baseline(self, p99_ms: float) -> None:
        """Set the baseline p99 (enables the p99-vs-baseline rollback rule); durable at once.

        Raises OSError when the snapshot holding it cannot be written (a 503)."""
        self.set_baselines({"p99": p99_ms})

    def set_baselines(self, values: Mapping[str, float]) -> None:
        """Set baselines by metric (`p99`, `ttft.p99`, `goodput`); durable at once.

        Raises OSError when the snapshot holding them cannot be written (a 503)."""
        with self.lock:
            for name, value in values.items():
                self.controller.set_baseline(value, name)
        self.compact()

    def clear_verdict(self, reason: str) -> list[str]:
        """Disengage the rollback rules (an operator says the rollback is over); journaled.

        Returns the rules cleared. A rule whose condition still holds fires again
        after its `for` span, as after any recovery. Raises OSError when the
        snapshot holding the clear cannot be written (a 503; the journal has it).
        """
        with self.lock:
            rules = self.controller.clear("rollback")
        record = {"kind": "clear", "t_s": time.time(), "action": "rollback", "rules": rules}
        self.journal.append({**record, "reason": reason})
        log.info("rollback cleared by request (rules: %s): %s", ", ".join(rules) or "none", reason)
        self.compact()
        return rules

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
            "classes": {
                "windows": self.class_windows.to_state(),
                "observations": dict(self.class_observations),
                "controllers": {n: c.to_state() for n, c in self.class_controllers.items()},
                "shed": self.shed_order.to_state(),
            },
        }

    def compact(self) -> None:
        """Write a snapshot and empty the write-ahead log.

        Raises OSError when the snapshot cannot be written; the old snapshot and
        the whole log then stay, so nothing acknowledged is lost."""
        # Group commit first, lock second, as a commit takes them: no batch is then
        # written but not yet applied, which the truncation would lose.
        with self.commits.exclusive(), self.lock:
            self._compact()

    def _compact(self) -> None:
        self._last_compact = time.monotonic()  # a failing disk is retried on schedule
        try:
            self.state.compact(self.snapshot())
        except OSError as exc:
            self.snapshot_error = f"cannot write the snapshot ({exc.strerror or exc})"
            log.error("%s; the write-ahead log keeps every batch", self.snapshot_error)
            raise
        except ValueError as exc:  # a non-finite figure got past the checks: never stored
            self.snapshot_error = f"cannot write the snapshot ({exc})"
            log.error("%s; the write-ahead log keeps every batch", self.snapshot_error)
            raise OSError(errno.EINVAL, str(exc)) from exc
        self.snapshot_error = None
        self.snapshot_written_s = time.time()

    def close(self) -> None:
        """Run the queued actions, final snapshot (graceful SIGTERM), close the files."""
        self.wait_for_actions(timeout_s=30.0)
        self._actions.shutdown(wait=False, cancel_futures=True)
        with self.commits.exclusive(), self.lock:
            try:
                self._compact()
            except OSError:
                pass  # logged; the log replays at the next start
            finally:
                self.state.close()
                self.journal.close()
