"""Remote hosts for tests: network namespaces that each run a real OpenSSH server.

Every host is a network namespace with a veth pair whose other end sits on a bridge owned by the
test session, addressed 10.213.N.10, .11, ... in a /24 chosen free at start (the test host is
10.213.N.1 on the bridge), running its own `sshd -D -f CFG` on port 22 with a generated host key
and the session's authorized key. One more sshd listens on 127.0.0.1 at a free port.

Hosts share this machine's filesystem (so a host can run a worker from the checkout's virtualenv)
except two directories: each sshd runs in its own mount namespace where /var/lib/iris and
/var/cache/iris are private bind mounts, so what Iris leaves on one host (markers, caches, task
state) is invisible on the others, as on separate machines.

Names (namespaces, bridge, veths) carry this process's id, plus a letter for a second network in
the same process (the GCP fake's hosts beside these tests' own), so concurrent test sessions on one
machine do not collide. `stop()` ends every process running in a host's mount namespace (all of
them were started through that host's sshd), stops the sshds by PID and deletes what it created.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from iris.time import wait_until

SUBNET_PREFIX = "10.213"
# Directories a real host has for itself; every test host gets private ones (see module doc).
PRIVATE_HOST_DIRS = ("/var/lib/iris", "/var/cache/iris")
SSHD = "/usr/sbin/sshd"
START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 10.0
_ALLOCATION_LOCK = Path(tempfile.gettempdir()) / "iris-test-hosts.lock"


class HostsUnavailable(RuntimeError):
    """This machine cannot create test hosts (no sshd, no `ip`, not root)."""


def _run(*argv: str) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise HostsUnavailable(f"`{' '.join(argv)}` exited {result.returncode}: {result.stderr.strip()}")
    return result.stdout


def generate_key(path: Path) -> Path:
    """An ed25519 key pair without passphrase at `path` and `path`.pub."""
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "iris-test", "-f", str(path))
    return path


@dataclass
class SshHost:
    """One "machine": an sshd and the namespaces its sessions run in."""

    name: str
    address: str
    port: int
    netns: str | None
    state_dir: Path
    sshd: subprocess.Popen[bytes] | None = None
    veth: str | None = None

    def mount_namespace(self) -> str:
        assert self.sshd is not None
        return os.readlink(f"/proc/{self.sshd.pid}/ns/mnt")

    def processes(self, include_sshd: bool = False) -> list[psutil.Process]:
        """The processes of this host, without sshd and its sessions unless asked: what sessions
        started and left running."""
        if self.sshd is None or self.sshd.poll() is not None:
            return []
        namespace = self.mount_namespace()
        found = []
        for process in psutil.process_iter(["name"]):
            if process.info["name"] == "sshd" and not include_sshd:
                continue
            try:
                if os.readlink(f"/proc/{process.pid}/ns/mnt") == namespace:
                    found.append(process)
            except (FileNotFoundError, PermissionError, ProcessLookupError):
                continue
        return found

    def host_path(self, path: str) -> Path:
        """Where this host's private `path` (under one of PRIVATE_HOST_DIRS) is seen from the test."""
        for private in PRIVATE_HOST_DIRS:
            if path == private or path.startswith(private + "/"):
                return (
                    self.state_dir / private.strip("/").replace("/", "-") / path[len(private) :].lstrip("/")
                )
        return Path(path)

    @contextmanager
    def refusing(self, source: str, port: int) -> Iterator[None]:
        """While the block runs, the host refuses TCP from `source` to `port` (a firewall between
        the test host and a service), while SSH and the host's own connections still get through."""
        assert self.netns is not None, "the loopback host has no firewall of its own"
        rule = ["INPUT", "-p", "tcp", "-s", source, "--dport", str(port), "-j", "REJECT", "--reject-with", "tcp-reset"]
        _run("ip", "netns", "exec", self.netns, "iptables", "-I", *rule)
        try:
            yield
        finally:
            _run("ip", "netns", "exec", self.netns, "iptables", "-D", *rule)

    @property
    def authorized_keys(self) -> Path:
        """The file this host's sshd reads the keys it accepts from."""
        return self.state_dir / "authorized_keys"

    @property
    def host_public_key(self) -> str:
        """The public half of the key this host's sshd proves itself with (`ssh-ed25519 AAAA...`)."""
        return (self.state_dir / "ssh_host_ed25519_key.pub").read_text().strip()

    def wipe(self) -> None:
        """Back to a fresh machine: nothing running but sshd, link up, private directories empty."""
        _stop_processes(self.processes())
        if self.veth:
            self.set_link(True)
        for private in PRIVATE_HOST_DIRS:
            directory = self.host_path(private)
            for child in directory.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()

    def set_link(self, up: bool) -> None:
        """Cut (or restore) the host's network cable: its veth on the bridge."""
        assert self.veth is not None, "the loopback host has no link to cut"
        _run("ip", "link", "set", self.veth, "up" if up else "down")


@dataclass
class HostNetwork:
    root: Path
    count: int
    session: str = ""
    hosts: list[SshHost] = field(default_factory=list)
    loopback: SshHost | None = None
    key: Path | None = None
    wrong_key: Path | None = None
    subnet: str = ""
    bridge: str = ""
    namespaces: list[str] = field(default_factory=list)

    @property
    def gateway(self) -> str:
        """The test host's own address on the hosts' network: where hosts reach a test controller."""
        return f"{self.subnet}.1"

    @property
    def unreachable_address(self) -> str:
        """An address on the hosts' network where no machine answers."""
        return f"{self.subnet}.250"

    def start(self) -> None:
        for tool in ("ip", "iptables", "ssh-keygen", SSHD):
            if shutil.which(tool) is None:
                raise HostsUnavailable(f"{tool} is not installed; run scripts/ci_setup.sh")
        if os.geteuid() != 0:
            raise HostsUnavailable("creating network namespaces needs root")
        self.root.mkdir(parents=True, exist_ok=True)
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
        for private in PRIVATE_HOST_DIRS:
            Path(private).mkdir(parents=True, exist_ok=True)
        self.key = generate_key(self.root / "id_user")
        self.wrong_key = generate_key(self.root / "id_stranger")
        try:
            with open(_ALLOCATION_LOCK, "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                self._create_network()
            for index in range(self.count):
                self._start_namespace_host(index)
            self._start_loopback_host()
        except BaseException:
            self.stop()
            raise

    def _create_network(self) -> None:
        used = set(
            re.findall(
                rf"{re.escape(SUBNET_PREFIX)}\.(\d+)\.",
                _run("ip", "-4", "-o", "addr") + _run("ip", "-4", "route"),
            )
        )
        self.session = _free_session_name()
        start = os.getpid() % 250
        third = next(
            ((start + step) % 250 + 1 for step in range(250) if str((start + step) % 250 + 1) not in used),
            None,
        )
        if third is None:
            raise HostsUnavailable(f"every {SUBNET_PREFIX}.N.0/24 is in use on this machine")
        self.subnet = f"{SUBNET_PREFIX}.{third}"
        self.bridge = f"irb{self.session}"
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")

    def _write_sshd_config(self, host_dir: Path, listen: str, port: int) -> Path:
        host_key = generate_key(host_dir / "ssh_host_ed25519_key")
        authorized = host_dir / "authorized_keys"  # SshHost.authorized_keys
        assert self.key is not None
        authorized.write_text(self.key.with_suffix(".pub").read_text())
        config = host_dir / "sshd_config"
        config.write_text(
            f"ListenAddress {listen}\n"
            f"Port {port}\n"
            f"HostKey {host_key}\n"
            f"AuthorizedKeysFile {authorized}\n"
            "PidFile none\n"
            "UsePAM no\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "PubkeyAuthentication yes\n"
            "PermitRootLogin prohibit-password\n"
            # The key files live in the test's temp dir, whose parents sshd would refuse to trust.
            "StrictModes no\n"
            "MaxStartups 100:30:200\n"
            # The default post-quantum key exchange costs CPU that a shared test machine lacks.
            "KexAlgorithms curve25519-sha256\n"
            "MaxSessions 50\n"
            "Subsystem sftp internal-sftp\n"
        )
        return config

    def _sshd_argv(self, host_dir: Path, config: Path) -> list[str]:
        mounts = []
        for private in PRIVATE_HOST_DIRS:
            source = host_dir / private.strip("/").replace("/", "-")
            source.mkdir(parents=True, exist_ok=True)
            mounts.append(f"mount --bind {source} {private}")
        script = " && ".join([*mounts, f"exec {SSHD} -D -e -f {config}"])
        return ["unshare", "--mount", "--propagation", "slave", "sh", "-c", script]

    def _launch(self, host: SshHost, argv: list[str]) -> None:
        with open(host.state_dir / "sshd.log", "ab") as log:
            host.sshd = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

        def listening() -> bool:
            if host.sshd is not None and host.sshd.poll() is not None:
                log_text = (host.state_dir / "sshd.log").read_text(errors="replace")
                raise HostsUnavailable(f"sshd for {host.name} exited: {log_text[-1000:]}")
            return _answers(host)

        wait_until(listening, START_TIMEOUT_S, 0.05, f"sshd on {host.name} to listen")

    def _start_namespace_host(self, index: int) -> None:
        name = f"iris-{self.session}-h{index}"
        address = f"{self.subnet}.{10 + index}"
        veth, peer = f"irv{self.session}h{index}", f"irp{self.session}h{index}"
        _run("ip", "netns", "add", name)
        self.namespaces.append(name)
        _run("ip", "link", "add", veth, "type", "veth", "peer", "name", peer, "netns", name)
        _run("ip", "link", "set", veth, "master", self.bridge)
        _run("ip", "link", "set", veth, "up")
        _run("ip", "-n", name, "link", "set", "lo", "up")
        _run("ip", "-n", name, "link", "set", peer, "name", "eth0")
        _run("ip", "-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
        _run("ip", "-n", name, "link", "set", "eth0", "up")
        _run("ip", "-n", name, "route", "add", "default", "via", self.gateway)
        host_dir = self.root / name
        host_dir.mkdir()
        host = SshHost(name=name, address=address, port=22, netns=name, state_dir=host_dir, veth=veth)
        self.hosts.append(host)
        config = self._write_sshd_config(host_dir, "0.0.0.0", 22)
        self._launch(host, ["ip", "netns", "exec", name, *self._sshd_argv(host_dir, config)])

    def _start_loopback_host(self) -> None:
        host_dir = self.root / "loopback"
        host_dir.mkdir()
        port = _free_port()
        host = SshHost(name="loopback", address="127.0.0.1", port=port, netns=None, state_dir=host_dir)
        self.loopback = host
        config = self._write_sshd_config(host_dir, "127.0.0.1", port)
        self._launch(host, self._sshd_argv(host_dir, config))

    def all_hosts(self) -> list[SshHost]:
        return [*self.hosts, *([self.loopback] if self.loopback else [])]

    def reset(self) -> None:
        """Back to fresh machines: nothing running but sshd, links up, private directories empty."""
        for host in self.all_hosts():
            host.wipe()

    def stop(self) -> None:
        """Stop everything the hosts run, then the sshds, then delete the network. Idempotent."""
        for host in self.all_hosts():
            _stop_processes(host.processes(include_sshd=True))
            if host.sshd is not None:
                host.sshd.wait()
        for name in self.namespaces:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
        self.namespaces.clear()
        if self.bridge:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)
            self.bridge = ""


def _free_session_name() -> str:
    """This process's id, with a letter when another network of this process already has it.
    Called under the allocation lock, which keeps the check and the bridge's creation together."""
    existing = _run("ip", "-o", "link", "show")
    for suffix in ("", *"bcdefgh"):
        session = f"{os.getpid()}{suffix}"
        if f" irb{session}:" not in existing:
            return session
    raise HostsUnavailable(f"too many test host networks in process {os.getpid()}")


def _answers(host: SshHost) -> bool:
    # From the root namespace: the bridge routes to namespace hosts, so this also proves the wiring.
    try:
        with socket.create_connection((host.address, host.port), timeout=0.5) as sock:
            return sock.recv(4).startswith(b"SSH")
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop_processes(processes: list[psutil.Process]) -> None:
    for process in processes:
        try:
            process.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(processes, timeout=STOP_TIMEOUT_S)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(alive, timeout=STOP_TIMEOUT_S)
