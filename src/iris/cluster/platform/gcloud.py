"""The `gcloud` CLI as GcpPlatform drives it: one runner, one error table, pure argv builders, and
`RemoteExec` over `gcloud ... ssh` for TPU workers and GCE VMs.

Every gcloud process Iris starts goes through `Gcloud.start`: it adds the project and
`--quiet`, runs with the environment the platform was given (a test points gcloud at a fake of
the Google APIs through it), logs the command, kills it at its timeout, and maps a failure
through `classify_gcloud_error` to a typed platform error whose message names the zone, the
accelerator and what to do.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import subprocess
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iris.cluster.platform.base import (
    CommandResult,
    PlatformError,
    PlatformUnavailableError,
    QuotaExhaustedError,
    ResourceNotFoundError,
)
from iris.cluster.platform.remote_exec import (
    DEFAULT_COMMAND_TIMEOUT,
    TIMEOUT_EXIT,
    HostUnreachableError,
    RemoteCommandFailedError,
    RemoteCommandTimeoutError,
    accepts_local,
    bounded_command,
    classify_client_error,
    free_local_port,
    short_command,
)
from iris.time import Duration, wait_until

logger = logging.getLogger(__name__)

GCLOUD = "gcloud"
# How long one describe/list/label call may take before the API counts as unavailable.
API_TIMEOUT = Duration.from_seconds(120)
# What a bootstrap over gcloud ssh may take beyond the daemon's init_timeout (gcloud's own work).
BOOTSTRAP_SLACK = Duration.from_seconds(60)
# The TPU API's location wildcard: list the nodes of every zone at once.
ALL_ZONES = "-"
# GCE and TPU label values: lowercase letters, digits, '_' and '-', at most 63 characters.
_LABEL_TEXT = re.compile(r"[a-z0-9_-]{0,63}")
_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")


class ZoneCapacityError(QuotaExhaustedError):
    """The zone has quota but no free machines of the type (a stockout); try another zone."""


class GcpPermissionError(PlatformError):
    """The account gcloud uses may not do this (or gcloud has no account at all)."""


def json_of(result: CommandResult) -> Any:
    """What a `--format=json` command printed; None when it printed nothing."""
    text = result.stdout.strip()
    return json.loads(text) if text else None


@dataclass(frozen=True)
class GcloudContext:
    """What a gcloud command was doing, for the error message a user reads."""

    what: str
    zone: str = ""
    accelerator: str = ""

    def where(self) -> str:
        parts = [f"zone {self.zone}" if self.zone else "", self.accelerator]
        return " for ".join(p for p in parts if p) or "this project"


@dataclass(frozen=True)
class _GcloudErrorPattern:
    pattern: re.Pattern[str]
    error: type[PlatformError]
    advice: Callable[[GcloudContext], str]


# Order matters: a quota refusal also says "exhausted" and an API outage may mention anything, so
# the specific causes come first. Patterns match gcloud's own stderr, which quotes the API's status
# (RESOURCE_EXHAUSTED, NOT_FOUND, ...) or, for Compute, its error code and message.
GCLOUD_ERRORS: tuple[_GcloudErrorPattern, ...] = (
    _GcloudErrorPattern(
        re.compile(
            r"no more capacity|ZONE_RESOURCE_POOL_EXHAUSTED|resource pool exhausted|stockout"
            r"|does not have enough resources available|insufficient capacity",
            re.IGNORECASE,
        ),
        ZoneCapacityError,
        lambda c: (
            f"{c.where()} has no free capacity right now (stockout); Iris tries the scale group's other "
            "zones and this one again after defaults.autoscaler.quota_backoff; add zones to the group to widen the search"
        ),
    ),
    _GcloudErrorPattern(
        re.compile(
            r"RESOURCE_EXHAUSTED|Quota .*exceeded|quota exceeded|QUOTA_EXCEEDED|Quota limit", re.IGNORECASE
        ),
        QuotaExhaustedError,
        lambda c: (
            f"the project's quota {'in ' + c.where() if c.zone else 'for ' + c.where()} is used up; Iris tries the "
            "scale group's other zones; ask for more quota (IAM & Admin > Quotas) or lower max_slices"
        ),
    ),
    _GcloudErrorPattern(
        re.compile(
            r"PERMISSION_DENIED|does not have permission|Permission .* denied|Required '[^']+' permission"
            r"|UNAUTHENTICATED|insufficient authentication"
            r"|You do not currently have an active account|Reauthentication required|invalid_grant",
            re.IGNORECASE,
        ),
        GcpPermissionError,
        lambda c: (
            "check that gcloud is logged in (gcloud auth list) with an account that may manage TPUs and VMs "
            "in the project (roles/tpu.admin, roles/compute.instanceAdmin.v1), and that platform.gcp.project_id is right"
        ),
    ),
    _GcloudErrorPattern(
        re.compile(r"NOT_FOUND|was not found|notFound|\b404\b"),
        ResourceNotFoundError,
        lambda c: "it does not exist (any more)",
    ),
    _GcloudErrorPattern(
        re.compile(
            r"UNAVAILABLE|INTERNAL|DEADLINE_EXCEEDED|\b50[0234]\b|Backend Error|Internal error|Connection refused"
            r"|Failed to connect|Max retries exceeded|timed out|Temporary failure in name resolution",
            re.IGNORECASE,
        ),
        PlatformUnavailableError,
        lambda c: (
            "the Google Cloud API did not answer properly; Iris retries on its own, check the service status if it persists"
        ),
    ),
)


_COMMAND_PREFIX = re.compile(r"^ERROR:\s*(\(gcloud[^)]*\)\s*)?")
# What follows gcloud's ERROR line when the API's message is on the next lines (an operation's
# error as JSON, or Compute's "Could not fetch resource:" list).
_DETAIL_MESSAGE = re.compile(
    r'^\s*(?:"message":\s*"(?P<json>.*)",?|message:\s*(?P<yaml>.*)|-\s+(?P<item>.*))$'
)
_PARTIAL_FAILURE = "Some requests did not succeed"
_TOKEN_NOTE = " This command is authenticated with an access token from the CLOUDSDK_AUTH_ACCESS_TOKEN environment variable"


def error_line(stderr: str) -> str:
    """One line saying what went wrong, from gcloud's stderr: its ERROR line, or the API message
    that follows it when the ERROR line only introduces one."""
    lines = [line.rstrip() for line in stderr.splitlines() if line.strip()]
    for index, line in enumerate(lines):
        if not line.startswith("ERROR:"):
            continue
        text = _COMMAND_PREFIX.sub("", line).strip()
        details = lines[index + 1 :]
        if text.endswith(":") and text != "Could not fetch resource:" and details:
            # "Could not add SSH key to ...:" and the cause on the next line.
            return f"{text} {details[0].strip().removeprefix('- ')}".replace(_TOKEN_NOTE, "")
        if text and text not in ("{", "Could not fetch resource:"):
            return text.replace(_TOKEN_NOTE, "")
        for position, detail in enumerate(details):
            match = _DETAIL_MESSAGE.match(detail)
            if match:
                found = match.group("json") or match.group("yaml") or match.group("item") or ""
                # A YAML message may wrap onto the next indented line.
                following = details[position + 1] if position + 1 < len(details) else ""
                if match.group("yaml") and following.startswith("  ") and ":" not in following:
                    found += " " + following.strip()
                return found.replace('\\"', '"').strip()
        return text or "(no message)"
    return lines[-1].strip() if lines else "(no output)"


def classify_gcloud_error(stderr: str, context: GcloudContext) -> PlatformError:
    """The typed error a failed gcloud command's stderr stands for, with a one-line message that
    says what failed, where, and what to do."""
    first = error_line(stderr)
    for known in GCLOUD_ERRORS:
        if known.pattern.search(stderr):
            message = f"{context.what} failed: {first}; {known.advice(context)}"
            if issubclass(known.error, QuotaExhaustedError):
                return known.error(message, zone=context.zone)
            return known.error(message)
    return PlatformError(f"{context.what} failed: {first}")


# ---------------------------------------------------------------- running gcloud


class GcloudCall:
    """One running gcloud process; its output is collected as it comes."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        context: GcloudContext,
        timeout: Duration,
        on_line: Callable[[str], None] | None = None,
    ):
        self.argv = argv
        self.context = context
        self.timeout = timeout
        self._stdout: list[str] = []
        self._stderr: list[str] = []
        self._lock = threading.Lock()
        self._timed_out = threading.Event()
        self._process = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        self._readers = [
            threading.Thread(
                target=self._read, args=(self._process.stdout, self._stdout, on_line), daemon=True
            ),
            threading.Thread(target=self._read, args=(self._process.stderr, self._stderr, None), daemon=True),
        ]
        for reader in self._readers:
            reader.start()
        self._killer = threading.Timer(timeout.seconds, self._expire)
        self._killer.daemon = True
        self._killer.start()

    def _read(self, stream, sink: list[str], on_line: Callable[[str], None] | None) -> None:
        for line in stream:
            with self._lock:
                sink.append(line)
            if on_line is not None:
                on_line(line.rstrip("\n"))

    def _expire(self) -> None:
        self._timed_out.set()
        self.kill()

    def kill(self) -> None:
        if self._process.poll() is None:
            try:
                os.killpg(self._process.pid, 9)
            except ProcessLookupError:
                pass

    @property
    def pid(self) -> int:
        return self._process.pid

    def stderr_so_far(self) -> str:
        with self._lock:
            return "".join(self._stderr)

    def wait_for_stderr(self, pattern: re.Pattern[str], timeout: Duration) -> bool:
        """Wait until stderr shows `pattern` (True) or the process ends first (False)."""

        def seen_or_done() -> bool:
            return bool(pattern.search(self.stderr_so_far())) or self._process.poll() is not None

        wait_until(seen_or_done, timeout.seconds, 0.05, f"`{self.describe()}` to report progress")
        return bool(pattern.search(self.stderr_so_far()))

    def running(self) -> bool:
        return self._process.poll() is None

    def describe(self) -> str:
        return shlex.join(self.argv[:8]) + (" ..." if len(self.argv) > 8 else "")

    def finish(self) -> CommandResult:
        """Wait for the process (up to its timeout) and return its exit code and output, whatever they are."""
        returncode = self._process.wait()
        self._killer.cancel()
        for reader in self._readers:
            reader.join(timeout=5)
        with self._lock:
            result = CommandResult(returncode, "".join(self._stdout), "".join(self._stderr))
        if self._timed_out.is_set():
            raise PlatformUnavailableError(
                f"{self.context.what} failed: gcloud did not finish within {self.timeout} "
                f"({self.describe()}); the Google Cloud API may be slow or unreachable"
            )
        return result

    def result(self) -> CommandResult:
        """As `finish`, raising the classified error when gcloud exited non-zero."""
        result = self.finish()
        # A list over several zones exits 0 when some of them refused; that is a failure too.
        if result.returncode != 0 or _PARTIAL_FAILURE in result.stderr:
            error = classify_gcloud_error(result.stderr, self.context)
            logger.info("gcloud failed (%s): %s", self.describe(), error)
            raise error
        return result


@dataclass(frozen=True)
class Gcloud:
    """How to run gcloud for one project: the environment it runs in and its global flags."""

    project: str
    # Variables set on top of this process's environment (a test's fake endpoints and token).
    env: Mapping[str, str] | None = None

    def argv(self, args: list[str]) -> list[str]:
        flags = [f"--project={self.project}"] if self.project else []
        flags.append("--quiet")
        # What follows "--" goes to ssh, so gcloud's own flags go before it.
        split = args.index("--") if "--" in args else len(args)
        return [GCLOUD, *args[:split], *flags, *args[split:]]

    def environ(self) -> dict[str, str]:
        return {**os.environ, **(self.env or {}), "CLOUDSDK_CORE_DISABLE_PROMPTS": "1"}

    def start(
        self,
        args: list[str],
        context: GcloudContext,
        timeout: Duration,
        on_line: Callable[[str], None] | None = None,
    ) -> GcloudCall:
        argv = self.argv(args)
        logger.info("running %s", shlex.join(_abbreviated(arg) for arg in argv))
        try:
            return GcloudCall(argv, self.environ(), context, timeout, on_line)
        except FileNotFoundError:
            raise PlatformError(
                f"{context.what} failed: the gcloud CLI is not installed on this machine; install the Google "
                "Cloud SDK (https://cloud.google.com/sdk/docs/install)"
            ) from None

    def run(self, args: list[str], context: GcloudContext, timeout: Duration) -> CommandResult:
        return self.start(args, context, timeout).result()


def _abbreviated(arg: str, limit: int = 120) -> str:
    """An argument as the log shows it: a bootstrap script passed as --command is cut short."""
    first = arg.splitlines()[0] if arg else arg
    return first if len(first) <= limit and first == arg else first[:limit] + " ..."


# ---------------------------------------------------------------- argv builders (pure)


def format_labels(labels: Mapping[str, str]) -> str:
    """`k=v,k2=v2` for --labels / --update-labels; refuses what GCP would refuse, saying why."""
    for key, value in labels.items():
        if not _LABEL_KEY.fullmatch(key) or not _LABEL_TEXT.fullmatch(value):
            raise PlatformError(
                f"label {key}={value} is not a valid GCP label: keys and values use lowercase letters, digits, "
                "'-' and '_' (keys start with a letter), at most 63 characters; change platform.label_prefix "
                "or the scale group's name"
            )
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def label_filter(labels: Mapping[str, str]) -> str:
    """A --filter that keeps resources carrying every one of `labels`, exactly."""
    return " AND ".join(f"labels.{k}={v}" for k, v in sorted(labels.items()))


def tpu_create_args(
    name: str,
    zone: str,
    accelerator_type: str,
    runtime_version: str,
    labels: Mapping[str, str],
    preemptible: bool = False,
    spot: bool = False,
) -> list[str]:
    args = [
        "compute", "tpus", "tpu-vm", "create", name, f"--zone={zone}", f"--accelerator-type={accelerator_type}",
        f"--version={runtime_version}", f"--labels={format_labels(labels)}",
    ]  # fmt: skip
    if spot:
        args.append("--spot")
    elif preemptible:
        args.append("--preemptible")
    return [*args, "--format=json"]


def tpu_describe_args(name: str, zone: str) -> list[str]:
    return ["compute", "tpus", "tpu-vm", "describe", name, f"--zone={zone}", "--format=json"]


def tpu_list_args(zone: str, labels: Mapping[str, str]) -> list[str]:
    args = ["compute", "tpus", "tpu-vm", "list", f"--zone={zone}", "--format=json"]
    return [*args, f"--filter={label_filter(labels)}"] if labels else args


def tpu_delete_args(name: str, zone: str) -> list[str]:
    return ["compute", "tpus", "tpu-vm", "delete", name, f"--zone={zone}"]


def ssh_flags(connect_timeout: Duration) -> list[str]:
    """Options for the ssh gcloud runs: no prompt can block a thread, no host key pinned for good
    (nodes come and go under the same names and addresses)."""
    seconds = max(1, round(connect_timeout.seconds))
    return [
        "--strict-host-key-checking=no",
        f"--ssh-flag=-o ConnectTimeout={seconds}",
        "--ssh-flag=-o ServerAliveInterval=5",
        "--ssh-flag=-o ServerAliveCountMax=3",
        "--ssh-flag=-o UserKnownHostsFile=/dev/null",
        "--ssh-flag=-o LogLevel=ERROR",
    ]


def tpu_ssh_args(name: str, zone: str, worker: int, command: str, connect_timeout: Duration) -> list[str]:
    return [
        "compute", "tpus", "tpu-vm", "ssh", name, f"--zone={zone}", f"--worker={worker}", "--internal-ip",
        *ssh_flags(connect_timeout), f"--command={command}",
    ]  # fmt: skip


def tpu_scp_args(name: str, zone: str, worker: int, local_path: str, remote_path: str) -> list[str]:
    return [
        "compute", "tpus", "tpu-vm", "scp", local_path, f"{name}:{remote_path}", f"--zone={zone}",
        f"--worker={worker}", "--internal-ip", "--strict-host-key-checking=no",
    ]  # fmt: skip


def instance_create_args(
    name: str,
    zone: str,
    machine_type: str,
    boot_disk_size_gb: int,
    labels: Mapping[str, str],
    metadata: Mapping[str, str],
) -> list[str]:
    args = [
        "compute", "instances", "create", name, f"--zone={zone}", f"--machine-type={machine_type}",
        f"--boot-disk-size={boot_disk_size_gb}GB",
        # Container-Optimized OS: Docker is there to run the controller image.
        "--image-family=cos-stable", "--image-project=cos-cloud",
        "--scopes=cloud-platform",
        f"--labels={format_labels(labels)}",
    ]  # fmt: skip
    if metadata:
        args.append("--metadata=" + ",".join(f"{k}={v}" for k, v in sorted(metadata.items())))
    return [*args, "--format=json"]


def instance_list_args(zones: list[str], labels: Mapping[str, str]) -> list[str]:
    args = ["compute", "instances", "list", "--format=json"]
    if zones:
        args.append(f"--zones={','.join(zones)}")
    return [*args, f"--filter={label_filter(labels)}"] if labels else args


def instance_describe_args(name: str, zone: str) -> list[str]:
    return ["compute", "instances", "describe", name, f"--zone={zone}", "--format=json"]


def instance_delete_args(name: str, zone: str) -> list[str]:
    return ["compute", "instances", "delete", name, f"--zone={zone}"]


def instance_add_labels_args(name: str, zone: str, labels: Mapping[str, str]) -> list[str]:
    return ["compute", "instances", "add-labels", name, f"--zone={zone}", f"--labels={format_labels(labels)}"]


def instance_add_metadata_args(name: str, zone: str, metadata: Mapping[str, str]) -> list[str]:
    items = ",".join(f"{k}={v}" for k, v in sorted(metadata.items()))
    return ["compute", "instances", "add-metadata", name, f"--zone={zone}", f"--metadata={items}"]


def instance_ssh_args(name: str, zone: str, command: str, connect_timeout: Duration) -> list[str]:
    return ["compute", "ssh", name, f"--zone={zone}", *ssh_flags(connect_timeout), f"--command={command}"]


def instance_scp_args(name: str, zone: str, local_path: str, remote_path: str) -> list[str]:
    return [
        "compute",
        "scp",
        local_path,
        f"{name}:{remote_path}",
        f"--zone={zone}",
        "--strict-host-key-checking=no",
    ]


def instance_forward_args(
    name: str, zone: str, local_port: int, remote_port: int, connect_timeout: Duration
) -> list[str]:
    """`gcloud compute ssh VM -- -N -L ...`: a local port forwarded to the VM's own loopback."""
    return [
        "compute", "ssh", name, f"--zone={zone}", *ssh_flags(connect_timeout),
        "--", "-N", "-o", "ExitOnForwardFailure=yes", "-L", f"127.0.0.1:{local_port}:127.0.0.1:{remote_port}",
    ]  # fmt: skip


# gcloud's own work around an ssh (key check, metadata update) on top of the command's timeout.
SSH_SLACK = Duration.from_seconds(90)
# gcloud's own failure (as opposed to the remote command's exit code, which gcloud ssh passes on).
_GCLOUD_OWN_ERROR = re.compile(r"^ERROR: \(gcloud\.", re.MULTILINE)
_SSH_KEY_NOT_ADDED = re.compile(r"Could not add SSH key to (instance|project) metadata")


# ---------------------------------------------------------------- remote execution over gcloud ssh


class _GcloudSshExec(ABC):
    """`RemoteExec` through `gcloud ... ssh` (which manages the SSH key and the host's metadata)."""

    def __init__(self, gcloud: Gcloud, name: str, zone: str, address: str, connect_timeout: Duration):
        self._gcloud = gcloud
        self._name = name
        self._zone = zone
        self._address = address
        self._connect_timeout = connect_timeout

    @property
    def address(self) -> str:
        return self._address

    @property
    def zone(self) -> str:
        return self._zone

    @abstractmethod
    def _ssh_args(self, command: str) -> list[str]:
        """The gcloud arguments that run `command` on this host."""

    @abstractmethod
    def _scp_args(self, local_path: str, remote_path: str) -> list[str]:
        """The gcloud arguments that copy a local file to this host."""

    def _context(self, what: str) -> GcloudContext:
        return GcloudContext(f"{what} on {self._name} ({self._address})", self._zone)

    def _deadline(self, timeout: Duration | None) -> Duration:
        base = timeout.seconds if timeout is not None else 24 * 3600
        return Duration.from_seconds(base + self._connect_timeout.seconds + SSH_SLACK.seconds)

    def _checked(self, command: str, timeout: Duration | None, result: CommandResult) -> CommandResult:
        error = classify_client_error(self._address, result.returncode, result.stderr)
        if error is not None:
            raise error
        if result.returncode != 0 and _GCLOUD_OWN_ERROR.search(result.stderr):
            error = classify_gcloud_error(result.stderr, self._context(f"`{short_command(command)}`"))
            if _SSH_KEY_NOT_ADDED.search(result.stderr) and not isinstance(error, GcpPermissionError):
                # Two clients adding their keys to the same metadata at once: the loser sees a stale
                # fingerprint. The host is not reachable yet, and trying again fixes it.
                raise HostUnreachableError(self._address, str(error))
            raise error
        if timeout is not None and result.returncode == TIMEOUT_EXIT:
            raise RemoteCommandTimeoutError(
                self._address,
                f"`{short_command(command)}` on {self._address} did not finish within {timeout}",
            )
        return result

    def _call(
        self, command: str, timeout: Duration | None, on_line: Callable[[str], None] | None
    ) -> CommandResult:
        call = self._gcloud.start(
            self._ssh_args(bounded_command(command, timeout)),
            self._context(f"`{short_command(command)}`"),
            self._deadline(timeout),
            on_line,
        )
        try:
            result = call.finish()
        except PlatformUnavailableError:
            raise HostUnreachableError(
                self._address,
                f"ssh to {self._name} ({self._address}) did not finish within {self._deadline(timeout)}",
            ) from None
        return self._checked(command, timeout, result)

    def run(self, command: str, timeout: Duration = DEFAULT_COMMAND_TIMEOUT) -> CommandResult:
        return self._call(command, timeout, None)

    def run_streaming(
        self, command: str, on_line: Callable[[str], None], timeout: Duration | None = None
    ) -> CommandResult:
        return self._call(command, timeout, on_line)

    def copy_file(
        self, local_path: Path, remote_path: str, timeout: Duration = DEFAULT_COMMAND_TIMEOUT
    ) -> None:
        context = self._context(f"copying {local_path} to {remote_path}")
        result = self._gcloud.start(
            self._scp_args(str(local_path), remote_path), context, self._deadline(timeout)
        ).finish()
        error = classify_client_error(self._address, result.returncode, result.stderr)
        if error is not None:
            raise error
        if result.returncode != 0:
            raise RemoteCommandFailedError(self._address, f"copying {local_path} to {remote_path}", result)


class GcloudRemoteExec(_GcloudSshExec):
    """One worker host of a TPU node, through `gcloud compute tpus tpu-vm ssh --worker=N`."""

    def __init__(
        self, gcloud: Gcloud, node: str, zone: str, worker: int, address: str, connect_timeout: Duration
    ):
        super().__init__(gcloud, node, zone, address, connect_timeout)
        self._worker = worker

    def _ssh_args(self, command: str) -> list[str]:
        return tpu_ssh_args(self._name, self._zone, self._worker, command, self._connect_timeout)

    def _scp_args(self, local_path: str, remote_path: str) -> list[str]:
        return tpu_scp_args(self._name, self._zone, self._worker, local_path, remote_path)


class GceRemoteExec(_GcloudSshExec):
    """A GCE VM, through `gcloud compute ssh`."""

    def _ssh_args(self, command: str) -> list[str]:
        return instance_ssh_args(self._name, self._zone, command, self._connect_timeout)

    def _scp_args(self, local_path: str, remote_path: str) -> list[str]:
        return instance_scp_args(self._name, self._zone, local_path, remote_path)

    @contextmanager
    def forward(self, remote_port: int, local_port: int | None = None) -> Iterator[int]:
        """A local port forwarded to the VM's own `127.0.0.1:remote_port` while the block runs."""
        port = local_port or free_local_port()
        args = instance_forward_args(self._name, self._zone, port, remote_port, self._connect_timeout)
        call = self._gcloud.start(args, self._context("the tunnel"), Duration.from_seconds(7 * 24 * 3600))
        try:
            try:
                wait_until(
                    lambda: not call.running() or accepts_local(port),
                    self._connect_timeout.seconds + SSH_SLACK.seconds,
                    0.05,
                    f"the tunnel to {self._name}",
                )
            except TimeoutError:
                raise HostUnreachableError(
                    self._address, f"the SSH tunnel to {self._name} ({self._address}) did not open in time"
                ) from None
            if not call.running():
                result = call.finish()
                raise classify_client_error(
                    self._address, result.returncode, result.stderr
                ) or classify_gcloud_error(result.stderr, self._context("opening the tunnel"))
            yield port
        finally:
            call.kill()

