"""What a new user trips on (issue 10), each reproduced as the user saw it.

Most tests share one background local cluster with a scale group and a configured controller
port (a free one, never the default 10000 other clusters on the machine may hold).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import (
    IRIS,
    IrisResult,
    IrisRunner,
    LocalClusterConfig,
    closed_port,
    kill_all,
    pid_alive,
    process_tree,
    send_ctrl_c,
    wait_for_file_text,
)

from iris.client import InvalidRequestError, IrisClient, JobState, LogEntry
from iris.cluster.types import TERMINAL_JOB_STATES, Entrypoint, EnvironmentSpec, ResourceSpec
from iris.rpc import cluster_pb2 as pb
from iris.time import wait_until

LONG_NAME = "a-job-name-long-enough-that-an-eighty-column-table-would-have-to-fold-it-" + "x" * 20


def write_config(directory: Path, name: str, port: int) -> Path:
    path = directory / "cluster.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            name: {name}
            platform:
              local: {{}}
            controller:
              local:
                port: {port}
                state_dir: {directory / "state"}
            defaults:
              timeouts:
                heartbeat_interval: 1s
                kill_grace_period: 2s
              autoscaler:
                evaluation_interval: 1s
                scale_up_delay: 1s
                scale_down_delay: 10m
            scale_groups:
              local-cpu:
                min_slices: 1
                max_slices: 1
                resources:
                  cpu: 4
                  ram: 8GB
                slice_template:
                  accelerator_type: cpu
                  num_vms: 1
                  local: {{}}
            """
        )
    )
    return path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, iris_home: Path) -> Iterator[LocalClusterConfig]:
    directory = tmp_path_factory.mktemp("new-user-cluster")
    (directory / "work").mkdir()
    path = write_config(directory, "new-user", closed_port())
    config = LocalClusterConfig("new-user", path, directory / "state", IrisRunner(iris_home, directory / "work"))
    try:
        config.start()
        yield config
    finally:
        config.stop()


def iris_on(cluster: LocalClusterConfig, *args: str, **kwargs) -> IrisResult:
    """iris ARGS --config F, with --config placed before any `--` that starts a job command."""
    split = args.index("--") if "--" in args else len(args)
    return cluster.runner(*args[:split], "--config", str(cluster.path), *args[split:], **kwargs)


def configured_port(cluster: LocalClusterConfig) -> int:
    return int(next(line for line in cluster.path.read_text().splitlines() if "port:" in line).split(":")[1])


# ---------------------------------------------------------------- 1. environment variables


def test_run_env_key_equals_value_reaches_job(cluster: LocalClusterConfig) -> None:
    result = iris_on(cluster, "run", "-e", "FOO=bar=baz", "--", "python", "-c", "import os; print(os.environ['FOO'])")

    assert result.returncode == 0, str(result)
    assert result.stdout.splitlines() == ["bar=baz"], str(result)


def test_client_env_name_with_equals_or_nul_rejected_at_submit(cluster: LocalClusterConfig) -> None:
    with IrisClient.remote(cluster.url()) as client:
        request = pb.LaunchJobRequest(
            name="bad-env",
            entrypoint=Entrypoint.from_command("true").proto,
            environment=pb.EnvironmentConfig(env_vars={"A=B": "1"}),
        )
        with pytest.raises(InvalidRequestError, match="contains '='"):
            client.call("launch_job", request)
        request.environment.Clear()
        request.entrypoint.command.argv.append("nul\0byte")
        with pytest.raises(InvalidRequestError, match="NUL"):
            client.call("launch_job", request)
        assert "/bad-env" not in [job.job_id for job in client.list_jobs()]
        with pytest.raises(ValueError, match="'A=B' contains '='"):
            client.submit(Entrypoint.from_command("true"), environment=EnvironmentSpec(env_vars={"A=B": "1"}))
        with pytest.raises(ValueError, match="NUL"):
            client.submit(Entrypoint.from_command("echo", "a\0b"))


# ---------------------------------------------------------------- 2. job names used again


def test_run_same_name_twice_replaces_finished_job(cluster: LocalClusterConfig) -> None:
    first = iris_on(cluster, "run", "--name", "again", "--", "python", "-c", "print('first')")
    second = iris_on(cluster, "run", "--name", "again", "--", "python", "-c", "print('second')")

    assert first.returncode == 0, str(first)
    assert second.returncode == 0, str(second)
    assert second.stdout.splitlines() == ["second"], str(second)
    logs = iris_on(cluster, "job", "logs", "/again")
    assert logs.stdout.splitlines() == ["second"], str(logs)


def test_client_submit_running_name_policies(cluster: LocalClusterConfig, tmp_path: Path) -> None:
    with IrisClient.remote(cluster.url(), workspace=tmp_path) as client:
        running = client.submit(Entrypoint.from_command("sleep", "600"), name="busy")
        with pytest.raises(InvalidRequestError, match="still"):
            client.submit(Entrypoint.from_command("true"), name="busy")
        kept = client.submit(Entrypoint.from_command("true"), name="busy", existing_job_policy="keep")
        assert kept.job_id == running.job_id
        assert kept.status().state not in TERMINAL_JOB_STATES
        replaced = client.submit(
            Entrypoint.from_command("python", "-c", "print('replacement')"), name="busy", existing_job_policy="recreate"
        )
        assert replaced.wait(timeout=60).state == JobState.SUCCEEDED
        assert [line.data for line in replaced.logs()] == ["replacement"]
        with pytest.raises(InvalidRequestError, match="already exists"):
            client.submit(Entrypoint.from_command("true"), name="busy", existing_job_policy="error")


def test_job_delete_refuses_running_job_and_frees_name(cluster: LocalClusterConfig) -> None:
    submitted = iris_on(cluster, "run", "--no-wait", "--name", "to-delete", "--", "sleep", "600")
    assert submitted.returncode == 0, str(submitted)

    refused = iris_on(cluster, "job", "delete", "/to-delete")
    killed = iris_on(cluster, "job", "delete", "--kill", "/to-delete")
    listing = iris_on(cluster, "job", "list", "--json")

    assert refused.returncode == 1 and "kill it before deleting it" in refused.stderr, str(refused)
    assert killed.returncode == 0 and "deleted /to-delete" in killed.stdout, str(killed)
    assert "/to-delete" not in [job["jobId"] for job in json.loads(listing.stdout)]


# ---------------------------------------------------------------- 3. a stable controller address


def test_cluster_configured_port_is_the_url_across_restart(cluster: LocalClusterConfig) -> None:
    expected = f"http://127.0.0.1:{configured_port(cluster)}"
    assert cluster.url() == expected

    restarted = iris_on(cluster, "cluster", "restart")

    assert restarted.returncode == 0, str(restarted)
    assert cluster.url() == expected
    listed = cluster.runner("job", "list", "--controller-url", expected)
    assert listed.returncode == 0, str(listed)


def test_run_following_job_rides_out_controller_restart(cluster: LocalClusterConfig, tmp_path: Path) -> None:
    started, release = tmp_path / "started", tmp_path / "release"
    script = (
        "import os, time\n"
        f"open({str(started)!r}, 'w').close()\n"
        f"while not os.path.exists({str(release)!r}): time.sleep(0.05)\n"
        "print('finished after the restart')"
    )
    args = ("run", "--config", str(cluster.path), "--", "python", "-c", script)
    process = cluster.runner.popen(*args)
    try:
        wait_until(started.exists, 60, 0.05, "the job to start")
        restarted = iris_on(cluster, "cluster", "restart")
        assert restarted.returncode == 0, str(restarted)
        release.touch()
        result = cluster.runner.finish(process, args, timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    assert result.returncode == 0, str(result)
    assert result.stdout.splitlines() == ["finished after the restart"], str(result)
    assert "retrying" in result.stderr and "reconnected" in result.stderr, str(result)


def test_cluster_start_port_taken_says_which_setting_to_change(tmp_path: Path, iris_home: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        path = write_config(tmp_path, "port-taken", port)
        config = LocalClusterConfig("port-taken", path, tmp_path / "state", IrisRunner(iris_home, tmp_path))
        try:
            result = config.runner("cluster", "--config", str(path), "start")
        finally:
            config.stop()

    assert result.returncode == 1, str(result)
    assert f"127.0.0.1:{port}" in result.stderr and "controller.local.port" in result.stderr, str(result)


# ---------------------------------------------------------------- 4. what a waiting job waits for


def test_run_waiting_job_prints_status_lines_when_piped(cluster: LocalClusterConfig) -> None:
    """A job that could run but finds the only worker full waits, saying why, until its timeout."""
    with IrisClient.remote(cluster.url()) as client:
        blocker = client.submit(
            Entrypoint.from_command("sleep", "60"), name="fills-the-worker", resources=ResourceSpec(cpu=4)
        )
        try:
            wait_until(lambda: blocker.status().state == pb.JOB_STATE_RUNNING, 30, 0.1, "the blocker to run")
            result = iris_on(cluster, "run", "--cpu", "4", "--scheduling-timeout", "4s", "--", "true")
        finally:
            blocker.terminate()

    assert result.returncode == 1, str(result)
    waiting = [line for line in result.stderr.splitlines() if " pending (" in line]
    assert waiting and waiting[0].startswith("iris: /"), str(result)
    assert "busy" in waiting[0], f"the pending reason should say the worker that fits is busy:\n{result}"
    assert "\r" not in result.stderr and "\x1b[" not in result.stderr, "piped output is plain lines"
    assert len(waiting) < 4, f"a line per change, not per second:\n{result}"
    assert "unschedulable" in result.stderr


def test_run_constraint_no_worker_or_group_satisfies_rejected_at_once(cluster: LocalClusterConfig) -> None:
    result = iris_on(cluster, "run", "--constraint", "pool=nowhere", "--", "true", timeout=30)

    assert result.returncode == 1, str(result)
    assert "no scale group or worker of this cluster can ever run it" in result.stderr, str(result)
    assert "pool=nowhere" in result.stderr, str(result)


def test_run_job_no_worker_or_group_can_hold_rejected_at_once(cluster: LocalClusterConfig) -> None:
    result = iris_on(cluster, "run", "--cpu", "1000", "--", "true", timeout=30)

    assert result.returncode == 1, str(result)
    assert "no scale group or worker of this cluster can ever run it" in result.stderr, str(result)
    assert "local-cpu" in result.stderr and "cpu" in result.stderr


# ---------------------------------------------------------------- 5. output in pipes


def test_job_list_piped_keeps_each_row_on_one_line(cluster: LocalClusterConfig) -> None:
    ran = iris_on(cluster, "run", "--name", LONG_NAME, "--", "true")
    assert ran.returncode == 0, str(ran)

    result = iris_on(cluster, "job", "list", env={"COLUMNS": "80"})

    rows = [line for line in result.stdout.splitlines() if f"/{LONG_NAME}" in line]
    assert len(rows) == 1 and "succeeded" in rows[0], str(result)


def test_job_logs_into_closed_pipe_exits_quietly(cluster: LocalClusterConfig) -> None:
    ran = iris_on(cluster, "run", "--name", "chatty", "--", "python", "-c", "for i in range(20000): print(i)")
    assert ran.returncode == 0, str(ran)

    process = subprocess.Popen(
        [*IRIS, "job", "logs", "/chatty", "--config", str(cluster.path)],
        cwd=cluster.runner.cwd,
        env=cluster.runner.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline() == "0\n"
    process.stdout.close()  # what `| head -1` does
    stderr = process.stderr.read()
    process.wait(60)

    assert stderr == "", stderr
    assert process.returncode == 128 + signal.SIGPIPE


def test_cluster_status_json_lists_workers_and_jobs(cluster: LocalClusterConfig) -> None:
    result = iris_on(cluster, "cluster", "status", "--json")

    assert result.returncode == 0, str(result)
    status = json.loads(result.stdout)
    assert status["controllerUrl"] == cluster.url()
    assert [w["state"] for w in status["workers"]] == ["WORKER_STATE_HEALTHY"]
    assert status["autoscaler"]["enabled"] is True


# ---------------------------------------------------------------- 8. run-local on a running cluster


def test_controller_run_local_on_running_cluster_refuses_and_keeps_url(cluster: LocalClusterConfig) -> None:
    url = cluster.url()

    result = iris_on(cluster, "cluster", "controller", "run-local", timeout=60)

    assert result.returncode == 1, str(result)
    assert "already running" in result.stderr and "stop" in result.stderr, str(result)
    assert cluster.url() == url
    assert iris_on(cluster, "cluster", "status").returncode == 0


# ---------------------------------------------------------------- 9. options and hints


def test_config_option_before_or_after_subcommand_and_traceback_anywhere(cluster: LocalClusterConfig) -> None:
    for name in ("listed-1", "listed-2"):
        assert iris_on(cluster, "run", "--name", name, "--", "true").returncode == 0
    after = cluster.runner("cluster", "status", "--config", str(cluster.path))
    before = cluster.runner("--config", str(cluster.path), "job", "list", "--limit", "1")
    traceback = cluster.runner("job", "status", "/no-such-job", "--config", str(cluster.path), "--traceback")

    assert after.returncode == 0 and "workers (1)" in after.stdout, str(after)
    assert before.returncode == 0 and before.stdout.split()[0] == "JOB", str(before)
    assert len(before.stdout.strip().splitlines()) == 2, f"--limit 1 shows one job:\n{before}"
    assert traceback.returncode == 1 and "Traceback (most recent call last)" in traceback.stderr, str(traceback)


def test_run_ctrl_c_hint_is_a_runnable_kill_command(cluster: LocalClusterConfig, tmp_path: Path) -> None:
    started = tmp_path / "started"
    args = ("run", "--config", str(cluster.path), "--", "sh", "-c", f"touch {started}; exec sleep 600")
    process = cluster.runner.popen(*args)
    wait_until(started.exists, 60, 0.05, "the job to start")
    send_ctrl_c(process)
    result = cluster.runner.finish(process, args, timeout=60)

    assert result.returncode == 130, str(result)
    hint = result.stderr.split("to stop it: ", 1)[1].split(")")[0]
    assert hint.startswith(f"iris job kill --config {cluster.path} /"), str(result)
    killed = cluster.runner(*hint.split()[1:])
    assert killed.returncode == 0 and killed.stdout.startswith("killed /"), str(killed)


# ---------------------------------------------------------------- 10. logs, wait and the Python API


RETRIED_SCRIPT = """
import os, sys
first = not os.path.exists("{flag}")
open("{flag}", "w").close()
for step in range(3 if first else 2):
    print(f"step {{step}}")
sys.exit(1 if first else 0)
"""


def test_job_logs_marks_attempts_and_follow_exits_with_job_status(cluster: LocalClusterConfig, tmp_path: Path) -> None:
    script = RETRIED_SCRIPT.format(flag=tmp_path / "flag")
    ran = iris_on(cluster, "run", "--name", "retried", "--max-retries", "1", "--", "python", "-c", script)
    assert ran.returncode == 0, str(ran)
    failed = iris_on(cluster, "run", "--name", "fails", "--", "python", "-c", "print('x'); raise SystemExit(3)")
    assert failed.returncode == 3, str(failed)

    logs = iris_on(cluster, "job", "logs", "/retried")
    tail = iris_on(cluster, "job", "logs", "/retried", "--tail", "1", "--timestamps")
    recent = iris_on(cluster, "job", "logs", "/retried", "--since", "1h")
    none_recent = iris_on(cluster, "job", "logs", "/retried", "--since", "1ms")
    follow_failed = iris_on(cluster, "job", "logs", "-f", "/fails")
    waited = iris_on(cluster, "job", "wait", "/fails")

    assert logs.stdout.splitlines() == ["step 0", "step 1", "step 2", "step 0", "step 1"], str(logs)
    assert "----- /retried/0: attempt 1 -----" in logs.stderr, str(logs)
    assert ran.stderr.count("----- /retried/0: attempt 1 -----") == 1, str(ran)
    (line,) = tail.stdout.splitlines()
    assert line.endswith("Z step 1") and line[:4].isdigit(), str(tail)
    assert recent.stdout == logs.stdout and none_recent.stdout == "", str(none_recent)
    assert follow_failed.returncode == 3 and follow_failed.stdout == "x\n", str(follow_failed)
    assert waited.returncode == 3 and "/fails failed" in waited.stdout, str(waited)


def test_job_status_history_shows_times(cluster: LocalClusterConfig) -> None:
    ran = iris_on(cluster, "run", "--name", "timed", "--", "true")
    assert ran.returncode == 0, str(ran)

    result = iris_on(cluster, "job", "status", "/timed")

    history = result.stdout.split("history", 1)[1].strip().splitlines()
    assert history and all(line.split()[0].count(":") == 2 for line in history), str(result)


def test_python_api_names_states_and_types_log_entries(cluster: LocalClusterConfig, tmp_path: Path) -> None:
    with IrisClient.remote(cluster.url(), workspace=tmp_path) as client:
        job = client.submit(Entrypoint.from_command("python", "-c", "print('typed')"), name="typed")
        entries = list(job.follow_logs())
        assert job.state() == JobState.SUCCEEDED and str(job.state()) == "succeeded"
        assert [job.job_id for job in client.list_jobs(states=["succeeded"], prefix="/typed")] == ["/typed"]

    (entry,) = entries
    assert isinstance(entry, LogEntry)
    assert (entry.data, entry.source, entry.task_index, entry.attempt_id) == ("typed", "stdout", 0, 0)
    assert entry.timestamp.year >= 2024


# ---------------------------------------------------------------- 6. cluster stop with running jobs (own cluster)


def test_cluster_stop_with_running_job_lists_it_and_needs_yes(local_config: LocalClusterConfig) -> None:
    local_config.start()
    submitted = local_config.runner("run", "--no-wait", "--name", "long", "--config", str(local_config.path), "--", "sleep", "600")
    assert submitted.returncode == 0, str(submitted)

    refused = local_config.runner("cluster", "stop", "--config", str(local_config.path))
    stopped = local_config.runner("cluster", "stop", "--config", str(local_config.path), "--yes")

    assert refused.returncode == 1, str(refused)
    assert "/long" in refused.stderr and "--yes" in refused.stderr, str(refused)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, str(stopped)


# ---------------------------------------------------------------- 11. signals end `iris run --local` cleanly


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["sigterm", "sighup"])
def test_run_local_signal_stops_job_and_workers(iris: IrisRunner, tmp_path: Path, sig: signal.Signals) -> None:
    pid_file = tmp_path / "job.pid"
    args = ("run", "--local", "--", "sh", "-c", f"echo $$ > {pid_file}; exec sleep 600")
    process = iris.popen(*args)
    try:
        job_pid = int(wait_for_file_text(pid_file, timeout=60))
        tree = process_tree(process.pid)
        os.kill(process.pid, sig)  # only the iris process, as `timeout` or a CI runner does
        result = iris.finish(process, args, timeout=60)

        assert result.returncode == 128 + sig, str(result)
        assert "Traceback" not in result.stderr, str(result)
        wait_until(lambda: not pid_alive(job_pid), 20, 0.05, "the job process to exit")
        assert not kill_all(tree), "a worker outlived `iris run --local`"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_follow_logs_of_short_job_returns_when_job_ends_not_a_poll_later(
    cluster: LocalClusterConfig, tmp_path: Path
) -> None:
    with IrisClient.remote(cluster.url(), workspace=tmp_path) as client:
        job = client.submit(Entrypoint.from_command("python", "-c", "print('late')"), name="late-line")
        began = time.monotonic()
        # The first read finds no line yet; a poll interval this long would show as a delay.
        entries = list(job.follow_logs(poll_interval=25.0))
        elapsed = time.monotonic() - began

    assert [entry.data for entry in entries] == ["late"]
    assert elapsed < 20.0, f"follow_logs took {elapsed:.1f}s after the job's end"
