"""The gcloud error table and the commands GcpPlatform builds, as pure functions.

The stderr texts below are what the real gcloud printed against the fake Google APIs (quota 429,
an operation that ended in a stockout, 404, 403, 503, Compute's error shapes).
"""

from __future__ import annotations

import pytest
import yaml
from cluster_support import EXAMPLE

from iris.cluster.platform.base import (
    PlatformError,
    PlatformUnavailableError,
    QuotaExhaustedError,
    ResourceNotFoundError,
)
from iris.cluster.platform.gcloud import (
    Gcloud,
    GcloudContext,
    GcpPermissionError,
    ZoneCapacityError,
    classify_gcloud_error,
    error_line,
    format_labels,
    instance_create_args,
    instance_forward_args,
    instance_list_args,
    tpu_create_args,
    tpu_list_args,
    tpu_ssh_args,
)
from iris.cluster.platform.gcp import PROVIDER
from iris.cluster.platform.gcp_tpu import node_worker_addresses, parse_rfc3339_ms
from iris.cluster.platform.gcp_vm import instance_addresses
from iris.cluster.types import ATTR_PREEMPTIBLE
from iris.config import ConfigError, apply_defaults, load_config_from_dict, validate_config
from iris.time import Duration

TPU_QUOTA = """ERROR: (gcloud.compute.tpus.tpu-vm.create) RESOURCE_EXHAUSTED: Quota limit 'TPUV5sPreemptibleLitepodServingPerProjectPerZoneForTPUAPI' has been exceeded. Limit: 0 in zone europe-west4-a.
- '@type': type.googleapis.com/google.rpc.ErrorInfo
  domain: tpu.googleapis.com
  metadata:
    quota_metric: TPUV5sPreemptibleLitepodServingPerProjectPerZoneForTPUAPI
    zone: europe-west4-a
  reason: RATE_LIMIT_EXCEEDED
"""

TPU_STOCKOUT = """Create request issued for: [n2]
Waiting for operation [projects/iris-test/locations/europe-west4-b/operations/operation-1795381156310-000001-fa14bc72] to complete...
.....failed.
ERROR: (gcloud.compute.tpus.tpu-vm.create) {
  "code": 8,
  "message": "There is no more capacity in the zone \\"europe-west4-b\\"; you can try in another zone where Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions) [EID: 0x1f2e3d4c5b6a7988]"
}
"""

TPU_NOT_FOUND = (
    "ERROR: (gcloud.compute.tpus.tpu-vm.describe) NOT_FOUND: The resource "
    "'projects/iris-test/locations/europe-west4-b/nodes/nope' was not found. This command is authenticated "
    "with an access token from the CLOUDSDK_AUTH_ACCESS_TOKEN environment variable\n"
)

TPU_PERMISSION = """ERROR: (gcloud.compute.tpus.tpu-vm.create) PERMISSION_DENIED: Permission 'tpu.nodes.create' denied on 'projects/iris-test/locations/europe-west4-b/nodes'. This command is authenticated with an access token from the CLOUDSDK_AUTH_ACCESS_TOKEN environment variable
- '@type': type.googleapis.com/google.rpc.ErrorInfo
  domain: iam.googleapis.com
  metadata:
    permission: tpu.nodes.create
    resource: projects/iris-test/locations/europe-west4-b/nodes
  reason: IAM_PERMISSION_DENIED
"""

TPU_UNAVAILABLE = (
    "ERROR: (gcloud.compute.tpus.tpu-vm.list) UNAVAILABLE: The service is currently unavailable.\n"
)

VM_QUOTA = """ERROR: (gcloud.compute.instances.create) Could not fetch resource:
 - Quota 'INSTANCES' exceeded.  Limit: 0.0 in region europe-west4.

"""

VM_STOCKOUT = """WARNING: You have selected a disk size of under [200GB]. This may result in poor I/O performance. For more information, see: https://developers.google.com/compute/docs/disks#performance.
ERROR: (gcloud.compute.instances.create) Could not fetch resource:
---
code: ZONE_RESOURCE_POOL_EXHAUSTED
message: The zone 'projects/iris-test/zones/europe-west4-b' does not have enough resources
  available to fulfill the request.  Try a different zone, or try again later.

"""

VM_NOT_FOUND = """ERROR: (gcloud.compute.instances.describe) Could not fetch resource:
 - The resource 'projects/iris-test/zones/europe-west4-b/instances/nope' was not found

"""

VM_LIST_PERMISSION = """WARNING: Some requests did not succeed.
 - Required 'compute.instances.list' permission for 'projects/iris-test/aggregated/instances'

"""

CREATE = GcloudContext("creating TPU node iris-tpu-1", "europe-west4-a", "v5litepod-16")


@pytest.mark.parametrize(
    ("stderr", "error", "says"),
    [
        (
            TPU_QUOTA,
            QuotaExhaustedError,
            "Quota limit 'TPUV5sPreemptibleLitepodServingPerProjectPerZoneForTPUAPI'",
        ),
        (TPU_STOCKOUT, ZoneCapacityError, 'There is no more capacity in the zone "europe-west4-b"'),
        (TPU_NOT_FOUND, ResourceNotFoundError, "nodes/nope' was not found."),
        (TPU_PERMISSION, GcpPermissionError, "Permission 'tpu.nodes.create' denied"),
        (TPU_UNAVAILABLE, PlatformUnavailableError, "The service is currently unavailable."),
        (VM_QUOTA, QuotaExhaustedError, "Quota 'INSTANCES' exceeded."),
        (VM_STOCKOUT, ZoneCapacityError, "does not have enough resources available to fulfill the request."),
        (VM_NOT_FOUND, ResourceNotFoundError, "instances/nope' was not found"),
        (VM_LIST_PERMISSION, GcpPermissionError, "Required 'compute.instances.list' permission"),
    ],
)
def test_classify_gcloud_error_real_stderr_maps_to_typed_error_with_one_line(
    stderr: str, error: type[PlatformError], says: str
) -> None:
    classified = classify_gcloud_error(stderr, CREATE)
    assert type(classified) is error
    message = str(classified)
    assert "\n" not in message
    assert message.startswith("creating TPU node iris-tpu-1 failed: ")
    assert says in message
    assert "CLOUDSDK_AUTH_ACCESS_TOKEN" not in message


def test_classify_gcloud_error_quota_and_stockout_name_zone_accelerator_and_fallback() -> None:
    for stderr in (TPU_QUOTA, TPU_STOCKOUT):
        error = classify_gcloud_error(stderr, CREATE)
        assert isinstance(error, QuotaExhaustedError)
        assert error.zone == "europe-west4-a"
        assert "europe-west4-a" in str(error) and "v5litepod-16" in str(error)
        assert "other zones" in str(error)


def test_classify_gcloud_error_permission_says_what_to_grant() -> None:
    assert "roles/tpu.admin" in str(classify_gcloud_error(TPU_PERMISSION, CREATE))


def test_classify_gcloud_error_unknown_failure_is_a_plain_platform_error_with_the_error_line() -> None:
    error = classify_gcloud_error(
        "ERROR: (gcloud.compute.tpus.tpu-vm.create) INVALID_ARGUMENT: bad type\n", CREATE
    )
    assert type(error) is PlatformError
    assert str(error) == "creating TPU node iris-tpu-1 failed: INVALID_ARGUMENT: bad type"


def test_error_line_takes_the_api_message_after_a_bare_error_line() -> None:
    assert error_line(TPU_STOCKOUT).startswith('There is no more capacity in the zone "europe-west4-b"; ')
    assert error_line(VM_QUOTA) == "Quota 'INSTANCES' exceeded.  Limit: 0.0 in region europe-west4."


def test_tpu_create_args_carry_type_version_zone_labels_and_preemptible() -> None:
    args = tpu_create_args(
        "iris-tpu-1",
        "europe-west4-b",
        "v5litepod-16",
        "v2-alpha-tpuv5-lite",
        {"iris-scale-group": "tpu", "iris-managed": "true"},
        preemptible=True,
    )
    assert args[:5] == ["compute", "tpus", "tpu-vm", "create", "iris-tpu-1"]
    assert "--zone=europe-west4-b" in args
    assert "--accelerator-type=v5litepod-16" in args
    assert "--version=v2-alpha-tpuv5-lite" in args
    assert "--labels=iris-managed=true,iris-scale-group=tpu" in args
    assert "--preemptible" in args and "--spot" not in args
    assert args[-1] == "--format=json"
    spot = tpu_create_args("n", "z", "v6e-8", "v", {}, preemptible=True, spot=True)
    assert "--spot" in spot and "--preemptible" not in spot


def test_gcp_config_with_both_preemptible_and_spot_is_refused_naming_the_field() -> None:
    config = apply_defaults(load_config_from_dict(yaml.safe_load(EXAMPLE.read_text())))
    validate_config(config, source="eu-west4.yaml")  # the example's spot group alone is fine
    assert config.scale_groups["tpu_v6e_8"].slice_template.gcp.spot
    assert PROVIDER.worker_attributes(config.scale_groups["tpu_v6e_8"].slice_template) == {
        ATTR_PREEMPTIBLE: "true"
    }
    config.scale_groups["tpu_v6e_8"].slice_template.gcp.preemptible = True
    with pytest.raises(ConfigError, match=r"tpu_v6e_8.slice_template.gcp.spot: a slice is either preemptible or spot"):
        validate_config(config, source="eu-west4.yaml")


def test_list_args_filter_on_every_label_exactly() -> None:
    args = tpu_list_args("europe-west4-a", {"iris-managed": "true", "iris-scale-group": "tpu"})
    assert "--filter=labels.iris-managed=true AND labels.iris-scale-group=tpu" in args
    assert instance_list_args([], {"iris-controller-iris": "true"}) == [
        "compute", "instances", "list", "--format=json", "--filter=labels.iris-controller-iris=true",
    ]  # fmt: skip
    assert "--zones=a,b" in instance_list_args(["a", "b"], {})


def test_ssh_args_never_prompt_and_reach_the_worker_by_index() -> None:
    args = tpu_ssh_args("iris-tpu-1", "europe-west4-a", 3, "echo hi", Duration.from_seconds(20))
    assert "--worker=3" in args and "--command=echo hi" in args
    assert "--strict-host-key-checking=no" in args
    assert "--ssh-flag=-o ConnectTimeout=20" in args


def test_gcloud_argv_puts_global_flags_before_the_ssh_arguments() -> None:
    gcloud = Gcloud("my-project")
    argv = gcloud.argv(instance_forward_args("vm", "z", 4000, 10000, Duration.from_seconds(5)))
    split = argv.index("--")
    assert "--project=my-project" in argv[:split] and "--quiet" in argv[:split]
    assert argv[split:] == [
        "--",
        "-N",
        "-o",
        "ExitOnForwardFailure=yes",
        "-L",
        "127.0.0.1:4000:127.0.0.1:10000",
    ]


def test_instance_create_args_label_and_publish_metadata() -> None:
    args = instance_create_args(
        "iris-controller", "europe-west4-a", "n2-standard-4", 50, {"iris-controller-iris": "true"}, {"k": "v"}
    )
    assert "--machine-type=n2-standard-4" in args and "--boot-disk-size=50GB" in args
    assert "--labels=iris-controller-iris=true" in args and "--metadata=k=v" in args


def test_format_labels_refuses_what_gcp_refuses_with_the_setting_to_change() -> None:
    with pytest.raises(PlatformError, match="label_prefix"):
        format_labels({"iris-scale-group": "TPU_Group"})
    assert format_labels({"b": "2", "a": "1"}) == "a=1,b=2"


def test_node_and_instance_json_give_addresses_and_times() -> None:
    node = {
        "name": "projects/p/locations/europe-west4-a/nodes/n",
        "networkEndpoints": [
            {"ipAddress": "10.0.0.2", "port": 8470},
            {"ipAddress": "10.0.0.3", "port": 8470},
        ],
        "createTime": "2026-11-22T21:00:00.123Z",
    }
    assert node_worker_addresses(node) == ["10.0.0.2", "10.0.0.3"]
    assert parse_rfc3339_ms(node["createTime"]) == 1795381200123
    instance = {"networkInterfaces": [{"networkIP": "10.0.0.9", "accessConfigs": [{"natIP": "34.1.2.3"}]}]}
    assert instance_addresses(instance) == ("10.0.0.9", "34.1.2.3")
    assert instance_addresses({}) == ("", "")
