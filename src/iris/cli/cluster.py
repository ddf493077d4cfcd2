"""`iris cluster --config F ...`: start, stop and inspect a cluster, its slices and autoscaler.

`start` creates the controller through the platform (for a local cluster, a detached
`iris cluster controller run-local` process whose autoscaler brings up the scale groups'
min_slices) and shows each step until the workers are up.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
import webbrowser
from pathlib import Path

import click

from iris.cli.connect import controller_from_config, remembered_connection
from iris.cli.render import age, console, jobs_table, message_dict, print_json, recent_workers, workers_table
from iris.client.client import IrisClient, IrisError, NotAuthenticatedError
from iris.cluster.controller.lifecycle import (
    URL_FILE,
    ClusterNotRunningError,
    ControllerInfo,
    connect_cluster,
    controller_connection,
    labelled_resources,
    local_state_dir,
    reachable_controller,
    reload_controller,
    start_controller,
    stop_all,
)
from iris.cluster.http_server import PortInUseError
from iris.cluster.local_cluster import LocalCluster
from iris.cluster.platform.base import Platform, PlatformError
from iris.cluster.platform.factory import create_platform
from iris.cluster.types import UNFINISHED_JOB_STATES, job_state_name
from iris.config import load_and_validate
from iris.rpc import cluster_pb2 as pb
from iris.rpc import config_pb2
from iris.time import wait_until

START_TIMEOUT_S = 120.0


def _load(ctx: click.Context) -> tuple[config_pb2.IrisClusterConfig, str]:
    config_path = remembered_connection().get("config_path")
    if not config_path:
        raise click.UsageError("give the cluster config: iris cluster --config CLUSTER.yaml ...")
    return load_and_validate(config_path), config_path


def _platform(config: config_pb2.IrisClusterConfig, config_path: str):
    return create_platform(config, local_state_dir(config), str(Path(config_path).resolve()))


def _client(ctx: click.Context) -> tuple[IrisClient, config_pb2.IrisClusterConfig]:
    """A client of the cluster's controller; a tunnel it needs stays open until the command ends."""
    config, config_path = _load(ctx)
    url = ctx.with_resource(controller_from_config(config, config_path))
    return IrisClient.remote(url), config


@click.group()
def cluster() -> None:
    """Start, stop and inspect a cluster described by a config file.

    --config goes before or after the subcommand: `iris cluster --config F status` and
    `iris cluster status --config F` are the same.
    """


def _wait_for_min_slices(client: IrisClient, config: config_pb2.IrisClusterConfig) -> int:
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


@cluster.command()
@click.pass_context
def start(ctx: click.Context) -> None:
    """Start the cluster in the background and wait until its min_slices are up."""
    config, config_path = _load(ctx)
    platform = _platform(config, config_path)
    with console.status(f"starting cluster '{config.name}'"):
        info = start_controller(platform, config, progress=lambda m: console.print(f"  {m}"))
    pid = getattr(info.handle, "pid", "?")
    if info.already_running:
        click.echo(f"cluster '{config.name}' is already running (pid {pid}) at {info.url}")
        return
    _report_running(platform, config, config_path, info)


def _report_running(
    platform: Platform, config: config_pb2.IrisClusterConfig, config_path: str, info: ControllerInfo
) -> None:
    pid = getattr(info.handle, "pid", "?")
    try:
        with (
            reachable_controller(platform, info.url) as url,
            IrisClient.remote(url) as client,
            console.status("waiting for workers"),
        ):
            _wait_for_min_slices(client, config)
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


def _unfinished_jobs(platform: Platform, config: config_pb2.IrisClusterConfig) -> list[pb.JobStatus] | None:
    """The jobs stopping would end; None when the controller cannot say (auth is on and this
    shell has no token)."""
    try:
        with controller_connection(platform, config) as url, IrisClient.remote(url) as client:
            return client.list_jobs(states=UNFINISHED_JOB_STATES)
    except NotAuthenticatedError:
        return None
    except (PlatformError, IrisError):
        # A controller that is not running or does not answer cannot say; stopping it is what the user asked.
        return []


@cluster.command()
@click.option("-y", "--yes", is_flag=True, help="Stop even though jobs are still running, without asking.")
@click.pass_context
def stop(ctx: click.Context, yes: bool) -> None:
    """Stop the controller and terminate every slice of the cluster.

    Jobs still running are listed first: they are lost with their workers and start over when
    the cluster is started again, so stop asks (or needs --yes).
    """
    config, config_path = _load(ctx)
    platform = _platform(config, config_path)
    unfinished = _unfinished_jobs(platform, config)
    if unfinished is None and not yes:
        raise click.ClickException(
            "not stopping: auth is on and this shell has no token, so the jobs still running cannot be listed; "
            f"log in (iris login --config {config_path}) or pass --yes to stop anyway"
        )
    if unfinished and not yes:
        click.echo(f"{len(unfinished)} job(s) have not finished:", err=True)
        for job in unfinished[:20]:
            click.echo(f"  {job.job_id}  {job_state_name(job.state)}", err=True)
        click.echo(
            "stopping the cluster ends their tasks; they start over when the cluster starts again "
            f"(kill them first to drop them: iris job kill --config {config_path} JOB)",
            err=True,
        )
        if not sys.stdin.isatty():
            raise click.ClickException("not stopping: pass --yes to stop anyway")
        if not click.confirm("stop the cluster anyway?", err=True):
            raise click.ClickException("not stopping")
    with console.status(f"stopping cluster '{config.name}'"):
        stopped, slices = stop_all(platform, config)
    if not stopped and not slices:
        click.echo(f"cluster '{config.name}' was not running")
        return
    click.echo(f"cluster '{config.name}' stopped")
    if slices:
        click.echo(f"  terminated {len(slices)} slice(s): {', '.join(slices)}")


@cluster.command()
@click.pass_context
def restart(ctx: click.Context) -> None:
    """Restart the controller on its state; jobs survive and running workers are re-adopted."""
    config, config_path = _load(ctx)
    with console.status(f"restarting the controller of '{config.name}'"):
        platform = _platform(config, config_path)
        info = reload_controller(platform, config, lambda m: console.print(f"  {m}"))
    _report_running(platform, config, config_path, info)


@cluster.command()
@click.option("--all", "show_all", is_flag=True, help="Also workers that stopped, failed or were terminated long ago.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def status(ctx: click.Context, show_all: bool, as_json: bool) -> None:
    """Show the controller, its scale groups and slices, its workers and recent jobs."""
    config, config_path = _load(ctx)
    platform = _platform(config, config_path)
    try:
        url = connect_cluster(platform, config)
    except ClusterNotRunningError:
        click.echo(f"cluster '{config.name}' is not running (start it with: iris cluster --config {config_path} start)")
        ctx.exit(1)
    try:
        reachable = ctx.with_resource(reachable_controller(platform, url))
    except PlatformError as exc:
        raise click.ClickException(f"cluster '{config.name}' does not answer at {url}: {exc}") from None
    with IrisClient.remote(reachable) as client:
        try:
            workers = client.list_workers()
            jobs = client.list_jobs(page_size=20)
            autoscaler = client.call("get_autoscaler_status", pb.GetAutoscalerStatusRequest())
        except IrisError as exc:
            raise click.ClickException(f"cluster '{config.name}' does not answer: {exc}") from None
    pid_file = local_state_dir(config) / "cluster.pid"
    pid = pid_file.read_text().strip() if pid_file.exists() else "?"
    shown = workers if show_all else recent_workers(workers, time.time() * 1000)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "cluster": config.name,
                    "controllerUrl": url,
                    "pid": pid,
                    "workers": [message_dict(w) for w in shown],
                    "autoscaler": message_dict(autoscaler),
                    "jobs": [message_dict(j) for j in jobs],
                },
                indent=2,
                sort_keys=True,
            )
        )
        return
    console.print(f"[bold]cluster[/bold] {config.name}  controller {url}  pid {pid}")
    if autoscaler.enabled:
        _print_groups(autoscaler)
        _print_actions(autoscaler, limit=8)
    hidden = len(workers) - len(shown)
    console.print(f"[bold]workers[/bold] ({len(shown)})" + (f", {hidden} gone long ago hidden (--all shows them)" if hidden else ""))
    console.print(workers_table(shown))
    console.print(f"[bold]recent jobs[/bold] ({len(jobs)})")
    if jobs:
        console.print(jobs_table(jobs[:20]))


@cluster.command()
@click.option("--port", type=int, default=None, help="Local port for the tunnel to the controller (default: any free port).")
@click.option("--open", "open_browser", is_flag=True, help="Also open the dashboard in this machine's browser.")
@click.pass_context
def dashboard(ctx: click.Context, port: int | None, open_browser: bool) -> None:
    """Print the controller dashboard's URL, through the platform's tunnel where one is needed."""
    config, config_path = _load(ctx)
    platform = _platform(config, config_path)
    try:
        url = connect_cluster(platform, config)
    except ClusterNotRunningError:
        raise click.ClickException(
            f"cluster '{config.name}' is not running (start it with: iris cluster --config {config_path} start)"
        ) from None
    with platform.tunnel(url, port) as local_url:
        dashboard_url = local_url.rstrip("/") + "/"
        click.echo(f"dashboard of '{config.name}': {dashboard_url}")
        if open_browser and not webbrowser.open(dashboard_url):
            click.echo("no browser found on this machine; open the URL above yourself")
        if local_url == url:
            return
        # The URL only works while the tunnel is up.
        click.echo("tunnel open; press Ctrl-C to close it")
        stop = threading.Event()
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        stop.wait()


def _print_groups(status: pb.GetAutoscalerStatusResponse) -> None:
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


@cluster.group()
def controller() -> None:
    """Controller operations."""


@controller.command("run-local")
@click.option("--port", type=int, default=None, help="Controller port (default from config).")
@click.pass_context
def run_local(ctx: click.Context, port: int | None) -> None:
    """Run the controller and its autoscaler in the foreground.

    Ctrl-C stops the controller and its workers; SIGTERM stops only the controller, leaving the
    workers running for the next controller to adopt (that is what `cluster restart` uses).
    """
    config, config_path = _load(ctx)
    if config.platform.WhichOneof("platform") != "local":
        raise click.ClickException(f"{config_path}: run-local needs a local platform config")
    state_dir = local_state_dir(config)
    running_url = _platform(config, config_path).discover_controller(config)
    if running_url:
        # A second controller on the same state would corrupt it and take the first one's URL file.
        raise click.ClickException(
            f"cluster '{config.name}' is already running at {running_url} on {state_dir}; "
            f"stop it first: iris cluster --config {config_path} stop"
        )
    configured_port = config.controller.local.port if config.controller.HasField("local") else 0
    # Without scale groups a local cluster still gets one plain worker, so it can run jobs.
    local = LocalCluster(
        config,
        state_dir=state_dir,
        port=port if port is not None else configured_port,
        config_path=str(Path(config_path).resolve()),
    )
    stop_requested = threading.Event()
    interrupted = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop_requested.set())

    def on_interrupt(*_) -> None:
        interrupted.set()
        stop_requested.set()

    signal.signal(signal.SIGINT, on_interrupt)
    try:
        try:
            local.start(progress=lambda message: click.echo(f"iris: {message}", err=True), timeout=START_TIMEOUT_S)
        except PortInUseError as exc:
            raise click.ClickException(
                f"{exc}: another Iris cluster or program holds the port; stop it, or set controller.local.port "
                f"in {config_path} to a free port (0 picks one at random, but then the address changes on "
                "every start)"
            ) from None
        (state_dir / URL_FILE).write_text(local.url)
        click.echo(f"iris: cluster '{config.name}' ready at {local.url}; Ctrl-C to stop", err=True)
        stop_requested.wait()
    finally:
        (state_dir / URL_FILE).unlink(missing_ok=True)
        local.stop(terminate_slices=interrupted.is_set())


# ---------------------------------------------------------------- slices


@cluster.group("slice")
def slice_group() -> None:
    """Create, list and terminate slices."""


@slice_group.command("create")
@click.option("--scale-group", required=True, help="The scale group to add a slice to.")
@click.pass_context
def slice_create(ctx: click.Context, scale_group: str) -> None:
    """Add one slice to a scale group now, bypassing the autoscaler's delays."""
    client, _ = _client(ctx)
    with client, console.status(f"creating a slice in {scale_group}"):
        created = client.call("create_slice", pb.CreateSliceRequest(scale_group=scale_group)).slice
    click.echo(f"created {created.slice_id} in {created.scale_group} ({created.state.lower()})")


@slice_group.command("list")
@click.option("--scale-group", default="", help="Only this group's slices.")
@click.option("--all", "include_deleted", is_flag=True, help="Include deleted slices.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def slice_list(ctx: click.Context, scale_group: str, include_deleted: bool, as_json: bool) -> None:
    """List the cluster's slices."""
    client, _ = _client(ctx)
    with client:
        slices = list(
            client.call("list_slices", pb.ListSlicesRequest(scale_group=scale_group, include_deleted=include_deleted)).slices
        )
    if as_json:
        print_json(slices)
        return
    if not slices:
        click.echo("no slices")
    for item in slices:
        click.echo(
            f"{item.slice_id}  {item.scale_group}  {item.state.lower()}  {age(item.created_at)}  "
            f"workers: {', '.join(item.worker_ids) or '-'}  {item.error}".rstrip()
        )


@slice_group.command("get")
@click.argument("slice_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def slice_get(ctx: click.Context, slice_id: str, as_json: bool) -> None:
    """Show one slice and its history."""
    client, _ = _client(ctx)
    with client:
        item = client.call("get_slice", pb.GetSliceRequest(slice_id=slice_id))
    if as_json:
        print_json(item)
        return
    click.echo(f"{item.slice_id}  {item.scale_group}  {item.state.lower()}  zone {item.zone or '-'}")
    click.echo(f"  workers: {', '.join(item.worker_ids) or '-'}")
    if item.error:
        click.echo(f"  error: {item.error}")
    for event in item.history:
        click.echo(f"  {event.from_state.lower() or 'new'} -> {event.to_state.lower()}: {event.reason}")


@slice_group.command("terminate")
@click.argument("slice_id", required=False)
@click.option("--all", "terminate_all", is_flag=True, help="Terminate every slice.")
@click.pass_context
def slice_terminate(ctx: click.Context, slice_id: str | None, terminate_all: bool) -> None:
    """Terminate one slice (or --all); its tasks are retried elsewhere."""
    if bool(slice_id) == terminate_all:
        raise click.UsageError("give a SLICE_ID or --all")
    client, _ = _client(ctx)
    with client, console.status("terminating"):
        ended = client.call(
            "terminate_slice", pb.TerminateSliceRequest(slice_id=slice_id or "", all=terminate_all)
        ).terminated_slice_ids
    click.echo("terminated " + (", ".join(ended) if ended else "nothing"))


# ---------------------------------------------------------------- autoscaler and VMs


@cluster.group("autoscaler")
def autoscaler_group() -> None:
    """Inspect the autoscaler."""


@autoscaler_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def autoscaler_status(ctx: click.Context, as_json: bool) -> None:
    """Each scale group's state, slices and unmet demand, and recent actions."""
    client, _ = _client(ctx)
    with client:
        status = client.call("get_autoscaler_status", pb.GetAutoscalerStatusRequest())
    if as_json:
        print_json(status)
        return
    if not status.enabled:
        click.echo("the autoscaler is off: the config defines no scale_groups")
        return
    _print_groups(status)
    _print_actions(status, limit=20)


def _print_actions(status: pb.GetAutoscalerStatusResponse, limit: int) -> None:
    if not status.recent_actions:
        return
    console.print("[bold]recent autoscaler actions[/bold]")
    for action in list(status.recent_actions)[:limit]:
        console.print(f"  {age(action.at)}  {action.scale_group}  {action.action}  {action.slice_id}  {action.reason}")


@cluster.group("vm")
def vm_group() -> None:
    """Workers as machines: their status and their own logs."""


@vm_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def vm_status(ctx: click.Context, as_json: bool) -> None:
    """Every worker the controller knows, with its state and load."""
    client, _ = _client(ctx)
    with client:
        workers = client.list_workers()
    if as_json:
        print_json(workers)
    else:
        console.print(workers_table(workers))


@vm_group.command("logs")
@click.argument("worker_id")
@click.option("--tail", type=int, default=200, show_default=True, help="Lines to show.")
@click.pass_context
def vm_logs(ctx: click.Context, worker_id: str, tail: int) -> None:
    """A worker's own log (its daemon's output, not its tasks')."""
    client, _ = _client(ctx)
    with client:
        logs = client.call("get_worker_logs", pb.GetWorkerLogsRequest(worker_id=worker_id, tail_lines=tail)).logs
    click.echo(logs)


# ---------------------------------------------------------------- debugging


@cluster.group("debug")
def debug_group() -> None:
    """Repairs for when a cluster is in a state its controller cannot fix."""


@debug_group.command("cleanup")
@click.option("--no-dry-run", "delete", is_flag=True, help="Delete what is listed (default: only list it).")
@click.pass_context
def debug_cleanup(ctx: click.Context, delete: bool) -> None:
    """List every resource this cluster's labels mark on the platform (controller VMs, slices),
    whether or not a controller runs; with --no-dry-run, delete them all."""
    config, config_path = _load(ctx)
    platform = _platform(config, config_path)
    vms, slices = labelled_resources(platform, config)
    if not vms and not slices:
        click.echo(f"nothing of cluster '{config.name}' found")
        return
    for vm in vms:
        click.echo(f"vm     {vm.worker_id}  {vm.internal_address}")
    for handle in slices:
        click.echo(f"slice  {handle.slice_id}  {handle.scale_group or '-'}  {handle.zone or '-'}")
    if not delete:
        click.echo(f"dry run: {len(vms)} VM(s) and {len(slices)} slice(s) left as they are; --no-dry-run deletes them")
        return
    for vm in vms:
        vm.terminate()
    for handle in slices:
        handle.terminate()
    click.echo(f"deleted {len(vms)} VM(s) and {len(slices)} slice(s)")
