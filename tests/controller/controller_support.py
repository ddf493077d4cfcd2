"""A scripted fake worker, request builders and a running controller daemon shared by the
controller tests.

`FakeWorker` answers heartbeats the way a worker daemon does, from attempt states a test scripts;
tests hand it the requests the controller's core builds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iris.cluster.controller.main import ControllerDaemon
from iris.cluster.controller.settings import DaemonSettings
from iris.cluster.types import Constraint, attribute_to_proto, job_id_of_task
from iris.rpc import cluster_pb2 as pb

GiB = 1024**3
T0 = 1_700_000_000_000
CONTROLLER = "http://controller.test:10000"
WORKER_TIMEOUT_MS = 60_000
ARGV = ["python", "-m", "train", "--lr", "0.1"]
ACTIVE = (pb.TASK_STATE_ASSIGNED, pb.TASK_STATE_BUILDING, pb.TASK_STATE_RUNNING)


def local_controller_settings(root: Path, **overrides: Any) -> DaemonSettings:
    """A controller on a free loopback port, its state and bundles under `root`."""
    return DaemonSettings.from_config(
        state_dir=root / "state", bundle_prefix=f"file://{root}/bundles", host="127.0.0.1", port=0, **overrides
    )


@contextlib.contextmanager
def running_controller(root: Path, **overrides: Any) -> Iterator[ControllerDaemon]:
    """`local_controller_settings`' daemon, serving until the block ends."""
    daemon = ControllerDaemon(local_controller_settings(root, **overrides))
    daemon.start_in_thread()
    try:
        yield daemon
    finally:
        daemon.stop()


def job_request(
    name: str,
    *,
    replicas: int = 1,
    cpu: int = 1000,
    memory: int = GiB,
    max_retries_failure: int = 0,
    max_retries_preemption: int = 100,
    max_task_failures: int = 0,
    parent_job_id: str = "",
    env: dict[str, str] | None = None,
    device: pb.DeviceConfig | None = None,
    group_by: str = "",
    constraints: tuple[Constraint, ...] = (),
    priority: int = 0,
    scheduling_timeout_ms: int = 0,
) -> pb.LaunchJobRequest:
    request = pb.LaunchJobRequest(
        name=name,
        entrypoint=pb.Entrypoint(command=pb.CommandEntrypoint(argv=ARGV)),
        resources=pb.ResourceSpec(cpu_millicores=cpu, memory_bytes=memory),
        environment=pb.EnvironmentConfig(env_vars=env or {}),
        bundle_uri=f"file:///bundles/{name.strip('/').replace('/', '-')}.zip",
        bundle_sha256="ab" * 32,
        replicas=replicas,
        max_retries_failure=max_retries_failure,
        max_task_failures=max_task_failures,
        parent_job_id=parent_job_id,
    )
    request.max_retries_preemption = max_retries_preemption
    if device is not None:
        request.resources.device.CopyFrom(device)
    if group_by:
        request.coscheduling.group_by = group_by
    request.constraints.extend(c.to_proto() for c in constraints)
    request.priority = priority
    if scheduling_timeout_ms:
        request.scheduling_timeout.milliseconds = scheduling_timeout_ms
    return request


# ---------------------------------------------------------------- fake worker


@dataclass
class ScriptedAttempt:
    state: int
    exit_code: int = 0
    error: str = ""
    logs: list[str] = field(default_factory=list)
    started_at_ms: int = 0
    ports: dict[str, int] = field(default_factory=dict)
    result: bytes = b""


class FakeWorker:
    """Answers heartbeats the way a worker daemon does, from attempt states the test scripts.

    Run requests start attempts in `start_state`; kill requests move active attempts to KILLED;
    running attempts are always reported, finished ones only while the controller expects them;
    log lines are returned from the controller's `log_offset`, at most `max_log_lines` per status.
    """

    def __init__(
        self,
        worker_id: str,
        *,
        cpu: int = 4000,
        memory: int = 16 * GiB,
        max_log_lines: int = 1000,
        clock: Callable[[], int] = lambda: T0,
        ip_address: str = "10.0.0.1",
        attributes: dict[str, str | int] | None = None,
        device: pb.DeviceConfig | None = None,
    ):
        self.worker_id = worker_id
        self.address = f"http://{worker_id}.test:10001"
        self.cpu = cpu
        self.memory = memory
        self.ip_address = ip_address
        self.attributes = dict(attributes or {})
        self.device = device
        self.max_log_lines = max_log_lines
        self.clock = clock
        self.start_state = pb.TASK_STATE_RUNNING
        self.attempts: dict[tuple[str, int], ScriptedAttempt] = {}
        self.received: list[pb.RunTaskRequest] = []
        self.kill_requests: list[tuple[str, int]] = []

    def metadata(self) -> pb.WorkerMetadata:
        metadata = pb.WorkerMetadata(
            hostname=self.worker_id,
            ip_address=self.ip_address,
            cpu_millicores=self.cpu,
            memory_bytes=self.memory,
            disk_bytes=100 * GiB,
            runtime="fake",
        )
        for key, value in self.attributes.items():
            metadata.attributes[key].CopyFrom(attribute_to_proto(value))
        if self.device is not None:
            metadata.device.CopyFrom(self.device)
        return metadata

    def script(self, task_id: str, attempt_id: int = 0, **changes) -> ScriptedAttempt:
        attempt = self.attempts.setdefault((task_id, attempt_id), ScriptedAttempt(pb.TASK_STATE_RUNNING))
        for name, value in changes.items():
            setattr(attempt, name, value)
        return attempt

    def log(self, task_id: str, attempt_id: int, *lines: str) -> None:
        self.attempts[(task_id, attempt_id)].logs.extend(lines)

    def restart(self) -> None:
        """The worker process restarted: it wiped its containers and knows no attempts."""
        self.attempts.clear()

    def heartbeat(self, request: pb.HeartbeatRequest) -> pb.HeartbeatResponse:
        for run in request.tasks_to_run:
            self.received.append(run)
            self.attempts.setdefault(
                (run.task_id, run.attempt_id), ScriptedAttempt(self.start_state, started_at_ms=self.clock())
            )
        for key in request.tasks_to_kill:
            self.kill_requests.append((key.task_id, key.attempt_id))
            attempt = self.attempts.get((key.task_id, key.attempt_id))
            if attempt is not None and attempt.state in ACTIVE:
                attempt.state, attempt.exit_code = pb.TASK_STATE_KILLED, -1
                attempt.error = "killed by the controller"
        offsets = {(e.task_id, e.attempt_id): e.log_offset for e in request.expected_tasks}
        response = pb.HeartbeatResponse(worker_id=self.worker_id)
        for (task_id, attempt_id), attempt in self.attempts.items():
            active = attempt.state in ACTIVE
            if not active and (task_id, attempt_id) not in offsets:
                continue
            offset = offsets.get((task_id, attempt_id), 0)
            status = pb.WorkerTaskStatus(
                task_id=task_id,
                attempt_id=attempt_id,
                job_id=job_id_of_task(task_id),
                state=attempt.state,
                exit_code=attempt.exit_code,
                error=attempt.error,
                total_log_lines=len(attempt.logs),
                ports=attempt.ports,
                result=attempt.result,
            )
            if attempt.started_at_ms:
                status.started_at.epoch_ms = attempt.started_at_ms
            for i, data in enumerate(attempt.logs[offset : offset + self.max_log_lines]):
                status.logs.append(pb.LogLine(timestamp_ms=T0 + offset + i, source="stdout", data=data))
            (response.running_tasks if active else response.completed_tasks).append(status)
        return response
