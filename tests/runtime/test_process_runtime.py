"""ProcessRuntime specifics: its state files, PDEATHSIG, and leftovers after a worker was killed.

The contract every runtime keeps is tested in test_runtime_contract.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from runtime_support import CreateContainer, is_alive, lines, poll_until, py, read_pid, write_pid_code

from iris.cluster.runtime import process, task_launcher
from iris.cluster.runtime.process import ProcessRuntime
from iris.cluster.runtime.types import ContainerConfig, ContainerError, ContainerPhase, managed_labels


@pytest.fixture
def runtime_kind() -> str:
    return "process"


@pytest.fixture(params=["launcher", "setpriv"])
def launch_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How tasks start: through the compiled launcher, or setpriv and a shell where there is none."""
    if request.param == "launcher" and task_launcher.launcher() is None:
        if shutil.which("cc") is not None:
            pytest.fail("a C compiler is installed but no task launcher was built")
        pytest.skip("no C compiler to build the task launcher")
    if request.param == "setpriv":
        if process.SETPRIV is None:
            pytest.skip("setpriv is not installed")
        monkeypatch.setattr(task_launcher, "launcher", lambda: None)
    return request.param


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

    handle.cleanup()

    poll_until(lambda: not is_alive(container), "container process to die")
    assert ProcessRuntime(tmp_path / "state").remove_leftovers() == 0


def test_process_cleanup_after_output_on_every_stream_removes_all_files(
    create_container: CreateContainer, tmp_path: Path
) -> None:
    handle = create_container(py("import sys; print('out-line'); sys.stderr.write('err-line')"))
    handle.run()
    handle.wait(timeout=30)
    containers_dir = tmp_path / "state" / "containers"
    assert len(list(containers_dir.glob("*.log"))) == 2

    handle.cleanup()

    assert list(containers_dir.glob("*.log")) == []
    assert ProcessRuntime(tmp_path / "state").remove_leftovers() == 0


def _monitor_threads() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name == "process-monitor"}


def test_process_containers_one_after_another_share_a_monitor_thread(
    create_container: CreateContainer,
) -> None:
    idle_before = _monitor_threads()
    for _ in range(3):
        handle = create_container(py("print('ran')"))
        handle.run()
        assert handle.wait(timeout=30).exit_code == 0
        handle.cleanup()

    # The thread that watched the last one waits, idle, for the next container.
    idle_after = _monitor_threads()
    assert idle_after
    assert len(idle_after - idle_before) <= 1


def test_process_run_to_exit_forks_and_watches_on_the_calling_thread(create_container: CreateContainer) -> None:
    monitors_before = _monitor_threads()
    handle = create_container(py("import os, time; print(os.getppid(), flush=True); time.sleep(0.3)"))
    threads: set[threading.Thread] = set()

    handle.run_to_exit(
        lambda: threads.add(threading.current_thread()), 0.05, lambda: threads.add(threading.current_thread())
    )

    assert handle.status().exit_code == 0
    assert threads == {threading.current_thread()}
    assert _monitor_threads() <= monitors_before
    # The launcher execs the command, so its parent is this process: the thread that forked it.
    assert lines(handle, "stdout") == [str(os.getpid())]


def test_process_logs_are_appended_to_state_files(create_container: CreateContainer, tmp_path: Path) -> None:
    handle = create_container(py("import sys; print('out-line'); sys.stderr.write('err-partial')"))
    handle.run()
    handle.wait(timeout=30)

    containers_dir = tmp_path / "state" / "containers"
    assert (containers_dir / f"{handle.container_id}.stdout.log").read_text() == "out-line\n"
    assert (containers_dir / f"{handle.container_id}.stderr.log").read_text() == "err-partial\n"


def test_process_log_files_only_for_streams_that_printed(
    create_container: CreateContainer, tmp_path: Path
) -> None:
    handle = create_container(py("print('out-line')"))
    handle.run()
    handle.wait(timeout=30)

    containers_dir = tmp_path / "state" / "containers"
    assert (containers_dir / f"{handle.container_id}.stdout.log").read_text() == "out-line\n"
    assert not (containers_dir / f"{handle.container_id}.stderr.log").exists()
    assert [line.data for line in handle.logs()] == ["out-line"]


def test_process_remove_leftovers_fresh_runtime_kills_previous_process_and_returns_1(
    tmp_path: Path, workdir: Path
) -> None:
    state_dir = tmp_path / "state"
    previous = ProcessRuntime(state_dir)
    code = f"import os, pathlib, time\n{write_pid_code('container.pid')}\nprint('up', flush=True)\n"
    code += "time.sleep(600)"
    handle = previous.create_container(_config(workdir, py(code)))
    try:
        handle.run()
        container = read_pid(workdir / "container.pid")
        log = state_dir / "containers" / f"{handle.container_id}.stdout.log"
        poll_until(log.exists, "the container's log file")

        assert ProcessRuntime(state_dir).remove_leftovers() == 1

        poll_until(lambda: not is_alive(container), "leftover process to die")
        assert handle.wait(timeout=10).exit_code == 128 + signal.SIGKILL
        assert list((state_dir / "containers").iterdir()) == []
        assert ProcessRuntime(state_dir).remove_leftovers() == 0
    finally:
        handle.cleanup()


WORKER_SCRIPT = """
import pathlib, sys, threading, time
from iris.cluster.runtime import task_launcher
from iris.cluster.runtime.process import ProcessRuntime
from iris.cluster.runtime.types import ContainerConfig, ContainerError, ContainerPhase, managed_labels

state_dir, workdir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
code, launch_path, start = sys.argv[3], sys.argv[4], sys.argv[5]
if launch_path == "setpriv":
    task_launcher.launcher = lambda: None
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
if start == "run":
    handle.run()
else:  # as the worker's attempts do: forked by, and watched on, a thread that stays with it
    threading.Thread(target=handle.run_to_exit, args=(lambda: None, 0.05, lambda: None), daemon=True).start()
time.sleep(600)
"""


def _kill_if_alive(proc: psutil.Process) -> None:
    if is_alive(proc):
        proc.kill()


@contextlib.contextmanager
def _worker_process(
    tmp_path: Path, workdir: Path, container_code: str, launch_path: str = "default", start: str = "run"
):
    """A separate worker process running one container, started through `launch_path`
    ("setpriv" or whatever the host offers) by `start` ("run" or "run_to_exit"); yields the
    worker's Popen."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER_SCRIPT)
    with open(tmp_path / "worker.log", "w") as log:
        worker = subprocess.Popen(
            [sys.executable, str(script), str(tmp_path / "state"), str(workdir), container_code, launch_path, start],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield worker
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.wait()


@pytest.mark.parametrize("start", ["run", "run_to_exit"])
def test_process_worker_sigkilled_container_process_dies(
    tmp_path: Path, workdir: Path, launch_path: str, start: str
) -> None:
    code = f"import os, pathlib, time\n{write_pid_code('container.pid')}\ntime.sleep(600)"
    with _worker_process(tmp_path, workdir, code, launch_path, start) as worker:
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


def test_process_remove_leftovers_pid_never_recorded_still_kills_the_orphan(
    tmp_path: Path, workdir: Path
) -> None:
    code = textwrap.dedent(
        f"""
        import os, pathlib, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        {write_pid_code("grandchild.pid", "child.pid")}
        time.sleep(600)
        """
    )
    with _worker_process(tmp_path, workdir, code) as worker:
        grandchild = read_pid(workdir / "grandchild.pid")
        try:
            worker.send_signal(signal.SIGKILL)
            worker.wait()
            # What a worker killed between fork and recording the pid leaves behind.
            (journal,) = (tmp_path / "state" / "containers").glob("*.journal")
            records = [json.loads(line) for line in journal.read_text().splitlines()]
            journal.write_text("".join(json.dumps(r) + "\n" for r in records if "pid" not in r))
            assert is_alive(grandchild)

            assert ProcessRuntime(tmp_path / "state").remove_leftovers() == 1

            poll_until(lambda: not is_alive(grandchild), "the unrecorded orphan to be killed", timeout=10)
        finally:
            _kill_if_alive(grandchild)


@contextlib.contextmanager
def _sleeping_session(env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """A process in a session of its own, as a task is: what a worker may leave behind. Killed at
    the end if the test did not see it killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], env=env, start_new_session=True
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_process_remove_leftovers_record_without_meta_kills_marked_process(tmp_path: Path) -> None:
    """What a worker killed after recording a container and while writing its pid leaves
    behind: the container's first line, a torn one, and processes carrying the container's id."""
    container_id = "iris-unrecorded-0-deadbeef"
    containers_dir = tmp_path / "state" / "containers"
    containers_dir.mkdir(parents=True)
    record = containers_dir / "0123.journal"
    record.write_text(f'{{"id": "{container_id}"}}\n{{"id": "{container_id}", "pi')
    with _sleeping_session(env={**os.environ, process.CONTAINER_MARKER_ENV: container_id}) as orphan:
        assert ProcessRuntime(tmp_path / "state").remove_leftovers() == 1

        assert orphan.wait(timeout=10) == -signal.SIGKILL
        assert not record.exists()


def test_process_remove_leftovers_record_of_an_earlier_version_kills_its_group(tmp_path: Path) -> None:
    """An earlier version recorded each container in a directory of its own, the pid in meta.json."""
    with _sleeping_session() as orphan:
        record_dir = tmp_path / "state" / "containers" / "iris-earlier-0-deadbeef"
        record_dir.mkdir(parents=True)
        created = psutil.Process(orphan.pid).create_time()
        (record_dir / "meta.json").write_text(json.dumps({"pid": orphan.pid, "create_time": created}))
        (record_dir / "stdout.log").write_text("line\n")

        assert ProcessRuntime(tmp_path / "state").remove_leftovers() == 1

        assert orphan.wait(timeout=10) == -signal.SIGKILL
        assert not record_dir.exists()


def test_process_remove_leftovers_recycled_pid_is_not_killed(tmp_path: Path, workdir: Path) -> None:
    with _sleeping_session() as bystander:
        containers_dir = tmp_path / "state" / "containers"
        containers_dir.mkdir(parents=True)
        record = containers_dir / "0123.journal"
        created = psutil.Process(bystander.pid).create_time()
        recycled = {"id": "iris-recycled-0-deadbeef", "pid": bystander.pid, "create_time": created - 100.0}
        record.write_text(json.dumps(recycled) + "\n")

        assert ProcessRuntime(tmp_path / "state").remove_leftovers() == 1

        assert bystander.poll() is None
        assert not record.exists()


def test_process_tasks_one_after_another_each_read_an_empty_stdin(create_container: CreateContainer) -> None:
    for _ in range(2):
        handle = create_container(py("import sys; print(repr(sys.stdin.read()))"))
        handle.run()
        handle.wait(timeout=30)
        handle.cleanup()

        assert lines(handle, "stdout") == ["''"]


def test_process_env_puts_worker_python_first_on_path(create_container: CreateContainer) -> None:
    handle = create_container(py("import sys; print(sys.executable)"))
    handle.run()
    handle.wait(timeout=30)

    [executable] = lines(handle, "stdout")
    assert os.path.dirname(executable) == os.path.dirname(sys.executable)


def test_process_run_environment_name_with_equals_raises_instead_of_hanging(
    create_container: CreateContainer,
) -> None:
    handle = create_container(py("print('never')"), env={"FOO=bar": "1"})
    handle.build()

    with pytest.raises(ContainerError, match="environment variable"):
        handle.run()
    assert handle.status().phase == ContainerPhase.EXITED


def test_process_run_missing_executable_raises_popens_error(
    create_container: CreateContainer, launch_path: str
) -> None:
    handle = create_container(["iris-no-such-executable"])

    with pytest.raises(ContainerError) as raised:
        handle.run()

    assert isinstance(raised.value.__cause__, FileNotFoundError)
    assert handle.status().error == (
        "failed to start 'iris-no-such-executable': "
        "[Errno 2] No such file or directory: 'iris-no-such-executable'"
    )


def test_process_run_file_without_execute_permission_raises_popens_error(
    create_container: CreateContainer, workdir: Path, launch_path: str
) -> None:
    (workdir / "script.sh").write_text("#!/bin/sh\necho never\n")
    handle = create_container(["./script.sh"])

    with pytest.raises(ContainerError) as raised:
        handle.run()

    assert isinstance(raised.value.__cause__, PermissionError)


def test_process_run_command_on_path_relative_to_workdir_runs(
    create_container: CreateContainer, workdir: Path, launch_path: str
) -> None:
    # Popen searches PATH after changing into the workdir, so "bin" is the workdir's.
    (workdir / "bin").mkdir()
    script = workdir / "bin" / "greet"
    script.write_text('#!/bin/sh\necho "hello from $0"\n')
    script.chmod(0o755)
    handle = create_container(["greet"], env={"PATH": f"bin{os.pathsep}{os.defpath}"})

    handle.run()
    status = handle.wait(timeout=30)

    assert status.exit_code == 0
    assert lines(handle, "stdout") == ["hello from bin/greet"]


@pytest.mark.parametrize("parent", ["worker", "another process"])
def test_process_launch_runs_command_only_under_the_worker(
    tmp_path: Path, launch_path: str, parent: str
) -> None:
    """The check for a worker that died before the task's death signal was armed: then the
    task's parent is no longer the worker, and the command must not run."""
    marker = tmp_path / "ran"
    argv, preexec = process.launch_argv(["touch", str(marker)], str(tmp_path), os.defpath)
    assert preexec is None
    if parent == "another process":
        # A shell that forks the launcher (no exec: a command follows) becomes its parent.
        argv = ["/bin/sh", "-c", '"$@"; exit $?', "sh", *argv]

    returncode = subprocess.run(argv, cwd=tmp_path).returncode

    assert marker.exists() == (parent == "worker")
    assert (returncode == 0) == (parent == "worker")
