"""Controller daemon: `python -m iris.cluster.controller.main serve --config cluster.yaml`.

`ControllerDaemon` is also what local mode embeds in-process (`IrisClient.local()`, `iris run
--local`, `iris cluster start` for a local cluster).
"""

from __future__ import annotations

import logging
import socket
import sys
import time
from pathlib import Path

import click
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from iris.chaos import load_from_env
from iris.cluster.auth.server import RequireToken
from iris.cluster.auth.tokens import (
    TASK_TOKEN_TTL_S,
    WORKER_TOKEN_TTL_S,
    AuthMode,
    Identity,
    Role,
    TokenVerifier,
    parse_mode,
)
from iris.cluster.controller.autoscaler import Autoscaler
from iris.cluster.controller.bundle_store import BundleStore
from iris.cluster.controller.controller import Controller
from iris.cluster.controller.dashboard import dashboard_routes
from iris.cluster.controller.service import ControllerServiceImpl
from iris.cluster.controller.settings import DaemonSettings
from iris.cluster.controller.state_lock import StateDirInUse, StateDirLock
from iris.cluster.controller.store import ControllerStore
from iris.cluster.listening_socket import IDLE_CONNECTION_TIMEOUT_S, PortInUseError, bind_socket, url_for
from iris.cluster.platform.base import PlatformError
from iris.cluster.platform.factory import create_platform
from iris.cluster.types import job_state_name
from iris.config import DEFAULT_CONTROLLER_PORT, ConfigError, load_and_validate
from iris.rpc import cluster_pb2 as pb
from iris.rpc import config_pb2
from iris.rpc.unary_server import UnaryServer, service_methods

logger = logging.getLogger("iris.controller")

# Room for the rest of a LaunchJob request around the largest bundle.
REQUEST_OVERHEAD_BYTES = 4 * 1024 * 1024


class ControllerDaemon:
    """The controller's store, loops and HTTP server, wired together from its settings."""

    def __init__(self, settings: DaemonSettings, sock: socket.socket | None = None):
        """`sock`, when given, is a bound and listening socket to serve on instead of binding
        settings.host and settings.port (a local cluster binds first to start its workers early)."""
        if not settings.bundle_prefix:
            raise ValueError(
                "storage.bundle_prefix is not configured: set it in the cluster config or pass --bundle-prefix "
                "(for example file:///var/cache/iris/bundles or gs://bucket/iris/bundles)"
            )
        self.settings = settings
        self.state_dir = settings.state_dir
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._state_lock = StateDirLock(self.state_dir)
        try:
            self._build(settings, sock)
        except BaseException:
            self._state_lock.release()
            raise

    def _build(self, settings: DaemonSettings, sock: socket.socket | None) -> None:
        self._sock = sock if sock is not None else bind_socket(settings.host, settings.port)
        self.url = url_for(self._sock, settings.advertise_host)
        self.store = ControllerStore(self.state_dir / "controller.sqlite3", durable=settings.durable_store)
        self.tokens = _token_verifier(settings.config.auth, self.state_dir)
        self._require_token = RequireToken(self.tokens) if self.tokens is not None else None
        self.controller = Controller(
            self.store,
            BundleStore(settings.bundle_prefix),
            settings.controller_settings(self.url),
            task_token=self._task_token if self.tokens is not None else None,
        )
        self.platform = None
        config = settings.config
        if config.scale_groups:
            self.platform = create_platform(config, self.state_dir, settings.config_path)
            self.controller.autoscaler = Autoscaler(
                self.store,
                self.platform,
                config,
                self.url,
                self.controller.apply_effects_threadsafe,
                worker_token=self.worker_token(),
            )
        # ControllerService goes through the lean unary server (under half the CPU per request of
        # uvicorn, Starlette and connectrpc); the pages and plain routes through Starlette behind it.
        pages = Starlette(
            routes=[Route("/health", self._health), Route("/metrics", self._metrics), *dashboard_routes()]
        )
        self._server = UnaryServer(
            self._sock,
            service_methods(
                ControllerServiceImpl(self.controller, self.platform, settings.input_limits, self.tokens),
                pb.DESCRIPTOR.services_by_name["ControllerService"],
            ),
            interceptors=[self._require_token] if self._require_token is not None else [],
            on_startup=self.controller.start,
            on_shutdown=self.controller.stop,
            idle_timeout_s=IDLE_CONNECTION_TIMEOUT_S,
            fallback=pages,
            read_max_bytes=settings.input_limits.max_bundle_bytes + REQUEST_OVERHEAD_BYTES,
        )

    async def _health(self, request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "url": self.url})

    def worker_token(self) -> str:
        """A token for the workers this controller starts; empty when auth is off."""
        if self.tokens is None:
            return ""
        return self.tokens.issue(Identity("worker", Role.WORKER), int(time.time()), WORKER_TOKEN_TTL_S)[0]

    def _task_token(self, owner: str) -> str:
        assert self.tokens is not None
        return self.tokens.issue(Identity(owner, Role.USER), int(time.time()), TASK_TOKEN_TTL_S)[0]

    async def _metrics(self, request: Request) -> Response:
        if self._require_token is not None:
            refusal = self._require_token.refuse_http(request)
            if refusal is not None:
                return refusal
        jobs, workers = self.store.count_by_state()
        lines = ["# TYPE iris_jobs gauge"]
        lines += [f'iris_jobs{{state="{job_state_name(state)}"}} {n}' for state, n in sorted(jobs.items())]
        lines.append("# TYPE iris_workers gauge")
        lines += [
            f'iris_workers{{state="{pb.WorkerState.Name(state).removeprefix("WORKER_STATE_").lower()}"}} {n}'
            for state, n in sorted(workers.items())
        ]
        return PlainTextResponse("\n".join(lines) + "\n")

    def start_in_thread(self) -> None:
        self._server.start_in_thread()

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def stop(self) -> None:
        self._server.stop()
        self.store.close()
        self._state_lock.release()


def _token_verifier(auth: config_pb2.AuthConfig, state_dir: Path) -> TokenVerifier | None:
    """None when auth is off (the default): nothing is checked and no key is made."""
    if parse_mode(auth.mode) is AuthMode.NONE:
        return None
    return TokenVerifier.from_config(auth, state_dir / "auth" / "jwt_hmac.key")


@click.group()
def cli() -> None:
    """The Iris controller daemon."""


@cli.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False), help="Cluster config YAML.")
@click.option("--host", default=None, help="Interface to listen on (default 0.0.0.0; 127.0.0.1 for local clusters).")
@click.option("--port", type=int, default=None, help=f"Port (default from config, else {DEFAULT_CONTROLLER_PORT}).")
@click.option("--state-dir", type=click.Path(file_okay=False), help="Where the SQLite state lives.")
@click.option("--bundle-prefix", help="Bundle storage URI (file://, s3://, gs://); overrides the config.")
@click.option("--advertise-host", help="Host name or IP workers and clients use to reach the controller.")
def serve(
    config_path: str,
    host: str | None,
    port: int | None,
    state_dir: str | None,
    bundle_prefix: str | None,
    advertise_host: str | None,
) -> None:
    """Serve the controller until SIGTERM or Ctrl-C."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        load_from_env("controller")
        config = load_and_validate(config_path)
        settings = DaemonSettings.from_config(
            config,
            state_dir=Path(state_dir) if state_dir else None,
            host=host,
            port=port,
            bundle_prefix=bundle_prefix,
            config_path=str(Path(config_path).resolve()),
            advertise_host=advertise_host,
        )
        daemon = ControllerDaemon(settings)
    except (ConfigError, ValueError, PortInUseError, PlatformError, StateDirInUse) as exc:
        raise click.ClickException(str(exc)) from None
    logger.info("controller serving on %s (state in %s)", daemon.url, daemon.state_dir)
    print(f"IRIS_CONTROLLER_READY {daemon.url}", flush=True)
    daemon.serve_forever()


def main() -> None:
    cli(prog_name="python -m iris.cluster.controller.main")


if __name__ == "__main__":
    sys.exit(main())
