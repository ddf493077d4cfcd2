"""`iris run`, `iris submit` and `iris job ...`: submitting and following jobs."""

from __future__ import annotations

import os
import runpy
import shlex
import signal
import sys
from contextlib import ExitStack
from pathlib import Path

import click
import pyqwest

from iris.cli.connect import (
    connection_from_context,
    connection_options,
    global_connection_options,
    open_controller_url,
)
from iris.cli.progress import WaitingLine
from iris.client.client import IrisClient, Job, JobTimeoutError, LogPrinter
from iris.cluster.types import (
    EXISTING_JOB_POLICIES,
    Constraint,
    Entrypoint,
    EnvironmentSpec,
    ResourceSpec,
    check_env_vars,
    job_state_name,
    parse_gpu_spec,
    parse_job_state,
    parse_priority,
    tpu_device,
    tpu_topology,
)
from iris.rpc import cluster_pb2 as pb
from iris.time import Duration


def exit_code_for(status: pb.JobStatus) -> int:
    if status.state == pb.JOB_STATE_SUCCEEDED:
        return 0
    if status.state == pb.JOB_STATE_FAILED and status.exit_code > 0:
        return min(status.exit_code, 255)
    return 1


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, handled like Ctrl-C so that a `--local` cluster never outlives the command."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_interrupted(signum: int, frame: object) -> None:
    raise Interrupted(signum)


def _interrupt_exit_code(exc: KeyboardInterrupt) -> int:
    return 128 + (exc.signum if isinstance(exc, Interrupted) else signal.SIGINT)


def _open_client(stack: ExitStack, local: bool, config_path: str | None, controller_url: str | None) -> IrisClient:
    if local:
        if config_path or controller_url:
            raise click.UsageError("--local starts its own cluster; do not combine it with --config or --controller-url")

        def progress(message: str) -> None:
            click.secho(f"iris: {message}", err=True, dim=True)

        progress("starting a local cluster")
        # Forked by the entry point before this module was imported (`iris.cli.main`); without
        # it (another caller, or a process that cannot fork) the cluster starts here.
        cluster = (click.get_current_context().find_root().obj or {}).get("local_cluster")
        if cluster is not None:
            stack.callback(cluster.stop)
            # The client's HTTP transport loads OpenTelemetry when first made: made now, that runs
            # while the cluster starts instead of on the way to the first RPC.
            pyqwest.get_default_sync_transport()
            return stack.enter_context(IrisClient.remote(cluster.wait_started(progress)))
        # The cluster is this command's first work, so its worker can be a fork of this process
        # (much faster to start than a new interpreter); it forks only while no other thread runs.
        return stack.enter_context(IrisClient.local(workers=1, progress=progress, fork_workers=True))
    url = stack.enter_context(open_controller_url(config_path, controller_url))
    return stack.enter_context(IrisClient.remote(url))


def connection_hint(config_path: str | None, controller_url: str | None, client: IrisClient) -> str:
    """The options that reach this cluster again, for hints a user can paste."""
    if config_path:
        return f"--config {shlex.quote(config_path)}"
    if controller_url or not os.environ.get("IRIS_CONTROLLER_URL"):
        return f"--controller-url {client.url}"
    return ""


def follow_job(job: Job) -> pb.JobStatus:
    """Stream the job's output, with a status line on stderr while it waits; its final status."""
    waiting = WaitingLine(job.client, sys.stderr)
    printer = LogPrinter(job.status().num_tasks > 1, sys.stdout, sys.stderr)
    try:
        for line in job.follow_logs(on_status=waiting.update):
            waiting.clear()
            printer.write(line)
    finally:
        waiting.clear()
    return job.wait(raise_on_failure=False)


def _follow(job: Job, local: bool, hint: str) -> int:
    click.secho(f"iris: submitted {job.job_id}", err=True, dim=True)
    try:
        status = follow_job(job)
    except KeyboardInterrupt as exc:
        if local:
            click.secho(f"iris: interrupted; killing {job.job_id}", err=True)
            job.terminate("interrupted by the user")
        else:
            kill = " ".join(filter(None, ["iris job kill", hint, job.job_id]))
            click.secho(f"iris: stopped following {job.job_id}; it keeps running (to stop it: {kill})", err=True)
        return _interrupt_exit_code(exc)
    if status.state != pb.JOB_STATE_SUCCEEDED:
        click.secho(
            f"iris: job {job.job_id} {job_state_name(status.state)}" + (f": {status.error}" if status.error else ""),
            err=True,
            fg="red",
        )
    return exit_code_for(status)


_common_submit_options = [
    click.option("--config", "config_path", type=click.Path(dir_okay=False), help="Cluster config YAML."),
    click.option("--controller-url", help="Controller URL (or IRIS_CONTROLLER_URL)."),
    click.option("--local", is_flag=True, help="Start a throwaway local cluster for this job."),
    click.option("--name", help="Job name (default: generated)."),
    click.option(
        "-e",
        "--env",
        "env_pairs",
        multiple=True,
        metavar="KEY=VALUE",
        callback=lambda ctx, param, values: parse_env_options(values),
        help="Environment variable for the job; a bare KEY passes this shell's value. Repeatable.",
    ),
    click.option("--cpu", type=float, default=1, show_default=True, help="Cpus per task."),
    click.option("--memory", default="1GB", show_default=True, help="Memory per task, e.g. 4GB."),
    click.option("--disk", default="0", help="Disk per task, e.g. 10GB."),
    click.option("--tpu", help="TPU slice variant, e.g. v5litepod-16 (multi-host variants run one task per host)."),
    click.option("--gpu", help="GPUs per task, e.g. H100x8."),
    click.option("--replicas", type=int, default=1, show_default=True, help="Number of tasks."),
    click.option("--max-retries", type=int, default=0, show_default=True, help="Retries after a task fails."),
    click.option("--timeout", help="Kill a task that runs longer than this, e.g. 30m."),
    click.option("--scheduling-timeout", help="Give up (UNSCHEDULABLE) if not placed within this, e.g. 10m."),
    click.option(
        "--constraint",
        "constraints",
        multiple=True,
        help="Worker attribute requirement: KEY=V, KEY!=V, KEY>V, KEY>=V, KEY<V, KEY<=V, KEY, !KEY, 'KEY in A,B'.",
    ),
    click.option("--priority", default="0", help="production, interactive, batch, or a number (higher first)."),
    click.option("--port", "ports", multiple=True, help="Named port to allocate (IRIS_PORT_<NAME>); repeatable."),
    click.option("--workspace", type=click.Path(file_okay=False, exists=True), help="Directory to bundle (default: cwd)."),
    click.option("--no-wait", is_flag=True, help="Submit and print the job id without waiting."),
    click.option(
        "--if-exists",
        "existing_job_policy",
        type=click.Choice(list(EXISTING_JOB_POLICIES)),
        default="replace-finished",
        show_default=True,
        help="When the name is taken: replace a finished job, refuse (error), follow the running one (keep), "
        "or kill and replace it (recreate).",
    ),
]


def parse_env_options(values: tuple[str, ...]) -> dict[str, str]:
    """`-e KEY=VALUE` as in Docker; `-e KEY` takes KEY's value from the submitting shell."""
    env: dict[str, str] = {}
    for text in values:
        name, has_value, value = text.partition("=")
        if not has_value:
            if name not in os.environ:
                raise click.BadParameter(f"{name} is not set here; write -e {name}=VALUE", param_hint="-e/--env")
            value = os.environ[name]
        env[name] = value
    try:
        check_env_vars(env)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="-e/--env") from None
    return env


def submit_options(func):
    for option in reversed(_common_submit_options):
        func = option(func)
    return func


def _duration(text: str | None, option: str) -> Duration | None:
    if text is None:
        return None
    try:
        return Duration.parse(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


def _submit(client: IrisClient, entrypoint: Entrypoint, default_name: str | None, options: dict) -> Job:
    if options["tpu"] and options["gpu"]:
        raise click.UsageError("a job asks for --tpu or --gpu, not both")
    try:
        device = None
        if options["tpu"]:
            tpu_topology(options["tpu"])
            device = tpu_device(options["tpu"])
        elif options["gpu"]:
            device = parse_gpu_spec(options["gpu"])
        resources = ResourceSpec(cpu=options["cpu"], memory=options["memory"], disk=options["disk"], device=device)
        resources.to_proto()
        constraints = [Constraint.parse(text) for text in options["constraints"]]
        priority = parse_priority(options["priority"])
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    workspace = options["workspace"]
    return client.submit(
        entrypoint,
        name=options["name"] or default_name,
        resources=resources,
        environment=EnvironmentSpec(env_vars=options["env_pairs"]),
        replicas=options["replicas"],
        max_retries_failure=options["max_retries"],
        timeout=_duration(options["timeout"], "--timeout"),
        scheduling_timeout=_duration(options["scheduling_timeout"], "--scheduling-timeout"),
        constraints=constraints,
        priority=priority,
        ports=options["ports"],
        workspace=Path(workspace) if workspace else Path.cwd(),
        existing_job_policy=options["existing_job_policy"],
    )


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@submit_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(command: tuple[str, ...], **options) -> None:
    """Run COMMAND as a job, stream its output, and exit with its exit status.

    \b
    Examples:
      iris run --local -- python -c "print('hello from iris')"
      iris run --config examples/local.yaml --cpu 2 -- python train.py --epochs 3
      iris run --controller-url http://localhost:10000 --tpu v5litepod-16 -- python train.py
      iris run --config cluster.yaml --constraint zone=us-central2-b --priority production -- ./serve.sh
    """
    local = options["local"]
    if options["no_wait"] and local:
        raise click.UsageError("--no-wait with --local would stop the cluster before the job runs")
    sys.exit(_run_job(lambda: Entrypoint.from_command(*command), None, options, print_result=False))


def _run_job(make_entrypoint, default_name: str | None, options: dict, print_result: bool) -> int:
    """Submit and follow; Ctrl-C, SIGTERM and SIGHUP end it cleanly at any point."""
    local = options["local"]
    config_path, controller_url = connection_from_context(options["config_path"], options["controller_url"])
    previous = {sig: signal.signal(sig, _raise_interrupted) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        with ExitStack() as stack:
            client = _open_client(stack, local, config_path, controller_url)
            job = _submit(client, make_entrypoint(), default_name, options)
            if options["no_wait"]:
                click.echo(job.job_id)
                return 0
            code = _follow(job, local, "" if local else connection_hint(config_path, controller_url, client))
            if code == 0 and print_result:
                value = job.result()
                if value is not None:
                    click.echo(repr(value))
            return code
    except KeyboardInterrupt as exc:
        click.secho("iris: interrupted", err=True)
        return _interrupt_exit_code(exc)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@click.command()
@submit_options
@click.argument("script", type=click.Path(dir_okay=False, exists=True))
@click.argument("args", nargs=-1)
def submit(script: str, args: tuple[str, ...], **options) -> None:
    """Run SCRIPT's main(*ARGS) as a job and print what it returns.

    SCRIPT is a Python file defining main(); its directory is bundled unless --workspace says
    otherwise.
    """
    namespace = runpy.run_path(script, run_name="__iris_submit__")
    main_fn = namespace.get("main")
    if not callable(main_fn):
        raise click.ClickException(f"{script} does not define a main() function")
    if options["no_wait"] and options["local"]:
        raise click.UsageError("--no-wait with --local would stop the cluster before the job runs")
    options["workspace"] = options["workspace"] or str(Path(script).resolve().parent)
    default_name = Path(script).stem.replace("_", "-")
    sys.exit(_run_job(lambda: Entrypoint.from_callable(main_fn, *args), default_name, options, print_result=True))


@click.group()
@global_connection_options
def job() -> None:
    """Inspect and control jobs."""


@job.command("list")
@connection_options
@click.option("--state", "states", multiple=True, help="Only jobs in this state (pending, running, ...); repeatable.")
@click.option("--prefix", default="", help="Only jobs whose id starts with this, e.g. /train.")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many jobs (the newest).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_jobs(client: IrisClient, states: tuple[str, ...], prefix: str, limit: int | None, as_json: bool) -> None:
    """List jobs, newest first."""
    # rich is imported by the commands that draw tables, not by `iris run`.
    from iris.cli.render import console, jobs_table, print_json

    try:
        state_values = [parse_job_state(s) for s in states]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--state") from None
    jobs = client.list_jobs(states=state_values, prefix=prefix, limit=limit)
    if as_json:
        print_json(jobs)
    elif not jobs:
        click.echo("no jobs")
    else:
        console.print(jobs_table(jobs))


@job.command("status")
@connection_options
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def job_status(client: IrisClient, job_id: str, as_json: bool) -> None:
    """Show a job, its tasks and its history."""
    from iris.cli.render import clock_time, console, print_json, short_state, styled_state, tasks_table

    status = client.job(job_id).status(include_tasks=True)
    if as_json:
        print_json(status)
        return
    console.print(f"[bold]{status.job_id}[/bold]  {styled_state(job_state_name(status.state))}")
    if status.error:
        console.print(f"error: {status.error}")
    if status.pending_reason:
        console.print(f"pending: {status.pending_reason}")
    if status.failure_count or status.preemption_count:
        console.print(f"failures: {status.failure_count}  preemptions: {status.preemption_count}")
    console.print(tasks_table(list(status.tasks)))
    if status.history:
        console.print("[bold]history[/bold]")
        for event in status.history:
            console.print(
                f"  {clock_time(event.at)}  {short_state(event.from_state)} -> {short_state(event.to_state)}: {event.reason}"
            )


def _duration_option(ctx: click.Context, param: click.Parameter, value: str | None) -> Duration | None:
    return _duration(value, f"--{param.name}")


@job.command("logs")
@connection_options
@click.argument("job_id")
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the job finishes; exit with its status.")
@click.option("--tail", type=click.IntRange(min=0), help="Only the last N lines (then follow, with -f).")
@click.option("--since", callback=_duration_option, help="Only lines from the last DURATION, e.g. 30s, 10m, 2h.")
@click.option("--timestamps", is_flag=True, help="Prefix each line with when it was written (UTC).")
def job_logs(
    client: IrisClient, job_id: str, follow: bool, tail: int | None, since: Duration | None, timestamps: bool
) -> None:
    """Print a job's logs (every task), or one task's with JOB_ID/INDEX.

    A line such as `----- /job/0: attempt 1 -----` (on stderr) marks where a retried task starts again.
    """
    target = "/" + job_id.strip("/")
    handle = Job(client, target)
    multi = not target.rsplit("/", 1)[-1].isdigit() and handle.status().num_tasks > 1
    printer = LogPrinter(multi, sys.stdout, sys.stderr, timestamps)
    # The controller applies --tail and --since: a long log is not downloaded to show its end.
    shown, cursor = handle.read_logs(tail=tail, since=since)
    for line in shown:
        printer.write(line)
    if not follow:
        return
    for line in handle.follow_logs(cursor=cursor):
        printer.write(line)
    sys.exit(exit_code_for(handle.wait(raise_on_failure=False)))


@job.command("wait")
@connection_options
@click.argument("job_id")
@click.option("--timeout", "timeout_text", help="Give up (exit 124) after this long, e.g. 30m.")
def job_wait(client: IrisClient, job_id: str, timeout_text: str | None) -> None:
    """Wait for a job to finish and exit with its status (0 when it succeeded)."""
    timeout = _duration(timeout_text, "--timeout")
    handle = client.job(job_id)
    waiting = WaitingLine(client, sys.stderr)
    try:
        status = handle.wait(
            timeout=timeout.seconds if timeout else None, raise_on_failure=False, on_status=waiting.update
        )
    except JobTimeoutError as exc:
        waiting.clear()
        click.echo(f"iris: {exc}", err=True)
        sys.exit(124)
    waiting.clear()
    click.echo(f"{status.job_id} {job_state_name(status.state)}" + (f": {status.error}" if status.error else ""))
    sys.exit(exit_code_for(status))


@job.command("kill")
@connection_options
@click.argument("job_id")
def job_kill(client: IrisClient, job_id: str) -> None:
    """Kill a job and its child jobs."""
    killed = client.job(job_id).terminate()
    if killed:
        click.echo("killed " + ", ".join(killed))
    else:
        status = client.job(job_id).status()
        click.echo(f"{status.job_id} had already finished ({job_state_name(status.state)})")


@job.command("delete")
@connection_options
@click.argument("job_ids", nargs=-1, required=True)
@click.option("--kill", "kill_running", is_flag=True, help="Kill a job that is still running instead of refusing.")
def job_delete(client: IrisClient, job_ids: tuple[str, ...], kill_running: bool) -> None:
    """Forget finished jobs (and their children), freeing their names."""
    for job_id in job_ids:
        deleted = client.job(job_id).delete(kill_running=kill_running)
        click.echo("deleted " + ", ".join(deleted))
