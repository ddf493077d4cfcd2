"""LaunchJob validation and shaping as pure functions: a request in, an error or a completed request out."""

from __future__ import annotations

import hashlib

import pytest

from iris.cluster.controller.launch import (
    DEFAULT_MAX_RETRIES_PREEMPTION,
    AcceptedBundles,
    inherit_from_parent,
    job_id_for,
    validate_launch_request,
)
from iris.cluster.types import Constraint, ConstraintOp, tpu_device
from iris.rpc import cluster_pb2 as pb

MAX_BUNDLE = 1024


def command_request(**fields) -> pb.LaunchJobRequest:
    request = pb.LaunchJobRequest(
        entrypoint=pb.Entrypoint(command=pb.CommandEntrypoint(argv=["true"])), **fields
    )
    return request


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (pb.LaunchJobRequest(), "entrypoint is required"),
        (pb.LaunchJobRequest(entrypoint=pb.Entrypoint(command=pb.CommandEntrypoint())), "has no arguments"),
        (command_request(replicas=-1), "replicas must be >= 0"),
        (command_request(resources=pb.ResourceSpec(cpu_millicores=-1)), "cannot be negative"),
        (
            command_request(replicas=1, coscheduling=pb.CoschedulingConfig(group_by="tpu-name")),
            "replicas to 2",
        ),
        (
            command_request(
                replicas=2, max_task_failures=1, coscheduling=pb.CoschedulingConfig(group_by="rack")
            ),
            "max_task_failures must be 0",
        ),
        (command_request(bundle_blob=b"x" * (MAX_BUNDLE + 1)), "over the controller's limit"),
        (command_request(bundle_blob=b"zip", bundle_sha256="0" * 64), "bundle digest mismatch"),
    ],
)
def test_validate_launch_request_rejects_with_what_to_change(request_, message):
    with pytest.raises(ValueError, match=message):
        validate_launch_request(request_, MAX_BUNDLE)


def test_validate_launch_request_fills_digest_and_default_preemption_retries():
    request = command_request(bundle_blob=b"zip", parent_job_id="team/parent")

    validate_launch_request(request, MAX_BUNDLE)

    assert request.bundle_sha256 == hashlib.sha256(b"zip").hexdigest()
    assert request.max_retries_preemption == DEFAULT_MAX_RETRIES_PREEMPTION
    assert request.parent_job_id == "/team/parent"


def test_validate_launch_request_keeps_explicit_zero_preemption_retries():
    request = command_request()
    request.max_retries_preemption = 0

    validate_launch_request(request, MAX_BUNDLE)

    assert request.max_retries_preemption == 0


def test_validate_launch_request_multi_host_tpu_gets_one_task_per_host_as_a_gang():
    request = command_request(resources=pb.ResourceSpec(device=tpu_device("v5litepod-16")))

    validate_launch_request(request, MAX_BUNDLE)

    assert request.replicas == 4
    assert request.coscheduling.group_by == "tpu-name"


def test_validate_launch_request_multi_host_tpu_with_wrong_replicas_names_the_host_count():
    request = command_request(replicas=3, resources=pb.ResourceSpec(device=tpu_device("v5litepod-16")))

    with pytest.raises(ValueError, match="v5litepod-16 has 4 hosts, so the job needs 4 replicas"):
        validate_launch_request(request, MAX_BUNDLE)


def test_job_id_for_child_lives_under_its_parent_unless_already_named_there():
    assert job_id_for(pb.LaunchJobRequest(name="train")) == "/train"
    assert job_id_for(pb.LaunchJobRequest(name="eval", parent_job_id="/train")) == "/train/eval"
    assert job_id_for(pb.LaunchJobRequest(name="/train/eval", parent_job_id="/train")) == "/train/eval"
    assert job_id_for(pb.LaunchJobRequest()).startswith("/job-")


def test_inherit_from_parent_takes_code_and_constraints_only_where_the_child_has_none():
    parent = pb.LaunchJobRequest(bundle_uri="file:///b/p.zip", bundle_sha256="ab" * 32)
    parent.constraints.append(Constraint("zone", ConstraintOp.EQ, "a").to_proto())
    child = pb.LaunchJobRequest()
    own = pb.LaunchJobRequest(bundle_uri="file:///b/c.zip", bundle_sha256="cd" * 32)
    own.constraints.append(Constraint("zone", ConstraintOp.EQ, "b").to_proto())

    inherit_from_parent(child, parent)
    inherit_from_parent(own, parent)

    assert (child.bundle_uri, list(child.constraints)) == (parent.bundle_uri, list(parent.constraints))
    assert own.bundle_uri == "file:///b/c.zip"
    assert Constraint.from_proto(own.constraints[0]).value == "b"


def test_accepted_bundles_forget_the_least_recently_used_past_capacity():
    accepted = AcceptedBundles(capacity=2)
    accepted.add("a")
    accepted.add("b")
    assert "a" in accepted  # used again: "b" is now the oldest

    accepted.add("c")

    assert ("a" in accepted, "b" in accepted, "c" in accepted) == (True, False, True)
