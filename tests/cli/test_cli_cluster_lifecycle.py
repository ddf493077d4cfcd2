"""`iris cluster --config F start|stop|status` on a local cluster of its own per test.

Starting a cluster, `start` on a running one and `restart` are covered on the shared cluster in
test_cli_background_cluster.py.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap

import pytest
from cli_support import LocalClusterConfig, is_alive, pid_alive, process_tree

from iris.time import wait_until


def cluster_cmd(config: LocalClusterConfig, *args: str):
    return config.runner("cluster", "--config", str(config.path), *args)


def test_cluster_stop_running_cluster_stops_processes_then_status_and_job_list_exit_1(
    local_config: LocalClusterConfig,
) -> None:
    local_config.start()
    tree = process_tree(local_config.pid())
    assert len(tree) >= 2, "expected the cluster process and at least one worker"

    stopped = cluster_cmd(local_config, "stop")

    assert stopped.returncode == 0, str(stopped)
    assert stopped.stdout.strip() == "cluster 'cli-test' stopped", str(stopped)
    wait_until(lambda: not any(is_alive(p) for p in tree), 20, 0.05, "the cluster's processes to exit")
    assert not local_config.url_file.exists()
    assert not local_config.pid_file.exists()

    status = cluster_cmd(local_config, "status")
    assert status.returncode == 1, str(status)
    assert "cluster 'cli-test' is not running" in status.stdout, str(status)
    assert "Traceback" not in status.stderr

    listed = local_config.runner("job", "list", "--config", str(local_config.path))
    assert listed.returncode == 1, str(listed)
    assert "'cli-test' is not running" in listed.stderr, str(listed)
    assert f"iris cluster --config {local_config.path} start" in listed.stderr, "should say how to start it"
    assert "Traceback" not in listed.stderr


def test_cluster_status_never_started_says_not_running_exit_1(local_config: LocalClusterConfig) -> None:
    result = cluster_cmd(local_config, "status")

    assert result.returncode == 1, str(result)
    assert result.stdout.startswith("cluster 'cli-test' is not running"), str(result)
    assert "start" in result.stdout


def test_cluster_stop_never_started_says_was_not_running(local_config: LocalClusterConfig) -> None:
    result = cluster_cmd(local_config, "stop")

    assert result.returncode == 0, str(result)
    assert result.stdout.strip() == "cluster 'cli-test' was not running", str(result)


def test_cluster_start_busy_port_reports_startup_failure(local_config: LocalClusterConfig) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        local_config.path.write_text(local_config.path.read_text().replace("port: 0", f"port: {port}"))

        result = cluster_cmd(local_config, "start")

    assert result.returncode == 1, str(result)
    assert "exited during start-up" in result.stderr, str(result)
    assert "Address already in use" in result.stderr, str(result)
    assert "Traceback" not in result.stderr
    pid = local_config.pid()
    assert pid is None or not pid_alive(pid)


def test_cluster_start_config_without_platform_names_the_key(local_config: LocalClusterConfig) -> None:
    local_config.path.write_text(
        textwrap.dedent(
            f"""\
            name: cli-test
            controller:
              local:
                port: 0
                state_dir: {local_config.state_dir}
            """
        )
    )

    result = cluster_cmd(local_config, "start")

    assert result.returncode == 1, str(result)
    assert result.stderr.startswith(f"error: {local_config.path}: platform:"), str(result)
    assert "Traceback" not in result.stderr


# A stand-in for a container init that does not reap orphans (e.g. `docker run` without --init):
# it adopts orphaned descendants as a child subreaper and never reaps them while `stop` runs.
NON_REAPING_INIT = """\
import ctypes, json, os, re, subprocess, sys, time

PR_SET_CHILD_SUBREAPER = 36
assert ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
config, stop_timeout = sys.argv[1], float(sys.argv[2])
cluster = [sys.executable, "-m", "iris.cli.main", "cluster", "--config", config]
report = {}
start = subprocess.run([*cluster, "start"], capture_output=True, text=True, timeout=120)
report["start"] = [start.returncode, start.stdout, start.stderr]
cluster_pid = int(re.search(r"[(]pid ([0-9]+)[)]", start.stdout).group(1))
began = time.monotonic()
try:
    stop = subprocess.run([*cluster, "stop"], capture_output=True, text=True, timeout=stop_timeout)
    report["stop"] = [stop.returncode, stop.stdout, stop.stderr]
except subprocess.TimeoutExpired:
    report["stop"] = None
    try:  # "Z": the cluster process exited and only waits to be reaped
        report["cluster_process_state"] = open(f"/proc/{cluster_pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        report["cluster_process_state"] = "gone"
    # Stop it for good, so the reaping below ends and the test reports instead of hanging.
    subprocess.run([*cluster, "stop"], capture_output=True, timeout=120)
report["stop_seconds"] = round(time.monotonic() - began, 2)
while True:  # now reap whatever was adopted
    try:
        if os.waitpid(-1, os.WNOHANG)[0] == 0:
            time.sleep(0.05)
    except ChildProcessError:
        break
print(json.dumps(report))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs PR_SET_CHILD_SUBREAPER")
def test_cluster_stop_when_init_does_not_reap_returns_promptly(local_config: LocalClusterConfig) -> None:
    """`cluster stop` must notice that the cluster exited even while its pid is an unreaped zombie."""
    # Below the 15 s a stop blind to zombies waits for the controller alone (local.STOP_TIMEOUT_S),
    # with room for a loaded machine.
    stop_timeout = 12.0
    helper = subprocess.run(
        [sys.executable, "-c", NON_REAPING_INIT, str(local_config.path), str(stop_timeout)],
        check=False,
        cwd=local_config.runner.cwd,
        env=local_config.runner.env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert helper.returncode == 0, helper.stderr
    report = json.loads(helper.stdout)

    assert report["start"][0] == 0, report
    assert report["stop"] is not None, (
        f"`iris cluster stop` was still waiting after {stop_timeout}s; the cluster process state was "
        f"{report.get('cluster_process_state')!r} ('Z' = it had exited and only awaited reaping): {report}"
    )
    assert report["stop"][0] == 0 and "stopped" in report["stop"][1], report
