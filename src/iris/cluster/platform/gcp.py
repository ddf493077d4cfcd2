"""GcpPlatform: TPU slices and the controller VM of a cluster on Google Cloud, created and reached
through the `gcloud` CLI. The slices live in gcp_tpu.py, the controller VM in gcp_vm.py; this module
joins them into the Platform and holds the provider (config defaults, validation, attributes)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path

from iris.cluster.platform.base import Labels, ResourceNotFoundError, VmLogKind
from iris.cluster.platform.bootstrap import CONTROLLER_DAEMON_NAME, stream_vm_log, worker_daemon_name
from iris.cluster.platform.gcloud import Gcloud
from iris.cluster.platform.gcp_tpu import GcpSliceHandle, GcpTpuSlices
from iris.cluster.platform.gcp_vm import GcpControllerHandle, GcpControllerVms
from iris.cluster.types import ATTR_PREEMPTIBLE, AttributeValue
from iris.config import DEFAULT_CONTROLLER_PORT
from iris.rpc import config_pb2

DEFAULT_MACHINE_TYPE = "n2-standard-4"
DEFAULT_BOOT_DISK_SIZE_GB = 50


class GcpPlatform:
    def __init__(self, config: config_pb2.IrisClusterConfig, gcloud_env: Mapping[str, str] | None = None):
        """`config` is the resolved cluster config (defaults applied); `gcloud_env` is set on top of
        this process's environment for every gcloud it runs."""
        self.label_prefix = config.platform.label_prefix or "iris"
        self.gcloud = Gcloud(config.platform.gcp.project_id, gcloud_env)
        self._tpus = GcpTpuSlices(config, self.gcloud)
        self._vms = GcpControllerVms(config, self.gcloud)

    def create_slice(
        self, config: config_pb2.SliceConfig, bootstrap_config: config_pb2.BootstrapConfig
    ) -> GcpSliceHandle:
        return self._tpus.create(config, bootstrap_config)

    def list_slices(self, zones: list[str], labels: dict[str, str] | None = None) -> list[GcpSliceHandle]:
        return self._tpus.list(zones, labels)

    def worker_logs(self, worker_id: str, tail_lines: int) -> str:
        return self._tpus.worker_logs(worker_id, tail_lines)

    def vm_log(
        self, vm_id: str, kind: VmLogKind, tail_lines: int, on_line: Callable[[str], None], follow: bool = False
    ) -> None:
        for vm in self._vms.list_vms([], {Labels(self.label_prefix).controller: "true"}):
            if vm.worker_id == vm_id:
                stream_vm_log(vm, CONTROLLER_DAEMON_NAME, kind, tail_lines, on_line, follow)
                return
        workers = [w for s in self._tpus.list([]) for w in s.describe().workers if w.worker_id == vm_id]
        if not workers:
            raise ResourceNotFoundError(f"no GCP controller VM or worker named {vm_id}")
        stream_vm_log(workers[0], worker_daemon_name(vm_id), kind, tail_lines, on_line, follow)

    def create_vm(self, config: config_pb2.VmConfig) -> GcpControllerHandle:
        return self._vms.create_vm(config)

    def list_vms(self, zones: list[str], labels: dict[str, str] | None = None) -> list[GcpControllerHandle]:
        return self._vms.list_vms(zones, labels)

    def discover_controller(self, config: config_pb2.IrisClusterConfig) -> str | None:
        return self._vms.discover_controller(config)

    def tunnel(self, address: str, local_port: int | None = None) -> AbstractContextManager[str]:
        return self._vms.tunnel(address, local_port)

    def shutdown(self) -> None:
        """Stop driving bring-ups and watches; nodes and VMs stay for the next controller."""
        self._tpus.shutdown()


# ---------------------------------------------------------------- the provider


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
                    (
                        f"{path}.gcp.zone",
                        "GCP slices need a zone; set slice_template.gcp.zone or the group's zones list",
                    )
                )
            if template.gcp.preemptible and template.gcp.spot:
                problems.append(
                    (
                        f"{path}.gcp.spot",
                        "a slice is either preemptible or spot, not both: spot is the newer model "
                        "(no 24-hour limit), keep one of the two",
                    )
                )
            if not template.accelerator_variant:
                problems.append(
                    (
                        f"{path}.accelerator_variant",
                        "GCP slices need the TPU type to create, e.g. 'v5litepod-16'",
                    )
                )
        if config.controller.HasField("gcp") and not config.controller.gcp.zone:
            problems.append(("controller.gcp.zone", "the controller VM needs a zone, e.g. 'europe-west4-a'"))
        return problems

    def worker_attributes(self, template: config_pb2.SliceConfig) -> dict[str, AttributeValue]:
        return {ATTR_PREEMPTIBLE: str(template.gcp.preemptible or template.gcp.spot).lower()}

    def create(
        self, config: config_pb2.IrisClusterConfig, state_dir: Path, config_path: str | None
    ) -> GcpPlatform:
        return GcpPlatform(config)


PROVIDER = GcpProvider()
