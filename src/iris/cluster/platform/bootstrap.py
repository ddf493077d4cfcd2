"""Bash scripts that start, stop and inspect Iris daemons (workers, the controller) on a host.

A platform that reaches hosts with a `RemoteExec` (Manual, GCP) runs these there. Each daemon runs
either from an Iris image with Docker (the production path: the image is used if present, else
pulled; host network; the Docker socket mounted so a worker's `--runtime docker` drives the host's
engine) or as a host process of a Python environment that has Iris installed (hosts without
Docker). Everything a daemon leaves on its host is under HOST_STATE_DIR/daemons/<name>/:

    marker.json    what runs there (kind, slice, worker, labels, how it was started), one JSON line;
                   a restarted controller lists these to rebuild its slices and adopt live workers
    pid | container  how to find the daemon again
    bootstrap.log  the bootstrap script's own output
    daemon.log     the daemon's output (process mode; with Docker, `docker logs` has it)

Stopping removes the daemon, its marker and its pid/container record; the logs stay for
`iris cluster vm logs`.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlparse

from iris.cluster import task_env
from iris.cluster.platform.base import PlatformError, RemoteWorkerHandle, ResourceNotFoundError, VmLogKind
from iris.rpc import config_pb2
from iris.time import Duration, Timestamp

HOST_STATE_DIR = "/var/lib/iris"
DAEMONS_DIR = f"{HOST_STATE_DIR}/daemons"
DEFAULT_DOCKER_SOCKET = "/var/run/docker.sock"
# Bootstrap output lines the script marks as its own, so they stand out among the daemon's.
LOG_TAG = "[iris-bootstrap]"
DEFAULT_READY_TIMEOUT_S = 120
_STOP_GRACE_S = 15


class BootstrapConfigError(ValueError):
    """The bootstrap config cannot start a daemon; the message names the setting to change."""


@dataclass(frozen=True)
class WorkerPlacement:
    """What a platform decided for one worker: its ids, where it is reached, what it reports.

    `labels` are the slice's labels; they go into the marker so a restarted controller can rebuild
    the slice from its hosts.
    """

    worker_id: str
    slice_id: str
    scale_group: str
    advertise_host: str
    labels: dict[str, str] = field(default_factory=dict)
    attributes: dict[str, str] = field(default_factory=dict)
    cpu: float | None = None
    memory_bytes: int | None = None
    tpu_variant: str = ""
    gpu_spec: str = ""


def worker_offer_flags(
    attributes: dict[str, str],
    cpu: float | None = None,
    memory_bytes: int | None = None,
    tpu_variant: str = "",
    gpu_spec: str = "",
) -> list[str]:
    """`worker.main serve` flags for what a worker offers beyond what it probes on its host."""
    flags: list[str] = []
    if cpu is not None:
        flags += ["--cpu", str(cpu)]
    if memory_bytes is not None:
        flags += ["--memory", str(memory_bytes)]
    if tpu_variant:
        flags += ["--tpu", tpu_variant]
    if gpu_spec:
        flags += ["--gpu", gpu_spec]
    for key, value in attributes.items():
        flags += ["--attribute", f"{key}={value}"]
    return flags


@dataclass(frozen=True)
class HostDaemon:
    """One Iris daemon to run on a host: `python -m <module> <args>` from an image or a Python env."""

    name: str
    module_args: list[str]
    port: int
    marker: dict[str, object]
    env: dict[str, str] = field(default_factory=dict)
    image: str = ""
    python_env: str = ""
    # Host directories the daemon needs, mounted at the same path when it runs in a container.
    host_dirs: list[str] = field(default_factory=list)
    # Files to write on the host before starting: path -> content.
    files: dict[str, str] = field(default_factory=dict)
    mount_docker_socket: bool = False

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", self.name):
            raise BootstrapConfigError(
                f"{self.name!r} cannot name a daemon: use letters, digits, '.', '_', '-'"
            )
        if not self.image and not self.python_env:
            raise BootstrapConfigError(
                "nothing to run the daemon from: set defaults.bootstrap.docker_image (run with Docker) or "
                "defaults.bootstrap.python_env (a Python environment with Iris installed on every host)"
            )

    @property
    def directory(self) -> str:
        return f"{DAEMONS_DIR}/{self.name}"

    @property
    def container(self) -> str:
        return container_name(self.name)


def container_name(daemon_name: str) -> str:
    return f"iris-{daemon_name}"


def worker_daemon_name(worker_id: str) -> str:
    return f"worker-{re.sub(r'[^A-Za-z0-9_.-]', '_', worker_id)}"


CONTROLLER_DAEMON_NAME = "controller"


def local_storage_dirs(*prefixes: str) -> list[str]:
    """The host directories behind file:// storage prefixes (a filesystem every host mounts), which a
    containerized daemon must see at the same path; other schemes need none."""
    return [urlparse(prefix).path for prefix in prefixes if prefix.startswith("file://")]


def worker_env(bootstrap: config_pb2.BootstrapConfig) -> dict[str, str]:
    """The worker daemon's environment: the configured variables and, when auth is on, its token
    (in the environment, not on the command line, where any user of the host could read it)."""
    env = dict(bootstrap.env_vars)
    if bootstrap.worker_token:
        env[task_env.WORKER_TOKEN] = bootstrap.worker_token
    return env


def worker_daemon(
    bootstrap: config_pb2.BootstrapConfig,
    placement: WorkerPlacement,
    kill_grace_s: float | None = None,
    storage_dirs: list[str] | None = None,
) -> HostDaemon:
    """The worker daemon a platform starts on one host of a slice.

    `storage_dirs` are host directories the worker reads bundles from (see `local_storage_dirs`).
    """
    if not bootstrap.controller_address:
        raise BootstrapConfigError(
            "defaults.bootstrap.controller_address is not set: workers could not find the controller"
        )
    runtime = bootstrap.runtime or (
        "process" if bootstrap.python_env and not bootstrap.docker_image else "docker"
    )
    use_image = not bootstrap.python_env
    cache_dir = bootstrap.cache_dir or "/var/cache/iris"
    args = [
        "iris.cluster.worker.main", "serve",
        "--controller-address", bootstrap.controller_address,
        "--host", "0.0.0.0",
        "--port", str(bootstrap.worker_port),
        "--advertise-host", placement.advertise_host,
        "--cache-dir", cache_dir,
        "--runtime", runtime,
        "--worker-id", placement.worker_id,
        "--slice-id", placement.slice_id,
    ]  # fmt: skip
    if bootstrap.task_image:
        args += ["--task-image", bootstrap.task_image]
    if kill_grace_s is not None:
        args += ["--kill-grace", str(kill_grace_s)]
    attributes = {"scale-group": placement.scale_group, **placement.attributes}
    args += worker_offer_flags(
        attributes, placement.cpu, placement.memory_bytes, placement.tpu_variant, placement.gpu_spec
    )
    marker: dict[str, object] = {
        "kind": "worker",
        "worker_id": placement.worker_id,
        "slice_id": placement.slice_id,
        "scale_group": placement.scale_group,
        "labels": dict(placement.labels),
        "address": placement.advertise_host,
        "port": bootstrap.worker_port,
        "controller_address": bootstrap.controller_address,
        "mode": "docker" if use_image else "process",
        "started_at_ms": Timestamp.now().epoch_ms,
    }
    return HostDaemon(
        name=worker_daemon_name(placement.worker_id),
        module_args=args,
        port=bootstrap.worker_port,
        marker=marker,
        env=worker_env(bootstrap),
        image=bootstrap.docker_image if use_image else "",
        python_env=bootstrap.python_env,
        host_dirs=[cache_dir, *(storage_dirs or [])],
        mount_docker_socket=runtime == "docker",
    )


def controller_daemon(
    config_yaml: str,
    port: int,
    advertise_host: str,
    image: str = "",
    python_env: str = "",
    env: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    metadata: dict[str, str] | None = None,
    vm_name: str = CONTROLLER_DAEMON_NAME,
    storage_dirs: list[str] | None = None,
) -> HostDaemon:
    """The controller daemon started on a host, serving the cluster config `config_yaml` and
    telling workers to reach it at `advertise_host`. `storage_dirs` (see `local_storage_dirs`) are
    mounted when it runs from the image, since it writes job bundles there."""
    directory = f"{DAEMONS_DIR}/{CONTROLLER_DAEMON_NAME}"
    config_path = f"{directory}/config.yaml"
    args = [
        "iris.cluster.controller.main", "serve",
        "--config", config_path,
        "--host", "0.0.0.0",
        "--port", str(port),
        "--state-dir", f"{directory}/state",
        "--advertise-host", advertise_host,
    ]  # fmt: skip
    return HostDaemon(
        name=CONTROLLER_DAEMON_NAME,
        module_args=args,
        port=port,
        marker={
            "kind": "controller",
            "name": vm_name,
            "port": port,
            "address": advertise_host,
            "labels": dict(labels or {}),
            "metadata": dict(metadata or {}),
            "mode": "docker" if not python_env else "process",
            "started_at_ms": Timestamp.now().epoch_ms,
        },
        env=dict(env or {}),
        image="" if python_env else image,
        python_env=python_env,
        host_dirs=[directory, *(storage_dirs or [])],
        files={config_path: config_yaml},
    )


def _docker_socket(env: dict[str, str]) -> str:
    docker_host = env.get("DOCKER_HOST", "")
    if docker_host.startswith("unix://"):
        return urlparse(docker_host).path
    return DEFAULT_DOCKER_SOCKET


_COMMON = r"""
say() { echo "$LOG_TAG $*"; }
fail() { echo "$LOG_TAG error: $*" >&2; exit 1; }
# The daemon's main pid, if it still runs (and still is that daemon, not a reused pid).
daemon_pid() {
  local pid
  [ -f "$DIR/pid" ] || return 1
  pid="$(cat "$DIR/pid")"
  [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$DAEMON_MODULE" || return 1
  echo "$pid"
}
container_running() {
  [ -f "$DIR/container" ] && command -v docker >/dev/null 2>&1 || return 1
  (
    # The engine the daemon was started on, which this shell's environment may not name.
    if [ -s "$DIR/docker_host" ]; then export DOCKER_HOST="$(cat "$DIR/docker_host")"; fi
    [ "$(docker inspect -f '{{.State.Running}}' "$(cat "$DIR/container")" 2>/dev/null)" = true ]
  )
}
daemon_alive() { daemon_pid >/dev/null || container_running; }
stop_daemon() {
  local pid i
  if pid="$(daemon_pid)"; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 $((STOP_GRACE * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  fi
  if [ -f "$DIR/container" ] && command -v docker >/dev/null 2>&1; then
    (
      if [ -s "$DIR/docker_host" ]; then export DOCKER_HOST="$(cat "$DIR/docker_host")"; fi
      docker rm -f "$(cat "$DIR/container")" >/dev/null 2>&1 || true
    )
  fi
  rm -f "$DIR/marker.json" "$DIR/pid" "$DIR/container" "$DIR/docker_host"
}
"""


def _preamble(daemon_name: str, module: str) -> str:
    return (
        "set -euo pipefail\n"
        f"LOG_TAG={shlex.quote(LOG_TAG)}\n"
        f"DIR={shlex.quote(f'{DAEMONS_DIR}/{daemon_name}')}\n"
        f"DAEMON_MODULE={shlex.quote(module)}\n"
        f"STOP_GRACE={_STOP_GRACE_S}\n" + _COMMON
    )


# Every Iris daemon's module starts with this, which is all `daemon_pid` needs when listing.
_ANY_DAEMON_MODULE = "iris.cluster."


def start_script(daemon: HostDaemon, ready_timeout_s: int = DEFAULT_READY_TIMEOUT_S, pull: bool = False) -> str:
    """Bash that (re)starts `daemon` on the host and exits 0 once it answers /health on its port.

    An image already on the host is used as it is, unless `pull`: a redeploy pulls it again, since
    a rebuilt image is usually pushed under the same tag.
    Exits non-zero with the reason and the daemon's last output if it cannot be started or dies
    before it is healthy; then nothing of it is left running.
    """
    module = daemon.module_args[0]
    lines = [_preamble(daemon.name, module)]
    lines.append('mkdir -p "$DIR"')
    lines.append('exec > >(tee -a "$DIR/bootstrap.log") 2>&1')
    lines.append(f"say starting {daemon.name} on $(hostname) at $(date -u +%FT%TZ)")
    lines.append("stop_daemon")
    for directory in daemon.host_dirs:
        lines.append(f"mkdir -p {shlex.quote(directory)}")
    for path, content in daemon.files.items():
        lines.append(f"cat >{shlex.quote(path)} <<'IRIS_FILE_EOF'\n{content.rstrip(chr(10))}\nIRIS_FILE_EOF")
    for key, value in daemon.env.items():
        lines.append(f"export {key}={shlex.quote(value)}")
    args = " ".join(shlex.quote(a) for a in daemon.module_args)
    if daemon.image:
        image = shlex.quote(daemon.image)
        lines.append(
            "command -v docker >/dev/null 2>&1 || fail 'docker is not installed on this host: install Docker, "
            "or set defaults.bootstrap.python_env to run the daemon from a Python environment'"
        )
        pull_image = (
            f"{{ say pulling {image}; docker pull -q {image} "
            f"|| fail 'could not pull {daemon.image}: check the image name and that this host can reach its registry'; }}"
        )
        lines.append(pull_image if pull else f"docker image inspect {image} >/dev/null 2>&1 || {pull_image}")
        # Not labelled iris.managed: that marks task containers, which a starting worker removes.
        run = [
            "docker",
            "run",
            "-d",
            "--name",
            daemon.container,
            "--network",
            "host",
            "--label",
            f"iris.daemon={daemon.name}",
        ]
        for directory in daemon.host_dirs:
            run += ["-v", f"{directory}:{directory}"]
        if daemon.mount_docker_socket:
            socket = _docker_socket(daemon.env)
            run += ["-v", f"{socket}:{socket}"]
        for key in daemon.env:
            run += ["-e", key]
        command = " ".join(shlex.quote(a) for a in run) + f" {image} python -m {args}"
        # A container of this name is an earlier start of this very daemon whose record was lost.
        lines.append(f"docker rm -f {shlex.quote(daemon.container)} >/dev/null 2>&1 || true")
        lines.append(f'echo {shlex.quote(daemon.container)} >"$DIR/container"')
        lines.append('echo "${DOCKER_HOST:-}" >"$DIR/docker_host"')
        lines.append(f"{command} >/dev/null || fail 'docker run of {daemon.image} failed'")
        lines.append(f"daemon_output() {{ docker logs --tail 30 {daemon.container} 2>&1; }}")
    else:
        python = shlex.quote(f"{daemon.python_env.rstrip('/')}/bin/python")
        lines.append(
            f"[ -x {python} ] || fail '{daemon.python_env} is not a Python environment on this host "
            "(no bin/python): install Iris there or fix defaults.bootstrap.python_env'"
        )
        lines.append(f'setsid {python} -m {args} >>"$DIR/daemon.log" 2>&1 </dev/null &')
        lines.append('echo $! >"$DIR/pid"')
        lines.append('daemon_output() { tail -n 30 "$DIR/daemon.log"; }')
    lines.append(
        f"cat >\"$DIR/marker.json\" <<'IRIS_MARKER_EOF'\n{json.dumps(daemon.marker)}\nIRIS_MARKER_EOF"
    )
    lines.append(
        f"""healthy() {{
  {{ exec 3<>/dev/tcp/127.0.0.1/{daemon.port}; }} 2>/dev/null || return 1
  printf 'GET /health HTTP/1.0\\r\\nHost: 127.0.0.1\\r\\n\\r\\n' >&3
  local status=""
  read -r -t 5 status <&3 || true
  exec 3<&-
  [[ "$status" == *" 200"* ]]
}}
for attempt in $(seq 1 {ready_timeout_s * 5}); do
  if ! daemon_alive; then
    say "{daemon.name} exited during startup; its last output:"
    daemon_output || true
    stop_daemon
    exit 1
  fi
  if healthy; then
    say "{daemon.name} is healthy on port {daemon.port}"
    exit 0
  fi
  sleep 0.2
done
say "{daemon.name} did not answer /health on port {daemon.port} within {ready_timeout_s}s; its last output:"
daemon_output || true
stop_daemon
exit 1"""
    )
    return "\n".join(lines) + "\n"


def stop_script(daemon_name: str, module: str) -> str:
    """Bash that stops a daemon started by `start_script` and removes its marker (logs stay)."""
    return _preamble(daemon_name, module) + "stop_daemon\n"


def stop_worker_script(worker_id: str) -> str:
    return stop_script(worker_daemon_name(worker_id), "iris.cluster.worker.main")


def stop_controller_script() -> str:
    return stop_script(CONTROLLER_DAEMON_NAME, "iris.cluster.controller.main")


def write_marker_script(daemon_name: str, marker: dict[str, object]) -> str:
    """Bash replacing the marker of a running daemon (to record new labels or metadata)."""
    directory = shlex.quote(f"{DAEMONS_DIR}/{daemon_name}")
    return f"""d={directory}
[ -f "$d/marker.json" ] || {{ echo "no Iris daemon {daemon_name} runs on this host" >&2; exit 3; }}
cat >"$d/marker.json.new" <<'IRIS_MARKER_EOF'
{json.dumps(marker)}
IRIS_MARKER_EOF
mv "$d/marker.json.new" "$d/marker.json"
"""


def logs_script(daemon_name: str, tail_lines: int) -> str:
    """Bash printing the last lines of a daemon's bootstrap output and of the daemon itself."""
    directory = shlex.quote(f"{DAEMONS_DIR}/{daemon_name}")
    container = shlex.quote(container_name(daemon_name))
    return f"""d={directory}
[ -d "$d" ] || {{ echo "no Iris daemon {daemon_name} was ever started on this host" >&2; exit 3; }}
tail -n {tail_lines} "$d/bootstrap.log" 2>/dev/null || true
if [ -f "$d/daemon.log" ]; then tail -n {tail_lines} "$d/daemon.log"
elif command -v docker >/dev/null 2>&1; then docker logs --tail {tail_lines} {container} 2>&1 || true
fi
"""


def vm_log_script(daemon_name: str, kind: str, tail_lines: int, follow: bool) -> str:
    """Bash printing one log of a daemon ("bootstrap": its bootstrap output; "daemon": the daemon's
    own), the last `tail_lines` lines and, with `follow`, every new line until it is killed."""
    directory = shlex.quote(f"{DAEMONS_DIR}/{daemon_name}")
    container = shlex.quote(container_name(daemon_name))
    tail = f"tail -n {tail_lines}" + (" -F" if follow else "")
    missing = f'{{ echo "no Iris daemon {daemon_name} was ever started on this host" >&2; exit 3; }}'
    if kind == "bootstrap":
        return f'd={directory}\n[ -f "$d/bootstrap.log" ] || {missing}\nexec {tail} "$d/bootstrap.log"\n'
    docker_follow = " -f" if follow else ""
    return f"""d={directory}
[ -d "$d" ] || {missing}
if [ -f "$d/daemon.log" ]; then exec {tail} "$d/daemon.log"
elif command -v docker >/dev/null 2>&1; then exec docker logs --tail {tail_lines}{docker_follow} {container} 2>&1
fi
{missing}
"""


def stream_vm_log(
    handle: RemoteWorkerHandle,
    daemon_name: str,
    kind: VmLogKind,
    tail_lines: int,
    on_line: Callable[[str], None],
    follow: bool,
) -> None:
    """`Platform.vm_log` for a daemon started by `start_script` on the host `handle` reaches."""
    script = vm_log_script(daemon_name, kind.value, tail_lines, follow)
    timeout = None if follow else Duration.from_seconds(60)
    result = handle.run_command(f"bash -c {shlex.quote(script)}", timeout, on_line)
    if result.returncode == 3:
        raise ResourceNotFoundError(f"{handle.internal_address}: {result.stderr.strip()}")
    if result.returncode != 0:
        raise PlatformError(
            f"reading the {kind.value} log of {daemon_name} on {handle.internal_address} failed "
            f"(exit {result.returncode}): {result.stderr.strip()[-300:]}"
        )


def list_markers_script() -> str:
    """Bash printing, for every daemon started on the host and not stopped, "alive" or "dead" and
    its marker, one per line."""
    return (
        _preamble("", _ANY_DAEMON_MODULE)
        + f"""for DIR in {DAEMONS_DIR}/*; do
  [ -f "$DIR/marker.json" ] || continue
  if daemon_alive; then state=alive; else state=dead; fi
  echo "$state $(cat "$DIR/marker.json")"
done
"""
    )


def parse_markers(output: str) -> list[dict]:
    """The markers `list_markers_script` printed, each with "alive" (bool) added; other lines are
    skipped."""
    markers = []
    for line in output.splitlines():
        state, _, text = line.partition(" ")
        if state not in ("alive", "dead"):
            continue
        try:
            marker = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(marker, dict):
            markers.append({**marker, "alive": state == "alive"})
    return markers
