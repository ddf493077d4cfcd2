"""Whether a job could ever run on this cluster: a pure check done once, at submission.

A cluster with scale groups knows every machine it can ever have; a job none of those groups and
none of the registered workers could hold would otherwise wait forever without a word.
"""

from __future__ import annotations

from collections.abc import Iterable

from iris.cluster.controller.scaling_group import ScalingGroup
from iris.cluster.controller.scheduling_types import Resources, TaskDemand, device_from_proto
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


def never_servable_reason(
    demand: TaskDemand, gang_size: int, groups: Iterable[ScalingGroup], worker_totals: Iterable[Resources]
) -> str:
    """Why no scale group and no registered worker could ever run one task, or "" if one might.

    Groups are asked first: `worker_totals` may be lazy, and reading workers costs more."""
    reasons = []
    for group in groups:
        why = group.cannot_serve(demand, gang_size)
        if not why:
            return ""
        reasons.append(f"{group.name}: {why}")
    if any(demand.resources.fits_in(total) for total in worker_totals):
        return ""
    return "no scale group or worker of this cluster can ever run it (" + "; ".join(reasons) + ")"
