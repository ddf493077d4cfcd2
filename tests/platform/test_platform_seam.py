"""The platform seam: shared code learns everything provider-specific from the provider objects,
so adding a provider is its module plus a line in the factory."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import iris
from iris.cluster.controller.scaling_group import ScalingGroup
from iris.cluster.platform.base import PlatformProvider, prepare_slice_config
from iris.cluster.platform.factory import PROVIDERS, create_platform
from iris.cluster.types import ATTR_PREEMPTIBLE, ATTR_ZONE
from iris.config import ConfigError, apply_defaults, validate_config
from iris.rpc import config_pb2

SOURCE = Path(iris.__file__).parent
SHARED_MODULES = [
    "config.py",
    "cluster/platform/base.py",
    "cluster/controller/scaling_group.py",
    "cluster/controller/autoscaler.py",
    "cluster/controller/lifecycle.py",
]
# The local controller section is a shared idea (a controller on this machine may drive any
# platform), so only the other providers' names are banned from shared code.
REMOTE_PROVIDERS = sorted(set(PROVIDERS) - {"local"})


@pytest.mark.parametrize("module", SHARED_MODULES)
def test_shared_module_names_no_provider_branch(module: str) -> None:
    tree = ast.parse((SOURCE / module).read_text())
    mentions = [
        f"line {node.lineno}: {getattr(node, 'value', None) or node.attr}"
        for node in ast.walk(tree)
        if (isinstance(node, ast.Constant) and node.value in REMOTE_PROVIDERS)
        or (isinstance(node, ast.Attribute) and node.attr in REMOTE_PROVIDERS)
    ]
    assert mentions == [], f"{module} branches on a provider; move it into the provider's module"


def test_providers_cover_every_platform_oneof_case() -> None:
    for message, oneof in (
        (config_pb2.PlatformConfig, "platform"),
        (config_pb2.SliceConfig, "platform"),
        (config_pb2.ControllerVmConfig, "controller"),
    ):
        cases = {field.name for field in message.DESCRIPTOR.oneofs_by_name[oneof].fields}
        assert cases == set(PROVIDERS), message.DESCRIPTOR.name
    for provider in PROVIDERS.values():
        assert isinstance(provider, PlatformProvider)


@pytest.mark.parametrize(("platform", "zone_field"), [("gcp", "zone"), ("coreweave", "region")])
def test_prepare_slice_config_zone_written_where_provider_keeps_it(platform: str, zone_field: str) -> None:
    template = config_pb2.SliceConfig()
    getattr(template, platform).SetInParent()
    stamped = prepare_slice_config(template, "tpu", "test", "zone-b", PROVIDERS[platform])
    assert getattr(getattr(stamped, platform), zone_field) == "zone-b"
    assert stamped.labels["test-scale-group"] == "tpu"


def test_scaling_group_zones_and_attributes_come_from_provider() -> None:
    gcp = config_pb2.ScaleGroupConfig(name="tpu")
    gcp.slice_template.gcp.zone = "europe-west4-a"
    gcp.slice_template.gcp.preemptible = True
    group = ScalingGroup(gcp)
    assert group.zones() == ["europe-west4-a"]
    assert group.worker_attributes("europe-west4-a")[ATTR_PREEMPTIBLE] == "true"

    local = config_pb2.ScaleGroupConfig(name="cpu")
    local.slice_template.local.attributes["rack"] = "r1"
    attributes = ScalingGroup(local).worker_attributes()
    assert attributes[ATTR_ZONE] == "local" and attributes["rack"] == "r1"


def test_provider_defaults_apply_only_to_their_platform() -> None:
    coreweave = config_pb2.IrisClusterConfig()
    coreweave.platform.coreweave.SetInParent()
    local = config_pb2.IrisClusterConfig()
    local.platform.local.SetInParent()
    resolved_coreweave, resolved_local = apply_defaults(coreweave), apply_defaults(local)
    # Bare-metal nodes provision slowly: CoreWeave's grace is longer than everyone else's.
    assert (
        resolved_coreweave.defaults.autoscaler.startup_grace_period.milliseconds
        > resolved_local.defaults.autoscaler.startup_grace_period.milliseconds
    )
    assert resolved_coreweave.platform.coreweave.namespace
    assert resolved_local.defaults.bootstrap.runtime == "process"
    assert resolved_coreweave.defaults.bootstrap.runtime == "docker"
    assert resolved_local.storage.bundle_prefix.startswith("file://")


def test_provider_config_problem_reported_with_key_path() -> None:
    config = config_pb2.IrisClusterConfig()
    config.platform.manual.SetInParent()
    config.storage.bundle_prefix = "s3://bucket/iris"
    config.scale_groups["cpu"].slice_template.manual.SetInParent()
    with pytest.raises(ConfigError, match=r"scale_groups.cpu.slice_template.manual.hosts: manual slices need"):
        validate_config(apply_defaults(config), source="cluster.yaml")


def test_create_platform_without_platform_names_every_provider(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="platform.gcp, platform.manual, platform.local, platform.coreweave"):
        create_platform(config_pb2.IrisClusterConfig(), tmp_path)
