"""Controller lifecycle as free functions over a Platform: start (or find) the controller, stop
it, restart it on its state, connect to it, and tear the whole cluster down.

The controller "VM" comes from `platform.create_vm()` and is found again by its label; its
address travels in the VM's metadata. For a local cluster the state directory also holds
`cluster.pid`, `controller.url` and the log, so a user can see what is running.

A controller on another host may not be reachable from the machine running the CLI;
`controller_connection` then goes through `platform.tunnel()` for as long as it is used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import httpx

from iris.cluster.platform.base import (
    Labels,
    Platform,
    PlatformError,
    RedeployableInPlace,
    RestartableInPlace,
    SliceHandle,
    StandaloneWorkerHandle,
)
from iris.config import state_dir_of
from iris.rpc import config_pb2
from iris.time import wait_until

PID_FILE = "cluster.pid"
URL_FILE = "controller.url"
START_TIMEOUT_S = 120.0


class ClusterNotRunningError(PlatformError):
    pass


@runtime_checkable
class DeclaresController(Protocol):
    """A platform whose controller is a set of declared resources (CoreWeave's Deployment and
    ConfigMap): starting a running cluster again applies the config to them, rolling the
    controller out when something changed, instead of leaving the old config running."""

    def apply_controller(self, config: config_pb2.VmConfig) -> bool:
        """Apply every controller resource and wait until the controller runs with them; True when
        something changed (and the controller was rolled out), False when all was already so."""
        ...


@dataclass(frozen=True)
class ControllerInfo:
    url: str
    handle: StandaloneWorkerHandle
    already_running: bool = False


def local_state_dir(config: config_pb2.IrisClusterConfig) -> Path:
    return Path(state_dir_of(config))


def _labels(config: config_pb2.IrisClusterConfig) -> Labels:
    return Labels(config.platform.label_prefix or "iris")


def _address_key(config: config_pb2.IrisClusterConfig) -> str:
    return f"iris-controller-address-{_labels(config).prefix}"


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def find_controller(platform: Platform, config: config_pb2.IrisClusterConfig) -> StandaloneWorkerHandle | None:
    vms = platform.list_vms([], {_labels(config).controller: "true"})
    return vms[0] if vms else None


def start_controller(
    platform: Platform,
    config: config_pb2.IrisClusterConfig,
    progress: Callable[[str], None] = lambda message: None,
    timeout: float = START_TIMEOUT_S,
) -> ControllerInfo:
    """Return the running controller, or create one and wait until it answers."""
    state_dir = local_state_dir(config)
    existing = find_controller(platform, config)
    if existing is not None and isinstance(platform, DeclaresController):
        if platform.apply_controller(_controller_vm_config(config)):
            progress("the config changed: applied it and rolled the controller out")
    if existing is not None:
        url = platform.discover_controller(config)
        if url:
            return ControllerInfo(url, existing, already_running=True)
        progress("found an unhealthy controller; replacing it")
        existing.terminate()
    url_file = state_dir / URL_FILE
    url_file.unlink(missing_ok=True)
    state_dir.mkdir(parents=True, exist_ok=True)
    handle = platform.create_vm(_controller_vm_config(config))
    (state_dir / PID_FILE).write_text(str(getattr(handle, "pid", "")))
    progress("controller starting")

    answering: list[str] = []

    def up() -> bool:
        # A local controller writes its URL into the state directory; one on a host is found by its platform.
        if url_file.exists():
            url = url_file.read_text().strip()
            found = url if _healthy(url) else None
        else:
            found = platform.discover_controller(config)
        if found:
            answering.append(found)
            return True
        # Not up yet: a controller that died will never be (checked only now, since on a remote
        # host asking costs an SSH round trip).
        if handle.status().state.value != "RUNNING":
            raise PlatformError(f"the controller exited during start-up; last log lines:\n{_log_tail(handle)}")
        return False

    try:
        wait_until(up, timeout, 0.1, "the controller to answer")
    except (TimeoutError, PlatformError) as exc:
        handle.terminate()
        (state_dir / PID_FILE).unlink(missing_ok=True)
        if isinstance(exc, TimeoutError):
            raise PlatformError(
                f"the controller did not come up within {timeout:.0f}s; last log lines:\n{_log_tail(handle)}"
            ) from None
        raise
    url = answering[-1]
    handle.set_metadata({_address_key(config): url})
    return ControllerInfo(url, handle)


def _controller_vm_config(config: config_pb2.IrisClusterConfig) -> config_pb2.VmConfig:
    labels = _labels(config)
    return config_pb2.VmConfig(name=f"{labels.prefix}-controller", labels={labels.controller: "true"})


def _log_tail(handle: StandaloneWorkerHandle, lines: int = 15) -> str:
    path = getattr(handle, "log_path", None)
    if path is None or not Path(path).exists():
        return "(no log)"
    return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])


def stop_controller(platform: Platform, config: config_pb2.IrisClusterConfig) -> bool:
    """Stop the controller; its workers keep running and are adopted by the next controller."""
    state_dir = local_state_dir(config)
    handle = find_controller(platform, config)
    (state_dir / PID_FILE).unlink(missing_ok=True)
    (state_dir / URL_FILE).unlink(missing_ok=True)
    if handle is None:
        return False
    handle.terminate()
    return True


def reload_controller(
    platform: Platform, config: config_pb2.IrisClusterConfig, progress: Callable[[str], None] = lambda m: None
) -> ControllerInfo:
    """Restart the controller on its state; running jobs and workers carry on.

    Where stopping the controller would delete its VM and the state on it (a cloud VM), the
    process is restarted on the VM it runs on; elsewhere the state directory outlives the
    process, so stopping and starting it again is the restart."""
    handle = find_controller(platform, config)
    if isinstance(handle, RestartableInPlace):
        return _restart_in_place(platform, config, handle, progress)
    stop_controller(platform, config)
    return start_controller(platform, config, progress)


def _restart_in_place(
    platform: Platform,
    config: config_pb2.IrisClusterConfig,
    handle: StandaloneWorkerHandle,
    progress: Callable[[str], None],
) -> ControllerInfo:
    assert isinstance(handle, RestartableInPlace)
    progress(f"restarting the controller on {handle.worker_id}, keeping its state")
    handle.restart_in_place()
    url = platform.discover_controller(config)
    if url is None:
        raise PlatformError(f"the controller on {handle.worker_id} restarted but cannot be found by its label")
    return ControllerInfo(url, handle)


def reload_cluster(
    platform: Platform,
    config: config_pb2.IrisClusterConfig,
    worker_token: Callable[[str], str],
    progress: Callable[[str], None] = lambda m: None,
) -> ControllerInfo:
    """Redeploy the controller and every worker with the current config and images.

    Where the controller restarts on its VM and every slice can take new worker daemons on its
    machines (a cloud: both would otherwise be paid for and waited for again), the controller is
    restarted in place and the worker bootstrap is run again on each slice's hosts, which keep their
    names; `worker_token(controller_url)` is what the new workers register with ("" when auth is
    off). Elsewhere the slices are stopped and the controller started again, and its autoscaler
    brings them back. Either way the jobs survive; tasks running on the old workers start over."""
    controller = find_controller(platform, config)
    slices = platform.list_slices(_slice_zones(config), {_labels(config).managed: "true"})
    redeployable = [(h.slice_id, h) for h in slices if isinstance(h, RedeployableInPlace)]
    if controller is None or not isinstance(controller, RestartableInPlace) or len(redeployable) < len(slices):
        _, ended = stop_all(platform, config)
        if ended:
            progress(f"stopped the workers of {len(ended)} slice(s): {', '.join(ended)}")
        return start_controller(platform, config, progress)
    info = _restart_in_place(platform, config, controller, progress)
    bootstrap = config_pb2.BootstrapConfig()
    bootstrap.CopyFrom(config.defaults.bootstrap)
    bootstrap.controller_address = info.url
    bootstrap.worker_token = worker_token(info.url)

    def redeploy(target: tuple[str, RedeployableInPlace]) -> str | None:
        slice_id, handle = target
        progress(f"redeploying the workers of slice {slice_id} on its hosts")
        try:
            handle.redeploy(bootstrap)
        except PlatformError as exc:
            return str(exc)
        return None

    with ThreadPoolExecutor(max_workers=max(1, len(redeployable))) as pool:
        failures = [failure for failure in pool.map(redeploy, redeployable) if failure]
    if failures:
        raise PlatformError(
            f"the controller was reloaded but {len(failures)} of {len(slices)} slice(s) were not: "
            + "; ".join(failures)
        )
    return info


def connect_cluster(platform: Platform, config: config_pb2.IrisClusterConfig) -> str:
    url = platform.discover_controller(config)
    if url is None:
        raise ClusterNotRunningError(f"the cluster '{config.name}' is not running")
    return url


def controller_connection(platform: Platform, config: config_pb2.IrisClusterConfig) -> AbstractContextManager[str]:
    """A URL of the running controller that answers from this machine (see reachable_controller);
    ClusterNotRunningError when there is none."""
    return reachable_controller(platform, connect_cluster(platform, config))


@contextmanager
def reachable_controller(platform: Platform, address: str) -> Iterator[str]:
    """`address` itself when the controller answers there from this machine, else a tunnel the
    platform opens to it, closed when the block ends."""
    if _healthy(address):
        yield address
        return
    with platform.tunnel(address) as local_url:
        yield local_url


def _slice_zones(config: config_pb2.IrisClusterConfig) -> list[str]:
    return sorted({z for g in config.scale_groups.values() for z in (g.zones or [""])})


def labelled_resources(
    platform: Platform, config: config_pb2.IrisClusterConfig
) -> tuple[list[StandaloneWorkerHandle], list[SliceHandle]]:
    """Everything of this cluster the platform holds, found by the cluster's labels alone (no
    controller needed): its controller VMs and its slices."""
    vms = platform.list_vms([], {_labels(config).controller: "true"})
    slices = platform.list_slices(_slice_zones(config), {_labels(config).managed: "true"})
    return vms, slices


def stop_all(platform: Platform, config: config_pb2.IrisClusterConfig) -> tuple[bool, list[str]]:
    """Stop the controller, then end every slice this cluster's label prefix marks as managed."""
    stopped = stop_controller(platform, config)
    ended = []
    for handle in platform.list_slices(_slice_zones(config), {_labels(config).managed: "true"}):
        handle.terminate()
        ended.append(handle.slice_id)
    return stopped, ended
