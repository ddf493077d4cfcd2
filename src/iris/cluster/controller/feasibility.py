"""Whether a job could ever run on this cluster: a pure check done once, at submission.

A cluster with scale groups knows every machine it can ever have; a cluster without them has the
workers that registered. A job that none of the groups and none of those workers could hold, even
with nothing else running, would otherwise wait forever without a word, so it is refused with what
is missing. A cluster with neither groups nor workers yet refuses nothing: workers may still
register, and the pending reason says that none has.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from iris.cluster.controller.scaling_group import ScalingGroup
from iris.cluster.controller.scheduler import constraint_holds, find_assignments
from iris.cluster.controller.scheduling_types import Resources, TaskDemand, WorkerCapacity, device_from_proto
from iris.cluster.types import Constraint
from iris.rpc import cluster_pb2 as pb


def demand_from_request(job_id: str, request: pb.LaunchJobRequest) -> TaskDemand:
    """The scheduling shape every task of the job shares."""
    spec = request.resources
    return TaskDemand(
        task_id="",
        job_id=job_id,
        resources=Resources(spec.cpu_millicores, spec.memory_bytes, spec.disk_bytes),
        device=device_from_proto(spec.device),
        constraints=tuple(Constraint.from_proto(c) for c in request.constraints),
        gang_group_by=request.coscheduling.group_by,
    )


def describe_demand(demand: TaskDemand) -> str:
    """What one task asks for, as a user wrote it: resources, device, constraints."""
    parts = [demand.resources.describe()]
    if demand.device is not None:
        parts.append(demand.device.describe())
    parts += [c.describe() for c in demand.constraints]
    return ", ".join(parts)


def never_servable_reason(
    demand: TaskDemand, gang_size: int, groups: Iterable[ScalingGroup], idle_workers: Sequence[WorkerCapacity]
) -> str:
    """Why no scale group and no registered worker could ever run the job, or "" if one might.

    `idle_workers` are the healthy workers; what they run now does not count."""
    group_reasons = []
    for group in groups:
        why = group.cannot_serve(demand, gang_size)
        if not why:
            return ""
        group_reasons.append(f"{group.name}: {why}")
    if idle_workers:
        # Workers register one by one (a cluster starting, a controller restarted), so a gang may
        # be waiting for its peers: registered workers rule out only what one task needs.
        why = idle_workers_cannot_hold(dataclasses.replace(demand, gang_group_by=""), 1, idle_workers)
        if not why:
            return ""
        if not group_reasons:
            return f"no worker of this cluster can ever run it ({why}); start a worker that offers it, then submit again"
        group_reasons.append(f"registered workers: {why}")
    if not group_reasons:
        return ""
    return "no scale group or worker of this cluster can ever run it (" + "; ".join(group_reasons) + ")"


def idle_workers_cannot_hold(
    demand: TaskDemand, gang_size: int, idle_workers: Sequence[WorkerCapacity]
) -> str:
    """The scheduler's own explanation of why the workers, all idle, could not place the job's
    gang (or one of its tasks), or "" when they could."""
    size = gang_size if demand.gang_group_by else 1
    if size == 1 and any(_could_hold(demand, w) for w in idle_workers):
        return ""  # the common case, without building a scheduling pass
    tasks = [dataclasses.replace(demand, task_id=f"{demand.job_id}/{i}") for i in range(size)]
    # What other jobs use now frees up later: only what a worker has at all counts.
    idle = [
        dataclasses.replace(w, available=w.total, device_free=w.device.count if w.device else 0)
        for w in idle_workers
    ]
    result = find_assignments(tasks, idle)
    if len(result.assignments) == size:
        return ""
    return next(iter(result.pending_reasons.values()))


def _could_hold(demand: TaskDemand, worker: WorkerCapacity) -> bool:
    device = demand.device
    if device is not None and not (device.matches(worker.device) and device.count <= worker.device.count):  # type: ignore[union-attr]
        return False
    return demand.resources.fits_in(worker.total) and all(
        constraint_holds(c, worker.attributes) for c in demand.constraints
    )
