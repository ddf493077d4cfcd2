"""`iris run --local -- CMD`: a throwaway cluster runs one command job and goes away."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
from cli_support import IrisRunner, pid_alive, send_ctrl_c, wait_for_file_text

from iris.cluster.local_cluster_process import CLUSTER_PROCESS_NAME
from iris.cluster.local_worker import WORKER_PROCESS_NAME
from iris.time import wait_until


def test_run_local_print_prints_line_and_exits_0(iris: IrisRunner, iris_home: Path) -> None:
    result = iris("run", "--local", "--", "python", "-c", "print('hello from iris')")

    assert result.returncode == 0, str(result)
    assert result.stdout.splitlines() == ["hello from iris"], str(result)
    # Progress goes to stderr, so stdout stays the job's own output.
    assert "iris: starting a local cluster" in result.stderr, str(result)
    assert "iris: submitted /" in result.stderr, str(result)
    assert "Traceback" not in result.stderr
    assert not (iris_home / ".iris").exists(), "a throwaway cluster must not write to ~/.iris"


def test_run_local_worker_is_a_fork_of_the_command_not_a_new_interpreter(iris: IrisRunner) -> None:
    """A new interpreter would import the worker's modules afresh before it could register: most
    of a second on the way to the job's first line."""
    script = "import os; p = os.getppid(); print(open(f'/proc/{p}/comm').read().strip(), os.getsid(p) == p)"
    result = iris("run", "--local", "--", "python", "-c", script)

    assert result.returncode == 0, str(result)
    # Named for process lists, and the leader of its own session as a spawned worker is.
    assert result.stdout.splitlines() == [f"{WORKER_PROCESS_NAME} True"], str(result)


def test_run_local_exit_3_exits_3_and_prints_reason(iris: IrisRunner) -> None:
    result = iris("run", "--local", "--", "python", "-c", "import sys; sys.exit(3)")

    assert result.returncode == 3, str(result)
    failure_lines = [line for line in result.stderr.splitlines() if " failed" in line]
    assert failure_lines, str(result)
    assert "exited with code 3" in failure_lines[-1], str(result)
    assert "Traceback" not in result.stderr


def test_run_local_job_stderr_goes_to_stderr(iris: IrisRunner) -> None:
    script = "import sys; print('to-out'); print('to-err', file=sys.stderr)"
    result = iris("run", "--local", "--", "python", "-c", script)

    assert result.returncode == 0, str(result)
    assert "to-out" in result.stdout.splitlines()
    assert "to-err" not in result.stdout
    assert "to-err" in result.stderr.splitlines()


def test_run_local_env_option_reaches_job_environment(iris: IrisRunner) -> None:
    result = iris(
        "run",
        "--local",
        "-e",
        "IRIS_CLI_TEST_VAR=value with spaces",
        "-e",
        "SECOND=2",
        "--",
        "python",
        "-c",
        "import os; print(os.environ['IRIS_CLI_TEST_VAR'], os.environ['SECOND'])",
    )

    assert result.returncode == 0, str(result)
    assert result.stdout.splitlines() == ["value with spaces 2"], str(result)


def test_run_local_no_wait_rejected_with_clear_message(iris: IrisRunner) -> None:
    result = iris("run", "--no-wait", "--local", "--", "true")

    assert result.returncode == 2, str(result)
    assert "--no-wait" in result.stderr and "--local" in result.stderr
    assert "starting a local cluster" not in result.stderr
    assert "Traceback" not in result.stderr


def test_run_local_with_config_rejected_with_clear_message(iris: IrisRunner) -> None:
    result = iris("run", "--local", "--controller-url", "http://127.0.0.1:1", "--", "true")

    assert result.returncode == 2, str(result)
    assert "--local" in result.stderr and "--controller-url" in result.stderr
    assert "Traceback" not in result.stderr


def test_run_local_ctrl_c_kills_job_and_exits_130(iris: IrisRunner, tmp_path: Path) -> None:
    pid_file = tmp_path / "job.pid"
    args = ("run", "--local", "--", "sh", "-c", f"echo $$ > {pid_file}; exec sleep 600")
    process = iris.popen(*args)
    job_pid = None
    try:
        job_pid = int(wait_for_file_text(pid_file, timeout=60))
        send_ctrl_c(process)
        result = iris.finish(process, args, timeout=60)

        assert result.returncode == 130, str(result)
        assert "interrupted" in result.stderr, str(result)
        assert "Traceback" not in result.stderr, str(result)
        wait_until(lambda: not pid_alive(job_pid), 20, 0.05, f"job process {job_pid} to exit")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        if job_pid is not None and pid_alive(job_pid):
            os.kill(job_pid, signal.SIGKILL)


def test_run_local_killed_by_sigkill_takes_its_cluster_worker_and_job_with_it(iris: IrisRunner, tmp_path: Path) -> None:
    pid_file = tmp_path / "job.pid"
    args = ("run", "--local", "--", "sh", "-c", f"echo $$ > {pid_file}; exec sleep 600")
    process = iris.popen(*args)
    job_pid = None
    cluster: list[psutil.Process] = []
    try:
        job_pid = int(wait_for_file_text(pid_file, timeout=60))
        # The command's only child is its cluster's process, whose child is the worker; the job
        # runs under the worker.
        cluster = psutil.Process(process.pid).children(recursive=True)
        names = sorted(p.name() for p in cluster if p.pid != job_pid)
        assert names == sorted([CLUSTER_PROCESS_NAME, WORKER_PROCESS_NAME]), "no cluster and worker under `iris run --local`"

        process.send_signal(signal.SIGKILL)  # no handler runs: only the cluster's process can notice
        process.wait(30)

        wait_until(lambda: not any(p.is_running() for p in cluster), 30, 0.05, "the cluster and its worker to stop")
        wait_until(lambda: not pid_alive(job_pid), 30, 0.05, f"job process {job_pid} to exit")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for child in cluster:
            if child.is_running():
                child.kill()
        if job_pid is not None and pid_alive(job_pid):
            os.kill(job_pid, signal.SIGKILL)


def test_run_without_cluster_asks_which_cluster(iris: IrisRunner) -> None:
    result = iris("run", "--", "true")

    assert result.returncode == 2, str(result)
    assert "--controller-url" in result.stderr and "--config" in result.stderr
    assert "Traceback" not in result.stderr


def test_run_local_tpu_job_refused_at_once_naming_missing_device(iris: IrisRunner) -> None:
    """A local cluster has no scale groups and one cpu worker: a TPU job could never run there."""
    result = iris("run", "--local", "--tpu", "v5litepod-16", "--", "true", timeout=60)

    assert result.returncode == 1, str(result)
    assert "no worker of this cluster can ever run it" in result.stderr, str(result)
    assert "no worker has tpu v5litepod-16" in result.stderr, str(result)
    assert "Traceback" not in result.stderr


def test_run_local_more_cpu_than_the_worker_refused_at_once(iris: IrisRunner) -> None:
    result = iris("run", "--local", "--cpu", "1000", "--", "true", timeout=60)

    assert result.returncode == 1, str(result)
    assert "no worker is large enough" in result.stderr and "short of cpu" in result.stderr, str(result)


def test_run_local_worker_that_cannot_start_fails_with_its_reason_and_exits_1(iris: IrisRunner) -> None:
    """The cluster starts in a process of its own: its failure still reaches the user as one line."""
    process = iris.popen("run", "--local", "--", "true", env={"IRIS_CHAOS": "no-such-point=1.0"})
    result = iris.finish(process, ("run", "--local", "--", "true"), timeout=60)

    assert result.returncode == 1, str(result)
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert error_lines and "local worker local-0 exited with code 1" in error_lines[0], str(result)
    assert "unknown chaos point 'no-such-point'" in error_lines[0], str(result)
    assert "Traceback" not in result.stderr, str(result)


def test_run_local_cluster_process_ends_before_the_command_does(iris: IrisRunner) -> None:
    # The job's parent is the worker; the worker's parent is the cluster's process.
    script = (
        "import os; cluster = open(f'/proc/{os.getppid()}/stat').read().rsplit(')', 1)[1].split()[1]; "
        "print(cluster, open(f'/proc/{cluster}/comm').read().strip())"
    )
    result = iris("run", "--local", "--", "python", "-c", script)

    assert result.returncode == 0, str(result)
    cluster_pid, name = result.stdout.split()
    assert name == CLUSTER_PROCESS_NAME, str(result)
    assert not pid_alive(int(cluster_pid)), "the local cluster outlived `iris run --local`"
