"""DirectSshRemoteExec and RemoteExecWorkerBase against real sshd hosts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from netns import HostNetwork, SshHost

from iris.cluster.platform.remote_exec import (
    AuthenticationRefusedError,
    DirectSshRemoteExec,
    HostUnreachableError,
    RemoteCommandFailedError,
    RemoteCommandTimeoutError,
    RemoteExec,
    RemoteExecWorkerBase,
)
from iris.time import Duration, wait_until


def ssh_to(host: SshHost, key: Path, connect_timeout_s: float = 5) -> DirectSshRemoteExec:
    return DirectSshRemoteExec(
        host.address, "root", str(key), host.port, Duration.from_seconds(connect_timeout_s), zone="test"
    )


def test_direct_ssh_run_returns_exit_code_and_both_streams(hosts: list[SshHost], ssh_key: Path) -> None:
    remote = ssh_to(hosts[1], ssh_key)
    assert isinstance(remote, RemoteExec)

    result = remote.run("ip -4 -o addr show dev eth0; echo to-stderr >&2; exit 3")

    assert result.returncode == 3
    assert f"inet {hosts[1].address}/24" in result.stdout
    assert result.stderr.strip() == "to-stderr"


def test_direct_ssh_run_on_loopback_host_uses_its_port(loopback_host: SshHost, ssh_key: Path) -> None:
    result = ssh_to(loopback_host, ssh_key).run("echo $SSH_CONNECTION")

    assert result.returncode == 0
    assert result.stdout.split()[-1] == str(loopback_host.port)


def test_direct_ssh_remote_exit_255_is_the_commands_result(hosts: list[SshHost], ssh_key: Path) -> None:
    result = ssh_to(hosts[0], ssh_key).run("echo bye; exit 255")

    assert (result.returncode, result.stdout) == (255, "bye\n")


def test_direct_ssh_run_past_timeout_raises_and_ends_the_remote_command(
    hosts: list[SshHost], ssh_key: Path
) -> None:
    host = hosts[0]
    started = time.monotonic()
    with pytest.raises(RemoteCommandTimeoutError, match="did not finish within 1s"):
        ssh_to(host, ssh_key).run("sleep 4242", timeout=Duration.from_seconds(1))

    assert time.monotonic() - started < 8
    wait_until(
        lambda: not any("4242" in " ".join(p.cmdline()) for p in host.processes()),
        10,
        0.1,
        "the timed out command to end on the host",
    )


def test_direct_ssh_run_streaming_delivers_each_line_before_the_command_ends(
    hosts: list[SshHost], ssh_key: Path, tmp_path: Path
) -> None:
    # The command only prints its second line after the test has seen the first one.
    seen_first = tmp_path / "seen-first"
    lines: list[str] = []

    def on_line(line: str) -> None:
        lines.append(line)
        if line == "first":
            seen_first.touch()

    result = ssh_to(hosts[2], ssh_key).run_streaming(
        f"echo first; while [ ! -e {seen_first} ]; do sleep 0.05; done; echo second",
        on_line,
        timeout=Duration.from_seconds(20),
    )

    assert result.returncode == 0
    assert lines == ["first", "second"]
    assert result.stdout == "first\nsecond"


def test_direct_ssh_run_streaming_past_timeout_raises(hosts: list[SshHost], ssh_key: Path) -> None:
    lines: list[str] = []
    with pytest.raises(RemoteCommandTimeoutError):
        ssh_to(hosts[2], ssh_key).run_streaming(
            "echo started; sleep 4243", lines.append, Duration.from_seconds(1)
        )

    assert lines == ["started"]


def test_direct_ssh_copy_file_lands_on_that_host_only(
    hosts: list[SshHost], ssh_key: Path, tmp_path: Path
) -> None:
    source = tmp_path / "payload.txt"
    source.write_text("copied over scp\n")

    ssh_to(hosts[1], ssh_key).copy_file(source, "/var/lib/iris/payload.txt")

    assert ssh_to(hosts[1], ssh_key).run("cat /var/lib/iris/payload.txt").stdout == "copied over scp\n"
    assert ssh_to(hosts[0], ssh_key).run("test -e /var/lib/iris/payload.txt").returncode == 1


def test_direct_ssh_copy_file_to_missing_directory_fails_with_the_reason(
    hosts: list[SshHost], ssh_key: Path, tmp_path: Path
) -> None:
    source = tmp_path / "payload.txt"
    source.write_text("x")

    with pytest.raises(RemoteCommandFailedError, match="exited 1") as caught:
        ssh_to(hosts[1], ssh_key).copy_file(source, "/no/such/dir/payload.txt")

    assert "No such file or directory" in str(caught.value)


def test_direct_ssh_wrong_key_raises_authentication_refused(
    hosts: list[SshHost], host_network: HostNetwork
) -> None:
    assert host_network.wrong_key is not None
    with pytest.raises(AuthenticationRefusedError, match="refused the SSH key") as caught:
        ssh_to(hosts[0], host_network.wrong_key).run("true")

    assert "Permission denied" in str(caught.value)
    assert caught.value.address == hosts[0].address


def test_direct_ssh_unreachable_host_raises_within_the_connect_timeout(
    host_network: HostNetwork, ssh_key: Path
) -> None:
    remote = DirectSshRemoteExec(
        host_network.unreachable_address, "root", str(ssh_key), 22, Duration.from_seconds(2)
    )
    started = time.monotonic()

    with pytest.raises(HostUnreachableError, match="check that the host is up"):
        remote.run("true")

    assert time.monotonic() - started < 2 + 3


def test_direct_ssh_host_with_cable_cut_is_unreachable(hosts: list[SshHost], ssh_key: Path) -> None:
    hosts[2].set_link(False)

    with pytest.raises(HostUnreachableError):
        ssh_to(hosts[2], ssh_key, connect_timeout_s=1).run("true")


def test_worker_base_bootstrap_failure_reports_exit_code_and_last_lines(
    hosts: list[SshHost], ssh_key: Path
) -> None:
    worker = RemoteExecWorkerBase("w-0", ssh_to(hosts[0], ssh_key))
    streamed: list[str] = []
    script = "set -e\nfor i in $(seq 1 30); do echo step $i; done\necho 'disk full' >&2\nexit 7\n"

    with pytest.raises(RemoteCommandFailedError) as caught:
        worker.bootstrap(script, streamed.append)

    message = str(caught.value)
    assert message.startswith(f"the bootstrap script on {hosts[0].address} exited 7")
    assert "step 30" in message and "disk full" in message and "step 5\n" not in message
    assert streamed[:2] == ["step 1", "step 2"]


def test_worker_base_bootstrap_success_returns_the_output(hosts: list[SshHost], ssh_key: Path) -> None:
    worker = RemoteExecWorkerBase("w-0", ssh_to(hosts[0], ssh_key))

    result = worker.bootstrap('echo "it\'s $((6 * 7))"')

    assert result.stdout == "it's 42"
    assert worker.internal_address == hosts[0].address
    assert worker.run_command("echo hi").stdout == "hi\n"


def test_worker_base_wait_for_connection_gives_up_after_timeout_on_unreachable_host(
    host_network: HostNetwork, ssh_key: Path
) -> None:
    remote = DirectSshRemoteExec(
        host_network.unreachable_address, "root", str(ssh_key), 22, Duration.from_seconds(1)
    )
    worker = RemoteExecWorkerBase("w-0", remote)
    started = time.monotonic()

    assert worker.wait_for_connection(Duration.from_seconds(3), Duration.from_seconds(0.5)) is False
    assert 3 <= time.monotonic() - started < 3 + 5


def test_worker_base_wait_for_connection_returns_once_the_host_is_back(
    hosts: list[SshHost], ssh_key: Path
) -> None:
    worker = RemoteExecWorkerBase("w-0", ssh_to(hosts[1], ssh_key, connect_timeout_s=1))
    hosts[1].set_link(False)
    assert worker.wait_for_connection(Duration.from_seconds(1), Duration.from_seconds(0.2)) is False
    hosts[1].set_link(True)

    assert worker.wait_for_connection(Duration.from_seconds(20), Duration.from_seconds(0.2)) is True


def test_worker_base_wait_for_connection_with_wrong_key_fails_at_once(
    hosts: list[SshHost], host_network: HostNetwork
) -> None:
    assert host_network.wrong_key is not None
    worker = RemoteExecWorkerBase("w-0", ssh_to(hosts[0], host_network.wrong_key))
    started = time.monotonic()

    with pytest.raises(AuthenticationRefusedError):
        worker.wait_for_connection(Duration.from_seconds(30))

    assert time.monotonic() - started < 10
