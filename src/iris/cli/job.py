"""`iris run`, `iris submit` and `iris job ...`: submitting and following jobs."""

from __future__ import annotations

import os
import runpy
import sys
from contextlib import ExitStack
from pathlib import Path

import click

from iris.cli.connect import connection_options, resolve_controller_url
from iris.cli.render import console, jobs_table, print_json, short_state, styled_state, tasks_table
from iris.client.client import IrisClient, Job
from iris.cluster.types import (
    EXISTING_JOB_POLICIES,
    Constraint,
    Entrypoint,
    EnvironmentSpec,
    check_env_vars,
    ResourceSpec,
    job_state_name,
    parse_gpu_spec,
    parse_job_state,
    parse_priority,
    tpu_device,
    tpu_topology,
)
from iris.rpc import cluster_pb2 as pb
from iris.time import Duration


def _exit_code_for(status: pb.JobStatus) -> int:
    if status.state == pb.JOB_STATE_SUCCEEDED:
        return 0
    if status.state == pb.JOB_STATE_FAILED and status.exit_code > 0:
        return min(status.exit_code, 255)
    return 1


def _open_client(stack: ExitStack, local: bool, config_path: str | None, controller_url: str | None) -> IrisClient:
    if local:
        if config_path or controller_url:
            raise click.UsageError("--local starts its own cluster; do not combine it with --config or --controller-url")

        def progress(message: str) -> None:
            click.secho(f"iris: {message}", err=True, dim=True)

        progress("starting a local cluster")
        return stack.enter_context(IrisClient.local(workers=1, progress=progress))
    return stack.enter_context(IrisClient.remote(resolve_controller_url(config_path, controller_url)))


def _follow(job: Job, local: bool) -> int:
    click.secho(f"iris: submitted {job.job_id}", err=True, dim=True)
    try:
        status = job.wait(stream_logs=True, raise_on_failure=False)
    except KeyboardInterrupt:
        if local:
            click.secho(f"iris: interrupted; killing {job.job_id}", err=True)
            job.terminate("interrupted by the user")
        else:
            click.secho(
                f"iris: stopped following {job.job_id}; it keeps running (iris job kill {job.job_id} to stop it)",
                err=True,
            )
        return 130
    if status.state != pb.JOB_STATE_SUCCEEDED:
        click.secho(
            f"iris: job {job.job_id} {job_state_name(status.state)}" + (f": {status.error}" if status.error else ""),
            err=True,
            fg="red",
        )
    return _exit_code_for(status)


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
    with ExitStack() as stack:
        client = _open_client(stack, local, options["config_path"], options["controller_url"])
        job = _submit(client, Entrypoint.from_command(*command), None, options)
        if options["no_wait"]:
            click.echo(job.job_id)
            return
        code = _follow(job, local)
    sys.exit(code)


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
    local = options["local"]
    if options["no_wait"] and local:
        raise click.UsageError("--no-wait with --local would stop the cluster before the job runs")
    options["workspace"] = options["workspace"] or str(Path(script).resolve().parent)
    with ExitStack() as stack:
        client = _open_client(stack, local, options["config_path"], options["controller_url"])
        job = _submit(client, Entrypoint.from_callable(main_fn, *args), Path(script).stem.replace("_", "-"), options)
        if options["no_wait"]:
            click.echo(job.job_id)
            return
        code = _follow(job, local)
        if code == 0:
            value = job.result()
            if value is not None:
                click.echo(repr(value))
    sys.exit(code)


@click.group()
def job() -> None:
    """Inspect and control jobs."""


@job.command("list")
@connection_options
@click.option("--state", "states", multiple=True, help="Only jobs in this state (pending, running, ...); repeatable.")
@click.option("--prefix", default="", help="Only jobs whose id starts with this, e.g. /train.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_jobs(client: IrisClient, states: tuple[str, ...], prefix: str, as_json: bool) -> None:
    """List jobs, newest first."""
    try:
        state_values = [parse_job_state(s) for s in states]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--state") from None
    jobs = client.list_jobs(states=state_values, prefix=prefix)
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
            console.print(f"  {short_state(event.from_state)} -> {short_state(event.to_state)}: {event.reason}")


@job.command("logs")
@connection_options
@click.argument("job_id")
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the job finishes.")
def job_logs(client: IrisClient, job_id: str, follow: bool) -> None:
    """Print a job's logs (every task), or one task's with JOB_ID/INDEX."""
    target = "/" + job_id.strip("/")
    is_task = target.rsplit("/", 1)[-1].isdigit()
    handle = Job(client, target)
    multi = not is_task and handle.status().num_tasks > 1
    lines = handle.follow_logs() if follow else handle.logs()
    for line in lines:
        prefix = f"[{line.task_id.rsplit('/', 1)[-1]}] " if multi else ""
        stream = sys.stderr if line.line.source == "stderr" else sys.stdout
        stream.write(f"{prefix}{line.line.data}\n")
        stream.flush()


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
