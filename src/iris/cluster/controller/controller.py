"""The controller's loops: scheduling, heartbeats, worker timeouts.

Everything runs on one asyncio event loop. Store calls are short synchronous transactions on
that loop; network calls (heartbeats, bundle writes) are awaited outside any transaction. A
submit or a worker change wakes the scheduler at once; a placement or a worker's nudge sends that
worker a heartbeat at once; the periodic tick only catches what no event announced.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from dataclasses import dataclass

import pyqwest

from iris import chaos
from iris.cluster.controller.autoscaler import Autoscaler
from iris.cluster.controller.bundle_store import BundleStore
from iris.cluster.controller.existing_jobs import ExistingJobAction, decide_existing_job
from iris.cluster.controller.feasibility import demand_from_request, never_servable_reason
from iris.cluster.controller.scheduler import Resources, find_assignments
from iris.cluster.controller.store import ControllerStore, Effects, HeartbeatPlan
from iris.cluster.types import JobName
from iris.rpc import cluster_pb2 as pb
from iris.rpc.cluster_connect import WorkerServiceClient

logger = logging.getLogger(__name__)

# How long the scheduler lets further submits gather after a wake-up before it runs.
SCHEDULING_COALESCE_S = 0.002


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class ControllerSettings:
    advertised_address: str
    heartbeat_interval_s: float = 5.0
    worker_timeout_s: float = 60.0
    heartbeat_rpc_timeout_s: float = 10.0
    # The scheduler also runs this often with no event, for time-based rules such as timeouts.
    scheduler_fallback_interval_s: float = 1.0


class Controller:
    def __init__(self, store: ControllerStore, bundles: BundleStore, settings: ControllerSettings):
        self.store = store
        self.bundles = bundles
        self.settings = settings
        self._schedule_event: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inflight: set[str] = set()
        self._again: set[str] = set()
        self._kill_sets: dict[str, set[tuple[str, int]]] = {}
        self._background: set[asyncio.Task] = set()
        self._http = pyqwest.Client()
        self._worker_clients: dict[str, WorkerServiceClient] = {}
        self._stopping = False
        # Set by the daemon when the cluster config has scale groups.
        self.autoscaler: Autoscaler | None = None

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._schedule_event = asyncio.Event()
        # Workers kept running while the controller was down; give them a fresh timeout window and
        # heartbeat them now so their running tasks are re-adopted rather than run twice.
        self.store.touch_live_workers(now_ms())
        for task in (self._scheduler_loop(), self._tick_loop()):
            self._spawn(task)
        for worker in self.store.live_workers():
            self.request_heartbeat(worker["worker_id"])
        self.wake_scheduler()
        if self.autoscaler is not None:
            self.autoscaler.start()

    async def stop(self) -> None:
        self._stopping = True
        if self.autoscaler is not None:
            await asyncio.to_thread(self.autoscaler.stop)
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # ------------------------------------------------------------ events

    def wake_scheduler(self) -> None:
        if self._schedule_event is not None:
            self._schedule_event.set()

    def apply_effects(self, effects: Effects) -> None:
        for worker_id, task_id, attempt_id in effects.kills:
            self._kill_sets.setdefault(worker_id, set()).add((task_id, attempt_id))
        for worker_id in effects.heartbeat_workers:
            self.request_heartbeat(worker_id)
        if effects.wake_scheduler:
            self.wake_scheduler()

    def apply_effects_threadsafe(self, effects: Effects) -> None:
        """For other threads (the autoscaler): hand the effects to the controller's loop."""
        if self._loop is not None and not self._stopping:
            self._loop.call_soon_threadsafe(self.apply_effects, effects)

    def request_heartbeat(self, worker_id: str) -> None:
        if self._stopping:
            return
        if worker_id in self._inflight:
            self._again.add(worker_id)
            return
        self._inflight.add(worker_id)
        self._spawn(self._heartbeat_worker(worker_id))

    # ------------------------------------------------------------ jobs

    async def launch_job(self, request: pb.LaunchJobRequest) -> str:
        job_id = self._job_id_for(request)
        if self.store.job_exists(job_id):
            action = decide_existing_job(job_id, request.existing_job_policy, self.store.job_status(job_id).state)
            if action == ExistingJobAction.KEEP:
                return job_id
            if action == ExistingJobAction.KILL_AND_REPLACE:
                self.terminate_job(job_id, "replaced by a new submission of the same name")
            self.store.delete_job_tree(job_id)
        if self.autoscaler is not None:
            self._refuse_never_servable(job_id, request)
        if request.bundle_blob:
            request.bundle_uri = await asyncio.to_thread(self.bundles.put, request.bundle_blob, request.bundle_sha256)
        if request.parent_job_id:
            # A child runs from its parent's code and on the same kind of workers unless it says otherwise.
            parent = self.store.request_for(request.parent_job_id)
            if not request.bundle_uri:
                request.bundle_uri, request.bundle_sha256 = parent.bundle_uri, parent.bundle_sha256
            if not request.constraints:
                request.constraints.extend(parent.constraints)
        self.apply_effects(self.store.create_job(job_id, request, now_ms()))
        if self.autoscaler is not None:
            self.autoscaler.wake()
        return job_id

    def _refuse_never_servable(self, job_id: str, request: pb.LaunchJobRequest) -> None:
        assert self.autoscaler is not None
        demand = demand_from_request(job_id, request)
        gang_size = max(1, request.replicas) if request.coscheduling.group_by else 1
        totals = (
            Resources(w.metadata.cpu_millicores, w.metadata.memory_bytes, w.metadata.disk_bytes)
            for w in self.store.list_workers()
            if w.state == pb.WORKER_STATE_HEALTHY
        )
        reason = never_servable_reason(demand, gang_size, self.autoscaler.groups.values(), totals)
        if reason:
            raise ValueError(f"job {job_id} asks for {demand.resources.describe()}: {reason}")

    def _job_id_for(self, request: pb.LaunchJobRequest) -> str:
        leaf = request.name or f"job-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        if request.parent_job_id:
            parent = JobName.parse(request.parent_job_id)
            leaf_name = JobName.parse(leaf)
            if leaf_name.parts[: len(parent.parts)] == parent.parts:
                return str(leaf_name)
            return str(parent.child(leaf))
        return str(JobName.parse(leaf))

    def terminate_job(self, job_id: str, reason: str) -> list[str]:
        terminated, effects = self.store.terminate_job(job_id, reason, now_ms())
        self.apply_effects(effects)
        return terminated

    def delete_job(self, job_id: str, kill_running: bool) -> list[str]:
        if kill_running:
            self.terminate_job(job_id, "killed to be deleted")
        return self.store.delete_job_tree(job_id)

    def register_worker(self, worker_id: str, address: str, metadata: pb.WorkerMetadata) -> None:
        self.apply_effects(self.store.register_worker(worker_id, address, metadata, now_ms()))

    # ------------------------------------------------------------ loops

    async def _scheduler_loop(self) -> None:
        assert self._schedule_event is not None
        while True:
            try:
                await asyncio.wait_for(self._schedule_event.wait(), self.settings.scheduler_fallback_interval_s)
            except TimeoutError:
                pass
            # A burst of submits shares one pass: the first wakes us, the rest land in this pause.
            await asyncio.sleep(SCHEDULING_COALESCE_S)
            self._schedule_event.clear()
            try:
                self.run_scheduling_pass()
            except Exception:
                logger.exception("scheduling pass failed")

    def run_scheduling_pass(self) -> None:
        self.apply_effects(self.store.expire_unschedulable(now_ms()))
        demands, workers = self.store.scheduling_inputs()
        if not demands:
            return
        result = find_assignments(demands, workers)
        self.apply_effects(self.store.apply_assignments(result.assignments, result.pending_reasons, now_ms()))

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_interval_s)
            try:
                self.apply_effects(self.store.fail_silent_workers(now_ms(), self._worker_timeout_ms))
                for worker in self.store.live_workers():
                    self.request_heartbeat(worker["worker_id"])
            except Exception:
                logger.exception("heartbeat tick failed")

    @property
    def _worker_timeout_ms(self) -> int:
        return int(self.settings.worker_timeout_s * 1000)

    def _client_for(self, address: str) -> WorkerServiceClient:
        client = self._worker_clients.get(address)
        if client is None:
            client = WorkerServiceClient(address, http_client=self._http, send_compression=None)
            self._worker_clients[address] = client
        return client

    async def _heartbeat_worker(self, worker_id: str) -> None:
        try:
            while True:
                self._again.discard(worker_id)
                more = await self._heartbeat_once(worker_id)
                if not (more or worker_id in self._again) or self._stopping:
                    return
        except Exception:
            logger.exception("heartbeat to %s failed unexpectedly", worker_id)
        finally:
            self._inflight.discard(worker_id)

    async def _heartbeat_once(self, worker_id: str) -> bool:
        """One heartbeat round trip; True when another should follow at once."""
        plan = self.store.plan_heartbeat(worker_id, self.settings.advertised_address)
        if plan is None:
            return False
        kills = self._kill_sets.pop(worker_id, set())
        request = pb.HeartbeatRequest(
            worker_id=worker_id,
            tasks_to_run=plan.to_run,
            tasks_to_kill=[pb.TaskKey(task_id=t, attempt_id=a) for t, a in sorted(kills)],
            expected_tasks=plan.expected,
        )
        try:
            chaos.maybe_fail("controller.heartbeat")
            response = await self._client_for(plan.address).heartbeat(
                request, timeout_ms=int(self.settings.heartbeat_rpc_timeout_s * 1000)
            )
        except Exception as exc:
            self._kill_sets.setdefault(worker_id, set()).update(kills)
            logger.warning("heartbeat to worker %s at %s failed: %s", worker_id, plan.address, exc)
            self.apply_effects(
                self.store.record_heartbeat_failure(worker_id, _describe_error(exc), now_ms(), self._worker_timeout_ms)
            )
            return False
        if response.worker_id and response.worker_id != worker_id:
            # Another worker now answers on this address: the one we knew is gone.
            self.apply_effects(
                self.store.record_heartbeat_failure(
                    worker_id, f"address {plan.address} now belongs to worker {response.worker_id}", now_ms(), 0
                )
            )
            return False
        unknown, effects = self.store.apply_heartbeat(plan, response, now_ms())
        self.apply_effects(effects)
        if unknown:
            self._kill_sets.setdefault(worker_id, set()).update(unknown)
        return bool(unknown) or _has_more_logs(plan, response)


def _has_more_logs(plan: HeartbeatPlan, response: pb.HeartbeatResponse) -> bool:
    offsets = {(e.task_id, e.attempt_id): e.log_offset for e in plan.expected}
    for status in (*response.running_tasks, *response.completed_tasks):
        offset = offsets.get((status.task_id, status.attempt_id))
        if offset is not None and offset + len(status.logs) < status.total_log_lines:
            return True
    return False


def _describe_error(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.split("\n", 1)[0][:300]
