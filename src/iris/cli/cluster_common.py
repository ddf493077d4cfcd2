"""What the `iris cluster` commands share: the cluster's config and platform, a client of its
controller, and how a started controller and its autoscaler are shown."""

from __future__ import annotations

from pathlib import Path

import click

from iris.cli.connect import open_controller_url, remembered_connection
from iris.cli.render import age, console
from iris.client.client import IrisClient, NotAuthenticatedError
from iris.cluster.controller.lifecycle import ControllerInfo, local_state_dir, reachable_controller
from iris.cluster.platform.base import Platform
from iris.cluster.platform.factory import create_platform
from iris.config import load_and_validate
from iris.rpc import cluster_pb2 as pb
from iris.rpc import config_pb2
from iris.time import wait_until

START_TIMEOUT_S = 120.0


def load_cluster() -> tuple[config_pb2.IrisClusterConfig, str]:
    """The config given with --config anywhere on the command line, and its path."""
    config_path = remembered_connection().get("config_path")
    if not config_path:
        raise click.UsageError("give the cluster config: iris cluster --config CLUSTER.yaml ...")
    return load_and_validate(config_path), config_path


def cluster_platform(config: config_pb2.IrisClusterConfig, config_path: str) -> Platform:
    return create_platform(config, local_state_dir(config), str(Path(config_path).resolve()))


def cluster_client(ctx: click.Context) -> IrisClient:
    """A client of the controller named by --controller-url, --config or IRIS_CONTROLLER_URL; a
    tunnel it needs stays open until the command ends."""
    remembered = remembered_connection()
    url = ctx.with_resource(open_controller_url(remembered.get("config_path"), remembered.get("controller_url")))
    return IrisClient.remote(url)


def wait_for_min_slices(client: IrisClient, config: config_pb2.IrisClusterConfig) -> int:
    """Show the autoscaler's steps until every group's min_slices are up; the worker count."""
    # Without scale groups, run-local starts one plain worker.
    wanted = sum(g.min_slices * max(1, g.slice_template.num_vms) for g in config.scale_groups.values())
    if not config.scale_groups:
        wanted = 1
    seen: set[tuple[str, str]] = set()

    def up() -> bool:
        status = client.call("get_autoscaler_status", pb.GetAutoscalerStatusRequest())
        for action in reversed(status.recent_actions):
            key = (action.slice_id, action.action)
            if key not in seen:
                seen.add(key)
                console.print(f"  {action.scale_group}: {action.action} {action.slice_id} {action.reason}".rstrip())
        healthy = [w for w in client.list_workers() if w.state == pb.WORKER_STATE_HEALTHY]
        return len(healthy) >= wanted

    wait_until(up, START_TIMEOUT_S, 0.2, "the scale groups' min_slices to come up")
    return wanted


def report_running(
    platform: Platform, config: config_pb2.IrisClusterConfig, config_path: str, info: ControllerInfo
) -> None:
    """Wait for the workers of a controller just started and say where the cluster runs."""
    pid = getattr(info.handle, "pid", "?")
    try:
        with (
            reachable_controller(platform, info.url) as url,
            IrisClient.remote(url) as client,
            console.status("waiting for workers"),
        ):
            wait_for_min_slices(client, config)
            healthy = [w for w in client.list_workers() if w.state == pb.WORKER_STATE_HEALTHY]
    except NotAuthenticatedError:
        click.echo(f"cluster '{config.name}' started: controller {info.url} (pid {pid})")
        click.echo(
            "  auth is on and this shell has no token, so the workers were not waited for: "
            f"log in with iris login --config {config_path} (or set IRIS_TOKEN)"
        )
        return
    click.echo(f"cluster '{config.name}' running: controller {info.url}, {len(healthy)} worker(s) (pid {pid})")
    click.echo(f"  state and logs: {local_state_dir(config)}")
    click.echo(f"  try: iris run --config {config_path} -- python -c \"print('hello from iris')\"")


def print_groups(status: pb.GetAutoscalerStatusResponse) -> None:
    for group in status.groups:
        live = [s for s in group.slices if s.state != "DELETED"]
        line = f"[bold]scale group[/bold] {group.name}: {group.state}, {len(live)} slice(s) (min {group.min_slices}, max {group.max_slices})"
        if group.demand:
            line += f", demand {group.demand}"
        console.print(line)
        if group.unmet_reason:
            console.print(f"  waiting: {group.unmet_reason}")
        for item in live:
            console.print(f"  {item.slice_id}  {item.state.lower()}  {age(item.created_at)}  {', '.join(item.worker_ids)}  {item.error}")
    for reason in status.unroutable:
        console.print(f"[red]unserved[/red] {reason}")


def print_actions(status: pb.GetAutoscalerStatusResponse, limit: int) -> None:
    if not status.recent_actions:
        return
    console.print("[bold]recent autoscaler actions[/bold]")
    for action in list(status.recent_actions)[:limit]:
        console.print(f"  {age(action.at)}  {action.scale_group}  {action.action}  {action.slice_id}  {action.reason}")


def print_autoscaler(status: pb.GetAutoscalerStatusResponse, limit: int = 20) -> None:
    if not status.enabled:
        click.echo("the autoscaler is off: the config defines no scale_groups")
        return
    print_groups(status)
    print_actions(status, limit)


def configured_images(config: config_pb2.IrisClusterConfig) -> dict[str, str]:
    """The images the config runs its daemons from, by kind of iris.cli.build ("worker",
    "controller", "controller-coreweave"); a daemon that runs from a Python environment instead
    has none."""
    images = {}
    if config.defaults.bootstrap.docker_image:
        images["worker"] = config.defaults.bootstrap.docker_image
    which = config.controller.WhichOneof("controller")
    controller_image = getattr(getattr(config.controller, which), "image", "") if which else ""
    if controller_image:
        images["controller-coreweave" if which == "coreweave" else "controller"] = controller_image
    return images
