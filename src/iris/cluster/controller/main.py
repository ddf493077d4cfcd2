"""Controller daemon: `python -m iris.cluster.controller.main serve --config cluster.yaml`.

`ControllerDaemon` is also what local mode embeds in-process (`IrisClient.local()`, `iris run
--local`, `iris cluster start` for a local cluster).
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import click
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from iris.bundle_format import DEFAULT_MAX_BUNDLE_BYTES
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
from iris.cluster.controller.settings import SCHEDULER_FALLBACK_INTERVAL_S, ControllerSettings
from iris.cluster.controller.store import ControllerStore
from iris.cluster.http_server import HttpServer, PortInUseError, bind_socket, build_app, url_for
from iris.cluster.limits import DEFAULT_INPUT_LIMITS, InputLimits
from iris.cluster.platform.base import PlatformError
from iris.cluster.platform.factory import create_platform
from iris.cluster.types import job_state_name
from iris.config import (
    DEFAULT_CONTROLLER_PORT,
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_WORKER_TIMEOUT,
    ConfigError,
    load_and_validate,
)
from iris.rpc import cluster_pb2 as pb
from iris.rpc import config_pb2
from iris.rpc.cluster_connect import ControllerServiceASGIApplication

logger = logging.getLogger("iris.controller")

# Room for the rest of a LaunchJob request around the largest bundle.
MAX_REQUEST_BYTES = DEFAULT_MAX_BUNDLE_BYTES + 4 * 1024 * 1024


class ControllerDaemon:
    """The controller's store, loops and HTTP server, wired together."""

    def __init__(
        self,
        state_dir: Path,
        bundle_prefix: str,
        host: str = "127.0.0.1",
        port: int = 0,
        heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL.seconds,
        worker_timeout_s: float = DEFAULT_WORKER_TIMEOUT.seconds,
        advertise_host: str | None = None,
        scheduler_fallback_interval_s: float = SCHEDULER_FALLBACK_INTERVAL_S,
        cluster_config: config_pb2.IrisClusterConfig | None = None,
        config_path: str | None = None,
        input_limits: InputLimits = DEFAULT_INPUT_LIMITS,
        auth: config_pb2.AuthConfig | None = None,
    ):
        if not bundle_prefix:
            raise ValueError(
                "storage.bundle_prefix is not configured: set it in the cluster config or pass --bundle-prefix "
                "(for example file:///var/cache/iris/bundles or gs://bucket/iris/bundles)"
            )
        state_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir = state_dir
        self._sock = bind_socket(host, port)
        self.url = url_for(self._sock, advertise_host)
        self.store = ControllerStore(state_dir / "controller.sqlite3")
        if auth is None and cluster_config is not None:
            auth = cluster_config.auth
        self.tokens = _token_verifier(auth, state_dir)
        self._require_token = RequireToken(self.tokens) if self.tokens is not None else None
        self.controller = Controller(
            self.store,
            BundleStore(bundle_prefix),
            ControllerSettings(
                advertised_address=self.url,
                heartbeat_interval_s=heartbeat_interval_s,
                worker_timeout_s=worker_timeout_s,
                scheduler_fallback_interval_s=scheduler_fallback_interval_s,
            ),
            task_token=self._task_token if self.tokens is not None else None,
        )
        self.platform = None
        if cluster_config is not None and cluster_config.scale_groups:
            self.platform = create_platform(cluster_config, state_dir, config_path)
            self.controller.autoscaler = Autoscaler(
                self.store,
                self.platform,
                cluster_config,
                self.url,
                self.controller.apply_effects_threadsafe,
                worker_token=self.worker_token(),
            )
        service = ControllerServiceASGIApplication(
            ControllerServiceImpl(self.controller, DEFAULT_MAX_BUNDLE_BYTES, self.platform, input_limits, self.tokens),
            read_max_bytes=MAX_REQUEST_BYTES,
            interceptors=[self._require_token] if self._require_token is not None else [],
        )
        app = build_app(
            [service],
            [Route("/health", self._health), Route("/metrics", self._metrics), *dashboard_routes()],
            on_startup=self.controller.start,
            on_shutdown=self.controller.stop,
        )
        self._server = HttpServer(app, self._sock)

    @classmethod
    def from_config(
        cls,
        config: config_pb2.IrisClusterConfig,
        state_dir: Path | None = None,
        host: str | None = None,
        port: int | None = None,
        bundle_prefix: str | None = None,
        config_path: str | None = None,
        advertise_host: str | None = None,
    ) -> ControllerDaemon:
        local = config.controller.local if config.controller.WhichOneof("controller") == "local" else None
        if state_dir is None:
            state_dir = Path(local.state_dir if local and local.state_dir else f"~/.iris/{config.name}").expanduser()
        if port is None:
            port = _configured_port(config)
        timeouts = config.defaults.timeouts
        return cls(
            state_dir=state_dir,
            bundle_prefix=bundle_prefix or config.storage.bundle_prefix,
            host=host or ("127.0.0.1" if local is not None else "0.0.0.0"),
            port=port,
            heartbeat_interval_s=timeouts.heartbeat_interval.milliseconds / 1000,
            worker_timeout_s=timeouts.worker_timeout.milliseconds / 1000,
            cluster_config=config,
            config_path=config_path,
            advertise_host=advertise_host,
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


def _token_verifier(auth: config_pb2.AuthConfig | None, state_dir: Path) -> TokenVerifier | None:
    """None when auth is off (the default): nothing is checked and no key is made."""
    if auth is None or parse_mode(auth.mode) is AuthMode.NONE:
        return None
    return TokenVerifier.from_config(auth, state_dir / "auth" / "jwt_hmac.key")


def _configured_port(config: config_pb2.IrisClusterConfig) -> int:
    which = config.controller.WhichOneof("controller")
    port = getattr(config.controller, which).port if which else 0
    return port or DEFAULT_CONTROLLER_PORT


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
    load_from_env()
    try:
        config = load_and_validate(config_path)
        daemon = ControllerDaemon.from_config(
            config,
            Path(state_dir).expanduser() if state_dir else None,
            host,
            port,
            bundle_prefix,
            str(Path(config_path).resolve()),
            advertise_host,
        )
    except (ConfigError, ValueError, PortInUseError, PlatformError) as exc:
        raise click.ClickException(str(exc)) from None
    logger.info("controller serving on %s (state in %s)", daemon.url, daemon.state_dir)
    print(f"IRIS_CONTROLLER_READY {daemon.url}", flush=True)
    daemon.serve_forever()


def main() -> None:
    cli(prog_name="python -m iris.cluster.controller.main")


if __name__ == "__main__":
    sys.exit(main())
