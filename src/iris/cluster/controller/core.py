"""The controller's decisions, synchronously: which workers are owed a heartbeat, what each one
gets, what to do with each answer, and when to schedule.

No event loop and no network: `Controller` (controller.py) is a thin asyncio shell that sends the
heartbeats this core builds and hands back the answers. Time comes from an injected clock, so
tests drive the core with fake workers and a number they advance.

Heartbeats to one worker never overlap: a request for a worker whose round is in flight is
remembered and answered by one more round when the current one ends. Kills ride on the next
heartbeat to their worker and are re-queued when it fails.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from iris.cluster.controller.autoscaler_plan import explain_pending
from iris.cluster.controller.scheduler import find_assignments
from iris.cluster.controller.settings import ControllerSettings
from iris.cluster.controller.store import ControllerStore, Effects, HeartbeatPlan
from iris.rpc import cluster_pb2 as pb
from iris.time import Clock, now_ms

AttemptKey = tuple[str, int]

# The longest a scheduling pass may go on trying only newly submitted tasks.
FULL_PASS_INTERVAL_MS = 1000


@dataclass(frozen=True)
class HeartbeatRound:
    """One heartbeat to send: the store's plan, the request built from it, and the kills it carries."""

    plan: HeartbeatPlan
    request: pb.HeartbeatRequest
    kills: frozenset[AttemptKey]

    @property
    def address(self) -> str:
        return self.plan.address


@dataclass
class HeartbeatOutcome:
    """What an answered heartbeat changed, and whether another round should follow at once."""

    unknown: list[AttemptKey] = field(default_factory=list)
    effects: Effects = field(default_factory=Effects)
    more: bool = False


class ControllerCore:
    def __init__(
        self,
        store: ControllerStore,
        settings: ControllerSettings,
        clock: Clock = now_ms,
        start_round: Callable[[str], None] = lambda worker_id: None,
        wake_scheduler: Callable[[], None] = lambda: None,
        capacity_waits: Callable[[], dict[str, str]] = dict,
    ):
        """`start_round(worker_id)` is called when a worker's heartbeat round should start;
        `wake_scheduler()` when a scheduling pass should run soon; `capacity_waits()` says, per
        job, why the autoscaler brings no capacity for it (added to its tasks' pending reasons)."""
        self.store = store
        self.settings = settings
        self._clock = clock
        self._start_round = start_round
        self._wake_scheduler = wake_scheduler
        self._capacity_waits = capacity_waits
        self._kill_sets: dict[str, set[AttemptKey]] = {}
        self._inflight: set[str] = set()
        self._again: set[str] = set()
        # The store's scheduling mark when the last pass started, and when the last full one ran.
        self._tried: tuple[int, int] | None = None
        self._last_full_pass_ms = 0

    # ------------------------------------------------------------ effects and heartbeat requests

    def apply(self, effects: Effects) -> None:
        for worker_id, task_id, attempt_id in effects.kills:
            self._kill_sets.setdefault(worker_id, set()).add((task_id, attempt_id))
        for worker_id in sorted(effects.heartbeat_workers):
            self.request_heartbeat(worker_id)
        if effects.wake_scheduler:
            self._wake_scheduler()

    def request_heartbeat(self, worker_id: str) -> None:
        """Owe the worker a heartbeat: start a round now, or one more after the round in flight."""
        if worker_id in self._inflight:
            self._again.add(worker_id)
            return
        self._inflight.add(worker_id)
        self._start_round(worker_id)

    def pending_kills(self, worker_id: str) -> set[AttemptKey]:
        return set(self._kill_sets.get(worker_id, ()))

    # ------------------------------------------------------------ one round

    def begin_round(self, worker_id: str) -> HeartbeatRound | None:
        """The heartbeat to send now, or None when the worker is no longer live."""
        return self.begin_rounds([worker_id])[worker_id]

    def begin_rounds(self, worker_ids: Sequence[str]) -> dict[str, HeartbeatRound | None]:
        """`begin_round` for every worker whose round starts in the same turn, planned together."""
        for worker_id in worker_ids:
            self._again.discard(worker_id)
        rounds: dict[str, HeartbeatRound | None] = {}
        plans = self.store.plan_heartbeats(worker_ids, self.settings.advertised_address)
        # Durable before sending: should an answer never be recorded (a crash, a failed write),
        # its attempts are expected of the worker from now on, never started a second time.
        self.store.record_sent([plan for plan in plans.values() if plan is not None])
        for worker_id, plan in plans.items():
            if plan is None:
                rounds[worker_id] = None
                continue
            kills = frozenset(self._kill_sets.pop(worker_id, ()))
            request = pb.HeartbeatRequest(
                worker_id=worker_id,
                tasks_to_run=plan.to_run,
                tasks_to_kill=[pb.TaskKey(task_id=t, attempt_id=a) for t, a in sorted(kills)],
                expected_tasks=plan.expected,
            )
            rounds[worker_id] = HeartbeatRound(plan, request, kills)
        return rounds

    def round_failed(self, heartbeat: HeartbeatRound, error: str) -> Effects:
        """The RPC failed: its kills wait for the next round, the attempts it started are retried
        under new ids; the worker is unhealthy, then failed."""
        worker_id = heartbeat.plan.worker_id
        self._kill_sets.setdefault(worker_id, set()).update(heartbeat.kills)
        sent = [(run.task_id, run.attempt_id) for run in heartbeat.plan.to_run]
        effects = self.store.record_heartbeat_failure(
            worker_id, error, self._clock(), self.settings.worker_timeout_ms, sent
        )
        self.apply(effects)
        return effects

    def round_answered(self, heartbeat: HeartbeatRound, response: pb.HeartbeatResponse) -> HeartbeatOutcome:
        outcome = self.rounds_answered([(heartbeat, response)])[0]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def rounds_answered(
        self, answers: Sequence[tuple[HeartbeatRound, pb.HeartbeatResponse]]
    ) -> list[HeartbeatOutcome | Exception]:
        """`round_answered` for the answers that arrived in the same turn, written in one
        transaction; an answer whose reconciliation failed gets its exception instead."""
        outcomes: list[HeartbeatOutcome | Exception | None] = [None] * len(answers)
        ours: list[int] = []
        for i, (heartbeat, response) in enumerate(answers):
            worker_id = heartbeat.plan.worker_id
            if response.worker_id and response.worker_id != worker_id:
                # Another worker now answers on this address: the one we knew is gone.
                reason = f"address {heartbeat.address} now belongs to worker {response.worker_id}"
                effects = self.store.record_heartbeat_failure(worker_id, reason, self._clock(), 0)
                self.apply(effects)
                outcomes[i] = HeartbeatOutcome(effects=effects)
            else:
                ours.append(i)
        applied = (
            self.store.apply_heartbeats([(answers[i][0].plan, answers[i][1]) for i in ours], self._clock())
            if ours
            else []
        )
        for i, result in zip(ours, applied, strict=True):
            if isinstance(result, Exception):
                outcomes[i] = result
                continue
            heartbeat, response = answers[i]
            unknown, effects = result
            self.apply(effects)
            if unknown:
                self._kill_sets.setdefault(heartbeat.plan.worker_id, set()).update(unknown)
            outcomes[i] = HeartbeatOutcome(unknown, effects, bool(unknown) or has_more_logs(heartbeat.plan, response))
        return [outcome for outcome in outcomes if outcome is not None]

    def another_round(self, worker_id: str, outcome: HeartbeatOutcome | None) -> bool:
        """Whether the worker's next round should follow at once: the last one left work behind,
        or someone asked for a heartbeat while it was in flight."""
        return (outcome is not None and outcome.more) or worker_id in self._again

    def rounds_ended(self, worker_id: str) -> None:
        self._inflight.discard(worker_id)
        self._again.discard(worker_id)

    # ------------------------------------------------------------ periodic work

    def tick(self) -> None:
        """Fail workers silent past their timeout, and owe every live worker a heartbeat."""
        self.apply(self.store.fail_silent_workers(self._clock(), self.settings.worker_timeout_ms))
        for worker in self.store.live_workers():
            self.request_heartbeat(worker["worker_id"])

    def run_scheduling_pass(self) -> Effects:
        effects = self.schedule()
        self.apply(effects)
        return effects

    def schedule(self) -> Effects:
        """Expire tasks past their scheduling timeout, then place what is pending; the caller applies
        the effects. Only the store is touched, so this may run off the event loop: a pass over a
        hundred thousand pending tasks takes seconds.

        While no capacity was freed since the last pass, the tasks it tried still do not fit (a
        pass only ever takes capacity) and keep their reasons, so the pass tries only the tasks
        submitted since. Every FULL_PASS_INTERVAL_MS a pass expires timed-out tasks and tries
        every pending task, which also refreshes reasons that depend on more than capacity."""
        now = self._clock()
        mark = self.store.scheduling_mark()
        periodic = self._tried is None or now - self._last_full_pass_ms >= FULL_PASS_INTERVAL_MS
        full = periodic or self._tried is None or self._tried[0] != mark[0]
        effects = self.store.expire_unschedulable(now) if periodic else Effects()
        demands, workers = self.store.scheduling_inputs(after_row=0 if full or self._tried is None else self._tried[1])
        if demands:
            result = find_assignments(demands, workers)
            reasons = explain_pending(result.pending_reasons, demands, self._capacity_waits())
            effects.merge(self.store.apply_assignments(result.assignments, reasons, now))
        self._tried = mark
        if periodic:
            self._last_full_pass_ms = now
        return effects

    def tasks_created_since_last_pass(self) -> int | None:
        """How many task rows were created since the last pass started (None before the first):
        what a burst of submissions adds to the next pass's work."""
        if self._tried is None:
            return None
        return self.store.scheduling_mark()[1] - self._tried[1]

    def resume(self) -> None:
        """After a controller (re)start: workers kept running while it was down; give them a fresh
        timeout window and heartbeat them now so their tasks are re-adopted rather than run twice."""
        self.store.touch_live_workers(self._clock())
        for worker in self.store.live_workers():
            self.request_heartbeat(worker["worker_id"])
        self._wake_scheduler()

    # ------------------------------------------------------------ commands

    def create_job(self, job_id: str, request: pb.LaunchJobRequest) -> None:
        self.apply(self.store.create_job(job_id, request, self._clock()))

    def terminate_job(self, job_id: str, reason: str) -> list[str]:
        terminated, effects = self.store.terminate_job(job_id, reason, self._clock())
        self.apply(effects)
        return terminated

    def register_worker(
        self, worker_id: str, address: str, metadata: pb.WorkerMetadata, callback_token: str = ""
    ) -> None:
        self.apply(self.store.register_worker(worker_id, address, metadata, self._clock(), callback_token))


def has_more_logs(plan: HeartbeatPlan, response: pb.HeartbeatResponse) -> bool:
    """The worker holds log lines it could not fit in this answer."""
    offsets = {(e.task_id, e.attempt_id): e.log_offset for e in plan.expected}
    for status in (*response.running_tasks, *response.completed_tasks):
        offset = offsets.get((status.task_id, status.attempt_id))
        if offset is not None and offset + len(status.logs) < status.total_log_lines:
            return True
    return False
