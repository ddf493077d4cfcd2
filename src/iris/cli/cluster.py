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
from collections.abc import Callable

import click

from iris.cli.cluster_common import (
    cluster_client,
    cluster_platform,
    configured_images,
    load_cluster,
    print_actions,
    print_autoscaler,
    print_groups,
    report_running,
)
from iris.cli.controller import controller
from iris.cli.debug import debug_group
from iris.cli.render import age, console, jobs_table, message_dict, print_json, recent_workers, workers_table
from iris.client.client import IrisClient, IrisError, NotAuthenticatedError
from iris.cluster.auth.tokens import WORKER_TOKEN_TTL_S, AuthMode, parse_mode
from iris.cluster.controller.lifecycle import (
    ClusterNotRunningError,
    connect_cluster,
    controller_connection,
    local_state_dir,
    reachable_controller,
    reload_cluster,
    reload_controller,
    start_controller,
    stop_all,
)
from iris.cluster.platform.base import Platform, PlatformError
from iris.cluster.types import UNFINISHED_JOB_STATES, job_state_name
from iris.rpc import cluster_pb2 as pb
from iris.rpc import config_pb2
from iris.time import Duration


@click.group()
def cluster() -> None:
    """Start, stop and inspect a cluster described by a config file.

    --config goes before or after the subcommand: `iris cluster --config F status` and
    `iris cluster status --config F` are the same.
    """


@cluster.command()
@click.pass_context
def start(ctx: click.Context) -> None:
    """Start the cluster in the background and wait until its min_slices are up."""
    config, config_path = load_cluster()
    platform = cluster_platform(config, config_path)
    with console.status(f"starting cluster '{config.name}'"):
        info = start_controller(platform, config, progress=lambda m: console.print(f"  {m}"))
    pid = getattr(info.handle, "pid", "?")
    if info.already_running:
        click.echo(f"cluster '{config.name}' is already running (pid {pid}) at {info.url}")
        return
    report_running(platform, config, config_path, info)


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


def _confirm_ending_jobs(
    platform: Platform, config: config_pb2.IrisClusterConfig, config_path: str, yes: bool, doing: str
) -> None:
    """List the jobs whose tasks `doing` the cluster ends, and ask (or need --yes) to go on."""
    if yes:
        # Nothing to ask, so nothing to list (on a cloud, listing costs a tunnel to the controller).
        return
    unfinished = _unfinished_jobs(platform, config)
    if unfinished is None:
        raise click.ClickException(
            f"not {doing}: auth is on and this shell has no token, so the jobs still running cannot be listed; "
            f"log in (iris login --config {config_path}) or pass --yes to go on anyway"
        )
    if unfinished:
        click.echo(f"{len(unfinished)} job(s) have not finished:", err=True)
        for job in unfinished[:20]:
            click.echo(f"  {job.job_id}  {job_state_name(job.state)}", err=True)
        click.echo(
            f"{doing} the cluster ends their tasks; they start over when its workers are back "
            f"(kill them first to drop them: iris job kill --config {config_path} JOB)",
            err=True,
        )
        if not sys.stdin.isatty():
            raise click.ClickException(f"not {doing}: pass --yes to go on anyway")
        if not click.confirm("go on anyway?", err=True):
            raise click.ClickException(f"not {doing}")


@cluster.command()
@click.option("-y", "--yes", is_flag=True, help="Stop even though jobs are still running, without asking.")
@click.pass_context
def stop(ctx: click.Context, yes: bool) -> None:
    """Stop the controller and terminate every slice of the cluster.

    Jobs still running are listed first: they are lost with their workers and start over when
    the cluster is started again, so stop asks (or needs --yes).
    """
    config, config_path = load_cluster()
    platform = cluster_platform(config, config_path)
    _confirm_ending_jobs(platform, config, config_path, yes, "stopping")
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
    config, config_path = load_cluster()
    with console.status(f"restarting the controller of '{config.name}'"):
        platform = cluster_platform(config, config_path)
        info = reload_controller(platform, config, lambda m: console.print(f"  {m}"))
    report_running(platform, config, config_path, info)


@cluster.command()
@click.option("-y", "--yes", is_flag=True, help="Reload even though jobs are still running, without asking.")
@click.option("--no-build", is_flag=True, help="Redeploy the images as they are in the registry.")
@click.pass_context
def reload(ctx: click.Context, yes: bool, no_build: bool) -> None:
    """Rebuild the config's images, then redeploy the controller and the workers on the cluster's
    capacity (locally: restart the daemons with this checkout's code).

    The controller restarts on its state, so jobs survive; tasks running on the old workers start
    over on the new ones.
    """
    config, config_path = load_cluster()
    platform = cluster_platform(config, config_path)
    images = configured_images(config)
    if images and not no_build:
        from iris.cli.build import build_and_push

        for kind, image in images.items():
            build_and_push(kind, image)
    elif not images:
        click.echo("the config names no images: the daemons run this checkout's code")
    _confirm_ending_jobs(platform, config, config_path, yes, "reloading")
    with console.status(f"reloading cluster '{config.name}'"):
        info = reload_cluster(platform, config, _worker_token(platform, config), lambda m: console.print(f"  {m}"))
    report_running(platform, config, config_path, info)


def _worker_token(platform: Platform, config: config_pb2.IrisClusterConfig) -> Callable[[str], str]:
    """What redeployed workers register with: a worker token from the controller (this shell's
    login must be an admin's) when auth is on, else nothing."""

    def issue(url: str) -> str:
        if parse_mode(config.auth.mode) is AuthMode.NONE:
            return ""
        with reachable_controller(platform, url) as reachable, IrisClient.remote(reachable) as client:
            try:
                return client.create_token("worker", "worker", Duration.from_seconds(WORKER_TOKEN_TTL_S)).token
            except IrisError as exc:
                raise click.ClickException(
                    f"the controller restarted, but no worker token for the redeployed workers: {exc} "
                    f"(log in as an admin: iris login --config ..., then reload again)"
                ) from None

    return issue


@cluster.command()
@click.option("--all", "show_all", is_flag=True, help="Also workers that stopped, failed or were terminated long ago.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def status(ctx: click.Context, show_all: bool, as_json: bool) -> None:
    """Show the controller, its scale groups and slices, its workers and recent jobs."""
    config, config_path = load_cluster()
    platform = cluster_platform(config, config_path)
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
        print_groups(autoscaler)
        print_actions(autoscaler, limit=8)
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
    config, config_path = load_cluster()
    platform = cluster_platform(config, config_path)
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


# ---------------------------------------------------------------- slices


@cluster.group("slice")
def slice_group() -> None:
    """Create, list and terminate slices."""


@slice_group.command("create")
@click.option("--scale-group", required=True, help="The scale group to add a slice to.")
@click.pass_context
def slice_create(ctx: click.Context, scale_group: str) -> None:
    """Add one slice to a scale group now, bypassing the autoscaler's delays."""
    client = cluster_client(ctx)
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
    client = cluster_client(ctx)
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
    client = cluster_client(ctx)
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
    client = cluster_client(ctx)
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
    client = cluster_client(ctx)
    with client:
        status = client.call("get_autoscaler_status", pb.GetAutoscalerStatusRequest())
    if as_json:
        print_json(status)
        return
    print_autoscaler(status)


@cluster.group("vm")
def vm_group() -> None:
    """Workers as machines: their status and their own logs."""


@vm_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def vm_status(ctx: click.Context, as_json: bool) -> None:
    """Every worker the controller knows, with its state and load."""
    client = cluster_client(ctx)
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
    client = cluster_client(ctx)
    with client:
        logs = client.call("get_worker_logs", pb.GetWorkerLogsRequest(worker_id=worker_id, tail_lines=tail)).logs
    click.echo(logs)




@vm_group.command("get")
@click.argument("vm_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def vm_get(ctx: click.Context, vm_id: str, as_json: bool) -> None:
    """One worker: its state, address, slice, attributes and load."""
    client = cluster_client(ctx)
    with client:
        found = [w for w in client.list_workers() if w.worker_id == vm_id]
    if not found:
        raise click.ClickException(f"no worker {vm_id} is known to the controller (iris cluster vm status lists them)")
    worker = found[0]
    if as_json:
        print_json(worker)
        return
    console.print(workers_table([worker]))
    for key, value in sorted(message_dict(worker.metadata).get("attributes", {}).items()):
        click.echo(f"  {key}: {next(iter(value.values()), '')}")


cluster.add_command(controller)
cluster.add_command(debug_group)
