"""How a CLI command finds the controller: --controller-url, --config, or IRIS_CONTROLLER_URL."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path

import click

from iris.client.client import IrisClient
from iris.config import apply_defaults, default_state_dir, load_and_validate
from iris.rpc import config_pb2

URL_FILE = "controller.url"


def local_state_dir(config: config_pb2.IrisClusterConfig) -> Path:
    resolved = apply_defaults(config)
    if resolved.controller.HasField("local") and resolved.controller.local.state_dir:
        return Path(resolved.controller.local.state_dir)
    return Path(default_state_dir(resolved.name))


def controller_url_from_config(config: config_pb2.IrisClusterConfig, config_path: str) -> str:
    platform = config.platform.WhichOneof("platform")
    if platform != "local":
        raise click.ClickException(
            f"{config_path}: reaching a {platform} cluster's controller from its config is not supported by this "
            "version yet; pass --controller-url (for example through an SSH tunnel or port-forward)"
        )
    url_file = local_state_dir(config) / URL_FILE
    if not url_file.exists():
        raise click.ClickException(
            f"the local cluster '{config.name}' is not running (no {url_file}); "
            f"start it with: iris cluster --config {config_path} start"
        )
    return url_file.read_text().strip()


def resolve_controller_url(config_path: str | None, controller_url: str | None) -> str:
    if controller_url:
        return controller_url
    if config_path:
        return controller_url_from_config(load_and_validate(config_path), config_path)
    env_url = os.environ.get("IRIS_CONTROLLER_URL") or os.environ.get("IRIS_CONTROLLER_ADDRESS")
    if env_url:
        return env_url
    raise click.UsageError(
        "which cluster? pass --controller-url URL, --config CLUSTER.yaml, or set IRIS_CONTROLLER_URL"
    )


def connection_options(func: Callable) -> Callable:
    """Adds --config and --controller-url and passes a ready `client` to the command."""

    @click.option("--config", "config_path", type=click.Path(dir_okay=False), help="Cluster config YAML.")
    @click.option("--controller-url", help="Controller URL, e.g. http://localhost:10000 (or IRIS_CONTROLLER_URL).")
    @functools.wraps(func)
    def wrapper(*args, config_path: str | None, controller_url: str | None, **kwargs):
        client = IrisClient.remote(resolve_controller_url(config_path, controller_url))
        try:
            return func(*args, client=client, **kwargs)
        finally:
            client.close()

    return wrapper
