"""The GCP platform's controller VM: created with `gcloud compute instances create`, found again by
its labels (so any machine with the cluster's config finds it), reached over `gcloud compute ssh`,
and tunnelled to with an SSH local forward. The controller runs on it from its image (or a Python
environment), with its state directory on the VM's disk: a restart in place keeps it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any
from urllib.parse import urlparse

import yaml

from iris.cluster.platform import gcloud as g
from iris.cluster.platform.base import Labels, PlatformError, ResourceNotFoundError
from iris.cluster.platform.bootstrap import BootstrapConfigError, controller_daemon, start_script
from iris.cluster.platform.gcloud import GceRemoteExec, Gcloud, GcloudContext
from iris.cluster.platform.remote_exec import HostUnreachableError, RemoteExecWorkerBase
from iris.config import config_to_dict
from iris.rpc import config_pb2
from iris.time import Duration

logger = logging.getLogger(__name__)

# Tries of a label or metadata update that Compute refuses for a stale fingerprint.
_FINGERPRINT_ATTEMPTS = 3


def instance_addresses(instance: Mapping[str, Any]) -> tuple[str, str]:
    """(internal IP, external IP or "") of a GCE instance."""
    interfaces = instance.get("networkInterfaces") or [{}]
    internal = str(interfaces[0].get("networkIP", ""))
    configs = interfaces[0].get("accessConfigs") or [{}]
    return internal, str(configs[0].get("natIP", ""))


def instance_metadata(instance: Mapping[str, Any]) -> dict[str, str]:
    return {str(i["key"]): str(i.get("value", "")) for i in (instance.get("metadata") or {}).get("items", [])}


class GcpControllerHandle(RemoteExecWorkerBase):
    """The controller's GCE VM."""

    def __init__(self, vms: GcpControllerVms, instance: Mapping[str, Any], remote: GceRemoteExec):
        super().__init__(str(instance["name"]), remote, instance_addresses(instance)[1] or None)
        self._vms = vms
        self._zone = remote.zone
        self._private_address = instance_addresses(instance)[0]
        self._instance = dict(instance)
        self._labels = dict(instance.get("labels") or {})
        self._metadata = instance_metadata(instance)

    @property
    def zone(self) -> str:
        return self._zone

    @property
    def labels(self) -> dict[str, str]:
        return dict(self._labels)

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self._metadata)

    @property
    def private_address(self) -> str:
        """The VM's address inside its network, where workers reach the controller."""
        return self._private_address

    def terminate(self) -> None:
        self._vms.delete_instance(self.worker_id, self._zone)

    def restart_in_place(self) -> None:
        """The controller process is restarted on this VM (the start script stops the running one
        first); its state directory on the VM's disk, and so every job, stays."""
        vm = config_pb2.VmConfig(name=self.worker_id, labels=self._labels, metadata=self._metadata)
        self._vms.start_controller(self._instance, self._zone, vm, booting=False)

    def set_labels(self, labels: dict[str, str]) -> None:
        self._update(
            g.instance_add_labels_args(self.worker_id, self._zone, labels),
            f"labelling VM {self.worker_id}",
            lambda instance: dict(instance.get("labels") or {}),
            labels,
        )
        self._labels.update(labels)

    def set_metadata(self, metadata: dict[str, str]) -> None:
        self._update(
            g.instance_add_metadata_args(self.worker_id, self._zone, metadata),
            f"setting metadata of VM {self.worker_id}",
            instance_metadata,
            metadata,
        )
        self._metadata.update(metadata)

    def _update(
        self,
        args: list[str],
        what: str,
        current: Callable[[Mapping[str, Any]], dict[str, str]],
        wanted: dict[str, str],
    ) -> None:
        """Run a read-modify-write gcloud update, again when Compute refuses it because the VM
        changed in between (a stale fingerprint); done as soon as the VM carries `wanted`."""
        context = GcloudContext(what, self._zone)
        for attempt in range(_FINGERPRINT_ATTEMPTS):
            try:
                self._vms.gcloud.run(args, context, g.API_TIMEOUT)
                return
            except PlatformError as exc:
                if "fingerprint" not in str(exc) or attempt == _FINGERPRINT_ATTEMPTS - 1:
                    raise
                logger.info("%s: the VM changed meanwhile (%s); checking and trying again", what, exc)
            have = current(self._vms.describe_instance(self.worker_id, self._zone))
            if all(have.get(k) == v for k, v in wanted.items()):
                return


class GcpControllerVms:
    """Creates, finds and reaches the controller's VM for one cluster config."""

    def __init__(self, config: config_pb2.IrisClusterConfig, gcloud: Gcloud):
        self._config = config
        self.gcloud = gcloud
        self.label_prefix = config.platform.label_prefix or "iris"
        self._keys = Labels(self.label_prefix)
        timeouts = config.defaults.timeouts
        self._boot_timeout = Duration.from_proto(timeouts.boot_timeout)
        self._init_timeout = Duration.from_proto(timeouts.init_timeout)
        self._poll_interval = Duration.from_proto(timeouts.ssh_poll_interval)
        self._connect_timeout = Duration.from_proto(config.defaults.ssh.connect_timeout)
        # The controller address discover_controller last returned, and the VM serving it.
        self._discovered: tuple[str, GcpControllerHandle] | None = None

    def delete_instance(self, name: str, zone: str) -> None:
        context = GcloudContext(f"deleting VM {name}", zone)
        try:
            self.gcloud.run(g.instance_delete_args(name, zone), context, self._boot_timeout)
        except ResourceNotFoundError:
            pass

    def create_vm(self, config: config_pb2.VmConfig) -> GcpControllerHandle:
        """Create the controller's VM, start the controller on it serving this cluster's config,
        and return once it answers /health there; on any failure the VM is deleted again."""
        controller = self._config.controller.gcp
        zone = config.gcp.zone or controller.zone
        if not zone:
            raise PlatformError("controller.gcp.zone is not set: name the zone the controller VM runs in")
        name = (config.name or f"{self.label_prefix}-controller").lower().replace("_", "-")
        labels = {**config.labels, self._keys.managed: "true"}
        context = GcloudContext(f"creating the controller VM {name}", zone, controller.machine_type)
        args = g.instance_create_args(
            name,
            zone,
            config.gcp.machine_type or controller.machine_type,
            config.gcp.boot_disk_size_gb or controller.boot_disk_size_gb,
            labels,
            dict(config.metadata),
        )
        created = g.json_of(self.gcloud.run(args, context, self._boot_timeout))
        instance = created[0] if isinstance(created, list) and created else self.describe_instance(name, zone)
        try:
            return self.start_controller(instance, zone, config)
        except (PlatformError, BootstrapConfigError) as exc:
            self.delete_instance(name, zone)
            raise PlatformError(f"the controller on VM {name} did not start: {exc}".splitlines()[0]) from None

    def describe_instance(self, name: str, zone: str) -> dict[str, Any]:
        context = GcloudContext(f"describing VM {name}", zone)
        return g.json_of(self.gcloud.run(g.instance_describe_args(name, zone), context, g.API_TIMEOUT)) or {}

    def _controller_handle(self, instance: Mapping[str, Any], zone: str) -> GcpControllerHandle:
        internal, external = instance_addresses(instance)
        remote = GceRemoteExec(
            self.gcloud, str(instance["name"]), zone, external or internal, self._connect_timeout
        )
        return GcpControllerHandle(self, instance, remote)

    def start_controller(
        self, instance: Mapping[str, Any], zone: str, config: config_pb2.VmConfig, booting: bool = True
    ) -> GcpControllerHandle:
        """(Re)start the controller on the VM; a `booting` VM is first waited for until it answers SSH."""
        handle = self._controller_handle(instance, zone)
        if booting and not handle.wait_for_connection(self._boot_timeout, self._poll_interval):
            raise HostUnreachableError(
                handle.internal_address,
                f"VM {handle.worker_id} did not answer over SSH within boot_timeout ({self._boot_timeout})",
            )
        controller = self._config.controller.gcp
        bootstrap = self._config.defaults.bootstrap
        daemon = controller_daemon(
            yaml.safe_dump(config_to_dict(self._config), sort_keys=False),
            controller.port,
            instance_addresses(instance)[0],
            image=controller.image,
            python_env=bootstrap.python_env,
            # The controller runs gcloud too (the autoscaler): it gets the daemons' environment.
            env=dict(bootstrap.env_vars),
            labels=dict(config.labels),
            metadata=dict(config.metadata),
            vm_name=handle.worker_id,
        )
        handle.bootstrap(
            start_script(daemon, round(self._init_timeout.seconds)),
            timeout=Duration.from_seconds(self._init_timeout.seconds + g.BOOTSTRAP_SLACK.seconds),
        )
        return handle

    def list_vms(self, zones: list[str], labels: dict[str, str] | None = None) -> list[GcpControllerHandle]:
        context = GcloudContext("listing VMs", ",".join(z for z in zones if z))
        instances = g.json_of(
            self.gcloud.run(
                g.instance_list_args([z for z in zones if z], labels or {}), context, g.API_TIMEOUT
            )
        )
        return [
            self._controller_handle(instance, str(instance.get("zone", "")).rsplit("/", 1)[-1])
            for instance in instances or []
            if instance.get("status", "RUNNING") in ("RUNNING", "PROVISIONING", "STAGING")
        ]

    def discover_controller(self, config: config_pb2.IrisClusterConfig) -> str | None:
        """The controller's address from its VM's metadata (or its internal IP and port), found by
        label; whether this machine can reach it directly is the caller's concern (tunnel)."""
        address_key = f"iris-controller-address-{self.label_prefix}"
        for vm in self.list_vms([], {self._keys.controller: "true"}):
            address = (
                vm.metadata.get(address_key) or f"http://{vm.private_address}:{config.controller.gcp.port}"
            )
            # A CLI that cannot reach the address tunnels to this VM next: no second listing.
            self._discovered = (address, vm)
            return address
        return None

    def tunnel(self, address: str, local_port: int | None = None) -> AbstractContextManager[str]:
        """An SSH forward (through `gcloud compute ssh`) to the controller VM serving `address`."""
        parsed = urlparse(address if "://" in address else f"http://{address}")
        if not parsed.hostname or not parsed.port:
            raise PlatformError(f"cannot tunnel to {address!r}: expected http://HOST:PORT")
        if self._discovered is not None and self._discovered[0] == address:
            return _url_of_forward(self._discovered[1].remote_exec, parsed.port, local_port)
        vms = self.list_vms([], {self._keys.controller: "true"})
        if not vms:
            raise PlatformError(f"no controller VM labelled {self._keys.controller}=true to tunnel to")
        return _url_of_forward(vms[0].remote_exec, parsed.port, local_port)


@contextmanager
def _url_of_forward(remote: Any, port: int, local_port: int | None) -> Iterator[str]:
    with remote.forward(port, local_port=local_port) as local:
        yield f"http://127.0.0.1:{local}"
