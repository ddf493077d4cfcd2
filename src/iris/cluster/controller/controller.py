"""The controller's asyncio shell around `ControllerCore`: the loops and the network.

Everything runs on one asyncio event loop. The core decides (who is owed a heartbeat, what it
carries, what an answer changes) with short synchronous store transactions on that loop; this
shell sends heartbeats and writes bundles, awaited outside any transaction. A submit or a worker
change wakes the scheduler at once; a placement or a worker's nudge sends that worker a heartbeat
at once; the periodic tick only catches what no event announced.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections import deque
from collections.abc import Callable

from iris.cluster.controller.autoscaler import Autoscaler
from iris.cluster.controller.bundle_store import BundleStore
from iris.cluster.controller.core import FULL_PASS_INTERVAL_MS, ControllerCore
from iris.cluster.controller.existing_jobs import ExistingJobAction, decide_existing_job
from iris.cluster.controller.feasibility import demand_from_request, describe_demand, never_servable_reason
from iris.cluster.controller.heartbeat_rounds import HeartbeatRounds
from iris.cluster.controller.job_watch import JobWatch
from iris.cluster.controller.launch import AcceptedBundles, inherit_from_parent, job_id_for
from iris.cluster.controller.samples import ClusterSamples
from iris.cluster.controller.settings import ControllerSettings
from iris.cluster.controller.store import ControllerStore, Effects
from iris.cluster.controller.store_base import RequestAlreadyServedError
from iris.cluster.controller.store_launch import Launch
from iris.cluster.controller.thread_batch import ThreadBatch
from iris.cluster.types import TERMINAL_JOB_STATES
from iris.rpc import cluster_pb2 as pb
from iris.time import ExponentialBackoff, now_ms

logger = logging.getLogger(__name__)

# How long the scheduler lets further submits gather after a wake-up before it runs.
SCHEDULING_COALESCE_S = 0.002
# The longest pause between scheduling passes however long the last one took.
MAX_SCHEDULING_PAUSE_S = 0.5
# A pass runs on the event loop while every pass of the last INLINE_PASS_MEMORY_S took less of the
# controller's CPU than INLINE_PASS_MAX_S and at most INLINE_PASS_MAX_NEW_TASKS tasks were created
# since the last; otherwise on a thread, so that heartbeats and requests are served while it runs.
# The memory spans two full passes (one a second), which take longest.
INLINE_PASS_MAX_S = 0.005
INLINE_PASS_MEMORY_S = 2 * FULL_PASS_INTERVAL_MS / 1000
INLINE_PASS_MAX_NEW_TASKS = 256
# How long a starting controller retries a store it cannot write before giving up.
STARTUP_STORE_RETRY_S = 30.0
# The longest GetJobStatus waits for a job's state to change.
MAX_STATUS_WAIT_MS = 30_000


def pass_runs_on_loop(recent_passes: deque[tuple[float, float]], created_since: int | None, now: float) -> bool:
    """Whether the next scheduling pass runs on the event loop: every pass that ended in the last
    INLINE_PASS_MEMORY_S, of `recent_passes` ((monotonic end, CPU seconds), oldest first; older ones
    are dropped from it here), took less CPU than INLINE_PASS_MAX_S, and few tasks were created
    since the last pass (`created_since`; None: no pass yet, nothing known)."""
    while recent_passes and now - recent_passes[0][0] > INLINE_PASS_MEMORY_S:
        recent_passes.popleft()
    if created_since is None or created_since > INLINE_PASS_MAX_NEW_TASKS:
        return False
    return all(cpu < INLINE_PASS_MAX_S for _, cpu in recent_passes)


class Controller:
    """`task_token`, set when auth is on, gives the token a task of `owner`'s job calls the
    controller with (to launch children, register endpoints)."""

    def __init__(
        self,
        store: ControllerStore,
        bundles: BundleStore,
        settings: ControllerSettings,
        task_token: Callable[[str], str] | None = None,
    ):
        self.store = store
        self.bundles = bundles
        self.settings = settings
        self.core = ControllerCore(
            store,
            settings,
            start_round=self._start_rounds,
            wake_scheduler=self.wake_scheduler,
            capacity_waits=self._capacity_waits,
        )
        self.job_watch = JobWatch()
        store.on_job_state_change = self.job_watch.job_changed
        self._schedule_event: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._background: set[asyncio.Task] = set()
        self._stopping = False
        self._launches: ThreadBatch[Launch, Effects] = ThreadBatch(self._create_jobs)
        self._stored_bundles = AcceptedBundles()  # only ever touched by the one running batch
        # Set by the daemon when the cluster config has scale groups.
        self.autoscaler: Autoscaler | None = None
        # Sampled on every tick, for the dashboard's plots.
        self.samples = ClusterSamples(int(settings.heartbeat_interval_s * 1000))
        self._rounds = HeartbeatRounds(self.core, store, settings, self.samples, task_token)

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.job_watch.bind(self._loop)
        self._schedule_event = asyncio.Event()
        for task in (self._scheduler_loop(), self._tick_loop()):
            self._spawn(task)
        await self._resume()
        if self.autoscaler is not None:
            self.autoscaler.start()
        await self.sample_cluster()

    async def _resume(self) -> None:
        """`core.resume()`, retried while the store cannot be written: a database briefly locked
        or a full disk being cleaned must not stop the controller from coming up."""
        backoff = ExponentialBackoff(initial=0.05, maximum=2.0)
        deadline = time.monotonic() + STARTUP_STORE_RETRY_S
        while True:
            try:
                self.core.resume()
                return
            except sqlite3.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise
                delay = backoff.next_delay()
                logger.warning("cannot record the controller's start in its store: %s; retrying in %.2fs", exc, delay)
                await asyncio.sleep(delay)

    async def stop(self) -> None:
        self._stopping = True
        if self.autoscaler is not None:
            await asyncio.to_thread(self.autoscaler.stop)
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._rounds.stop()

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # ------------------------------------------------------------ events

    def _capacity_waits(self) -> dict[str, str]:
        return self.autoscaler.job_waits() if self.autoscaler is not None else {}

    def wake_scheduler(self) -> None:
        if self._schedule_event is not None:
            self._schedule_event.set()

    def apply_effects(self, effects: Effects) -> None:
        self.core.apply(effects)

    def apply_effects_threadsafe(self, effects: Effects) -> None:
        """For other threads (the autoscaler): hand the effects to the controller's loop."""
        if self._loop is not None and not self._stopping:
            self._loop.call_soon_threadsafe(self.apply_effects, effects)

    def request_heartbeat(self, worker_id: str) -> None:
        if not self._stopping:
            self.core.request_heartbeat(worker_id)

    async def heartbeat_live_workers(self) -> dict[str, bool]:
        """Heartbeat every live worker now, as the periodic tick does, and return once each one's
        answer is reconciled (or its heartbeat failed): worker id -> whether it answered. A worker
        whose round is in flight answers in the round after it, planned after this call."""
        if self._stopping:
            raise RuntimeError("the controller is stopping")
        answered: dict[str, asyncio.Future[bool]] = {}
        for worker in self.store.live_workers():
            worker_id = worker["worker_id"]
            answered[worker_id] = self._rounds.next_round_ended(worker_id)
            self.request_heartbeat(worker_id)
        await asyncio.gather(*answered.values())
        return {worker_id: future.result() for worker_id, future in answered.items()}

    def heartbeat_live_workers_threadsafe(self, timeout_s: float) -> dict[str, bool]:
        """`heartbeat_live_workers` from another thread, waited for at most `timeout_s`."""
        if self._loop is None:
            raise RuntimeError("the controller has not started")
        future = asyncio.run_coroutine_threadsafe(self.heartbeat_live_workers(), self._loop)
        try:
            return future.result(timeout_s)
        except TimeoutError:
            future.cancel()
            raise

    def _start_rounds(self, worker_id: str) -> None:
        self._rounds.start(worker_id)

    # ------------------------------------------------------------ jobs

    async def launch_job(self, request: pb.LaunchJobRequest, owner: str = "") -> str:
        job_id = job_id_for(request)
        if self.store.job_exists(job_id):
            # A retry of a submission whose answer was lost gets the job the first one created.
            # (Asked only of a name already taken: a retry under a name now free, or with a
            # generated name, is found by the launch's own transaction.)
            if request.request_id:
                served = self.store.job_for_request(request.request_id)
                if served is not None:
                    return served
            action = decide_existing_job(job_id, request.existing_job_policy, self.store.job_status(job_id).state)
            if action == ExistingJobAction.KEEP:
                return job_id
            if action == ExistingJobAction.KILL_AND_REPLACE:
                self.terminate_job(job_id, "replaced by a new submission of the same name")
            self.store.delete_job_tree(job_id)
        # Checking every healthy worker, storing the bundle and writing one row per task take a
        # while for a big job, and the event loop must keep serving: one trip to a thread, shared
        # with the submissions that arrive meanwhile (one transaction for all of them).
        try:
            effects = await self._launches.submit((job_id, request, owner))
        except RequestAlreadyServedError as served:
            return served.job_id  # a concurrent retry of the same submission got there first
        self.apply_effects(effects)
        if self.autoscaler is not None:
            self.autoscaler.wake()
        return job_id

    def _create_jobs(self, launches: list[Launch]) -> list[Effects | Exception]:
        """Off the event loop: each launch's checks and bundle, then one transaction for those that passed."""
        results: list[Effects | Exception | None] = []
        for job_id, request, _ in launches:
            try:
                self._refuse_never_servable(job_id, request)
                if request.bundle_blob:
                    request.bundle_uri = self._store_bundle(request.bundle_blob, request.bundle_sha256)
                if request.parent_job_id:
                    inherit_from_parent(request, self.store.request_for(request.parent_job_id))
                results.append(None)
            except Exception as exc:  # noqa: BLE001 - refuses this launch alone
                results.append(exc)
        ready = [i for i, result in enumerate(results) if result is None]
        created = self.store.create_jobs([launches[i] for i in ready], now_ms()) if ready else []
        for i, result in zip(ready, created, strict=True):
            results[i] = result
        return [result for result in results if result is not None]

    def _store_bundle(self, blob: bytes, sha256: str) -> str:
        """The bundle's URI, stored unless this controller stored it lately: its digest was checked
        against the bytes on the way in, and a remote store's existence check is a round trip."""
        if sha256 in self._stored_bundles:
            return self.bundles.uri_for(sha256)
        uri = self.bundles.put(blob, sha256)
        self._stored_bundles.add(sha256)
        return uri

    async def job_status_after_change(
        self,
        job_id: str,
        known_state: int,
        wait_ms: int,
        include_tasks: bool = False,
        until_finished: bool = False,
    ) -> pb.JobStatus:
        """The job's status once its state is no longer `known_state` (with `until_finished`: once
        the job has finished), or after `wait_ms` (at most MAX_STATUS_WAIT_MS) with neither."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(wait_ms, MAX_STATUS_WAIT_MS) / 1000
        with self.job_watch.watching(job_id, until_finished) as changed:
            while True:
                changed.clear()  # before reading: a change after the read sets it again
                status = self.store.job_status(job_id, include_tasks)
                remaining = deadline - loop.time()
                if remaining <= 0 or (
                    status.state in TERMINAL_JOB_STATES if until_finished else status.state != known_state
                ):
                    return status
                try:
                    await asyncio.wait_for(changed.wait(), remaining)
                except TimeoutError:
                    pass

    def _refuse_never_servable(self, job_id: str, request: pb.LaunchJobRequest) -> None:
        demand = demand_from_request(job_id, request)
        gang_size = max(1, request.replicas) if request.coscheduling.group_by else 1
        groups = self.autoscaler.groups.values() if self.autoscaler is not None else ()
        reason = never_servable_reason(demand, gang_size, groups, self.store.idle_capacities())
        if reason:
            raise ValueError(f"job {job_id} asks for {describe_demand(demand)}: {reason}")

    def terminate_job(self, job_id: str, reason: str) -> list[str]:
        return self.core.terminate_job(job_id, reason)

    def delete_job(self, job_id: str, kill_running: bool) -> list[str]:
        if kill_running:
            self.terminate_job(job_id, "killed to be deleted")
        return self.store.delete_job_tree(job_id)

    def register_worker(
        self, worker_id: str, address: str, metadata: pb.WorkerMetadata, callback_token: str = ""
    ) -> None:
        self.core.register_worker(worker_id, address, metadata, callback_token)

    # ------------------------------------------------------------ loops

    async def _scheduler_loop(self) -> None:
        assert self._schedule_event is not None
        last_pass_s = 0.0
        # (monotonic end, CPU) of each pass of the last INLINE_PASS_MEMORY_S
        recent_passes: deque[tuple[float, float]] = deque()
        while True:
            try:
                await asyncio.wait_for(self._schedule_event.wait(), self.settings.scheduler_fallback_interval_s)
            except TimeoutError:
                pass
            # A burst of submits shares one pass: the first wakes us, the rest land in this pause.
            # It is at least as long as the last pass took of the controller's CPU, so that passes
            # over a long queue, woken by every job's end, each place many tasks and take at most
            # half of it. (Not the pass's wall time: that counts the turns it waits for the
            # interpreter while heartbeats and requests are served, which made the pause, and every
            # freed slot's wait for the next pass, two to three times longer than the pass's work.)
            await asyncio.sleep(max(SCHEDULING_COALESCE_S, last_pass_s))
            self._schedule_event.clear()
            try:
                # A short pass (a few tasks submitted or freed since the last) costs less than the
                # hand-offs to a thread and back, and every freed slot waited for those: placing its
                # next task took ~10 ms longer under load (submit-to-done p99 two to four times).
                created_since = self.core.tasks_created_since_last_pass()
                if pass_runs_on_loop(recent_passes, created_since, time.monotonic()):
                    effects, last_pass_s = self._timed_pass()
                else:
                    effects, last_pass_s = await asyncio.to_thread(self._timed_pass)
                recent_passes.append((time.monotonic(), last_pass_s))
                self.apply_effects(effects)
            except Exception:
                logger.exception("scheduling pass failed")

    def _timed_pass(self) -> tuple[Effects, float]:
        """A scheduling pass, with the CPU it took (at most MAX_SCHEDULING_PAUSE_S)."""
        started = time.thread_time()
        effects = self.core.schedule()
        return effects, min(time.thread_time() - started, MAX_SCHEDULING_PAUSE_S)

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_interval_s)
            try:
                self.core.tick()
                await self.sample_cluster()
            except Exception:
                logger.exception("heartbeat tick failed")

    async def sample_cluster(self) -> None:
        """One point of the dashboard's cluster plots; a failure costs a point, nothing else."""
        try:
            jobs_per_state, _ = self.store.count_by_state()
            autoscaler = await asyncio.to_thread(self.autoscaler.status) if self.autoscaler is not None else None
            self.samples.record_cluster(now_ms(), jobs_per_state, autoscaler)
        except Exception:
            logger.exception("sampling the cluster for the dashboard failed")
