"""Slices and cluster resources of the CoreWeave platform against the fake API server, whose
kubelet runs Pods on the private dockerd: each early failure of seed 001 section 9 ends the slice
in FAILED with its reason within seconds, pools are applied idempotently, a restarted platform
rebuilds slices from Pod labels, and stopping leaves only the NodePools."""

from __future__ import annotations

import json

import pytest
from engines import DockerEngine
from fakes.kubernetes.cluster import FakeKubernetes

from iris.cluster.platform import coreweave_resources as res
from iris.cluster.platform.base import (
    CloudSliceState,
    PlatformError,
    ResourceNotFoundError,
    VmLogKind,
    prepare_slice_config,
)
from iris.cluster.platform.coreweave import PROVIDER, CoreweavePlatform
from iris.rpc import config_pb2
from iris.time import wait_until


def _platform(config: config_pb2.IrisClusterConfig) -> CoreweavePlatform:
    platform = CoreweavePlatform(config)
    platform.ensure_rbac()
    platform.ensure_nodepools()
    return platform


def _slice(platform: CoreweavePlatform, config: config_pb2.IrisClusterConfig, image: str, **bootstrap: object):
    template = prepare_slice_config(config.scale_groups["cpu"].slice_template, "cpu", "iris", provider=PROVIDER)
    boot = config_pb2.BootstrapConfig()
    boot.CopyFrom(config.defaults.bootstrap)
    boot.docker_image = image
    boot.controller_address = "http://127.0.0.1:1"
    for key, value in bootstrap.items():
        setattr(boot, key, value)
    return platform.create_slice(template, boot)


def _failed(handle) -> str:
    status = wait_until(
        lambda: (s := handle.describe()).state == CloudSliceState.FAILED and s, 60, 0.2, "the slice to fail"
    )
    return status.message


def test_slice_bad_image_fails_with_the_pull_error(kube_cluster: FakeKubernetes, coreweave_config) -> None:
    config = coreweave_config(kube_cluster)
    platform = _platform(config)
    platform.kube.apply(res.config_map(platform.namespace, "{}"))

    handle = _slice(platform, config, "iris-test-missing:nope")

    assert handle.describe().state in (CloudSliceState.CREATING, CloudSliceState.BOOTSTRAPPING)
    message = _failed(handle)
    assert "cannot pull image iris-test-missing:nope" in message
    # The platform cleaned up after itself.
    wait_until(lambda: not platform.kube.list("Pod", platform.namespace), 30, 0.2, "the worker Pod to go")


def test_slice_missing_secret_fails_with_create_container_config_error(
    kube_cluster: FakeKubernetes, coreweave_config, docker_engine: DockerEngine
) -> None:
    config = coreweave_config(kube_cluster, storage={"bundle_prefix": "s3://bucket/bundles"})
    platform = _platform(config)
    platform.kube.apply(res.config_map(platform.namespace, "{}"))

    message = _failed(_slice(platform, config, docker_engine.base_image))

    assert 'secret "iris-s3-credentials" not found' in message


def test_slice_crash_loop_fails_with_its_last_log_lines(
    kube_cluster: FakeKubernetes, coreweave_config, docker_engine: DockerEngine
) -> None:
    config = coreweave_config(kube_cluster)
    platform = _platform(config)
    platform.kube.apply(res.config_map(platform.namespace, "{}"))

    # The base image has no Iris: the worker command dies at once, again and again.
    message = _failed(_slice(platform, config, docker_engine.base_image))

    assert "keeps crashing" in message and "last log lines" in message


def test_slice_failed_mount_fails_after_the_grace(
    kube_cluster: FakeKubernetes, coreweave_config, docker_engine: DockerEngine
) -> None:
    config = coreweave_config(kube_cluster)
    platform = _platform(config)  # no ConfigMap: the config volume cannot mount

    message = _failed(_slice(platform, config, docker_engine.base_image))

    assert "cannot mount its volumes" in message and "iris-cluster-config" in message


def test_slice_of_several_vms_is_refused(kube_cluster: FakeKubernetes, coreweave_config) -> None:
    config = coreweave_config(kube_cluster)
    platform = CoreweavePlatform(config)
    template = prepare_slice_config(config.scale_groups["cpu"].slice_template, "cpu", "iris", provider=PROVIDER)
    template.num_vms = 2

    with pytest.raises(PlatformError, match="multi-node slices are not supported"):
        platform.create_slice(template, config.defaults.bootstrap)


def test_nodepools_reapplied_unchanged_and_stale_pool_deleted(kube_cluster: FakeKubernetes, coreweave_config) -> None:
    groups = {
        "cpu": {"slice_template": {"coreweave": {"instance_type": "cd-gp-i64-erapids"}}},
        "h100": {"max_slices": 4, "slice_template": {"coreweave": {"instance_type": "gd-8xh100ib-i128"}}},
    }
    # A prefix of its own: garbage collection of stale pools goes by the cluster's prefix.
    platform = {"label_prefix": "np", "coreweave": {"kubeconfig_path": str(kube_cluster.kubeconfig)}}
    first = _platform(coreweave_config(kube_cluster, scale_groups=groups, platform=platform))

    def pools() -> dict[str, dict]:
        shown = kube_cluster.kubectl("get", "nodepools", "-l", "np-managed=true", "-o", "json")
        return {p["metadata"]["name"]: p for p in json.loads(shown.stdout)["items"]}

    before = wait_until(
        lambda: (found := pools()) and all((p.get("status") or {}).get("conditions") for p in found.values()) and found,
        30, 0.1, "the pools' status",
    )
    spec = before["np-h100"]["spec"]
    assert (spec["autoscaling"], spec["minNodes"], spec["maxNodes"], spec["targetNodes"]) == (True, 0, 4, 0)
    assert spec["instanceType"] == "gd-8xh100ib-i128"
    first.ensure_nodepools()
    assert {n: p["metadata"]["resourceVersion"] for n, p in pools().items()} == {
        n: p["metadata"]["resourceVersion"] for n, p in before.items()
    }

    _platform(coreweave_config(kube_cluster, scale_groups={"cpu": groups["cpu"]}, platform=platform))

    wait_until(lambda: set(pools()) == {"np-cpu"}, 30, 0.2, "the stale pool to be deleted")


def test_restarted_platform_rebuilds_slices_from_pod_labels_and_reads_their_bring_up(
    kube_cluster: FakeKubernetes, coreweave_config
) -> None:
    config = coreweave_config(kube_cluster)
    platform = _platform(config)
    platform.kube.apply(res.config_map(platform.namespace, "{}"))
    handle = _slice(platform, config, "iris-test-missing:adopt")
    wait_until(lambda: platform.kube.list("Pod", platform.namespace), 30, 0.1, "the worker Pod")

    restarted = CoreweavePlatform(config)
    [found] = restarted.list_slices([], {"iris-managed": "true"})

    assert found.slice_id == handle.slice_id and found.scale_group == "cpu"
    assert found.describe().state in (CloudSliceState.BOOTSTRAPPING, CloudSliceState.FAILED)
    first_state, _, first_reason = found.history()[0]
    assert first_state == CloudSliceState.BOOTSTRAPPING and "found at controller start" in first_reason

    def bring_up() -> list[str]:
        lines: list[str] = []
        restarted.vm_log(f"{found.slice_id}-0", VmLogKind.BOOTSTRAP, 50, lines.append)
        return lines

    lines = wait_until(
        lambda: (got := bring_up()) and any("Failed to pull image" in line for line in got) and got,
        30,
        0.2,
        "the Pod's pull failure in its bring-up log",
    )
    assert any('"iris-test-missing:adopt"' in line for line in lines)
    with pytest.raises(ResourceNotFoundError):
        restarted.vm_log("no-such-slice-0", VmLogKind.BOOTSTRAP, 5, lines.append)
    found.terminate()
    platform.shutdown()
    restarted.shutdown()
