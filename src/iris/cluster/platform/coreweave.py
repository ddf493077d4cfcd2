"""CoreWeave: slices as worker Pods on shared, autoscaling NodePools of a CKS cluster (seed 001).

This module holds the CoreWeave provider's part of the cluster config (namespace, the controller's
Service and scale group, the long startup grace of bare-metal nodes) and of autoscaler routing.
Building the cluster through the Kubernetes API is not in this version yet, so `create` refuses
with a reason.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from iris.cluster.platform.base import Platform, PlatformError
from iris.cluster.types import AttributeValue
from iris.config import DEFAULT_CONTROLLER_PORT
from iris.rpc import config_pb2
from iris.time import Duration

DEFAULT_NAMESPACE = "iris"
DEFAULT_CONTROLLER_SERVICE_NAME = "iris-controller-svc"
# Bare-metal nodes take 20-30 minutes to provision before a Pod can even pull its image.
DEFAULT_STARTUP_GRACE_PERIOD = Duration.from_seconds(2400)


class CoreweaveProvider:
    name = "coreweave"
    zone_field = "region"

    def apply_defaults(self, config: config_pb2.IrisClusterConfig) -> None:
        config.platform.coreweave.namespace = config.platform.coreweave.namespace or DEFAULT_NAMESPACE
        autoscaler = config.defaults.autoscaler
        if not autoscaler.HasField("startup_grace_period"):
            autoscaler.startup_grace_period.CopyFrom(DEFAULT_STARTUP_GRACE_PERIOD.to_proto())
        if config.controller.HasField("coreweave"):
            controller = config.controller.coreweave
            controller.port = controller.port or DEFAULT_CONTROLLER_PORT
            controller.service_name = controller.service_name or DEFAULT_CONTROLLER_SERVICE_NAME

    def config_problems(self, config: config_pb2.IrisClusterConfig) -> list[tuple[str, str]]:
        problems = [
            (
                f"scale_groups.{name}.slice_template.coreweave.instance_type",
                "CoreWeave slices need an instance_type, e.g. 'gd-8xh100ib-i128'",
            )
            for name, group in config.scale_groups.items()
            if not group.slice_template.coreweave.instance_type
        ]
        if config.controller.HasField("coreweave"):
            problem = _controller_group_problem(config)
            if problem:
                problems.append(("controller.coreweave.scale_group", problem))
        return problems

    def worker_attributes(self, template: config_pb2.SliceConfig) -> dict[str, AttributeValue]:
        # A CoreWeave worker reports nothing beyond its group, slice, region and device.
        return {}

    def create(
        self, config: config_pb2.IrisClusterConfig, state_dir: Path, config_path: str | None
    ) -> Platform:
        raise PlatformError(
            "the coreweave platform is not available in this version of Iris; the local and manual platforms are"
        )


def _controller_group_problem(config: config_pb2.IrisClusterConfig) -> str:
    group = config.controller.coreweave.scale_group
    groups = sorted(config.scale_groups)
    defined = ", ".join(groups) if groups else "none"
    if not group:
        return f"required: name the scale group whose nodes host the controller (defined groups: {defined})"
    if group not in config.scale_groups:
        close = difflib.get_close_matches(group, groups, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        return f"'{group}' is not a scale group; {hint}(defined groups: {defined})"
    return ""


PROVIDER = CoreweaveProvider()
