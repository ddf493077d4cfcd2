"""ContainerRuntime contract tests (through the `runtime` fixture) plus ProcessRuntime specifics."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psutil
import pytest

from iris.cluster.runtime.process import ProcessRuntime
from iris.cluster.runtime.types import (
    BuildFailedError,
    ContainerConfig,
    ContainerError,
    ContainerHandle,
    ContainerPhase,
    ContainerRuntime,
    ContainerStats,
    managed_labels,
)

T = TypeVar("T")
CreateContainer = Callable[..., ContainerHandle]

MIB = 1024 * 1024


def py(code: str) -> list[str]:
    return ["python3", "-c", textwrap.dedent(code)]


def poll_until(check: Callable[[], T | None], what: str, timeout: float = 20.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def lines(handle: ContainerHandle, source: str) -> list[str]:
    return [line.data for line in handle.logs() if line.source == source]


def wait_for_line(handle: ContainerHandle, text: str) -> None:
    poll_until(lambda: any(line.data == text for line in handle.logs()), f"log line {text!r}")


def is_alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def read_pid(path: Path) -> psutil.Process:
    pid = poll_until(lambda: path.read_text() if path.exists() else None, f"pid file {path.name}")
    return psutil.Process(int(pid))


def write_pid_code(name: str, pid_expr: str = "os.getpid()") -> str:
    """Code that atomically writes a pid file into the cwd, so readers never see it half-written."""
    return f"pathlib.Path('{name}.tmp').write_text(str({pid_expr})); os.replace('{name}.tmp', '{name}')"


SLEEPER_READY = """
import time
print("ready", flush=True)
time.sleep(600)
"""


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
    create_container: CreateContainer, workdir: Path
) -> None:
    handle = create_container(
        py(
            """
            import pathlib, time
            print("first", flush=True)
            while not pathlib.Path("go").exists():
                time.sleep(0.02)
            print("second", flush=True)
            """
        )
    )
    handle.run()
    wait_for_line(handle, "first")
    seen = handle.logs()
    assert handle.logs(start_line=len(seen)) == []

    (workdir / "go").touch()
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


# -- ProcessRuntime specifics --------------------------------------------------------------------


def _config(workdir: Path, command: list[str]) -> ContainerConfig:
    return ContainerConfig(
        command=command,
        workdir=workdir,
        task_id="leftover-task",
        attempt_id=0,
        labels=managed_labels("leftover-task", "leftover-job", 0),
    )


def test_process_cleanup_kills_process_and_removes_state(
    create_container: CreateContainer, workdir: Path, tmp_path: Path
) -> None:
    handle = create_container(
        py(f"import os, pathlib, time\n{write_pid_code('container.pid')}\ntime.sleep(600)")
    )
    handle.run()
    container = read_pid(workdir / "container.pid")
    containers_dir = tmp_path / "state" / "containers"
    assert (containers_dir / handle.container_id / "meta.json").exists()

    handle.cleanup()

    poll_until(lambda: not is_alive(container), "container process to die")
    assert list(containers_dir.iterdir()) == []


def test_process_logs_are_appended_to_state_files(create_container: CreateContainer, tmp_path: Path) -> None:
    handle = create_container(py("import sys; print('out-line'); sys.stderr.write('err-partial')"))
    handle.run()
    handle.wait(timeout=30)

    record_dir = tmp_path / "state" / "containers" / handle.container_id
    assert (record_dir / "stdout.log").read_text() == "out-line\n"
    assert (record_dir / "stderr.log").read_text() == "err-partial\n"


def test_process_remove_leftovers_fresh_runtime_kills_previous_process_and_returns_1(
    tmp_path: Path, workdir: Path
) -> None:
    state_dir = tmp_path / "state"
    previous = ProcessRuntime(state_dir)
    handle = previous.create_container(
        _config(workdir, py(f"import os, pathlib, time\n{write_pid_code('container.pid')}\ntime.sleep(600)"))
    )
    try:
        handle.run()
        container = read_pid(workdir / "container.pid")

        assert ProcessRuntime(state_dir).remove_leftovers() == 1

        poll_until(lambda: not is_alive(container), "leftover process to die")
        assert handle.wait(timeout=10).exit_code == 128 + signal.SIGKILL
        assert list((state_dir / "containers").iterdir()) == []
        assert ProcessRuntime(state_dir).remove_leftovers() == 0
    finally:
        handle.cleanup()


WORKER_SCRIPT = """
import pathlib, sys, time
from iris.cluster.runtime.process import ProcessRuntime
from iris.cluster.runtime.types import ContainerConfig, managed_labels

state_dir, workdir, code = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
runtime = ProcessRuntime(state_dir)
handle = runtime.create_container(
    ContainerConfig(
        command=["python3", "-c", code],
        workdir=workdir,
        task_id="orphan-task",
        attempt_id=0,
        labels=managed_labels("orphan-task", "orphan-job", 0),
    )
)
handle.run()
time.sleep(600)
"""


def _kill_if_alive(proc: psutil.Process) -> None:
    if is_alive(proc):
        proc.kill()


@contextlib.contextmanager
def _worker_process(tmp_path: Path, workdir: Path, container_code: str):
    """A separate worker process running one container; yields the worker's Popen."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER_SCRIPT)
    with open(tmp_path / "worker.log", "w") as log:
        worker = subprocess.Popen(
            [sys.executable, str(script), str(tmp_path / "state"), str(workdir), container_code],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield worker
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.wait()


def test_process_worker_sigkilled_container_process_dies(tmp_path: Path, workdir: Path) -> None:
    code = f"import os, pathlib, time\n{write_pid_code('container.pid')}\ntime.sleep(600)"
    with _worker_process(tmp_path, workdir, code) as worker:
        container = read_pid(workdir / "container.pid")
        try:
            assert container.ppid() == worker.pid
            assert is_alive(container)

            worker.send_signal(signal.SIGKILL)
            worker.wait()

            poll_until(lambda: not is_alive(container), "container to die with its worker", timeout=10)
        finally:
            _kill_if_alive(container)


def test_process_remove_leftovers_after_worker_sigkill_kills_orphaned_group(
    tmp_path: Path, workdir: Path
) -> None:
    code = textwrap.dedent(
        f"""
        import os, pathlib, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        {write_pid_code("grandchild.pid", "child.pid")}
        {write_pid_code("container.pid")}
        time.sleep(600)
        """
    )
    with _worker_process(tmp_path, workdir, code) as worker:
        container = read_pid(workdir / "container.pid")
        grandchild = read_pid(workdir / "grandchild.pid")
        try:
            worker.send_signal(signal.SIGKILL)
            worker.wait()
            poll_until(lambda: not is_alive(container), "container to die with its worker", timeout=10)
            # PDEATHSIG reaches only the direct child; its own children are what leftovers are for.
            assert is_alive(grandchild)

            assert ProcessRuntime(tmp_path / "state").remove_leftovers() == 1

            poll_until(lambda: not is_alive(grandchild), "orphaned grandchild to be killed", timeout=10)
            assert list((tmp_path / "state" / "containers").iterdir()) == []
        finally:
            _kill_if_alive(container)
            _kill_if_alive(grandchild)


def test_process_remove_leftovers_recycled_pid_is_not_killed(tmp_path: Path, workdir: Path) -> None:
    bystander = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
    )
    try:
        record_dir = tmp_path / "state" / "containers" / "iris-recycled-0-deadbeef"
        record_dir.mkdir(parents=True)
        created = psutil.Process(bystander.pid).create_time()
        (record_dir / "meta.json").write_text(
            '{"container_id": "iris-recycled-0-deadbeef", "labels": {"iris.managed": "true"}, '
            f'"pid": {bystander.pid}, "create_time": {created - 100.0}}}'
        )

        assert ProcessRuntime(tmp_path / "state").remove_leftovers() == 1

        assert bystander.poll() is None
        assert not record_dir.exists()
    finally:
        bystander.kill()
        bystander.wait()


def test_process_env_puts_worker_python_first_on_path(create_container: CreateContainer) -> None:
    handle = create_container(py("import sys; print(sys.executable)"))
    handle.run()
    handle.wait(timeout=30)

    [executable] = lines(handle, "stdout")
    assert os.path.dirname(executable) == os.path.dirname(sys.executable)
