"""GCP: TPU slices and the controller VM.

This module holds the GCP provider's part of the cluster config (zones, TPU types, the controller
VM's defaults) and of autoscaler routing (preemptible workers). Creating TPU slices through gcloud
is not in this version yet, so `create` refuses with a reason.
"""

from __future__ import annotations

from pathlib import Path

from iris.cluster.platform.base import Platform, PlatformError
from iris.cluster.types import ATTR_PREEMPTIBLE, AttributeValue
from iris.config import DEFAULT_CONTROLLER_PORT
from iris.rpc import config_pb2

DEFAULT_MACHINE_TYPE = "n2-standard-4"
DEFAULT_BOOT_DISK_SIZE_GB = 50


class GcpProvider:
    name = "gcp"
    zone_field = "zone"

    def apply_defaults(self, config: config_pb2.IrisClusterConfig) -> None:
        if config.controller.HasField("gcp"):
            controller = config.controller.gcp
            controller.port = controller.port or DEFAULT_CONTROLLER_PORT
            controller.machine_type = controller.machine_type or DEFAULT_MACHINE_TYPE
            controller.boot_disk_size_gb = controller.boot_disk_size_gb or DEFAULT_BOOT_DISK_SIZE_GB

    def config_problems(self, config: config_pb2.IrisClusterConfig) -> list[tuple[str, str]]:
        problems = []
        for name, group in config.scale_groups.items():
            template = group.slice_template
            path = f"scale_groups.{name}.slice_template"
            if not template.gcp.zone and not group.zones:
                problems.append(
                    (f"{path}.gcp.zone", "GCP slices need a zone; set slice_template.gcp.zone or the group's zones list")
                )
            if not template.accelerator_variant:
                problems.append(
                    (f"{path}.accelerator_variant", "GCP slices need the TPU type to create, e.g. 'v5litepod-16'")
                )
        if config.controller.HasField("gcp") and not config.controller.gcp.zone:
            problems.append(("controller.gcp.zone", "the controller VM needs a zone, e.g. 'europe-west4-a'"))
        return problems

    def worker_attributes(self, template: config_pb2.SliceConfig) -> dict[str, AttributeValue]:
        return {ATTR_PREEMPTIBLE: str(template.gcp.preemptible).lower()}

    def create(
        self, config: config_pb2.IrisClusterConfig, state_dir: Path, config_path: str | None
    ) -> Platform:
        raise PlatformError(
            "the gcp platform is not available in this version of Iris; the local and manual platforms are"
        )


PROVIDER = GcpProvider()
