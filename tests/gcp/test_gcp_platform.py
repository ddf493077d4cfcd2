"""GcpPlatform against the fake through the real gcloud, below the controller: what a restarted
controller finds by labels, and the typed errors it raises at once."""

from __future__ import annotations

from pathlib import Path

import pytest
from cluster_support import GROUP, LABEL_PREFIX, ZONES, cluster_config
from conftest import Gcloud
from fakes.gcp import FakeGcp
from fakes.gcp.fake import DEFAULT_OPERATION_DELAY_S

from iris.cluster.platform.base import CloudSliceState, QuotaExhaustedError, prepare_slice_config
from iris.cluster.platform.gcloud import GcpPermissionError
from iris.cluster.platform.gcp import PROVIDER, GcpPlatform
from iris.config import apply_defaults, load_config_from_dict
from iris.rpc import config_pb2
from iris.time import wait_until

MANAGED = f"--labels={LABEL_PREFIX}-managed=true,{LABEL_PREFIX}-scale-group={GROUP}"


def _platform(fake: FakeGcp, tmp_path: Path) -> tuple[GcpPlatform, config_pb2.IrisClusterConfig]:
    data = cluster_config(tmp_path, {})
    data["platform"]["gcp"]["project_id"] = fake.project
    config = apply_defaults(load_config_from_dict(data))
    return GcpPlatform(config, fake.gcloud_env(tmp_path / "platform-home")), config


def _create_node(gcloud: Gcloud, name: str, zone: str, *flags: str) -> None:
    gcloud.ok(
        "compute", "tpus", "tpu-vm", "create", name, f"--zone={zone}", "--accelerator-type=v5litepod-8",
        "--version=v2-alpha-tpuv5-lite", *flags,
    )  # fmt: skip


def test_gcp_platform_after_restart_adopts_labelled_nodes_and_fails_a_preempted_one_at_once(
    fake_gcp: FakeGcp, gcloud: Gcloud, tmp_path: Path
) -> None:
    _create_node(gcloud, "running", ZONES[0], MANAGED, "--preemptible")
    fake_gcp.operation_delay = 30.0
    _create_node(gcloud, "half-made", ZONES[1], MANAGED, "--async")
    _create_node(gcloud, "not-ours", ZONES[0], "--async")
    # Only those two stay CREATING: deleting the preempted node below takes the usual moment.
    fake_gcp.operation_delay = DEFAULT_OPERATION_DELAY_S
    platform, _ = _platform(fake_gcp, tmp_path)

    found = {h.slice_id: h for h in platform.list_slices(ZONES, {f"{LABEL_PREFIX}-managed": "true"})}

    assert sorted(found) == ["half-made", "running"]
    running, half_made = found["running"], found["half-made"]
    assert (running.zone, running.scale_group) == (ZONES[0], GROUP)
    status = running.describe()
    assert status.state == CloudSliceState.READY
    assert [w.internal_address for w in status.workers] == [h.address for h in fake_gcp.node("running").hosts]
    # Its bring-up died with the previous controller: the autoscaler replaces it.
    assert half_made.describe().state == CloudSliceState.FAILED
    assert "CREATING" in half_made.describe().message

    fake_gcp.preempt("running")
    wait_until(
        lambda: running.describe().state == CloudSliceState.FAILED, 60, 0.2, "the preempted slice to fail"
    )
    assert running.describe().message == "preempted"
    platform.shutdown()


def test_gcp_platform_create_slice_raises_quota_and_permission_at_once_and_creates_spot_as_spot(
    fake_gcp: FakeGcp, tmp_path: Path
) -> None:
    platform, config = _platform(fake_gcp, tmp_path)
    fake_gcp.set_quota(ZONES[0], tpu_chips=8)
    template = config.scale_groups[GROUP].slice_template
    bootstrap = config_pb2.BootstrapConfig(controller_address="http://10.0.0.1:10000", python_env="/nowhere")

    with pytest.raises(QuotaExhaustedError) as quota:
        platform.create_slice(
            prepare_slice_config(template, GROUP, LABEL_PREFIX, ZONES[0], PROVIDER), bootstrap
        )
    assert quota.value.zone == ZONES[0]
    assert ZONES[0] in str(quota.value) and "v5litepod-16" in str(quota.value)

    fake_gcp.fail_next("permission_denied", method="POST", path=r"/nodes$")
    with pytest.raises(GcpPermissionError, match="tpu.nodes.create"):
        platform.create_slice(
            prepare_slice_config(template, GROUP, LABEL_PREFIX, ZONES[1], PROVIDER), bootstrap
        )
    assert fake_gcp.nodes() == []

    template.gcp.preemptible, template.gcp.spot = False, True
    spot = platform.create_slice(prepare_slice_config(template, GROUP, LABEL_PREFIX, ZONES[1], PROVIDER), bootstrap)
    node = fake_gcp.node(spot.slice_id)
    assert node.spot and not node.preemptible
    spot.terminate()
    assert fake_gcp.nodes() == []
    platform.shutdown()


def test_gcp_slice_terminated_while_creating_with_the_api_refusing_deletes_logs_and_leaves_the_node_labelled(
    fake_gcp: FakeGcp, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    platform, config = _platform(fake_gcp, tmp_path)
    template = config.scale_groups[GROUP].slice_template
    bootstrap = config_pb2.BootstrapConfig(controller_address="http://10.0.0.1:10000", python_env="/nowhere")
    handle = platform.create_slice(prepare_slice_config(template, GROUP, LABEL_PREFIX, ZONES[0], PROVIDER), bootstrap)
    # Both deletes fail: terminate()'s own, and the one its bring-up makes once the create is done.
    fake_gcp.fail_next("permission_denied", method="DELETE", path=r"/nodes/", times=2)

    with caplog.at_level("WARNING", logger="iris.cluster.platform.gcp_tpu"):
        with pytest.raises(GcpPermissionError, match="tpu.nodes.delete"):
            handle.terminate()
        wait_until(
            lambda: "its node is left for reconcile" in caplog.text, 60, 0.2, "the bring-up to give up the delete"
        )

    [node] = fake_gcp.nodes()
    assert node.labels[f"{LABEL_PREFIX}-managed"] == "true"
    platform.shutdown()
