"""The ContainerRuntime contract, run against every runtime: process, docker, containerd and kubernetes.

Each test gets its runtime through the `runtime` / `create_container` fixtures (conftest.py), so
one test states one promise every runtime keeps; what only one runtime does is tested in its own
module.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import signal
import socket
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from runtime_support import MIB, SLEEPER_READY, CreateContainer, lines, poll_until, py, wait_for_line

from iris.cluster.runtime.types import (
    BuildFailedError,
    ContainerConfig,
    ContainerError,
    ContainerPhase,
    ContainerRuntime,
    ContainerStats,
    managed_labels,
)

# -- run, exit codes, logs -----------------------------------------------------------------------


def test_run_successful_command_reports_exit_code_zero_and_logs(create_container: CreateContainer) -> None:
    handle = create_container(py("print('hello')"))
    assert handle.status().phase == ContainerPhase.CREATED

    handle.run()
    status = handle.wait(timeout=30)

    assert status.phase == ContainerPhase.EXITED
    assert status.exit_code == 0
    assert status.error == ""
    assert not status.oom_killed and not status.timed_out
    assert status.started_at_ms is not None and status.finished_at_ms is not None
    assert status.started_at_ms <= status.finished_at_ms
    assert lines(handle, "stdout") == ["hello"]


def test_run_to_exit_reports_the_start_polls_while_running_and_returns_after_the_exit(
    create_container: CreateContainer,
) -> None:
    handle = create_container(py("import sys, time; print('first', flush=True); time.sleep(0.5); sys.exit(3)"))
    calls: list[str] = []

    handle.run_to_exit(lambda: calls.append("running"), 0.05, lambda: calls.append("poll"))

    status = handle.status()
    assert status.phase == ContainerPhase.EXITED
    assert (status.exit_code, status.error) == (3, "exited with code 3")
    assert calls[0] == "running" and calls.count("running") == 1
    assert calls.count("poll") >= 3  # half a second of running, polled every 50 ms
    assert lines(handle, "stdout") == ["first"]


def test_run_to_exit_missing_executable_returns_or_raises_with_the_failure(create_container: CreateContainer) -> None:
    handle = create_container(["iris-no-such-executable"])
    calls: list[str] = []

    try:
        handle.run_to_exit(lambda: calls.append("running"), 0.05, lambda: calls.append("poll"))
    except ContainerError:
        assert calls == []  # a runtime that knows before the start raises before reporting one
    status = handle.status()
    assert status.phase == ContainerPhase.EXITED and status.exit_code not in (None, 0)
    assert "iris-no-such-executable" in status.error


def test_run_failing_command_reports_exit_code_and_error(create_container: CreateContainer) -> None:
    handle = create_container(py("import sys; sys.exit(3)"))

    handle.run()
    status = handle.wait(timeout=30)

    assert status.exit_code == 3
    assert status.error == "exited with code 3"
    assert not status.oom_killed and not status.timed_out


def test_run_command_killed_by_signal_reports_128_plus_signal(create_container: CreateContainer) -> None:
    handle = create_container(py("import os, signal; os.kill(os.getpid(), signal.SIGUSR1)"))

    handle.run()
    status = handle.wait(timeout=30)

    assert status.exit_code == 128 + signal.SIGUSR1
    assert f"killed by signal {int(signal.SIGUSR1)}" in status.error
    assert "SIGUSR1" in status.error


def test_run_missing_executable_reports_failure(create_container: CreateContainer) -> None:
    handle = create_container(["iris-no-such-executable"])

    with contextlib.suppress(ContainerError):
        handle.run()
    status = handle.wait(timeout=30)

    assert status.phase == ContainerPhase.EXITED
    assert status.exit_code not in (None, 0)
    assert "iris-no-such-executable" in status.error


def test_logs_stdout_and_stderr_are_separated_and_timestamped(create_container: CreateContainer) -> None:
    handle = create_container(
        py(
            """
            import sys
            print("to-stdout", flush=True)
            print("to-stderr", file=sys.stderr, flush=True)
            """
        )
    )
    before_ms = time.time_ns() // 1_000_000

    handle.run()
    handle.wait(timeout=30)
    after_ms = time.time_ns() // 1_000_000

    assert lines(handle, "stdout") == ["to-stdout"]
    assert lines(handle, "stderr") == ["to-stderr"]
    assert all(before_ms <= line.timestamp_ms <= after_ms for line in handle.logs())


def test_run_config_env_is_visible_and_worker_env_is_not(
    create_container: CreateContainer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IRIS_TEST_WORKER_ONLY", "worker-secret")
    handle = create_container(
        py(
            """
            import os
            print(os.environ.get("IRIS_TEST_VALUE"))
            print(os.environ.get("IRIS_TEST_WORKER_ONLY"))
            """
        ),
        env={"IRIS_TEST_VALUE": "from-config"},
    )

    handle.run()
    handle.wait(timeout=30)

    assert lines(handle, "stdout") == ["from-config", "None"]


def test_logs_start_line_returns_only_new_lines_with_stable_indexes(
    create_container: CreateContainer,
) -> None:
    port = _free_port()
    # The go signal comes over loopback: a runtime's workdir need not be shared while the task runs.
    handle = create_container(
        py(
            f"""
            import socket
            server = socket.socket()
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("127.0.0.1", {port}))
            server.listen()
            print("first", flush=True)
            server.accept()[0].close()
            print("second", flush=True)
            """
        ),
        ports={"go": port},
    )
    handle.run()
    wait_for_line(handle, "first")
    seen = handle.logs()
    assert handle.logs(start_line=len(seen)) == []

    socket.create_connection(("127.0.0.1", port), timeout=10).close()
    handle.wait(timeout=30)

    assert [line.data for line in handle.logs(start_line=len(seen))] == ["second"]
    assert handle.logs()[: len(seen)] == seen


def test_logs_partial_last_line_without_newline_is_captured(create_container: CreateContainer) -> None:
    handle = create_container(py("import sys; sys.stdout.write('first\\nno newline at end')"))

    handle.run()
    handle.wait(timeout=30)

    assert lines(handle, "stdout") == ["first", "no newline at end"]


# -- kill, limits, stats -------------------------------------------------------------------------


def test_kill_process_trapping_sigterm_reports_its_clean_exit(create_container: CreateContainer) -> None:
    handle = create_container(
        py(
            """
            import signal, sys, time
            def on_term(signum, frame):
                print("terminating", flush=True)
                sys.exit(0)
            signal.signal(signal.SIGTERM, on_term)
            print("ready", flush=True)
            time.sleep(600)
            """
        )
    )
    handle.run()
    wait_for_line(handle, "ready")

    started = time.monotonic()
    handle.kill(grace_seconds=30)
    elapsed = time.monotonic() - started
    status = handle.wait(timeout=10)

    assert elapsed < 10, "kill() must return once the process exits, not after the whole grace"
    assert status.phase == ContainerPhase.EXITED
    assert status.exit_code == 0
    assert "terminating" in lines(handle, "stdout")


def test_kill_process_ignoring_sigterm_is_sigkilled_after_grace(create_container: CreateContainer) -> None:
    handle = create_container(
        py(
            """
            import signal, time
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            print("ready", flush=True)
            time.sleep(600)
            """
        )
    )
    handle.run()
    wait_for_line(handle, "ready")

    started = time.monotonic()
    handle.kill(grace_seconds=1.0)
    elapsed = time.monotonic() - started
    status = handle.wait(timeout=10)

    assert 1.0 <= elapsed < 1.0 + 2.0
    assert status.phase == ContainerPhase.EXITED
    assert status.exit_code == 128 + signal.SIGKILL
    assert "killed by signal 9" in status.error


def test_memory_limit_exceeded_reports_oom_killed(create_container: CreateContainer) -> None:
    handle = create_container(
        py(
            """
            import time
            chunks = []
            for _ in range(100):
                chunks.append(b"x" * 10_000_000)
                time.sleep(0.05)
            time.sleep(600)
            """
        ),
        memory_bytes=100 * MIB,
    )

    handle.run()
    status = handle.wait(timeout=60)

    assert status.phase == ContainerPhase.EXITED
    assert status.oom_killed
    assert not status.timed_out
    assert status.exit_code == 137
    assert "out of memory" in status.error
    assert "100MB limit" in status.error


def test_timeout_exceeded_reports_timed_out(create_container: CreateContainer) -> None:
    handle = create_container(py(SLEEPER_READY), timeout_seconds=1.0)

    started = time.monotonic()
    handle.run()
    status = handle.wait(timeout=30)

    assert status.phase == ContainerPhase.EXITED
    assert status.timed_out
    assert not status.oom_killed
    assert status.exit_code not in (None, 0)
    assert "timeout of 1s" in status.error
    assert time.monotonic() - started < 10


def test_stats_running_process_reports_its_memory(create_container: CreateContainer) -> None:
    handle = create_container(
        py(
            """
            import time
            data = b"x" * 60_000_000
            print("ready", flush=True)
            time.sleep(600)
            """
        )
    )
    handle.run()
    wait_for_line(handle, "ready")

    def stats_with_memory() -> ContainerStats | None:
        stats = handle.stats()
        return stats if stats.memory_bytes >= 60_000_000 else None

    stats = poll_until(stats_with_memory, "stats to show 60MB of memory")

    assert stats.process_count >= 1
    assert stats.memory_bytes < 1024 * MIB


def test_stats_busy_process_reports_cpu_percent(create_container: CreateContainer) -> None:
    handle = create_container(
        py(
            """
            print("ready", flush=True)
            while True:
                pass
            """
        )
    )
    handle.run()
    wait_for_line(handle, "ready")

    poll_until(lambda: handle.stats().cpu_percent > 10.0, "cpu_percent above 10%")


def test_stats_exited_container_reports_nothing_running(create_container: CreateContainer) -> None:
    handle = create_container(py("pass"))
    handle.run()
    handle.wait(timeout=30)

    stats = handle.stats()

    assert stats.memory_bytes == 0
    assert stats.process_count == 0


# -- build ---------------------------------------------------------------------------------------


def test_build_setup_commands_run_in_workdir_with_build_logs(create_container: CreateContainer) -> None:
    handle = create_container(
        py("print(open('artifact.txt').read().strip())"),
        setup_commands=["echo building-$IRIS_BUILD_VALUE", "echo built > artifact.txt"],
        env={"IRIS_BUILD_VALUE": "42"},
    )

    handle.build()
    assert handle.status().phase == ContainerPhase.CREATED
    assert "building-42" in lines(handle, "build")
    assert lines(handle, "stdout") == []

    handle.run()
    status = handle.wait(timeout=30)

    assert status.exit_code == 0
    assert lines(handle, "stdout") == ["built"]


def test_build_failing_setup_command_raises_build_failed_error(create_container: CreateContainer) -> None:
    failing = "echo about-to-fail; exit 7"
    handle = create_container(
        py("print('never runs')"), setup_commands=["echo ok", failing, "echo never-reached"]
    )

    with pytest.raises(BuildFailedError) as excinfo:
        handle.build()

    assert excinfo.value.command == failing
    assert excinfo.value.exit_code == 7
    assert "about-to-fail" in excinfo.value.last_lines
    assert failing in str(excinfo.value)
    assert "never-reached" not in lines(handle, "build")
    status = handle.status()
    assert status.phase == ContainerPhase.EXITED
    assert status.exit_code == 7
    assert failing in status.error
    with pytest.raises(ContainerError):
        handle.run()


def test_run_without_required_build_raises_container_error(create_container: CreateContainer) -> None:
    handle = create_container(py("pass"), setup_commands=["true"])

    with pytest.raises(ContainerError):
        handle.run()


def test_kill_during_build_stops_build_promptly(create_container: CreateContainer) -> None:
    handle = create_container(py("print('never runs')"), setup_commands=["echo build-started; sleep 600"])
    errors: list[BuildFailedError] = []

    def build() -> None:
        try:
            handle.build()
        except BuildFailedError as e:
            errors.append(e)

    builder = threading.Thread(target=build)
    builder.start()
    wait_for_line(handle, "build-started")

    started = time.monotonic()
    handle.kill(grace_seconds=10)
    builder.join(timeout=10)

    assert time.monotonic() - started < 5
    assert not builder.is_alive()
    assert len(errors) == 1
    status = handle.status()
    assert status.phase == ContainerPhase.EXITED
    assert "killed" in status.error


def _write_wheel(path: Path, module: str, version: str, source: str) -> None:
    """A minimal pure-Python wheel, so installing it needs neither a network nor a build backend."""
    dist_info = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": source,
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {module}\nVersion: {version}\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: iris-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    with zipfile.ZipFile(path, "w") as wheel:
        for name, content in files.items():
            data = content.encode()
            wheel.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{name},sha256={digest},{len(data)}")
        record.append(f"{dist_info}/RECORD,,")
        wheel.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")


def test_build_pip_packages_local_wheel_is_importable_by_command(
    create_container: CreateContainer, workdir: Path
) -> None:
    wheel = "iris_tiny_pkg-0.1-py3-none-any.whl"
    _write_wheel(workdir / wheel, "iris_tiny_pkg", "0.1", "GREETING = 'hello from iris_tiny_pkg'\n")
    handle = create_container(
        py("import iris_tiny_pkg; print(iris_tiny_pkg.GREETING)"),
        pip_packages=[f"./{wheel}"],
        # Proves the install never needs an index.
        env={"PIP_NO_INDEX": "1", "UV_OFFLINE": "1"},
    )

    handle.build()
    handle.run()
    status = handle.wait(timeout=60)

    assert status.exit_code == 0, handle.logs()
    assert lines(handle, "stdout") == ["hello from iris_tiny_pkg"]
    assert lines(handle, "build"), "pip output is recorded as build logs"


# -- cleanup and leftovers -----------------------------------------------------------------------


def test_cleanup_running_container_stops_it_and_keeps_workdir(
    create_container: CreateContainer, workdir: Path
) -> None:
    (workdir / "bundle.txt").write_text("bundle")
    handle = create_container(py(SLEEPER_READY))
    handle.run()
    wait_for_line(handle, "ready")

    handle.cleanup()

    assert handle.status().phase == ContainerPhase.EXITED
    assert (workdir / "bundle.txt").read_text() == "bundle"


def test_remove_leftovers_keeps_containers_of_the_same_runtime(
    runtime: ContainerRuntime, create_container: CreateContainer
) -> None:
    handle = create_container(py(SLEEPER_READY))
    handle.run()
    wait_for_line(handle, "ready")

    assert runtime.remove_leftovers() == 0
    assert handle.status().phase == ContainerPhase.RUNNING


def test_remove_leftovers_fresh_runtime_removes_previous_runtimes_containers(
    make_runtime: Callable[[], ContainerRuntime], container_image: str, workdir: Path
) -> None:
    previous = make_runtime()
    handle = previous.create_container(
        ContainerConfig(
            command=py(SLEEPER_READY),
            workdir=workdir,
            task_id="/leftover-user/leftover-job/0",
            attempt_id=0,
            labels=managed_labels("/leftover-user/leftover-job/0", "/leftover-user/leftover-job", 0),
            image=container_image,
        )
    )
    try:
        handle.run()
        wait_for_line(handle, "ready")

        assert make_runtime().remove_leftovers() >= 1

        assert handle.wait(timeout=20).phase == ContainerPhase.EXITED
        assert make_runtime().remove_leftovers() == 0
    finally:
        handle.cleanup()


# -- what the worker relies on -------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_ports_allocated_by_the_worker_are_reachable_from_the_host(create_container: CreateContainer) -> None:
    port = _free_port()
    handle = create_container(
        py(
            """
            import os, socket
            server = socket.socket()
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("127.0.0.1", int(os.environ["IRIS_PORT_HTTP"])))
            server.listen()
            print("listening", flush=True)
            connection, _ = server.accept()
            connection.sendall(b"hello from the task")
            connection.close()
            """
        ),
        ports={"http": port},
        env={"IRIS_PORT_HTTP": str(port)},
    )
    handle.run()
    wait_for_line(handle, "listening")

    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        reply = connection.recv(100)

    assert reply == b"hello from the task"
    assert handle.wait(timeout=30).exit_code == 0


def test_run_files_written_in_workdir_are_visible_to_the_worker(
    create_container: CreateContainer, workdir: Path
) -> None:
    (workdir / "input.txt").write_text("from the bundle")
    handle = create_container(
        py(
            f"""
            import pathlib
            text = pathlib.Path("input.txt").read_text()
            pathlib.Path({str(workdir / "result.txt")!r}).write_text(text.upper())
            pathlib.Path("out", "relative.txt").parent.mkdir()
            pathlib.Path("out", "relative.txt").write_text("written in the working directory")
            """
        )
    )

    handle.run()
    assert handle.wait(timeout=30).exit_code == 0

    # Paths under the workdir the worker computed, and paths relative to the working directory.
    assert (workdir / "result.txt").read_text() == "FROM THE BUNDLE"
    assert (workdir / "out" / "relative.txt").read_text() == "written in the working directory"
    assert (workdir / "input.txt").read_text() == "from the bundle"
