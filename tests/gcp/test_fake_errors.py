"""What the real gcloud prints for each failure the fake produces: the texts the GCP platform's
error table matches (quota, stockout, not found, permission denied, unavailable)."""

from __future__ import annotations

import pytest
from fakes.gcp import FakeGcp
from fakes.gcp.gcloud import Gcloud

ZONE = "us-west4-a"
TPU_CREATE = (
    *("compute", "tpus", "tpu-vm", "create", "n1", f"--zone={ZONE}"),
    *("--accelerator-type=v5litepod-4", "--version=v2-alpha-tpuv5-lite"),
)
VM_CREATE = ("compute", "instances", "create", "vm1", f"--zone={ZONE}", "--machine-type=n2-standard-4")


def test_tpu_create_over_quota_prints_resource_exhausted(fake_gcp: FakeGcp, gcloud: Gcloud) -> None:
    fake_gcp.set_quota(ZONE, tpu_chips=2)
    stderr = gcloud.error(*TPU_CREATE)
    assert (
        "RESOURCE_EXHAUSTED: Quota limit 'TPUV5sLitepodServingPerProjectPerZoneForTPUAPI' has been exceeded. "
        f"Limit: 2 in zone {ZONE}." in stderr
    )
    assert fake_gcp.nodes() == []


def test_tpu_create_without_capacity_fails_its_operation_with_code_8(
    fake_gcp: FakeGcp, gcloud: Gcloud
) -> None:
    fake_gcp.set_capacity(ZONE, tpu_chips=0)
    stderr = gcloud.error(*TPU_CREATE)
    assert '"code": 8' in stderr and f'There is no more capacity in the zone \\"{ZONE}\\"' in stderr
    assert fake_gcp.nodes() == []


def test_tpu_create_when_the_pool_has_too_few_hosts_is_a_stockout(fake_gcp: FakeGcp, gcloud: Gcloud) -> None:
    too_big = f"v4-{fake_gcp.free_hosts * 8 + 8}"  # one host more than the pool holds
    stderr = gcloud.error(*TPU_CREATE[:-2], f"--accelerator-type={too_big}", "--version=tpu-ubuntu2204-base")
    assert "There is no more capacity in the zone" in stderr


def test_tpu_describe_missing_node_prints_not_found(gcloud: Gcloud) -> None:
    stderr = gcloud.error("compute", "tpus", "tpu-vm", "describe", "ghost", f"--zone={ZONE}")
    assert (
        f"NOT_FOUND: The resource 'projects/iris-test/locations/{ZONE}/nodes/ghost' was not found" in stderr
    )


def test_tpu_create_denied_prints_permission_denied(fake_gcp: FakeGcp, gcloud: Gcloud) -> None:
    fake_gcp.fail_next("permission_denied", method="POST", path="/nodes$")
    stderr = gcloud.error(*TPU_CREATE)
    assert "PERMISSION_DENIED: Permission 'tpu.nodes.create' denied on" in stderr


def test_tpu_unavailable_once_is_retried_by_gcloud_itself(fake_gcp: FakeGcp, gcloud: Gcloud) -> None:
    # gcloud retries a 503 from the TPU API on its own (after about 2 s). How it gives up on one that
    # persists (5 tries, backing off about 30 s) is checked alongside the GCP cluster scenario,
    # where those 30 s overlap the scenario's own waiting.
    fake_gcp.fail_next("unavailable", method="GET", path="/nodes$", times=1)
    assert gcloud.json("compute", "tpus", "tpu-vm", "list", f"--zone={ZONE}") == []
    assert fake_gcp.calls.count(("GET", f"/v2/projects/iris-test/locations/{ZONE}/nodes")) == 2


@pytest.mark.parametrize(
    ("arrange", "expected"),
    [
        (
            lambda fake: fake.set_quota(ZONE, instances=0),
            "Quota 'INSTANCES' exceeded.  Limit: 0.0 in region us-west4.",
        ),
        (lambda fake: fake.set_capacity(ZONE, instances=0), "code: ZONE_RESOURCE_POOL_EXHAUSTED"),
        (
            lambda fake: fake.fail_next("permission_denied", method="POST", path="/instances$"),
            f"Required 'compute.instances.create' permission for 'projects/iris-test/zones/{ZONE}/instances'",
        ),
        (
            lambda fake: fake.fail_next("unavailable", method="POST", path="/instances$"),
            "The service is currently unavailable.",
        ),
    ],
    ids=["quota", "stockout", "permission-denied", "unavailable"],
)
def test_compute_create_failure_prints_could_not_fetch_resource(
    fake_gcp: FakeGcp, gcloud: Gcloud, arrange, expected
) -> None:
    arrange(fake_gcp)
    stderr = gcloud.error(*VM_CREATE)
    assert "Could not fetch resource:" in stderr and expected in stderr
    assert fake_gcp.instances() == []


def test_compute_describe_missing_vm_prints_not_found(gcloud: Gcloud) -> None:
    stderr = gcloud.error("compute", "instances", "describe", "ghost", f"--zone={ZONE}")
    assert f"The resource 'projects/iris-test/zones/{ZONE}/instances/ghost' was not found" in stderr
