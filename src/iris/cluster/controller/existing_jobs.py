"""What a launch does when its job name is taken: a pure decision from the policy and the old job's state."""

from __future__ import annotations

import enum

from iris.cluster.types import TERMINAL_JOB_STATES, job_state_name
from iris.rpc import cluster_pb2 as pb


class ExistingJobAction(enum.Enum):
    REPLACE = "replace"  # delete the finished job's records, then create the new one
    KILL_AND_REPLACE = "kill_and_replace"
    KEEP = "keep"  # answer with the running job's id; nothing is created


class JobNameTakenError(ValueError):
    pass


def decide_existing_job(job_id: str, policy: int, existing_state: int) -> ExistingJobAction:
    """Raises JobNameTakenError, with what the user can do, when the policy refuses."""
    finished = existing_state in TERMINAL_JOB_STATES
    state = job_state_name(existing_state)
    if policy == pb.EXISTING_JOB_POLICY_ERROR:
        raise JobNameTakenError(
            f"job {job_id} already exists ({state}); choose another name, delete it (iris job delete {job_id}) "
            "or submit with another existing-job policy"
        )
    if finished:
        return ExistingJobAction.REPLACE
    if policy == pb.EXISTING_JOB_POLICY_KEEP:
        return ExistingJobAction.KEEP
    if policy == pb.EXISTING_JOB_POLICY_RECREATE:
        return ExistingJobAction.KILL_AND_REPLACE
    raise JobNameTakenError(
        f"job {job_id} is still {state}; wait for it, kill it (iris job kill {job_id}), or resubmit with "
        "--if-exists recreate (kill and replace) or --if-exists keep (follow the running one)"
    )
