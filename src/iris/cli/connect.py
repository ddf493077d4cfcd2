"""How a CLI command finds the controller: --controller-url, --config, or IRIS_CONTROLLER_URL."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path

import click

from iris.client.client import IrisClient
from iris.cluster.controller.lifecycle import ClusterNotRunningError, connect_cluster, local_state_dir
from iris.cluster.platform.base import PlatformError
from iris.cluster.platform.factory import create_platform
from iris.config import load_and_validate
from iris.rpc import config_pb2


def controller_url_from_config(config: config_pb2.IrisClusterConfig, config_path: str) -> str:
    try:
        platform = create_platform(config, local_state_dir(config), str(Path(config_path).resolve()))
        return connect_cluster(platform, config)
    except ClusterNotRunningError:
        raise click.ClickException(
            f"the cluster '{config.name}' is not running; start it with: iris cluster --config {config_path} start"
        ) from None
    except PlatformError as exc:
        raise click.ClickException(
            f"{config_path}: {exc}; pass --controller-url (for example through an SSH tunnel or port-forward)"
        ) from None


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
