"""IrisClient: submit jobs, follow them, collect their results.

`IrisClient.remote(url)` talks to a running controller; `IrisClient.local()` starts a whole
cluster on this machine (controller in-process, real worker processes) and tears it down on
close. Inside a task, `iris_ctx()` gives the task's identity and a client whose submissions
become child jobs of the running job.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, TypeVar

import cloudpickle
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from iris.client.bundle import DEFAULT_MAX_BUNDLE_BYTES, build_bundle
from iris.cluster.types import (
    TERMINAL_JOB_STATES,
    Constraint,
    CoschedulingConfig,
    Entrypoint,
    EnvironmentSpec,
    ResourceSpec,
    job_state_name,
    normalize_job_id,
    parse_existing_job_policy,
    parse_priority,
)
from iris.rpc import cluster_pb2 as pb
from iris.rpc import time_pb2
from iris.rpc.cluster_connect import ControllerServiceClientSync
from iris.time import Duration

R = TypeVar("R")

DEFAULT_RPC_TIMEOUT_MS = 60_000


class IrisError(RuntimeError):
    """Base of every error the client raises on purpose."""


class ControllerUnavailableError(IrisError):
    pass


class JobNotFoundError(IrisError):
    pass


class InvalidRequestError(IrisError):
    pass


class JobFailedError(IrisError):
    def __init__(self, status: pb.JobStatus):
        self.status = status
        reason = status.error or "no reason recorded"
        super().__init__(f"job {status.job_id} {job_state_name(status.state)}: {reason}")


class JobTimeoutError(IrisError, TimeoutError):
    pass


class RemoteTaskError(IrisError):
    """A callable task raised; the original exception, when it could travel, is the __cause__."""


def _translate(exc: ConnectError, url: str) -> IrisError:
    if exc.code in (Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED) and "Request failed" in exc.message:
        detail = exc.message.rsplit(":", 1)[-1].strip()
        return ControllerUnavailableError(f"cannot reach the Iris controller at {url}: {detail}")
    if exc.code == Code.NOT_FOUND:
        return JobNotFoundError(exc.message)
    if exc.code in (Code.INVALID_ARGUMENT, Code.ALREADY_EXISTS, Code.FAILED_PRECONDITION):
        return InvalidRequestError(exc.message)
    return IrisError(f"controller error ({exc.code.name.lower()}): {exc.message}")


@dataclass
class IrisContext:
    """Who the current task is, from the variables the worker sets."""

    job_id: str
    task_id: str
    task_index: int
    num_tasks: int
    attempt_id: int
    worker_id: str
    controller_address: str
    ports: dict[str, int]

    @property
    def client(self) -> IrisClient:
        return IrisClient.remote(self.controller_address)

    def register_endpoint(self, name: str, address: str, metadata: dict[str, str] | None = None) -> str:
        """Publish a service of this task under its job, e.g. `ctx.register_endpoint("http", addr)`."""
        with self.client as client:
            return client.register_endpoint(self.job_id, name, address, metadata)


def iris_ctx() -> IrisContext:
    env = os.environ
    if "IRIS_JOB_ID" not in env:
        raise IrisError("iris_ctx() is only available inside an Iris task (IRIS_JOB_ID is not set)")
    ports = {k.removeprefix("IRIS_PORT_").lower(): int(v) for k, v in env.items() if k.startswith("IRIS_PORT_")}
    return IrisContext(
        job_id=env["IRIS_JOB_ID"],
        task_id=env.get("IRIS_TASK_ID", ""),
        task_index=int(env.get("IRIS_TASK_INDEX", "0")),
        num_tasks=int(env.get("IRIS_NUM_TASKS", "1")),
        attempt_id=int(env.get("IRIS_ATTEMPT_ID", "0")),
        worker_id=env.get("IRIS_WORKER_ID", ""),
        controller_address=env.get("IRIS_CONTROLLER_ADDRESS", ""),
        ports=ports,
    )


class IrisClient:
    def __init__(self, url: str, workspace: Path | None = None, max_bundle_bytes: int = DEFAULT_MAX_BUNDLE_BYTES):
        self.url = url.rstrip("/") if "://" in url else f"http://{url.rstrip('/')}"
        self.workspace = workspace
        self.max_bundle_bytes = max_bundle_bytes
        self._rpc = ControllerServiceClientSync(self.url, timeout_ms=DEFAULT_RPC_TIMEOUT_MS)
        self._on_close: list[Callable[[], None]] = []

    @classmethod
    def remote(cls, url: str, workspace: Path | None = None) -> IrisClient:
        return cls(url, workspace)

    @classmethod
    def local(
        cls,
        workers: int = 1,
        workspace: Path | None = None,
        config=None,
        progress: Callable[[str], None] | None = None,
    ) -> IrisClient:
        """Start a controller and `workers` worker processes here; `close()` stops them all."""
        from iris.cluster.local_cluster import LocalCluster
        from iris.cluster.platform.local import LocalWorkerSpec

        specs = None if config is not None else [LocalWorkerSpec(f"local-{i}") for i in range(workers)]
        cluster = LocalCluster(config=config, workers=specs).start(progress)
        client = cls(cluster.url, workspace)
        client.cluster = cluster
        client._on_close.append(cluster.stop)
        return client

    def close(self) -> None:
        self._rpc.close()
        while self._on_close:
            self._on_close.pop()()

    def __enter__(self) -> IrisClient:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # ------------------------------------------------------------ rpc

    def call(self, method: str, request: Any, timeout_ms: int | None = None) -> Any:
        try:
            return getattr(self._rpc, method)(request, timeout_ms=timeout_ms)
        except ConnectError as exc:
            raise _translate(exc, self.url) from None

    # ------------------------------------------------------------ jobs

    def submit(
        self,
        entrypoint: Entrypoint,
        name: str | None = None,
        resources: ResourceSpec | None = None,
        environment: EnvironmentSpec | None = None,
        replicas: int = 1,
        max_retries_failure: int = 0,
        max_retries_preemption: int | None = None,
        timeout: float | Duration | None = None,
        ports: Sequence[str] = (),
        priority: int | str = 0,
        workspace: Path | None = None,
        constraints: Sequence[Constraint] = (),
        coscheduling: CoschedulingConfig | None = None,
        scheduling_timeout: float | Duration | None = None,
        max_task_failures: int = 0,
        existing_job_policy: str | int | None = None,
    ) -> Job:
        """Submit a job; see `Job` for following it.

        A job whose name is taken by a finished job replaces it; one still running is an error
        unless `existing_job_policy` is "keep" (return the running job) or "recreate" (kill and
        replace it); "error" refuses any existing job.

        `timeout` bounds each task's run time and `scheduling_timeout` how long it may wait to be
        placed (the job becomes UNSCHEDULABLE). A TPU device of a multi-host variant sets replicas
        and coscheduling by itself. Inside a task, the job becomes a child of the running job.
        """
        request = pb.LaunchJobRequest(
            name=name or "",
            entrypoint=entrypoint.proto,
            resources=(resources or ResourceSpec()).to_proto(),
            environment=(environment or EnvironmentSpec()).to_proto(),
            replicas=replicas,
            max_retries_failure=max_retries_failure,
            max_task_failures=max_task_failures,
            ports=list(ports),
            priority=parse_priority(priority),
            constraints=[c.to_proto() for c in constraints],
            existing_job_policy=parse_existing_job_policy(existing_job_policy),
        )
        if coscheduling is not None:
            request.coscheduling.CopyFrom(coscheduling.to_proto())
        if max_retries_preemption is not None:
            request.max_retries_preemption = max_retries_preemption
        for field_name, value in (("timeout", timeout), ("scheduling_timeout", scheduling_timeout)):
            if value is not None:
                duration = value if isinstance(value, Duration) else Duration.from_seconds(value)
                getattr(request, field_name).CopyFrom(time_pb2.Duration(milliseconds=duration.milliseconds))
        parent_job_id = os.environ.get("IRIS_JOB_ID", "")
        if parent_job_id:
            request.parent_job_id = parent_job_id
        bundle_root = workspace or self.workspace
        if bundle_root is None and not parent_job_id:
            bundle_root = Path.cwd()
        if bundle_root is not None:
            bundle = build_bundle(Path(bundle_root), self.max_bundle_bytes)
            request.bundle_blob = bundle.blob
            request.bundle_sha256 = bundle.sha256
        response = self.call("launch_job", request)
        return Job(self, response.job_id)

    def job(self, job_id: str) -> Job:
        return Job(self, normalize_job_id(job_id))

    def list_jobs(self, states: Sequence[int] = (), prefix: str = "", page_size: int = 500) -> list[pb.JobStatus]:
        jobs: list[pb.JobStatus] = []
        token = ""
        while True:
            response = self.call(
                "list_jobs",
                pb.ListJobsRequest(states=list(states), name_prefix=prefix, page_size=page_size, page_token=token),
            )
            jobs.extend(response.jobs)
            token = response.next_page_token
            if not token:
                return jobs

    def list_workers(self) -> list[pb.WorkerInfo]:
        return list(self.call("list_workers", pb.ListWorkersRequest()).workers)

    def register_endpoint(self, job_id: str, name: str, address: str, metadata: dict[str, str] | None = None) -> str:
        """Publish `address` as `<job_id>/<name>`; it disappears when the job finishes."""
        request = pb.RegisterEndpointRequest(name=name, address=address, job_id=job_id, metadata=metadata or {})
        return self.call("register_endpoint", request).endpoint_id

    def list_endpoints(self, prefix: str) -> list[pb.Endpoint]:
        return list(self.call("list_endpoints", pb.ListEndpointsRequest(prefix=prefix)).endpoints)


class Job:
    def __init__(self, client: IrisClient, job_id: str):
        self.client = client
        self.job_id = job_id

    def __repr__(self) -> str:
        return f"Job({self.job_id!r})"

    def status(self, include_tasks: bool = False) -> pb.JobStatus:
        return self.client.call(
            "get_job_status", pb.GetJobStatusRequest(job_id=self.job_id, include_tasks=include_tasks)
        ).job

    def terminate(self, reason: str = "terminated by user") -> list[str]:
        return list(self.client.call("terminate_job", pb.TerminateJobRequest(job_id=self.job_id, reason=reason)).terminated_job_ids)

    def delete(self, kill_running: bool = False) -> list[str]:
        """Forget a finished job and its children so that the name can be used again."""
        request = pb.DeleteJobRequest(job_id=self.job_id, kill_running=kill_running)
        return list(self.client.call("delete_job", request).deleted_job_ids)

    def logs(self, cursor: int = 0) -> list[pb.TaskLogLine]:
        lines: list[pb.TaskLogLine] = []
        while True:
            response = self.client.call("get_task_logs", pb.GetTaskLogsRequest(id=self.job_id, cursor=cursor))
            lines.extend(response.lines)
            if not response.lines:
                return lines
            cursor = response.next_cursor

    def follow_logs(self, poll_interval: float = 0.1, timeout: float | None = None) -> Iterator[pb.TaskLogLine]:
        """Yield log lines as they arrive until the job is finished and every line has been seen."""
        cursor = 0
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            response = self.client.call("get_task_logs", pb.GetTaskLogsRequest(id=self.job_id, cursor=cursor))
            yield from response.lines
            cursor = response.next_cursor
            if response.finished:
                return
            if deadline is not None and time.monotonic() > deadline:
                raise JobTimeoutError(f"job {self.job_id} did not finish within {timeout}s")
            if not response.lines:
                time.sleep(poll_interval)

    def wait(
        self,
        timeout: float | None = None,
        stream_logs: bool = False,
        raise_on_failure: bool = True,
        poll_interval: float = 0.1,
        out: TextIO | None = None,
        err: TextIO | None = None,
    ) -> pb.JobStatus:
        """Block until the job finishes; optionally print its logs as they arrive."""
        if stream_logs:
            prefix_tasks = self.status().num_tasks > 1
            out, err = out or sys.stdout, err or sys.stderr
            for line in self.follow_logs(poll_interval, timeout):
                stream = err if line.line.source == "stderr" else out
                prefix = f"[{line.task_id.rsplit('/', 1)[-1]}] " if prefix_tasks else ""
                stream.write(f"{prefix}{line.line.data}\n")
                stream.flush()
            status = self.status()
        else:
            deadline = None if timeout is None else time.monotonic() + timeout
            delay = 0.02
            while True:
                status = self.status()
                if status.state in TERMINAL_JOB_STATES:
                    break
                if deadline is not None and time.monotonic() > deadline:
                    raise JobTimeoutError(
                        f"job {self.job_id} still {job_state_name(status.state)} after {timeout}s"
                        + (f": {status.pending_reason}" if status.pending_reason else "")
                    )
                time.sleep(delay)
                # Poll fast at first (most jobs here are short), easing off to poll_interval.
                delay = min(delay * 1.5, max(poll_interval, 0.02))
        if raise_on_failure and status.state != pb.JOB_STATE_SUCCEEDED:
            raise JobFailedError(status)
        return status

    def result(self, timeout: float | None = None) -> Any:
        """The callable's return value (a list, one per task, for a job with several tasks).

        If the callable raised, its exception is raised here with the remote traceback attached.
        """
        status = self.wait(timeout, raise_on_failure=False)
        tasks = self.client.call("list_tasks", pb.ListTasksRequest(job_id=self.job_id)).tasks
        values = [_unpack_result(self.job_id, task) for task in tasks]
        if status.state != pb.JOB_STATE_SUCCEEDED:
            raise JobFailedError(status)
        return values[0] if len(values) == 1 else values


def _unpack_result(job_id: str, task: pb.TaskStatus) -> Any:
    if not task.result:
        return None
    outcome = cloudpickle.loads(task.result)
    if outcome[0] == "ok":
        return outcome[1]
    _, exc, formatted = outcome
    note = f"raised in Iris task {task.task_id}; remote traceback:\n{formatted}"
    if isinstance(exc, BaseException):
        exc.add_note(note)
        raise exc
    raise RemoteTaskError(f"task {task.task_id} of job {job_id} raised: {exc}\n{note}")
