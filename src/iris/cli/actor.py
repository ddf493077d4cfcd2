"""`iris actor list|call`: see which actors run in a cluster and call one by hand."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.table import Table

from iris.actor.client import ActorClient, ActorError
from iris.actor.resolver import ACTOR_ATTEMPT_KEY, ACTOR_TASK_KEY
from iris.cli.connect import connection_options
from iris.cli.render import console
from iris.client.client import IrisClient
from iris.client.resolver import ClusterResolver, namespace_of

CLI_RESOLVE_TIMEOUT_S = 5.0


def call_arguments(text: str | None) -> tuple[list[Any], dict[str, Any]]:
    """--json ARGS: a list is positional arguments, an object keyword arguments, anything else the
    single argument."""
    if text is None:
        return [], {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(
            f"not valid JSON ({exc.msg} at column {exc.colno}): {text}", param_hint="--json"
        )
    if isinstance(value, list):
        return value, {}
    if isinstance(value, dict):
        return [], value
    return [value], {}


@click.group()
def actor() -> None:
    """Actors running in the cluster's jobs."""


@actor.command("list")
@connection_options
@click.option("--namespace", help="Only actors of this root job (e.g. /serve); default: every job.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_actors(client: IrisClient, namespace: str | None, as_json: bool) -> None:
    """List actors: name, namespace, job, address."""
    resolver = ClusterResolver(client.url, namespace=namespace)
    try:
        found = resolver.actor_endpoints()
    finally:
        resolver.close()
    rows = [
        {
            "name": name,
            "namespace": namespace_of(e.job_id),
            "job_id": e.job_id,
            "address": e.address,
            "task_id": e.metadata.get(ACTOR_TASK_KEY, ""),
            "attempt_id": e.metadata.get(ACTOR_ATTEMPT_KEY, ""),
            "endpoint_id": e.endpoint_id,
        }
        for name, e in found
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        where = f" in namespace {namespace_of(namespace)}" if namespace else ""
        click.echo(f"no actors{where}")
        return
    table = Table(box=None)
    for column in ("NAME", "NAMESPACE", "JOB", "ADDRESS", "TASK", "ATTEMPT"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["name"], row["namespace"], row["job_id"], row["address"], row["task_id"], row["attempt_id"]
        )
    console.print(table)


@actor.command("call")
@connection_options
@click.argument("name")
@click.argument("method")
@click.option(
    "--json", "json_args", metavar="ARGS", help='Arguments as JSON: [1, 2] positional, {"x": 1} keywords.'
)
@click.option("--namespace", help="Root job the actor belongs to (default: every job).")
@click.option(
    "--timeout",
    type=float,
    default=CLI_RESOLVE_TIMEOUT_S,
    show_default=True,
    help="Seconds to wait for a reachable endpoint.",
)
def call_actor(
    client: IrisClient, name: str, method: str, json_args: str | None, namespace: str | None, timeout: float
) -> None:
    """Call METHOD on actor NAME and print the result as JSON."""
    args, kwargs = call_arguments(json_args)
    resolver = ClusterResolver(client.url, namespace=namespace)
    try:
        with ActorClient(resolver, name, resolve_timeout=timeout) as actor_client:
            try:
                value = actor_client.call(method, *args, **kwargs)
            except ActorError:
                raise
            except Exception as exc:
                # The method itself raised: say so in one line (the remote traceback is a note).
                raise click.ClickException(
                    f"actor {name!r}: {method} raised {type(exc).__name__}: {exc}"
                ) from None
    finally:
        resolver.close()
    click.echo(json.dumps(value, default=repr))
