"""`iris login` and `iris token create`: getting a session token, and minting one for others.

A token never goes on a command line (where `ps` and shell history would keep it): `iris login`
reads the credential from a hidden prompt or from stdin, and writes the session token to the
token file, readable by its owner only.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import click

from iris.cli.connect import connection_options, global_connection_options
from iris.client.client import IrisClient
from iris.client.credentials import save_token
from iris.time import Duration


def _read_credential() -> str:
    if sys.stdin.isatty():
        credential = click.prompt("Token", hide_input=True, prompt_suffix=": ", err=True)
    else:
        credential = sys.stdin.readline()
    credential = credential.strip()
    if not credential:
        raise click.UsageError("no token given: type it at the prompt or pipe it to iris login")
    return credential


def _expiry(expires_at_ms: int) -> str:
    return datetime.fromtimestamp(expires_at_ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


@click.command()
@connection_options
def login(client: IrisClient) -> None:
    """Exchange a token an admin gave you for a session token, kept in the token file.

    \b
    The token is read from a hidden prompt, or from stdin when piped:
      iris login --controller-url http://HOST:10000
      printf '%s' "$MY_TOKEN" | iris login --config cluster.yaml
    Later commands read the session token from the file (see docs/auth.md for the order of
    token sources).
    """
    session = client.login(_read_credential())
    path = save_token(session.token)
    click.echo(
        f"logged in as {session.user} ({session.role}) until {_expiry(session.expires_at_ms)}; "
        f"the session token is in {path}"
    )


@click.group()
@global_connection_options
def token() -> None:
    """Session tokens for other users and machines (admin only)."""


@token.command("create")
@connection_options
@click.option("--user", required=True, help="Who the token names.")
@click.option(
    "--role", required=True, type=click.Choice(["admin", "user", "worker"]), help="What the token may do."
)
@click.option("--ttl", help="How long it stays valid, e.g. 12h or 30d (default: the cluster's session_ttl).")
def create_token(client: IrisClient, user: str, role: str, ttl: str | None) -> None:
    """Print a new session token on stdout, for the holder to use as IRIS_TOKEN or to log in with."""
    try:
        lifetime = Duration.parse(ttl) if ttl else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--ttl") from None
    session = client.create_token(user, role, lifetime)
    click.echo(session.token)
    click.echo(
        f"token for {session.user} ({session.role}), valid until {_expiry(session.expires_at_ms)}", err=True
    )
