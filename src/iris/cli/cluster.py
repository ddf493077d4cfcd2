"""`iris cluster --config F start|stop|restart|status` and `iris cluster controller run-local`.

A local cluster runs in the background as `iris cluster controller run-local`, detached from the
terminal, with its state directory holding the pid file, the controller URL and the log file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import click
import psutil

from iris.cli.connect import URL_FILE, local_state_dir
from iris.cli.render import console, jobs_table, workers_table
from iris.client.client import IrisClient, IrisError
from iris.cluster.local_cluster import LocalCluster
from iris.config import load_and_validate
from iris.rpc import config_pb2
from iris.time import wait_until

PID_FILE = "cluster.pid"
LOG_FILE = "cluster.log"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0


def _load(ctx: click.Context) -> tuple[config_pb2.IrisClusterConfig, str]:
    config_path = ctx.obj.get("config_path") if ctx.obj else None
    if not config_path:
        raise click.UsageError("give the cluster config: iris cluster --config CLUSTER.yaml ...")
    return load_and_validate(config_path), config_path


def _require_local(config: config_pb2.IrisClusterConfig, config_path: str, action: str) -> None:
    platform = config.platform.WhichOneof("platform")
    if platform != "local":
        raise click.ClickException(
            f"{config_path}: '{action}' for a {platform} cluster is not supported by this version yet; "
            "only local clusters can be managed"
        )


def _alive(pid: int) -> bool:
    """A process that exited but was not reaped yet (a zombie) is gone for our purposes: the
    detached cluster is reaped by init, which may take its time or never do it."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _running_pid(state_dir: Path) -> int | None:
    pid_file = state_dir / PID_FILE
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if _alive(pid) else None


def _log_tail(state_dir: Path, lines: int = 15) -> str:
    log = state_dir / LOG_FILE
    if not log.exists():
        return "(no log)"
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


@click.group()
@click.option("--config", "config_path", type=click.Path(dir_okay=False, exists=True), help="Cluster config YAML.")
@click.pass_context
def cluster(ctx: click.Context, config_path: str | None) -> None:
    """Start, stop and inspect a cluster described by a config file."""
    ctx.ensure_object(dict)
    ctx.obj["config_path"] = config_path


@cluster.command()
@click.pass_context
def start(ctx: click.Context) -> None:
    """Start the cluster in the background and wait until its workers are up."""
    config, config_path = _load(ctx)
    _require_local(config, config_path, "start")
    state_dir = local_state_dir(config)
    state_dir.mkdir(parents=True, exist_ok=True)
    pid = _running_pid(state_dir)
    url_file = state_dir / URL_FILE
    if pid is not None and url_file.exists():
        click.echo(f"cluster '{config.name}' is already running (pid {pid}) at {url_file.read_text().strip()}")
        return
    url_file.unlink(missing_ok=True)
    with open(state_dir / LOG_FILE, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "iris.cli.main", "cluster", "--config", str(Path(config_path).resolve()), "controller", "run-local"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    (state_dir / PID_FILE).write_text(str(process.pid))

    def up() -> bool:
        if process.poll() is not None:
            (state_dir / PID_FILE).unlink(missing_ok=True)
            raise click.ClickException(
                f"the cluster exited during start-up (code {process.returncode}); last log lines:\n{_log_tail(state_dir)}"
            )
        return url_file.exists()

    with console.status(f"starting cluster '{config.name}' (log: {state_dir / LOG_FILE})"):
        try:
            wait_until(up, START_TIMEOUT_S, 0.1, f"cluster '{config.name}' to start")
        except TimeoutError:
            process.terminate()
            (state_dir / PID_FILE).unlink(missing_ok=True)
            raise click.ClickException(
                f"cluster '{config.name}' did not come up within {START_TIMEOUT_S:.0f}s; last log lines:\n"
                f"{_log_tail(state_dir)}"
            ) from None
    url = url_file.read_text().strip()
    with IrisClient.remote(url) as client:
        workers = client.list_workers()
    click.echo(f"cluster '{config.name}' running: controller {url}, {len(workers)} worker(s) (pid {process.pid})")
    click.echo(f"  state and logs: {state_dir}")
    click.echo(f"  try: iris run --config {config_path} -- python -c \"print('hello from iris')\"")


def _stop_local(config: config_pb2.IrisClusterConfig) -> bool:
    state_dir = local_state_dir(config)
    pid = _running_pid(state_dir)
    if pid is None:
        (state_dir / URL_FILE).unlink(missing_ok=True)
        (state_dir / PID_FILE).unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)

    with console.status(f"stopping cluster '{config.name}' (pid {pid})"):
        try:
            wait_until(lambda: not _alive(pid), STOP_TIMEOUT_S, 0.1, f"pid {pid} to exit")
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
    (state_dir / URL_FILE).unlink(missing_ok=True)
    (state_dir / PID_FILE).unlink(missing_ok=True)
    return True


@cluster.command()
@click.pass_context
def stop(ctx: click.Context) -> None:
    """Stop the cluster's controller and workers."""
    config, config_path = _load(ctx)
    _require_local(config, config_path, "stop")
    if _stop_local(config):
        click.echo(f"cluster '{config.name}' stopped")
    else:
        click.echo(f"cluster '{config.name}' was not running")


@cluster.command()
@click.pass_context
def restart(ctx: click.Context) -> None:
    """Stop the cluster if it runs, then start it; jobs survive in the controller's state."""
    config, config_path = _load(ctx)
    _require_local(config, config_path, "restart")
    _stop_local(config)
    ctx.invoke(start)


@cluster.command()
@click.pass_context
def status(ctx: click.Context) -> None:
    """Show the controller, its workers and a summary of jobs."""
    config, config_path = _load(ctx)
    _require_local(config, config_path, "status")
    state_dir = local_state_dir(config)
    pid = _running_pid(state_dir)
    url_file = state_dir / URL_FILE
    if pid is None or not url_file.exists():
        click.echo(f"cluster '{config.name}' is not running (start it with: iris cluster --config {config_path} start)")
        ctx.exit(1)
    url = url_file.read_text().strip()
    with IrisClient.remote(url) as client:
        try:
            workers = client.list_workers()
            jobs = client.list_jobs(page_size=20)
        except IrisError as exc:
            raise click.ClickException(f"cluster '{config.name}' (pid {pid}) does not answer: {exc}") from None
    console.print(f"[bold]cluster[/bold] {config.name}  controller {url}  pid {pid}")
    console.print(f"[bold]workers[/bold] ({len(workers)})")
    console.print(workers_table(workers))
    console.print(f"[bold]recent jobs[/bold] ({len(jobs)})")
    if jobs:
        console.print(jobs_table(jobs[:20]))


@cluster.group()
def controller() -> None:
    """Controller operations."""


@controller.command("run-local")
@click.option("--port", type=int, default=None, help="Controller port (default from config).")
@click.pass_context
def run_local(ctx: click.Context, port: int | None) -> None:
    """Run the controller and the config's local workers in the foreground until Ctrl-C."""
    config, config_path = _load(ctx)
    _require_local(config, config_path, "controller run-local")
    state_dir = local_state_dir(config)
    configured_port = config.controller.local.port if config.controller.HasField("local") else 0
    local = LocalCluster(config, state_dir=state_dir, port=port if port is not None else configured_port)
    stop_requested = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop_requested.set())
    signal.signal(signal.SIGINT, lambda *_: stop_requested.set())
    try:
        local.start(progress=lambda message: click.echo(f"iris: {message}", err=True))
        (state_dir / URL_FILE).write_text(local.url)
        click.echo(f"iris: cluster '{config.name}' ready at {local.url}; Ctrl-C to stop", err=True)
        stop_requested.wait()
    finally:
        (state_dir / URL_FILE).unlink(missing_ok=True)
        local.stop()
