"""What a worker is sent to start an attempt: the job's request, shaped for one task, with the
task environment contract (`iris.cluster.task_env`) filled in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from iris.cluster.task_env import TaskEnv, tpu_env
from iris.cluster.types import ATTR_TPU_NAME, attribute_from_proto, tpu_topology
from iris.rpc import cluster_pb2 as pb


def run_request(
    request: pb.LaunchJobRequest,
    attempt: Mapping,
    worker_id: str,
    controller_address: str,
    gang_hosts: Sequence[str],
    worker: pb.WorkerMetadata,
) -> pb.RunTaskRequest:
    """`attempt` carries task_id, attempt_id, job_id and task_index; `gang_hosts` are the hosts of
    the job's tasks in task order (TPU jobs only)."""
    num_tasks = max(1, request.replicas)
    env = TaskEnv(
        job_id=attempt["job_id"],
        task_id=attempt["task_id"],
        task_index=attempt["task_index"],
        num_tasks=num_tasks,
        attempt_id=attempt["attempt_id"],
        worker_id=worker_id,
        controller_address=controller_address,
    ).to_env()
    if request.resources.device.HasField("tpu"):
        tpu_name = worker.attributes.get(ATTR_TPU_NAME)
        variant = request.resources.device.tpu.variant
        env.update(
            tpu_env(
                attempt["task_index"],
                gang_hosts,
                str(attribute_from_proto(tpu_name)) if tpu_name else "",
                tpu_topology(variant).chips_per_host if variant else 0,
            )
        )
    return pb.RunTaskRequest(
        task_id=attempt["task_id"],
        job_id=attempt["job_id"],
        attempt_id=attempt["attempt_id"],
        task_index=attempt["task_index"],
        num_tasks=num_tasks,
        entrypoint=request.entrypoint,
        resources=request.resources,
        environment=request.environment,
        bundle_uri=request.bundle_uri,
        bundle_sha256=request.bundle_sha256,
        ports=request.ports,
        timeout=request.timeout,
        env=env,
    )
