"""How a CLI command finds the controller: --controller-url, --config, or IRIS_CONTROLLER_URL.

`--config` and `--controller-url` are accepted at every level (`iris --config F job list`,
`iris job --config F list`, `iris job list --config F`); the one closest to the command wins.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from iris.rpc import config_pb2

CONFIG_HELP = "Cluster config YAML."
CONTROLLER_URL_HELP = "Controller URL, e.g. http://localhost:10000 (or IRIS_CONTROLLER_URL)."


@contextmanager
def controller_from_config(config: config_pb2.IrisClusterConfig, config_path: str) -> Iterator[str]:
    """The cluster's controller URL, through the platform's tunnel when this machine cannot reach
    the controller's own address; the tunnel closes when the block ends."""
    # Imported here, not at the top: `iris run --local` and `--controller-url` need none of the
    # platforms, their cloud clients or httpx, and every `iris` command imports this module.
    from iris.cluster.controller.lifecycle import (
        ClusterNotRunningError,
        controller_connection,
        local_state_dir,
    )
    from iris.cluster.platform.base import PlatformError
    from iris.cluster.platform.factory import create_platform

    with ExitStack() as stack:
        try:
            platform = create_platform(config, local_state_dir(config), str(Path(config_path).resolve()))
            url = stack.enter_context(controller_connection(platform, config))
        except ClusterNotRunningError:
            raise click.ClickException(
                f"the cluster '{config.name}' is not running; start it with: iris cluster --config {config_path} start"
            ) from None
        except PlatformError as exc:
            raise click.ClickException(
                f"{config_path}: cannot reach the controller: {exc}; pass --controller-url "
                "(for example through an SSH tunnel or port-forward)"
            ) from None
        yield url


def open_controller_url(config_path: str | None, url: str | None) -> AbstractContextManager[str]:
    """The controller URL to use for as long as the block runs: --controller-url, else --config
    (tunnelled when needed), else IRIS_CONTROLLER_URL."""
    if url:
        return nullcontext(url)
    if config_path:
        from iris.config import load_and_validate

        return controller_from_config(load_and_validate(config_path), config_path)
    env_url = os.environ.get("IRIS_CONTROLLER_URL") or os.environ.get("IRIS_CONTROLLER_ADDRESS")
    if env_url:
        return nullcontext(env_url)
    raise click.UsageError(
        "which cluster? pass --controller-url URL, --config CLUSTER.yaml, or set IRIS_CONTROLLER_URL"
    )


def _remember(key: str) -> Callable[[click.Context, click.Parameter, str | None], str | None]:
    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value:
            ctx.find_root().ensure_object(dict)[key] = value
        return value

    return callback


def remembered_connection() -> dict[str, str]:
    return click.get_current_context().find_root().obj or {}


def config_option() -> click.Option:
    """A --config that any command of a tree can take, remembered for the whole command line."""
    return click.Option(
        ["--config"],
        type=click.Path(dir_okay=False, exists=True),
        callback=_remember("config_path"),
        expose_value=False,
        help=CONFIG_HELP,
    )


def controller_url_option() -> click.Option:
    """A --controller-url that any command of a tree can take, remembered for the whole command line."""
    return click.Option(
        ["--controller-url"], callback=_remember("controller_url"), expose_value=False, help=CONTROLLER_URL_HELP
    )


def add_option_everywhere(command: click.Command, make_option: Callable[[], click.Option]) -> None:
    """Give a command and all its subcommands the option, unless one already has an option of that name."""
    option = make_option()
    if not any(set(option.opts) & set(getattr(param, "opts", ())) for param in command.params):
        command.params.append(option)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            add_option_everywhere(sub, make_option)


def global_connection_options(func: Callable) -> Callable:
    """--config and --controller-url on a group: remembered for the subcommands that connect."""
    func = click.option(
        "--controller-url", callback=_remember("controller_url"), expose_value=False, help=CONTROLLER_URL_HELP
    )(func)
    return click.option(
        "--config",
        type=click.Path(dir_okay=False),
        callback=_remember("config_path"),
        expose_value=False,
        help=CONFIG_HELP,
    )(func)


def connection_from_context(config_path: str | None, controller_url: str | None) -> tuple[str | None, str | None]:
    """The command's own options, else those given before it (`iris --config F job list`)."""
    remembered = remembered_connection()
    if config_path or controller_url:
        return config_path, controller_url
    return remembered.get("config_path"), remembered.get("controller_url")


def connection_options(func: Callable) -> Callable:
    """Adds --config and --controller-url and passes a ready `client` to the command."""

    @click.option("--config", "config_path", type=click.Path(dir_okay=False), help=CONFIG_HELP)
    @click.option("--controller-url", help=CONTROLLER_URL_HELP)
    @functools.wraps(func)
    def wrapper(*args, config_path: str | None, controller_url: str | None, **kwargs):
        from iris.client.client import IrisClient

        with (
            open_controller_url(*connection_from_context(config_path, controller_url)) as url,
            IrisClient.remote(url) as client,
        ):
            return func(*args, client=client, **kwargs)

    return wrapper
