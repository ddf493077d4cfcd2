"""The worker's core: registration, heartbeat handling, and the attempts it runs.

The controller drives the worker: each heartbeat brings tasks to run, attempts to kill and the
attempts the controller expects, and the answer reports every attempt's progress with new log
lines. The worker only reaches out on its own to register, to re-register when heartbeats stop
(the controller may have lost it), and to nudge the controller when an attempt changes so that
the next heartbeat comes at once instead of at the next tick.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from iris import chaos
from iris.client.connect_client import ConnectClient
from iris.client.credentials import bearer_header
from iris.cluster.limits import DEFAULT_INPUT_LIMITS, InputLimits
from iris.cluster.runtime.types import ContainerRuntime
from iris.cluster.worker.bundle_cache import BundleCache
from iris.cluster.worker.node_offer import OFFER_CHECK_INTERVAL_S, OfferReader, describe_offer
from iris.cluster.worker.ports import PortAllocator
from iris.cluster.worker.settings import reregister_delay_s
from iris.cluster.worker.task_attempt import AttemptContext, KeptAttempt, TaskAttempt
from iris.cluster.worker.workdirs import Workdirs
from iris.config import DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_KILL_GRACE_PERIOD
from iris.rpc import cluster_pb2 as pb
from iris.time import ExponentialBackoff

logger = logging.getLogger(__name__)

MAX_LOG_LINES_PER_HEARTBEAT = 2000
# Finished attempts the controller no longer expects stay this long for FetchTaskLogs, then go
# (their work directories go at once).
FINISHED_RETENTION_S = 600.0
# After a nudge the worker waits for the heartbeat it asked for, which reports every change up to
# its answer, before it nudges again; should none come (a lost nudge), it nudges again after this.
NUDGE_ANSWER_WAIT_S = 0.02
_NUDGE_TIMEOUT_MS = 5_000


@dataclass
class WorkerSettings:
    worker_id: str
    address: str
    controller_address: str
    cache_dir: Path
    metadata: pb.WorkerMetadata
    kill_grace_s: float = DEFAULT_KILL_GRACE_PERIOD.seconds
    task_image: str = ""
    # Re-register when no heartbeat arrived for this long.
    reregister_after_s: float = reregister_delay_s(DEFAULT_HEARTBEAT_INTERVAL.seconds)
    extra_env: dict[str, str] = field(default_factory=dict)
    # The cluster's limits; a worker unpacks only the bundles its controller accepts.
    input_limits: InputLimits = DEFAULT_INPUT_LIMITS
    # The worker token from bootstrap, when the cluster has auth on.
    token: str = field(default="", repr=False)
    # Reads what the worker can offer now, for a worker whose node other Pods share (node_offer).
    current_offer: OfferReader | None = None
    offer_check_interval_s: float = OFFER_CHECK_INTERVAL_S


class Worker:
    def __init__(self, settings: WorkerSettings, runtime: ContainerRuntime):
        self.settings = settings
        self.runtime = runtime
        self._lock = threading.Lock()
        # Every attempt still kept, for lookups by id; a heartbeat reports only `_reported`: those
        # running or whose end the controller has not yet taken in. The others wait in
        # `_retired_at` (oldest first) for FINISHED_RETENTION_S, so that a heartbeat costs what is
        # running, not every attempt of the last ten minutes; each is kept as a RetiredAttempt once
        # its thread is done with it, and until then is in `_ending`.
        self._attempts: dict[tuple[str, int], KeptAttempt] = {}
        self._reported: dict[tuple[str, int], KeptAttempt] = {}
        self._retired_at: dict[tuple[str, int], float] = {}
        self._ending: set[tuple[str, int]] = set()
        self._ports = PortAllocator()
        self._bundles = BundleCache(settings.cache_dir / "bundles", limits=settings.input_limits)
        self._ctx = AttemptContext(
            runtime=runtime,
            bundles=self._bundles,
            workdirs=Workdirs(settings.cache_dir / "tasks"),
            kill_grace_s=settings.kill_grace_s,
            task_image=settings.task_image,
            on_change=self._attempt_changed,
        )
        # Not connectrpc's client: its calls go through a runtime of their own threads, which
        # cost the worker more CPU per nudge than the nudge's own work.
        self._controller = ConnectClient(
            settings.controller_address,
            pb.DESCRIPTOR.services_by_name["ControllerService"],
            _NUDGE_TIMEOUT_MS,
            bearer_header(settings.token),
        )
        # With auth on, the controller must show this secret to call the worker (see register).
        self.callback_token = secrets.token_urlsafe(32) if settings.token else ""
        self._last_heartbeat = time.monotonic()
        self._offered = settings.metadata
        self._next_offer_check = time.monotonic() + settings.offer_check_interval_s
        self._registered = threading.Event()
        # Set by an attempt's change the controller has not been told of; cleared by the nudge
        # for it and as a heartbeat's answer reports every attempt.
        self._notify = threading.Event()
        # Set when a heartbeat was answered: the changes before it reached the controller.
        self._answered = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        removed = self.runtime.remove_leftovers()
        if removed:
            logger.info("removed %d leftover container(s) from a previous worker", removed)
        for target, name in ((self._registration_loop, "register"), (self._notify_loop, "notify")):
            thread = threading.Thread(target=target, name=f"worker-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, kill_tasks: bool = True) -> None:
        self._stop.set()
        self._notify.set()
        self._answered.set()
        if kill_tasks:
            with self._lock:
                attempts = [a for a in self._attempts.values() if isinstance(a, TaskAttempt)]
            for attempt in attempts:
                if not attempt.finished:
                    attempt.kill()
            for attempt in attempts:
                attempt.join(self.settings.kill_grace_s + 5)
        for thread in self._threads:
            thread.join(5)
        self._controller.close()

    @property
    def registered(self) -> bool:
        return self._registered.is_set()

    # ------------------------------------------------------------ talking to the controller

    def _register_once(self) -> None:
        chaos.maybe_fail(chaos.WORKER_REGISTER, _unreachable)
        self._controller.call(
            "register",
            pb.RegisterRequest(
                worker_id=self.settings.worker_id,
                address=self.settings.address,
                metadata=self._offered,
                callback_token=self.callback_token,
            ),
            timeout_ms=10_000,
        )
        self._last_heartbeat = time.monotonic()
        self._registered.set()
        logger.info("registered with %s as %s", self.settings.controller_address, self.settings.worker_id)

    def _registration_loop(self) -> None:
        backoff = ExponentialBackoff(initial=0.2, maximum=10.0)
        while not self._stop.is_set():
            silent = time.monotonic() - self._last_heartbeat
            lost = not self._registered.is_set() or silent > self.settings.reregister_after_s
            if lost or self._offer_changed():
                try:
                    self._register_once()
                    backoff.reset()
                except Exception as exc:
                    self._registered.clear()
                    delay = backoff.next_delay()
                    logger.warning(
                        "cannot register with controller %s: %s; retrying in %.1fs",
                        self.settings.controller_address,
                        str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                        delay,
                    )
                    self._stop.wait(delay)
                    continue
            self._stop.wait(1.0)

    def _offer_changed(self) -> bool:
        """Whether what the worker can offer changed since it registered (checked at most once per
        `offer_check_interval_s`); the new offer is what the next registration sends."""
        reader = self.settings.current_offer
        if reader is None or time.monotonic() < self._next_offer_check:
            return False
        self._next_offer_check = time.monotonic() + self.settings.offer_check_interval_s
        try:
            offer = reader()
        except Exception as exc:
            logger.warning("cannot read what this worker's node has left: %s; keeping the current offer", exc)
            return False
        if offer == self._offered:
            return False
        logger.info(
            "offer changed from %s to %s: registering again", describe_offer(self._offered), describe_offer(offer)
        )
        self._offered = offer
        return True

    def _attempt_changed(self) -> None:
        self._notify.set()

    def _notify_loop(self) -> None:
        while not self._stop.is_set():
            if not self._notify.wait(1.0) or self._stop.is_set():
                continue
            self._notify.clear()
            self._answered.clear()
            if self._registered.is_set():
                try:
                    self._controller.call(
                        "notify_worker_event", pb.NotifyWorkerEventRequest(worker_id=self.settings.worker_id)
                    )
                except Exception as exc:
                    logger.debug("nudge to controller failed: %s", exc)
            # Changes until the heartbeat this nudge asks for ride on its answer: one nudge per
            # heartbeat, however many attempts change meanwhile.
            self._answered.wait(NUDGE_ANSWER_WAIT_S)

    # ------------------------------------------------------------ heartbeat

    def heartbeat(self, request: pb.HeartbeatRequest) -> pb.HeartbeatResponse:
        self._last_heartbeat = time.monotonic()
        self._registered.set()
        new: list[TaskAttempt] = []
        with self._lock:
            for run in request.tasks_to_run:
                key = (run.task_id, run.attempt_id)
                if key in self._attempts:
                    continue  # a repeated delivery after a lost response
                attempt = TaskAttempt(run, self._ports.allocate(run.ports, owner=key), self._ctx)
                self._attempts[key] = attempt
                self._reported[key] = attempt
                new.append(attempt)
            to_kill = [self._attempts.get((k.task_id, k.attempt_id)) for k in request.tasks_to_kill]
            expected = {(e.task_id, e.attempt_id): e.log_offset for e in request.expected_tasks}
            for key in expected.keys() - self._reported.keys():
                # Retired, and yet the controller asks about it again: report it, and its
                # retention starts over once the controller lets it go.
                if key in self._attempts:
                    self._reported[key] = self._attempts[key]
                    self._retired_at.pop(key, None)
            attempts = dict(self._reported)
        for attempt in to_kill:
            # A retired attempt has ended: nothing of it is left to kill.
            if isinstance(attempt, TaskAttempt) and not attempt.finished:
                logger.info("killing %s attempt %d at the controller's request", *attempt.key)
                attempt.kill()
        # Before the attempts are read: a change from here on may be in this answer or not, and
        # nudges for the next one.
        self._notify.clear()
        response = pb.HeartbeatResponse(worker_id=self.settings.worker_id)
        for key, attempt in attempts.items():
            if attempt.finished and key not in expected:
                continue  # the controller has taken in its end: retired below
            status = attempt.status(expected.get(key), MAX_LOG_LINES_PER_HEARTBEAT)
            if not attempt.finished:
                response.running_tasks.append(status)
            else:
                response.completed_tasks.append(status)
        self._retire(attempts, expected)
        # Started once the answer is built: their threads would otherwise take turns with this one
        # while it reads every attempt, and the controller's round would wait for them.
        self._answered.set()
        for attempt in new:
            attempt.start()
        return response

    def _retire(
        self, reported: dict[tuple[str, int], KeptAttempt], expected: dict[tuple[str, int], int]
    ) -> None:
        """Stop reporting the finished attempts the controller no longer expects (their work
        directories go back to the pool, and each is kept as a RetiredAttempt once its thread is
        done with it), and forget those retired more than FINISHED_RETENTION_S ago."""
        retired = []
        with self._lock:
            now = time.monotonic()  # under the lock: `_retired_at` stays in the order of its times
            for key, attempt in reported.items():
                if attempt.finished and key not in expected and self._reported.pop(key, None) is not None:
                    self._ports.release(key)
                    self._retired_at[key] = now
                    if isinstance(attempt, TaskAttempt):
                        retired.append(attempt)
                        self._ending.add(key)
            for key in [key for key in self._ending if key not in self._reported]:
                attempt = self._attempts.get(key)
                if not isinstance(attempt, TaskAttempt):
                    self._ending.discard(key)  # forgotten already
                elif attempt.ended:
                    self._attempts[key] = attempt.retired()
                    self._ending.discard(key)
            while self._retired_at:
                key, retired_at = next(iter(self._retired_at.items()))
                if now - retired_at <= FINISHED_RETENTION_S:
                    break
                del self._retired_at[key]
                del self._attempts[key]
        for attempt in retired:
            attempt.release_workdir()

    # ------------------------------------------------------------ queries

    def attempt(self, task_id: str, attempt_id: int) -> KeptAttempt | None:
        with self._lock:
            if attempt_id >= 0:
                return self._attempts.get((task_id, attempt_id))
            matching = [a for (t, _), a in self._attempts.items() if t == task_id]
        return max(matching, key=lambda a: a.key[1], default=None)

    def attempts(self) -> list[KeptAttempt]:
        with self._lock:
            return list(self._attempts.values())

    def seconds_since_heartbeat(self) -> float:
        return time.monotonic() - self._last_heartbeat


def _unreachable(message: str) -> ConnectError:
    return ConnectError(Code.UNAVAILABLE, message)
