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
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import cloudpickle
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from iris.client.bundle import DEFAULT_MAX_BUNDLE_BYTES, WorkspaceBundles
from iris.client.connect_client import ConnectClient
from iris.client.credentials import bearer_header, resolve_token
from iris.cluster import task_env
from iris.cluster.task_env import TaskEnv
from iris.cluster.types import (
    TERMINAL_JOB_STATES,
    Constraint,
    CoschedulingConfig,
    Entrypoint,
    EnvironmentSpec,
    JobState,
    ResourceSpec,
    check_launch_strings,
    job_state_name,
    normalize_job_id,
    parse_existing_job_policy,
    parse_priority,
)
from iris.rpc import cluster_pb2 as pb
from iris.time import Duration

if TYPE_CHECKING:
    from iris.client.resolver import ClusterResolver

R = TypeVar("R")

DEFAULT_RPC_TIMEOUT_MS = 60_000
# How long a client following a job keeps trying to reach a restarting controller.
DEFAULT_RECONNECT_TIMEOUT_S = 120.0
RECONNECT_MAX_DELAY_S = 5.0
# Calls that may be sent again after a transient failure without doing anything twice. LaunchJob
# is one because each submission carries a request id the controller remembers.
IDEMPOTENT_METHODS = frozenset(
    {
        "launch_job",
        "get_job_status",
        "list_jobs",
        "terminate_job",
        "get_task_status",
        "list_tasks",
        "get_task_logs",
        "list_workers",
        "list_endpoints",
        "unregister_endpoint",
        "get_autoscaler_status",
        "list_slices",
        "get_slice",
        "get_worker_logs",
        "get_time_series",
        "get_job_spec",
    }
)
# Calls whose answers can be long and compress well: the controller gzips them. Every other answer
# is a short message, which gzip makes costlier to build and read (about 0.2 ms of CPU on each end
# here) for a few bytes saved. Requests are never compressed: the only large one, LaunchJob,
# carries an already deflated bundle.
COMPRESSED_ANSWERS = frozenset(
    {"list_jobs", "list_tasks", "get_task_logs", "list_workers", "get_worker_logs", "get_time_series"}
)
# A transient failure (connection refused or reset, a timeout) of an idempotent call is retried
# this many times, waiting TRANSIENT_RETRY_DELAY_S, doubling, in between.
TRANSIENT_RETRIES = 3
TRANSIENT_RETRY_DELAY_S = 0.2
# While a job waits, how often `wait`/`follow_logs` report its status to an `on_status` callback.
STATUS_INTERVAL_S = 1.0
# The longest one GetJobStatus call of Job.wait asks the controller to wait for a change of state.
STATUS_WAIT_S = 10.0


class IrisError(RuntimeError):
    """Base of every error the client raises on purpose."""


class ControllerUnavailableError(IrisError):
    pass


class JobNotFoundError(IrisError):
    pass


class InvalidRequestError(IrisError):
    pass


class NotAuthenticatedError(IrisError):
    """The controller wants a (valid) token: give IRIS_TOKEN or run `iris login`."""


class PermissionDeniedError(IrisError):
    """The token's user or role may not do this."""


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
    if exc.code == Code.UNAUTHENTICATED:
        return NotAuthenticatedError(f"the controller at {url} refused the call: {exc.message}")
    if exc.code == Code.PERMISSION_DENIED:
        return PermissionDeniedError(f"permission denied: {exc.message}")
    return IrisError(f"controller error ({exc.code.name.lower()}): {exc.message}")


@dataclass(frozen=True)
class LogEntry:
    """One line a task wrote: `source` is "stdout", "stderr" or "build" (setup before it ran)."""

    task_id: str
    attempt_id: int
    timestamp_ms: int
    source: str
    data: str
    cursor: int

    @classmethod
    def from_proto(cls, line: pb.TaskLogLine) -> LogEntry:
        return cls(line.task_id, line.attempt_id, line.line.timestamp_ms, line.line.source, line.line.data, line.cursor)

    @property
    def task_index(self) -> int:
        return int(self.task_id.rsplit("/", 1)[-1])

    @property
    def timestamp(self) -> datetime:
        return datetime.fromtimestamp(self.timestamp_ms / 1000, tz=timezone.utc)


def _as_duration(value: float | Duration) -> Duration:
    return value if isinstance(value, Duration) else Duration.from_seconds(value)


def _print_notice(message: str) -> None:
    print(f"iris: {message}", file=sys.stderr, flush=True)


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

    @property
    def resolver(self) -> ClusterResolver:
        """Finds actors of this job's namespace (its root job): its own, its parent's, its children's."""
        from iris.client.resolver import ClusterResolver, namespace_of

        return ClusterResolver(self.controller_address, namespace=namespace_of(self.job_id))

    def register_endpoint(self, name: str, address: str, metadata: dict[str, str] | None = None) -> str:
        """Publish a service of this task under its job, e.g. `ctx.register_endpoint("http", addr)`."""
        with self.client as client:
            return client.register_endpoint(self.job_id, name, address, metadata)


def iris_ctx() -> IrisContext:
    task = TaskEnv.from_env(os.environ)
    if task is None:
        raise IrisError(f"iris_ctx() is only available inside an Iris task ({task_env.JOB_ID} is not set)")
    return IrisContext(
        job_id=task.job_id,
        task_id=task.task_id,
        task_index=task.task_index,
        num_tasks=task.num_tasks,
        attempt_id=task.attempt_id,
        worker_id=task.worker_id,
        controller_address=task.controller_address,
        ports=task.ports,
    )


class IrisClient:
    """`reconnect_timeout` bounds how long following a job (`Job.wait`, `Job.follow_logs`) keeps
    retrying a controller that went away, e.g. while it restarts; `notice` hears about it (stderr
    by default). `token` is the bearer token for a cluster with auth on; without one the client
    looks in IRIS_TOKEN, then in the token file (see `iris.client.credentials`)."""

    def __init__(
        self,
        url: str,
        workspace: Path | None = None,
        max_bundle_bytes: int = DEFAULT_MAX_BUNDLE_BYTES,
        reconnect_timeout: float = DEFAULT_RECONNECT_TIMEOUT_S,
        notice: Callable[[str], None] = _print_notice,
        token: str | None = None,
    ):
        self.url = url.rstrip("/") if "://" in url else f"http://{url.rstrip('/')}"
        self.workspace = workspace
        self.max_bundle_bytes = max_bundle_bytes
        self.reconnect_timeout = reconnect_timeout
        self.notice = notice
        self._rpc = ConnectClient(
            self.url,
            pb.DESCRIPTOR.services_by_name["ControllerService"],
            DEFAULT_RPC_TIMEOUT_MS,
            bearer_header(resolve_token(token)),
        )
        self._on_close: list[Callable[[], None]] = []
        # Every job submitted from an unchanged workspace carries the same bundle: zip it once.
        self._bundles = WorkspaceBundles()

    @classmethod
    def remote(cls, url: str, workspace: Path | None = None, token: str | None = None) -> IrisClient:
        return cls(url, workspace, token=token)

    @classmethod
    def for_cluster(cls, config_path: str | Path, workspace: Path | None = None) -> IrisClient:
        """A client of the running cluster that a config file describes, through its platform's
        tunnel when the controller's own address does not answer from here; `close()` closes it."""
        from iris.cluster.controller.lifecycle import controller_connection, local_state_dir
        from iris.cluster.platform.factory import create_platform
        from iris.config import load_and_validate

        config = load_and_validate(str(config_path))
        platform = create_platform(config, local_state_dir(config), str(Path(config_path).resolve()))
        connection = ExitStack()
        url = connection.enter_context(controller_connection(platform, config))
        client = cls(url, workspace)
        client._on_close.append(connection.close)
        return client

    @classmethod
    def local(
        cls,
        workers: int = 1,
        workspace: Path | None = None,
        config=None,
        progress: Callable[[str], None] | None = None,
        fork_workers: bool = False,
    ) -> IrisClient:
        """Start a controller and `workers` worker processes here; `close()` stops them all.
        `fork_workers`: see `LocalCluster`."""
        from iris.cluster.local_cluster import LocalCluster
        from iris.cluster.platform.local import LocalWorkerSpec

        specs = None if config is not None else [LocalWorkerSpec(f"local-{i}") for i in range(workers)]
        cluster = LocalCluster(config=config, workers=specs, fork_workers=fork_workers).start(progress)
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
        """One RPC; an idempotent one is sent again, a few times, after a transient failure."""
        retries = TRANSIENT_RETRIES if method in IDEMPOTENT_METHODS else 0
        delay = TRANSIENT_RETRY_DELAY_S
        while True:
            try:
                return self._rpc.call(method, request, timeout_ms, method in COMPRESSED_ANSWERS)
            except ConnectError as exc:
                if exc.code not in (Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED) or retries == 0:
                    raise _translate(exc, self.url) from None
            retries -= 1
            time.sleep(delay)
            delay *= 2

    def _call_once(self, method: str, request: Any) -> Any:
        try:
            return self._rpc.call(method, request, accept_gzip=method in COMPRESSED_ANSWERS)
        except ConnectError as exc:
            raise _translate(exc, self.url) from None

    def call_riding_out_restarts(self, method: str, request: Any) -> Any:
        """`call`, retrying with backoff for up to `reconnect_timeout` while the controller is unreachable."""
        deadline: float | None = None
        delay = 0.2
        while True:
            try:
                # One try per loop: this loop retries, and tells the user it does.
                response = self._call_once(method, request)
            except ControllerUnavailableError as exc:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.reconnect_timeout
                    self.notice(f"{exc}; retrying for up to {self.reconnect_timeout:.0f}s")
                if now >= deadline:
                    raise ControllerUnavailableError(
                        f"{exc}; gave up after {self.reconnect_timeout:.0f}s of retrying"
                    ) from None
                time.sleep(min(delay, max(0.0, deadline - now)))
                delay = min(delay * 2, RECONNECT_MAX_DELAY_S)
                continue
            if deadline is not None:
                self.notice(f"reconnected to the controller at {self.url}")
            return response

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
        check_launch_strings(request)
        if coscheduling is not None:
            request.coscheduling.CopyFrom(coscheduling.to_proto())
        if max_retries_preemption is not None:
            request.max_retries_preemption = max_retries_preemption
        for field_name, value in (("timeout", timeout), ("scheduling_timeout", scheduling_timeout)):
            if value is not None:
                getattr(request, field_name).CopyFrom(_as_duration(value).to_proto())
        parent_job_id = os.environ.get(task_env.JOB_ID, "")
        if parent_job_id:
            request.parent_job_id = parent_job_id
        bundle_root = workspace or self.workspace
        if bundle_root is None and not parent_job_id:
            bundle_root = Path.cwd()
        if bundle_root is not None:
            bundle = self._bundles.build(Path(bundle_root), self.max_bundle_bytes)
            # A workspace without files has nothing to ship: its job runs in an empty directory
            # either way, and without a bundle the controller stores none and the worker unpacks
            # none. A child still ships its empty one, or it would run its parent's code.
            if bundle.file_count or parent_job_id:
                request.bundle_blob = bundle.blob
                request.bundle_sha256 = bundle.sha256
        request.request_id = uuid.uuid4().hex
        response = self.call("launch_job", request)
        return Job(self, response.job_id)

    def job(self, job_id: str) -> Job:
        return Job(self, normalize_job_id(job_id))

    def list_jobs(
        self,
        states: Sequence[int | str] = (),
        prefix: str = "",
        page_size: int = 500,
        limit: int | None = None,
    ) -> list[pb.JobStatus]:
        """Jobs, newest first; `states` takes JobState values or names such as "running"."""
        jobs: list[pb.JobStatus] = []
        token = ""
        state_values = [JobState.of(state) for state in states]
        while limit is None or len(jobs) < limit:
            size = page_size if limit is None else min(page_size, limit - len(jobs))
            response = self.call(
                "list_jobs",
                pb.ListJobsRequest(states=state_values, name_prefix=prefix, page_size=size, page_token=token),
            )
            jobs.extend(response.jobs)
            token = response.next_page_token
            if not token:
                break
        return jobs

    def list_workers(self) -> list[pb.WorkerInfo]:
        return list(self.call("list_workers", pb.ListWorkersRequest()).workers)

    def register_endpoint(self, job_id: str, name: str, address: str, metadata: dict[str, str] | None = None) -> str:
        """Publish `address` as `<job_id>/<name>`; it disappears when the job finishes."""
        request = pb.RegisterEndpointRequest(name=name, address=address, job_id=job_id, metadata=metadata or {})
        return self.call("register_endpoint", request).endpoint_id

    def list_endpoints(self, prefix: str) -> list[pb.Endpoint]:
        return list(self.call("list_endpoints", pb.ListEndpointsRequest(prefix=prefix)).endpoints)

    # ------------------------------------------------------------ auth

    def login(self, credential: str) -> pb.SessionToken:
        """Exchanges a configured token (or a session token) for a new session token."""
        return self.call("login", pb.LoginRequest(token=credential))

    def create_token(self, user: str, role: str, ttl: Duration | None = None) -> pb.SessionToken:
        """A session token for anyone (admin only)."""
        request = pb.CreateTokenRequest(user=user, role=role)
        if ttl is not None:
            request.ttl.CopyFrom(ttl.to_proto())
        return self.call("create_token", request)


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

    def state(self) -> JobState:
        return JobState.of(self.status().state)

    def _status_riding_out_restarts(
        self, known_state: int = pb.JOB_STATE_UNSPECIFIED, wait_s: float = 0, until_finished: bool = False
    ) -> pb.JobStatus:
        """With `wait_s`, the controller answers once the state is no longer `known_state` (with
        `until_finished`, once the job has finished), or after `wait_s`."""
        request = pb.GetJobStatusRequest(
            job_id=self.job_id, known_state=known_state, wait_ms=int(wait_s * 1000), until_finished=until_finished
        )
        return self.client.call_riding_out_restarts("get_job_status", request).job

    def terminate(self, reason: str = "terminated by user") -> list[str]:
        return list(self.client.call("terminate_job", pb.TerminateJobRequest(job_id=self.job_id, reason=reason)).terminated_job_ids)

    def delete(self, kill_running: bool = False) -> list[str]:
        """Forget a finished job and its children so that the name can be used again."""
        request = pb.DeleteJobRequest(job_id=self.job_id, kill_running=kill_running)
        return list(self.client.call("delete_job", request).deleted_job_ids)

    def logs(
        self, cursor: int = 0, tail: int | None = None, since: float | Duration | None = None
    ) -> list[LogEntry]:
        """The job's log lines after `cursor`: only the last `tail` of them, and only those written
        in the last `since` (seconds or a Duration), when given. The controller applies both."""
        return self.read_logs(cursor, tail, since)[0]

    def read_logs(
        self, cursor: int = 0, tail: int | None = None, since: float | Duration | None = None
    ) -> tuple[list[LogEntry], int]:
        """Like `logs()`, with the cursor to follow on from (past the lines `tail`/`since` skipped)."""
        request = pb.GetTaskLogsRequest(id=self.job_id, cursor=cursor)
        if tail is not None:
            request.tail_lines = tail
        if since is not None:
            request.since.CopyFrom(_as_duration(since).to_proto())
        lines: list[LogEntry] = []
        while True:
            response = self.client.call("get_task_logs", request)
            lines.extend(LogEntry.from_proto(line) for line in response.lines)
            if not response.lines:
                return lines, response.next_cursor
            request = pb.GetTaskLogsRequest(id=self.job_id, cursor=response.next_cursor)

    def follow_logs(
        self,
        poll_interval: float = 0.1,
        timeout: float | None = None,
        on_status: Callable[[pb.JobStatus], None] | None = None,
        cursor: int = 0,
    ) -> Iterator[LogEntry]:
        """Yield log lines as they arrive until the job is finished and every line has been seen.

        While no lines arrive, `on_status` gets the job's status about once a second (what
        `iris run` shows while a job waits). A controller restart is ridden out, see IrisClient.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        next_status = time.monotonic() + STATUS_INTERVAL_S
        job_finished = False
        while True:
            response = self.client.call_riding_out_restarts(
                "get_task_logs", pb.GetTaskLogsRequest(id=self.job_id, cursor=cursor)
            )
            for line in response.lines:
                yield LogEntry.from_proto(line)
            cursor = response.next_cursor
            if response.finished:
                return
            if deadline is not None and time.monotonic() > deadline:
                raise JobTimeoutError(f"job {self.job_id} did not finish within {timeout}s")
            if response.lines:
                continue
            if job_finished:
                # Finished, but an attempt is still closing: its last lines are on their way.
                time.sleep(poll_interval)
                continue
            # Instead of a sleep, a wait the controller ends as soon as the job finishes: a short
            # job's last lines arrive with its end, and are read then rather than up to a poll later.
            status = self._status_riding_out_restarts(wait_s=poll_interval, until_finished=True)
            job_finished = status.state in TERMINAL_JOB_STATES
            if on_status is not None and time.monotonic() >= next_status:
                on_status(status)
                next_status = time.monotonic() + STATUS_INTERVAL_S

    def wait(
        self,
        timeout: float | None = None,
        stream_logs: bool = False,
        raise_on_failure: bool = True,
        poll_interval: float = 0.1,
        out: TextIO | None = None,
        err: TextIO | None = None,
        on_status: Callable[[pb.JobStatus], None] | None = None,
    ) -> pb.JobStatus:
        """Block until the job finishes; optionally print its logs as they arrive.

        `on_status` hears the job's status while it waits; a controller restart is ridden out.
        """
        if stream_logs:
            printer = LogPrinter(self._status_riding_out_restarts().num_tasks > 1, out or sys.stdout, err or sys.stderr)
            for line in self.follow_logs(poll_interval, timeout, on_status):
                printer.write(line)
            status = self._status_riding_out_restarts()
        else:
            deadline = None if timeout is None else time.monotonic() + timeout
            delay = 0.02
            next_status = time.monotonic()
            known = pb.JOB_STATE_UNSPECIFIED
            while True:
                wait_s = STATUS_INTERVAL_S if on_status is not None else STATUS_WAIT_S
                if deadline is not None:
                    wait_s = max(0.0, min(wait_s, deadline - time.monotonic()))
                asked = time.monotonic()
                # One call for the whole wait; a controller that predates until_finished answers
                # on each change of state instead, which the loop follows as well.
                status = self._status_riding_out_restarts(known, wait_s, until_finished=True)
                if status.state in TERMINAL_JOB_STATES:
                    break
                if on_status is not None and time.monotonic() >= next_status:
                    on_status(status)
                    next_status = time.monotonic() + STATUS_INTERVAL_S
                if deadline is not None and time.monotonic() > deadline:
                    raise JobTimeoutError(
                        f"job {self.job_id} still {job_state_name(status.state)} after {timeout}s"
                        + (f": {status.pending_reason}" if status.pending_reason else "")
                    )
                if status.state == known and time.monotonic() - asked < wait_s / 2:
                    # The controller answered without waiting (one from before GetJobStatus could
                    # wait): poll, fast at first (most jobs here are short), easing off to poll_interval.
                    time.sleep(delay)
                    delay = min(delay * 1.5, max(poll_interval, 0.02))
                known = status.state
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


class LogPrinter:
    """Writes log lines to stdout or stderr as the task did, with a marker where a retry starts."""

    def __init__(self, prefix_tasks: bool, out: TextIO, err: TextIO, timestamps: bool = False):
        self._prefix_tasks = prefix_tasks
        self._out = out
        self._err = err
        self._timestamps = timestamps
        self._attempts: dict[str, int] = {}

    def write(self, line: LogEntry) -> None:
        prefix = f"[{line.task_index}] " if self._prefix_tasks else ""
        if self._timestamps:
            prefix = f"{line.timestamp.isoformat(timespec='milliseconds').replace('+00:00', 'Z')} {prefix}"
        if self._attempts.setdefault(line.task_id, line.attempt_id) != line.attempt_id:
            self._attempts[line.task_id] = line.attempt_id
            self._err.write(f"{prefix}{attempt_marker(line)}\n")
        stream = self._err if line.source == "stderr" else self._out
        stream.write(f"{prefix}{line.data}\n")
        stream.flush()


def attempt_marker(line: LogEntry) -> str:
    """The line shown where a retried task's output starts again."""
    return f"----- {line.task_id}: attempt {line.attempt_id} -----"


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
