"""`iris cluster --config F debug ...`: look into a cluster, and repair what its controller cannot.

Commands that talk to the controller open the platform's tunnel by themselves (or take
--controller-url); `discover`, `logs`, `bootstrap-logs` and `cleanup` ask the platform directly,
so they work while the controller is down.
"""

from __future__ import annotations

import sys
import time

import click
import httpx

from iris.cli.cluster_common import cluster_client, cluster_platform, load_cluster, print_autoscaler
from iris.cli.render import console, jobs_table, workers_table
from iris.cli.validation import ValidationFailed, target_of, validate
from iris.client.client import LogPrinter
from iris.cluster.controller.lifecycle import find_controller, labelled_resources
from iris.cluster.platform.base import Platform, StandaloneWorkerHandle, VmLogKind
from iris.rpc import cluster_pb2 as pb
from iris.rpc import config_pb2

DEFAULT_VALIDATE_TIMEOUT_S = 300.0


@click.group("debug")
def debug_group() -> None:
    """Look into a cluster, and repair what its controller cannot."""


def _controller_vm(platform: Platform, config: config_pb2.IrisClusterConfig, config_path: str) -> StandaloneWorkerHandle:
    handle = find_controller(platform, config)
    if handle is None:
        raise click.ClickException(
            f"no controller of '{config.name}' found on its platform (start it with: iris cluster --config {config_path} start)"
        )
    return handle


@debug_group.command("discover")
@click.pass_context
def debug_discover(ctx: click.Context) -> None:
    """Find the controller from the config alone, as the platform records it."""
    config, config_path = load_cluster()
    platform = cluster_platform(config, config_path)
    handle = _controller_vm(platform, config, config_path)
    url = platform.discover_controller(config)
    click.echo(f"controller of '{config.name}' on the {config.platform.WhichOneof('platform')} platform:")
    click.echo(f"  vm       {handle.worker_id}")
    click.echo(f"  address  {handle.internal_address}" + (f" (external {handle.external_address})" if handle.external_address else ""))
    click.echo(f"  url      {url or 'not answering'}")
    if url is None:
        ctx.exit(1)


@debug_group.command("health")
@click.pass_context
def debug_health(ctx: click.Context) -> None:
    """Whether the controller answers, and how its workers and scale groups are; exit 1 if unwell."""
    client = cluster_client(ctx)
    with client:
        try:
            answer = httpx.get(f"{client.url}/health", timeout=10)
        except httpx.HTTPError as exc:
            raise click.ClickException(f"the controller at {client.url} does not answer /health: {exc}") from None
        workers = client.list_workers()
        autoscaler = client.call("get_autoscaler_status", pb.GetAutoscalerStatusRequest())
    healthy = sum(1 for w in workers if w.state == pb.WORKER_STATE_HEALTHY)
    problems = [] if answer.status_code == 200 else [f"/health answered {answer.status_code}"]
    for group in autoscaler.groups:
        failed = [s for s in group.slices if s.state == "FAILED"]
        if failed:
            problems.append(f"scale group {group.name}: slice {failed[0].slice_id} failed: {failed[0].error}")
    problems += [f"unserved: {reason}" for reason in autoscaler.unroutable]
    click.echo(f"controller {client.url}: {'healthy' if answer.status_code == 200 else 'unhealthy'}")
    click.echo(f"workers: {healthy} healthy of {len(workers)}")
    for group in autoscaler.groups:
        live = [s for s in group.slices if s.state != "DELETED"]
        click.echo(f"scale group {group.name}: {group.state}, {len(live)} slice(s)")
    for problem in problems:
        click.echo(f"problem: {problem}")
    if problems:
        ctx.exit(1)


@debug_group.command("autoscaler-status")
@click.pass_context
def debug_autoscaler_status(ctx: click.Context) -> None:
    """Each scale group's state, slices and unmet demand, and the autoscaler's recent actions."""
    client = cluster_client(ctx)
    with client:
        print_autoscaler(client.call("get_autoscaler_status", pb.GetAutoscalerStatusRequest()))


@debug_group.command("list-workers")
@click.pass_context
def debug_list_workers(ctx: click.Context) -> None:
    """Every worker the controller knows, with its state and load."""
    client = cluster_client(ctx)
    with client:
        console.print(workers_table(client.list_workers()))


@debug_group.command("list-jobs")
@click.pass_context
def debug_list_jobs(ctx: click.Context) -> None:
    """Every job the controller holds, newest first."""
    client = cluster_client(ctx)
    with client:
        jobs = client.list_jobs()
    if not jobs:
        click.echo("no jobs")
        return
    console.print(jobs_table(jobs))


def _print_line(line: str) -> None:
    click.echo(line)


@debug_group.command("logs")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines until Ctrl-C.")
@click.option("--tail", type=int, default=100, show_default=True, help="Lines to show first.")
@click.pass_context
def debug_logs(ctx: click.Context, follow: bool, tail: int) -> None:
    """The controller's own log (its daemon's output), read through the platform."""
    config, config_path = load_cluster()
    platform = cluster_platform(config, config_path)
    handle = _controller_vm(platform, config, config_path)
    platform.vm_log(handle.worker_id, VmLogKind.DAEMON, tail, _print_line, follow)


@debug_group.command("bootstrap-logs")
@click.argument("vm_id", required=False)
@click.option("--tail", type=int, default=200, show_default=True, help="Lines to show.")
@click.pass_context
def debug_bootstrap_logs(ctx: click.Context, vm_id: str | None, tail: int) -> None:
    """What bringing up a VM printed: the controller's VM, or the worker VM_ID."""
    config, config_path = load_cluster()
    platform = cluster_platform(config, config_path)
    vm_id = vm_id or _controller_vm(platform, config, config_path).worker_id
    platform.vm_log(vm_id, VmLogKind.BOOTSTRAP, tail, _print_line)


@debug_group.command("show-task-logs")
@click.argument("job_id")
@click.option("--tail", type=int, default=None, help="Only the last N lines.")
@click.pass_context
def debug_show_task_logs(ctx: click.Context, job_id: str, tail: int | None) -> None:
    """Every task's output of a job, each line marked with its task, and each task's outcome."""
    client = cluster_client(ctx)
    with client:
        job = client.job(job_id)
        status = job.status(include_tasks=True)
        printer = LogPrinter(prefix_tasks=True, out=sys.stdout, err=sys.stdout)
        for line in job.logs(tail=tail):
            printer.write(line)
    for task in status.tasks:
        outcome = pb.TaskState.Name(task.state).removeprefix("TASK_STATE_").lower()
        detail = f" on {task.worker_id}" if task.worker_id else ""
        click.echo(f"task {task.task_id}: {outcome}{detail}" + (f": {task.error}" if task.error else ""))


@debug_group.command("validate")
@click.option("--scale-group", default=None, help="The group to run on (default: the one with the most hosts per slice).")
@click.option("--job-timeout", type=float, default=DEFAULT_VALIDATE_TIMEOUT_S, show_default=True, help="Seconds each step may take.")
@click.pass_context
def debug_validate(ctx: click.Context, scale_group: str | None, job_timeout: float) -> None:
    """Run the validation jobs (simple, concurrent, coscheduled, accelerator) and report each."""
    config, _ = load_cluster()
    try:
        target = target_of(config, scale_group)
    except ValidationFailed as exc:
        raise click.ClickException(str(exc)) from None
    client = cluster_client(ctx)
    click.echo(f"validating scale group {target.scale_group} ({target.accelerator}, {target.hosts_per_slice} host(s) per slice)")

    def show(result) -> None:
        click.echo(f"{'PASS' if result.passed else 'FAIL'}  {result.name} ({result.seconds:.1f}s): {result.detail}")

    with client:
        results = validate(client, target, job_timeout, f"validate-{int(time.time())}", show)
    failed = [r for r in results if not r.passed]
    click.echo(f"{len(results) - len(failed)} of {len(results)} passed")
    if failed:
        ctx.exit(1)


@debug_group.command("cleanup")
@click.option("--no-dry-run", "delete", is_flag=True, help="Delete what is listed (default: only list it).")
@click.pass_context
def debug_cleanup(ctx: click.Context, delete: bool) -> None:
    """List every resource this cluster's labels mark on the platform (controller VMs, slices),
    whether or not a controller runs; with --no-dry-run, delete them all."""
    config, config_path = load_cluster()
    platform = cluster_platform(config, config_path)
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
