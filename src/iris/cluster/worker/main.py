"""Worker daemon: `python -m iris.cluster.worker.main serve --controller-address URL --runtime process`."""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import sys
import threading
from pathlib import Path

import click

from iris.chaos import load_from_env
from iris.cluster import task_env
from iris.cluster.listening_socket import PortInUseError, bind_socket, url_for
from iris.cluster.runtime.types import ContainerError, ContainerRuntime
from iris.cluster.types import ATTR_SLICE_ID, parse_gpu_spec, tpu_device, tpu_topology
from iris.cluster.worker.env_probe import probe
from iris.cluster.worker.node_offer import describe_offer, node_offer_reader
from iris.cluster.worker.service import worker_server
from iris.cluster.worker.settings import WorkerDaemonSettings
from iris.cluster.worker.worker import Worker, WorkerSettings
from iris.config import (
    DEFAULT_KILL_GRACE_PERIOD,
    DEFAULT_WORKER_PORT,
    ConfigError,
    load_and_validate,
    parse_size,
)
from iris.rpc import cluster_pb2 as pb

logger = logging.getLogger("iris.worker")

RUNTIMES = ("process", "docker", "containerd", "kubernetes")


def create_runtime(name: str, state_dir: Path) -> ContainerRuntime:
    if name == "process":
        from iris.cluster.runtime.process import ProcessRuntime

        return ProcessRuntime(state_dir)
    try:
        if name == "docker":
            from iris.cluster.runtime.docker import DockerRuntime

            return DockerRuntime()
        if name == "containerd":
            from iris.cluster.runtime.containerd import ContainerdRuntime

            return ContainerdRuntime(state_dir)
        if name == "kubernetes":
            from iris.cluster.runtime.kubernetes import KubernetesRuntime

            return KubernetesRuntime()
    except ContainerError as exc:
        raise click.ClickException(f"--runtime {name}: {exc}") from None
    raise click.UsageError(f"runtime {name!r} is not available in this build of the worker; use --runtime process")


def _parse_attributes(pairs: tuple[str, ...]) -> dict[str, str]:
    attributes = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--attribute")
        attributes[key] = value
    return attributes


def _device_from_flags(tpu_variant: str | None, gpu_spec: str | None) -> pb.DeviceConfig | None:
    if tpu_variant and gpu_spec:
        raise ValueError("a worker offers either --tpu or --gpu, not both")
    if tpu_variant:
        return tpu_device(tpu_variant, tpu_topology(tpu_variant).chips_per_host)
    if gpu_spec:
        return parse_gpu_spec(gpu_spec)
    return None


def _stop_when_process_ends(pid: int) -> None:
    """Stop gracefully (tasks killed, as on SIGTERM) once process `pid` has ended, however it ended."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        pidfd = None

    def watch() -> None:
        if pidfd is not None:
            select.select([pidfd], [], [])
        logger.info("process %d, which this worker belongs to, has ended: stopping", pid)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="exit-with-pid", daemon=True).start()


@click.group()
def cli() -> None:
    """The Iris worker daemon."""


@cli.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="Cluster config YAML.")
@click.option("--controller-address", help="Controller URL, e.g. http://10.0.0.2:10000.")
@click.option("--host", default="0.0.0.0", show_default=True, help="Interface to listen on.")
@click.option("--port", type=int, default=None, help=f"Port to listen on (default {DEFAULT_WORKER_PORT}; 0 picks one).")
@click.option("--advertise-host", help="Host name or IP the controller should use to reach this worker.")
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False),
    help="Bundle cache and task work dirs (default: the config's bootstrap.cache_dir, else a local cluster's).",
)
@click.option(
    "--runtime",
    type=click.Choice(RUNTIMES),
    default=None,
    help="How tasks run (default: the config's bootstrap.runtime; process without a config).",
)
@click.option("--task-image", help="Image task containers run in (default: the config's bootstrap.task_image).")
@click.option("--worker-id", help="Stable id for this worker (default: <hostname>:<port>).")
@click.option("--attribute", "attributes", multiple=True, help="KEY=VALUE attribute to report; repeatable.")
@click.option("--cpu", type=float, help="Cpus to offer instead of the host's count.")
@click.option("--memory", help="Memory to offer instead of the host's, e.g. 8GB.")
@click.option("--slice-id", help="The slice this worker belongs to, as the platform that started it names it.")
@click.option(
    "--kill-grace",
    type=float,
    default=None,
    help=f"Seconds between SIGTERM and SIGKILL (default {DEFAULT_KILL_GRACE_PERIOD.seconds:g}).",
)
@click.option("--tpu", "tpu_variant", help="This host is part of a TPU slice of this variant, e.g. v5litepod-16.")
@click.option("--gpu", "gpu_spec", help="GPUs this host offers, e.g. H100x8.")
@click.option(
    "--exit-with-pid",
    type=int,
    default=None,
    help="Stop (killing its tasks) when this process ends, even by SIGKILL: for a worker that belongs to one "
    "program, such as `iris run --local`, and must not outlive it.",
)
def serve(
    config_path: str | None,
    controller_address: str | None,
    host: str,
    port: int | None,
    advertise_host: str | None,
    cache_dir: str | None,
    runtime: str | None,
    task_image: str | None,
    worker_id: str | None,
    slice_id: str | None,
    attributes: tuple[str, ...],
    cpu: float | None,
    memory: str | None,
    kill_grace: float | None,
    tpu_variant: str | None,
    gpu_spec: str | None,
    exit_with_pid: int | None,
) -> None:
    """Register with the controller and run the tasks it sends."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = None
    if config_path:
        try:
            config = load_and_validate(config_path)
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None
    try:
        options = WorkerDaemonSettings.from_config(
            config,
            controller_address=controller_address,
            host=host,
            port=port,
            runtime=runtime,
            cache_dir=cache_dir,
            kill_grace_s=kill_grace,
            task_image=task_image,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    cache = options.cache_dir
    try:
        memory_bytes = parse_size(memory) if memory else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--memory") from None

    try:
        device = _device_from_flags(tpu_variant, gpu_spec)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    container_runtime = create_runtime(options.runtime, cache / "runtime")
    reported = _parse_attributes(attributes)
    if slice_id:
        reported[ATTR_SLICE_ID] = slice_id
    metadata = probe(cache, options.runtime, cpu, memory_bytes, reported, device)
    if advertise_host:
        # The host's name may not resolve to where others reach it; a gang's peer list
        # (TPU_WORKER_HOSTNAMES) must name the address the controller was told.
        metadata.ip_address = advertise_host
    current_offer = node_offer_reader(container_runtime, metadata)
    if current_offer is not None:
        try:
            offer = current_offer()
        except ContainerError as exc:
            raise click.ClickException(str(exc)) from None
        if offer != metadata:
            logger.info("other Pods on this node leave %s for tasks", describe_offer(offer))
        metadata = offer
    try:
        sock = bind_socket(options.host, options.port)
    except PortInUseError as exc:
        raise click.ClickException(f"{exc}; pass --port 0 to pick a free port") from None
    bound_port = sock.getsockname()[1]
    address = url_for(sock, advertise_host or (metadata.ip_address if host in ("0.0.0.0", "") else None))
    settings = WorkerSettings(
        worker_id=worker_id or f"{socket.gethostname()}:{bound_port}",
        address=address,
        controller_address=options.controller_address,
        cache_dir=cache,
        metadata=metadata,
        kill_grace_s=options.kill_grace_s,
        task_image=options.task_image,
        reregister_after_s=options.reregister_after_s,
        input_limits=options.input_limits,
        # Taken out of the environment so that nothing the worker starts inherits it.
        token=os.environ.pop(task_env.WORKER_TOKEN, ""),
        current_offer=current_offer,
    )
    try:
        load_from_env(settings.worker_id)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    worker = Worker(settings, container_runtime)

    server = worker_server(worker, sock)
    worker.start()
    if exit_with_pid is not None:
        _stop_when_process_ends(exit_with_pid)
    logger.info("worker %s serving on %s (runtime %s)", settings.worker_id, address, options.runtime)
    print(f"IRIS_WORKER_READY {address}", flush=True)
    server.serve_forever()


def main() -> None:
    cli(prog_name="python -m iris.cluster.worker.main")


if __name__ == "__main__":
    sys.exit(main())
