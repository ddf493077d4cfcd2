"""`iris cluster --config F controller ...`: the controller alone, its slices untouched.

`start` creates it through the platform (or finds the one running), `stop` ends it with its
workers left running for the next controller to adopt, `restart` does both, and `status` says
where it runs and whether it answers. `run-local` is the local platform's controller process.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import click
import httpx

from iris.cli.cluster_common import START_TIMEOUT_S, cluster_platform, load_cluster, report_running
from iris.cli.render import console
from iris.cluster.controller.lifecycle import (
    URL_FILE,
    find_controller,
    local_state_dir,
    reachable_controller,
    reload_controller,
    start_controller,
    stop_controller,
)
from iris.cluster.controller.state_lock import StateDirInUse
from iris.cluster.listening_socket import PortInUseError
from iris.cluster.local_cluster import LocalCluster
from iris.cluster.platform.base import PlatformError


@click.group()
def controller() -> None:
    """Start, stop, restart or inspect the controller alone; slices and their workers stay."""


@controller.command("start")
@click.pass_context
def controller_start(ctx: click.Context) -> None:
    """Start the controller (with its autoscaler) unless one runs; wait until it answers."""
    config, config_path = load_cluster()
    platform = cluster_platform(config, config_path)
    with console.status(f"starting the controller of '{config.name}'"):
        info = start_controller(platform, config, progress=lambda m: console.print(f"  {m}"))
    if info.already_running:
        click.echo(f"the controller of '{config.name}' is already running at {info.url} ({info.handle.worker_id})")
        return
    report_running(platform, config, config_path, info)


@controller.command("stop")
@click.pass_context
def controller_stop(ctx: click.Context) -> None:
    """Stop the controller; its workers keep running for the next controller to adopt."""
    config, config_path = load_cluster()
    with console.status(f"stopping the controller of '{config.name}'"):
        stopped = stop_controller(cluster_platform(config, config_path), config)
    if not stopped:
        click.echo(f"the controller of '{config.name}' was not running")
        return
    click.echo(f"the controller of '{config.name}' stopped; its slices keep running")


@controller.command("restart")
@click.pass_context
def controller_restart(ctx: click.Context) -> None:
    """Restart the controller on its state; jobs survive and running workers are re-adopted."""
    config, config_path = load_cluster()
    platform = cluster_platform(config, config_path)
    with console.status(f"restarting the controller of '{config.name}'"):
        info = reload_controller(platform, config, lambda m: console.print(f"  {m}"))
    report_running(platform, config, config_path, info)


@controller.command("status")
@click.pass_context
def controller_status(ctx: click.Context) -> None:
    """Where the controller runs and whether it answers; exit 1 when it is not running."""
    config, config_path = load_cluster()
    platform = cluster_platform(config, config_path)
    handle = find_controller(platform, config)
    url = platform.discover_controller(config) if handle is not None else None
    if handle is None or url is None:
        click.echo(f"the controller of '{config.name}' is not running (start it with: iris cluster --config {config_path} controller start)")
        ctx.exit(1)
    where = f"controller of '{config.name}': {handle.worker_id} on {handle.internal_address}, {url}"
    try:
        with reachable_controller(platform, url) as reachable:
            answer = httpx.get(f"{reachable}/health", timeout=10)
    except (PlatformError, httpx.HTTPError) as exc:
        click.echo(f"{where}, not answering: {exc}")
        ctx.exit(1)
    if answer.status_code != 200:
        click.echo(f"{where}, unhealthy: /health answered {answer.status_code}")
        ctx.exit(1)
    click.echo(f"{where}, healthy" + ("" if reachable == url else f" (reached through a tunnel at {reachable})"))


@controller.command("run-local")
@click.option("--port", type=int, default=None, help="Controller port (default from config).")
@click.pass_context
def run_local(ctx: click.Context, port: int | None) -> None:
    """Run the controller and its autoscaler in the foreground.

    Ctrl-C stops the controller and its workers; SIGTERM stops only the controller, leaving the
    workers running for the next controller to adopt (that is what `cluster restart` uses).
    """
    config, config_path = load_cluster()
    if config.platform.WhichOneof("platform") != "local":
        raise click.ClickException(f"{config_path}: run-local needs a local platform config")
    state_dir = local_state_dir(config)
    running_url = cluster_platform(config, config_path).discover_controller(config)
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
        except StateDirInUse as exc:
            # Two run-locals started together both find no URL file; the state lock lets only one win.
            raise click.ClickException(
                f"cluster '{config.name}' is already running: {exc}; stop it first: "
                f"iris cluster --config {config_path} stop"
            ) from None
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


