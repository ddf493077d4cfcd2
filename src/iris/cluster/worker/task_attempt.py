"""One attempt of one task on this worker, driven by its own thread.

ASSIGNED -> BUILDING (bundle fetched, image pulled, setup run) -> RUNNING (command started) ->
SUCCEEDED, FAILED or KILLED; an attempt with none of that to do goes from ASSIGNED to RUNNING.
The attempt keeps every log line it produced (build, stdout, stderr) with stable indexes so the
controller can pull them incrementally from any offset.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from iris import chaos
from iris.cluster import task_env
from iris.cluster.reused_threads import ReusedThreads
from iris.cluster.runtime.types import (
    BuildFailedError,
    ContainerConfig,
    ContainerError,
    ContainerHandle,
    ContainerRuntime,
    LogLine,
    managed_labels,
)
from iris.cluster.worker.bundle_cache import BundleCache
from iris.cluster.worker.workdirs import Workdirs
from iris.rpc import cluster_pb2 as pb
from iris.rpc import time_pb2
from iris.storage import StorageError, StorageNotFoundError
from iris.time import now_ms

logger = logging.getLogger(__name__)

CALLABLE_FILE = ".iris-callable.pkl"
RESULT_FILE = ".iris-result.pkl"
# A callable's return value travels back in a heartbeat; past this it is refused with a clear error.
MAX_RESULT_BYTES = 32 * 1024 * 1024
LOG_POLL_INTERVAL_S = 0.05
# A running attempt's resource use is measured by its own thread this long after it starts
# running, then this often; heartbeats carry the last measurement, so answering one reads no
# container engine and no /proc. Reading /proc for every heartbeat cost more of the worker's CPU
# than anything else it does for a short task, and a measurement at the start says little: no CPU
# share yet, and the memory of the launcher rather than of the command.
USAGE_SAMPLE_INTERVAL_S = 1.0

TERMINAL = frozenset(
    {pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED, pb.TASK_STATE_KILLED, pb.TASK_STATE_WORKER_FAILED}
)


@dataclass(frozen=True)
class AttemptContext:
    """What every attempt on this worker shares."""

    runtime: ContainerRuntime
    bundles: BundleCache
    workdirs: Workdirs
    kill_grace_s: float
    task_image: str
    on_change: Callable[[], None]
    # Each attempt is driven by one of these threads from start to end.
    threads: ReusedThreads = field(default_factory=lambda: ReusedThreads("attempt"))


class _WorkerFault(Exception):
    """Preparing the attempt failed for a reason of the worker's (storage, the container engine)."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class TaskAttempt:
    def __init__(self, request: pb.RunTaskRequest, ports: dict[str, int], ctx: AttemptContext):
        self.request = request
        self.key = (request.task_id, request.attempt_id)
        self.ports = ports
        self._ctx = ctx
        self._lock = threading.Lock()
        self.state = pb.TASK_STATE_ASSIGNED
        self.exit_code = 0
        self.error = ""
        self.result = b""
        self.started_at_ms = 0
        self.finished_at_ms = 0
        self._logs: list[LogLine] = []
        self._handle: ContainerHandle | None = None
        # Set once by kill(), read by the attempt's thread between its steps.
        self._kill_requested = False
        # (when measured, monotonic; the measurement, None before the first): see
        # USAGE_SAMPLE_INTERVAL_S. Set when the attempt starts running.
        self._usage: tuple[float, pb.ResourceUsage | None] | None = None
        safe_id = request.task_id.strip("/").replace("/", "__")
        self.workdir = ctx.workdirs.root / f"{safe_id}.a{request.attempt_id}"
        self._ended = threading.Event()
        self._workdir_released = False

    # ------------------------------------------------------------ control

    def start(self) -> None:
        self._ctx.threads.run(self._run)

    def kill(self) -> None:
        """Ask the attempt to stop; returns at once, the attempt's thread does the waiting."""
        self._kill_requested = True
        handle = self._handle
        if handle is not None:
            threading.Thread(target=self._kill_container, args=(handle,), daemon=True).start()

    def _kill_container(self, handle: ContainerHandle) -> None:
        try:
            chaos.maybe_fail(chaos.CONTAINER_KILL, ContainerError)
            handle.kill(self._ctx.kill_grace_s)
        except ContainerError as exc:
            # The attempt keeps reporting itself running, so the controller asks for the kill again.
            logger.warning("killing %s attempt %d failed: %s", *self.key, exc)

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL

    def join(self, timeout: float | None = None) -> None:
        """Wait until the attempt's thread is done with it (cleanup included)."""
        self._ended.wait(timeout)

    @property
    def ended(self) -> bool:
        """Whether the attempt's thread is done with it (its container cleaned up)."""
        return self._ended.is_set()

    def retired(self) -> RetiredAttempt:
        """What the worker keeps of this attempt, ended, once the controller has taken in its end."""
        assert self.ended, "an attempt is kept as retired only once its thread is done with it"
        return RetiredAttempt(self.key, self.status(None, 0).SerializeToString(), tuple(self.logs()))

    def release_workdir(self) -> None:
        """The controller has taken in the attempt's end: its work directory goes back to the
        worker's pool as soon as the attempt's thread is done with it (its container cleaned up)."""
        with self._lock:
            if self._workdir_released:
                return
            self._workdir_released = True
            ended = self._ended.is_set()
        if ended:
            self._ctx.workdirs.release(self.workdir)

    # ------------------------------------------------------------ reporting

    def logs(self) -> list[LogLine]:
        with self._lock:
            return list(self._logs)

    def status(self, log_offset: int | None, max_lines: int) -> pb.WorkerTaskStatus:
        with self._lock:
            total_lines = len(self._logs)
            window = self._logs[log_offset : log_offset + max_lines] if log_offset is not None else []
            status = pb.WorkerTaskStatus(
                task_id=self.request.task_id,
                job_id=self.request.job_id,
                attempt_id=self.request.attempt_id,
                state=self.state,
                exit_code=self.exit_code,
                error=self.error,
                total_log_lines=total_lines,
                ports=self.ports,
            )
            if self.started_at_ms:
                status.started_at.CopyFrom(time_pb2.Timestamp(epoch_ms=self.started_at_ms))
            if self.finished_at_ms:
                status.finished_at.CopyFrom(time_pb2.Timestamp(epoch_ms=self.finished_at_ms))
            if self.result:
                status.result = self.result
        _add_logs(status, window)
        usage = self._usage
        if usage is not None and usage[1] is not None and self.state == pb.TASK_STATE_RUNNING:
            status.usage.CopyFrom(usage[1])
        return status

    def _sample_usage(self, handle: ContainerHandle) -> None:
        """Measure the running container's use when USAGE_SAMPLE_INTERVAL_S passed since the last
        measurement (or the start); on the attempt's thread, while it waits for the command."""
        last = self._usage
        now = time.monotonic()
        if last is None or now - last[0] < USAGE_SAMPLE_INTERVAL_S:
            return
        try:
            stats = handle.stats()
        except Exception:
            logger.debug("stats for %s unavailable", self.key, exc_info=True)
            self._usage = (now, None)
            return
        usage = pb.ResourceUsage(
            memory_bytes=stats.memory_bytes, cpu_percent=stats.cpu_percent, process_count=stats.process_count
        )
        self._usage = (now, usage)

    def _set_state(self, state: int, error: str = "", exit_code: int | None = None) -> None:
        with self._lock:
            if self.state in TERMINAL:
                return
            self.state = state
            if error:
                self.error = error
            if exit_code is not None:
                self.exit_code = exit_code
            if state == pb.TASK_STATE_RUNNING and not self.started_at_ms:
                self.started_at_ms = now_ms()
                self._usage = (time.monotonic(), None)
            if state in TERMINAL:
                self.finished_at_ms = now_ms()
        self._ctx.on_change()

    # ------------------------------------------------------------ the attempt's thread

    def _run(self) -> None:
        # Named for the attempt it drives, as a stack dump of the worker shows it.
        threading.current_thread().name = f"attempt-{self.request.task_id}#{self.request.attempt_id}"
        try:
            self._drive()
        finally:
            with self._lock:
                self._ended.set()
                released = self._workdir_released
            if released:
                self._ctx.workdirs.release(self.workdir)

    def _drive(self) -> None:
        try:
            self._prepare_and_run()
        except BuildFailedError as exc:
            self._set_state(pb.TASK_STATE_FAILED, f"setup failed: {exc}", exit_code=1)
        except _WorkerFault as fault:
            # The worker, not the task, failed: this spends the preemption budget, not the failure budget.
            logger.warning("attempt %s could not be prepared: %s", self.key, fault.cause)
            self._set_state(
                pb.TASK_STATE_WORKER_FAILED,
                f"the worker could not prepare the task: {type(fault.cause).__name__}: {fault.cause}",
                exit_code=1,
            )
        except Exception as exc:
            logger.exception("attempt %s failed", self.key)
            self._set_state(pb.TASK_STATE_FAILED, f"{type(exc).__name__}: {exc}", exit_code=1)
        finally:
            if self._kill_requested:
                self._set_state(pb.TASK_STATE_KILLED, "killed by the controller", exit_code=-1)
            handle = self._handle
            if handle is not None:
                try:
                    self._pull_logs(handle)
                    handle.cleanup()
                except Exception:
                    logger.warning("cleanup of %s failed", self.key, exc_info=True)
                # A finished attempt stays for FINISHED_RETENTION_S (300,000 of them at 500 jobs/s);
                # its container (process, pipes, locks) would stay with it and make every garbage
                # collection of the worker walk them.
                self._handle = None

    def _prepare_and_run(self) -> None:
        request = self.request
        if self._has_setup():
            self._set_state(pb.TASK_STATE_BUILDING)
        self._ctx.workdirs.create(self.workdir)
        if self._unpacks_bundle():
            try:
                self._ctx.bundles.extract_to(request.bundle_uri, request.bundle_sha256, self.workdir)
            except StorageNotFoundError:
                raise  # the bundle is gone for good: another attempt would not find it either
            except StorageError as exc:
                raise _WorkerFault(exc) from exc
        if self._kill_requested:
            return
        config = self._container_config()
        try:
            chaos.maybe_fail(chaos.CONTAINER_CREATE, ContainerError)
            handle = self._ctx.runtime.create_container(config)
        except ContainerError as exc:
            raise _WorkerFault(exc) from exc
        self._handle = handle
        if self._kill_requested:
            return
        handle.build()
        self._pull_logs(handle)
        if self._kill_requested:
            return
        chaos.maybe_fail(chaos.CONTAINER_START, ContainerError)
        handle.run_to_exit(
            lambda: self._set_state(pb.TASK_STATE_RUNNING), LOG_POLL_INTERVAL_S, lambda: self._poll(handle)
        )
        self._finish(handle)

    def _has_setup(self) -> bool:
        """Whether starting the command waits for something a user would want to see as BUILDING: a
        bundle to unpack, an image to pull, packages to install or setup commands to run. Without
        one, BUILDING lasted the few milliseconds of starting a process, yet in the sustained
        throughput benchmark heartbeats caught 43% of the jobs in it, and each such catch cost the
        controller three state changes more (attempt, task, job): over a quarter of the state
        changes its heartbeats wrote."""
        environment = self.request.environment
        return bool(
            self._unpacks_bundle()
            or self._ctx.runtime.pulls_images
            or environment.setup_commands
            or environment.pip_packages
        )

    def _unpacks_bundle(self) -> bool:
        """Whether this worker unpacks the job's bundle (a runtime that `fetches_bundle` does it itself)."""
        return bool(self.request.bundle_uri) and not self._ctx.runtime.fetches_bundle

    def _poll(self, handle: ContainerHandle) -> None:
        self._pull_logs(handle)
        self._sample_usage(handle)

    def _pull_logs(self, handle: ContainerHandle) -> None:
        with self._lock:
            known = len(self._logs)
        fresh = handle.logs(known)
        if fresh:
            with self._lock:
                self._logs.extend(fresh)
            self._ctx.on_change()

    def _finish(self, handle: ContainerHandle) -> None:
        status = handle.status()
        self._pull_logs(handle)
        if self._kill_requested:
            return
        result_path = self.workdir / RESULT_FILE
        if result_path.exists():
            size = result_path.stat().st_size
            if size > MAX_RESULT_BYTES:
                self._set_state(
                    pb.TASK_STATE_FAILED,
                    f"the callable's return value is {size / 2**20:.1f} MiB, over the {MAX_RESULT_BYTES // 2**20} MiB "
                    "limit; write large results to storage and return their location",
                    exit_code=status.exit_code if status.exit_code else 1,
                )
                return
            with self._lock:
                self.result = result_path.read_bytes()
        if status.exit_code == 0:
            self._set_state(pb.TASK_STATE_SUCCEEDED, exit_code=0)
        else:
            error = status.error or f"exited with code {status.exit_code}"
            self._set_state(pb.TASK_STATE_FAILED, error, exit_code=status.exit_code if status.exit_code is not None else 1)

    def _container_config(self) -> ContainerConfig:
        request = self.request
        env = {}
        if request.resources.device.HasField("tpu"):
            # TPU runtimes read the host's TPU_* description (bounds, topology); the controller's
            # view of the slice (hostnames, worker id) wins where both speak.
            env.update({k: v for k, v in os.environ.items() if k.startswith("TPU_")})
        env.update(request.environment.env_vars)
        env.update(request.env)
        for name, port in self.ports.items():
            env[task_env.port_env_name(name)] = str(port)
        env[task_env.WORKDIR] = str(self.workdir)
        entry = request.entrypoint.WhichOneof("kind")
        if entry == "callable":
            (self.workdir / CALLABLE_FILE).write_bytes(request.entrypoint.callable.pickled)
            # In a container the worker's interpreter path means nothing; the task image's python3
            # has iris (and so cloudpickle and the callable runner) installed.
            python = sys.executable if self._ctx.runtime.name == "process" else "python3"
            command = [
                python,
                "-m",
                "iris.cluster.worker.callable_runner",
                str(self.workdir / CALLABLE_FILE),
                str(self.workdir / RESULT_FILE),
            ]
        else:
            command = list(request.entrypoint.command.argv)
        # User modules in the bundle must be importable, as they were on the submitting machine.
        env["PYTHONPATH"] = ":".join(filter(None, [str(self.workdir), env.get("PYTHONPATH", "")]))
        resources = request.resources
        device = resources.device
        return ContainerConfig(
            image=self._ctx.task_image,
            bundle_uri=request.bundle_uri if self._ctx.runtime.fetches_bundle else "",
            bundle_sha256=request.bundle_sha256 if self._ctx.runtime.fetches_bundle else "",
            command=command,
            env=env,
            workdir=self.workdir,
            setup_commands=list(request.environment.setup_commands),
            pip_packages=list(request.environment.pip_packages),
            cpu_millicores=resources.cpu_millicores,
            memory_bytes=resources.memory_bytes,
            disk_bytes=resources.disk_bytes,
            ports=dict(self.ports),
            labels=managed_labels(request.task_id, request.job_id, request.attempt_id),
            task_id=request.task_id,
            attempt_id=request.attempt_id,
            timeout_seconds=(request.timeout.milliseconds / 1000) if request.timeout.milliseconds else None,
            tpu_variant=device.tpu.variant if device.HasField("tpu") else "",
            gpu_count=device.gpu.count if device.HasField("gpu") else 0,
        )


@dataclass(frozen=True, slots=True, eq=False)
class RetiredAttempt:
    """An ended attempt whose end the controller has taken in, as the worker keeps it for
    FINISHED_RETENTION_S (for FetchTaskLogs and the worker's own status queries, and to be reported
    again should the controller ask): its final status, serialized, and its log lines.

    A TaskAttempt kept that long held its request (a callable's pickle among it), locks and events:
    about 7 KB and 18 objects for the garbage collector to walk, for each of the 300,000 attempts a
    worker ends in ten minutes at 500 jobs/s."""

    key: tuple[str, int]
    final_status: bytes
    lines: tuple[LogLine, ...]

    @property
    def finished(self) -> bool:
        return True

    @property
    def state(self) -> int:
        return self._status().state

    def logs(self) -> list[LogLine]:
        return list(self.lines)

    def status(self, log_offset: int | None, max_lines: int) -> pb.WorkerTaskStatus:
        status = self._status()
        if log_offset is not None:
            _add_logs(status, self.lines[log_offset : log_offset + max_lines])
        return status

    def _status(self) -> pb.WorkerTaskStatus:
        return pb.WorkerTaskStatus.FromString(self.final_status)


# What the worker keeps of an attempt, by its key.
KeptAttempt = TaskAttempt | RetiredAttempt


def _add_logs(status: pb.WorkerTaskStatus, lines: Iterable[LogLine]) -> None:
    status.logs.extend(
        pb.LogLine(timestamp_ms=line.timestamp_ms, source=line.source, data=line.data) for line in lines
    )
