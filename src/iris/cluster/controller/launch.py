"""What a LaunchJob request must satisfy, and the shape the controller gives it, as pure functions.

`validate_launch_request` checks a request and fills in what the controller decides for the user
(TPU replicas and gang, bundle digest, preemption retries); `job_id_for` names the job;
`inherit_from_parent` gives a child its parent's code and placement; `AcceptedBundles` remembers
which bundles already passed the unpacking checks. No store, no network.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import OrderedDict

from iris.cluster.types import (
    ATTR_TPU_NAME,
    Constraint,
    JobName,
    check_launch_strings,
    normalize_job_id,
    tpu_topology,
)
from iris.rpc import cluster_pb2 as pb

# Preemptions are not the task's fault: retry them generously unless the user says otherwise.
DEFAULT_MAX_RETRIES_PREEMPTION = 100


def validate_launch_request(request: pb.LaunchJobRequest, max_bundle_bytes: int) -> None:
    """Raise ValueError with what to change, or complete the request in place."""
    entry = request.entrypoint.WhichOneof("kind")
    if entry is None:
        raise ValueError("entrypoint is required: give a command or a callable")
    if entry == "command" and not request.entrypoint.command.argv:
        raise ValueError("the command entrypoint has no arguments")
    check_launch_strings(request)
    if request.replicas < 0:
        raise ValueError(f"replicas must be >= 0, got {request.replicas}")
    resources = request.resources
    if resources.cpu_millicores < 0 or resources.memory_bytes < 0 or resources.disk_bytes < 0:
        raise ValueError("resources cannot be negative")
    if request.name:
        JobName.parse(request.name)
    for constraint in request.constraints:
        Constraint.from_proto(constraint)
    if request.resources.device.HasField("tpu"):
        shape_tpu_job(request)
    if request.coscheduling.group_by and request.replicas <= 1:
        raise ValueError("coscheduling places several tasks together: set replicas to 2 or more")
    if request.coscheduling.group_by and request.max_task_failures:
        raise ValueError(
            "a coscheduled job runs as one unit, so one failed task ends it: max_task_failures must be 0 "
            "(use max_retries_failure to retry the gang)"
        )
    if request.parent_job_id:
        request.parent_job_id = normalize_job_id(request.parent_job_id)
    if request.bundle_blob:
        check_bundle(request, max_bundle_bytes)
    if not request.HasField("max_retries_preemption"):
        request.max_retries_preemption = DEFAULT_MAX_RETRIES_PREEMPTION


def check_bundle(request: pb.LaunchJobRequest, max_bundle_bytes: int) -> None:
    """The inline bundle fits the limit and matches its digest (filled in when not given)."""
    if len(request.bundle_blob) > max_bundle_bytes:
        raise ValueError(
            f"bundle is {len(request.bundle_blob) / 2**20:.1f} MiB, over the controller's limit of "
            f"{max_bundle_bytes / 2**20:.0f} MiB; add large files to .gitignore"
        )
    digest = hashlib.sha256(request.bundle_blob).hexdigest()
    if request.bundle_sha256 and request.bundle_sha256 != digest:
        raise ValueError(
            f"bundle digest mismatch: the request says {request.bundle_sha256} but the bytes hash to {digest}"
        )
    request.bundle_sha256 = digest


class AcceptedBundles:
    """Digests of the bundles that lately passed a check (`check_bundle_blob`, or being stored),
    most recent last.

    Every job submitted from one workspace carries the same bundle. `check_bundle` has verified
    that a request's digest is its bytes' SHA-256, so a digest seen here is the same bytes, and
    checking them again (unzipping them off the event loop, a thread hop per job; asking the
    bundle store whether it holds them) can be skipped."""

    def __init__(self, capacity: int = 256) -> None:
        self._capacity = capacity
        self._digests: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, digest: str) -> bool:
        if digest not in self._digests:
            return False
        self._digests.move_to_end(digest)
        return True

    def add(self, digest: str) -> None:
        self._digests[digest] = None
        self._digests.move_to_end(digest)
        if len(self._digests) > self._capacity:
            self._digests.popitem(last=False)


def shape_tpu_job(request: pb.LaunchJobRequest) -> None:
    """A multi-host TPU slice runs one task per host, all at once on one slice."""
    topology = tpu_topology(request.resources.device.tpu.variant)
    if topology.hosts == 1:
        return
    if request.replicas in (0, 1):
        request.replicas = topology.hosts
    elif request.replicas != topology.hosts:
        raise ValueError(
            f"{topology.variant} has {topology.hosts} hosts, so the job needs {topology.hosts} replicas "
            f"(one per host), not {request.replicas}"
        )
    if not request.coscheduling.group_by:
        request.coscheduling.group_by = ATTR_TPU_NAME


def job_id_for(request: pb.LaunchJobRequest) -> str:
    """The job's id: its name under its parent's, or a generated one."""
    leaf = request.name or f"job-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    if request.parent_job_id:
        parent = JobName.parse(request.parent_job_id)
        leaf_name = JobName.parse(leaf)
        if leaf_name.parts[: len(parent.parts)] == parent.parts:
            return str(leaf_name)
        return str(parent.child(leaf))
    return str(JobName.parse(leaf))


def inherit_from_parent(request: pb.LaunchJobRequest, parent: pb.LaunchJobRequest) -> None:
    """A child runs from its parent's code and on the same kind of workers unless it says otherwise."""
    if not request.bundle_uri:
        request.bundle_uri, request.bundle_sha256 = parent.bundle_uri, parent.bundle_sha256
    if not request.constraints:
        request.constraints.extend(parent.constraints)
