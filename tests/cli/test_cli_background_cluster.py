"""Jobs on a background local cluster (`iris cluster start`), shared by every test in this module."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
from cli_support import IrisResult, LocalClusterConfig, pid_alive, wait_for_file_text

from iris.time import wait_until

HELLO_JOB = "/cli-hello"
HELLO_SCRIPT = "import sys; print('hello from the cluster'); print('a warning', file=sys.stderr)"


def iris_on(cluster: LocalClusterConfig, *args: str, **kwargs) -> IrisResult:
    """iris ARGS --config F, with --config placed before any `--` that starts a job command."""
    split = args.index("--") if "--" in args else len(args)
    return cluster.runner(*args[:split], "--config", str(cluster.path), *args[split:], **kwargs)


@pytest.fixture(scope="module")
def hello_run(background_cluster: LocalClusterConfig) -> IrisResult:
    """`iris run --config F` of a job that writes to stdout and stderr, run once for the module."""
    return iris_on(background_cluster, "run", "--name", "cli-hello", "--", "python", "-c", HELLO_SCRIPT)


def job_state(cluster: LocalClusterConfig, job_id: str) -> str:
    result = iris_on(cluster, "job", "status", job_id, "--json")
    assert result.returncode == 0, str(result)
    return json.loads(result.stdout)["state"]


# ---------------------------------------------------------------- cluster start / status


def test_cluster_start_port_zero_prints_controller_url_and_worker_count(
    background_cluster: LocalClusterConfig,
) -> None:
    output = background_cluster.start_result.stdout
    url = background_cluster.url()

    match = re.fullmatch(r"http://127\.0\.0\.1:(\d+)", url)
    assert match and int(match.group(1)) != 0, f"controller.url holds {url!r}"
    assert f"cluster 'cli-shared' running: controller {url}, 1 worker(s)" in output, output


def test_cluster_status_running_shows_workers_and_jobs(
    background_cluster: LocalClusterConfig, hello_run: IrisResult
) -> None:
    result = background_cluster.runner("cluster", "--config", str(background_cluster.path), "status")

    assert result.returncode == 0, str(result)
    assert f"controller {background_cluster.url()}" in result.stdout
    assert "workers (1)" in result.stdout
    worker_rows = [line for line in result.stdout.splitlines() if "local-0" in line]
    assert worker_rows and "healthy" in worker_rows[0], str(result)
    job_rows = [line for line in result.stdout.splitlines() if HELLO_JOB in line.split()]
    assert job_rows and "succeeded" in job_rows[0], str(result)


def test_cluster_start_again_says_already_running(background_cluster: LocalClusterConfig) -> None:
    url, pid = background_cluster.url(), background_cluster.pid()

    result = background_cluster.runner("cluster", "--config", str(background_cluster.path), "start")

    assert result.returncode == 0, str(result)
    expected = f"cluster 'cli-shared' is already running (pid {pid}) at {url}"
    assert result.stdout.strip() == expected, str(result)
    assert background_cluster.pid() == pid and pid_alive(pid)
    assert background_cluster.url() == url


# ---------------------------------------------------------------- iris run --config


def test_run_config_prints_output_and_exits_0(hello_run: IrisResult) -> None:
    assert hello_run.returncode == 0, str(hello_run)
    assert hello_run.stdout.splitlines() == ["hello from the cluster"], str(hello_run)
    assert "a warning" in hello_run.stderr.splitlines(), str(hello_run)
    assert f"iris: submitted {HELLO_JOB}" in hello_run.stderr


def test_run_config_failing_job_exits_with_its_code(background_cluster: LocalClusterConfig) -> None:
    result = iris_on(background_cluster, "run", "--", "python", "-c", "raise SystemExit(4)")

    assert result.returncode == 4, str(result)
    assert "exited with code 4" in result.stderr, str(result)


def test_run_controller_url_env_var_reaches_cluster(background_cluster: LocalClusterConfig) -> None:
    result = background_cluster.runner(
        "run", "--", "python", "-c", "print('via env')", env={"IRIS_CONTROLLER_URL": background_cluster.url()}
    )

    assert result.returncode == 0, str(result)
    assert result.stdout.splitlines() == ["via env"], str(result)


# ---------------------------------------------------------------- iris job list


def test_job_list_shows_job_and_state(background_cluster: LocalClusterConfig, hello_run: IrisResult) -> None:
    result = iris_on(background_cluster, "job", "list")

    assert result.returncode == 0, str(result)
    header = result.stdout.splitlines()[0].split()
    assert header[:3] == ["JOB", "STATE", "TASKS"], str(result)
    rows = [line.split() for line in result.stdout.splitlines() if HELLO_JOB in line.split()]
    assert rows and rows[0][:3] == [HELLO_JOB, "succeeded", "1/1"], str(result)


def test_job_list_json_is_valid_json_with_job(
    background_cluster: LocalClusterConfig, hello_run: IrisResult
) -> None:
    result = iris_on(background_cluster, "job", "list", "--json")

    assert result.returncode == 0, str(result)
    jobs = json.loads(result.stdout)
    by_id = {job["jobId"]: job for job in jobs}
    assert HELLO_JOB in by_id, str(result)
    assert by_id[HELLO_JOB]["state"] == "JOB_STATE_SUCCEEDED"
    assert by_id[HELLO_JOB]["numTasks"] == 1


def test_job_list_state_filter_keeps_matching_jobs_only(
    background_cluster: LocalClusterConfig, hello_run: IrisResult
) -> None:
    succeeded = iris_on(background_cluster, "job", "list", "--state", "succeeded", "--json")
    killed = iris_on(background_cluster, "job", "list", "--state", "killed", "--json")

    assert succeeded.returncode == 0 and killed.returncode == 0, f"{succeeded}\n{killed}"
    assert HELLO_JOB in {job["jobId"] for job in json.loads(succeeded.stdout)}
    assert HELLO_JOB not in {job["jobId"] for job in json.loads(killed.stdout)}


def test_job_list_state_bogus_rejected_exit_2(background_cluster: LocalClusterConfig) -> None:
    result = iris_on(background_cluster, "job", "list", "--state", "bogus")

    assert result.returncode == 2, str(result)
    assert "--state" in result.stderr and "bogus" in result.stderr
    assert "running" in result.stderr, "the error should list the valid states"
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------- iris job status


def test_job_status_shows_tasks_and_history(
    background_cluster: LocalClusterConfig, hello_run: IrisResult
) -> None:
    result = iris_on(background_cluster, "job", "status", HELLO_JOB)

    assert result.returncode == 0, str(result)
    lines = result.stdout.splitlines()
    assert lines[0].split() == [HELLO_JOB, "succeeded"], str(result)
    task_rows = [line.split() for line in lines if line.split()[:1] == [f"{HELLO_JOB}/0"]]
    assert task_rows and task_rows[0][:3] == [f"{HELLO_JOB}/0", "succeeded", "local-0"], str(result)
    assert "history" in lines, str(result)
    history = lines[lines.index("history") + 1 :]
    assert history and all("->" in line for line in history), str(result)
    assert "succeeded" in history[-1], str(result)


def test_job_status_history_uses_plain_state_names(
    background_cluster: LocalClusterConfig, hello_run: IrisResult
) -> None:
    """The history should name states the way the STATE column does ("pending -> running")."""
    result = iris_on(background_cluster, "job", "status", HELLO_JOB)

    assert result.returncode == 0, str(result)
    history = result.stdout.split("history", 1)[1]
    assert "-> succeeded:" in history, str(result)
    assert "job_state_" not in history, str(result)


def test_job_status_json_has_tasks_and_history(
    background_cluster: LocalClusterConfig, hello_run: IrisResult
) -> None:
    result = iris_on(background_cluster, "job", "status", HELLO_JOB, "--json")

    assert result.returncode == 0, str(result)
    status = json.loads(result.stdout)
    assert status["jobId"] == HELLO_JOB
    assert status["state"] == "JOB_STATE_SUCCEEDED"
    assert [task["taskId"] for task in status["tasks"]] == [f"{HELLO_JOB}/0"]
    assert status["tasks"][0]["state"] == "TASK_STATE_SUCCEEDED"
    assert status["history"][-1]["toState"] == "JOB_STATE_SUCCEEDED"


def test_job_status_id_without_slash_finds_job(
    background_cluster: LocalClusterConfig, hello_run: IrisResult
) -> None:
    result = iris_on(background_cluster, "job", "status", HELLO_JOB.lstrip("/"), "--json")

    assert result.returncode == 0, str(result)
    assert json.loads(result.stdout)["jobId"] == HELLO_JOB


def test_job_status_unknown_id_one_line_error_exit_1(background_cluster: LocalClusterConfig) -> None:
    result = iris_on(background_cluster, "job", "status", "/nope")

    assert result.returncode == 1, str(result)
    assert result.stderr.splitlines()[0] == "error: job /nope not found", str(result)
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_job_status_unknown_id_traceback_flag_shows_traceback(background_cluster: LocalClusterConfig) -> None:
    result = background_cluster.runner(
        "--traceback", "job", "status", "/nope", "--config", str(background_cluster.path)
    )

    assert result.returncode != 0, str(result)
    assert "Traceback (most recent call last)" in result.stderr, str(result)
    assert "job /nope not found" in result.stderr


# ---------------------------------------------------------------- iris job logs


def test_job_logs_prints_stdout_and_stderr_to_matching_streams(
    background_cluster: LocalClusterConfig, hello_run: IrisResult
) -> None:
    result = iris_on(background_cluster, "job", "logs", HELLO_JOB)

    assert result.returncode == 0, str(result)
    assert result.stdout.splitlines() == ["hello from the cluster"], str(result)
    assert result.stderr.splitlines() == ["a warning"], str(result)


def test_job_logs_follow_finished_job_prints_and_returns(
    background_cluster: LocalClusterConfig, hello_run: IrisResult
) -> None:
    result = iris_on(background_cluster, "job", "logs", "-f", HELLO_JOB, timeout=60)

    assert result.returncode == 0, str(result)
    assert "hello from the cluster" in result.stdout.splitlines(), str(result)


def test_job_logs_unknown_id_one_line_error_exit_1(background_cluster: LocalClusterConfig) -> None:
    result = iris_on(background_cluster, "job", "logs", "/nope")

    assert result.returncode == 1, str(result)
    assert result.stderr.splitlines()[0] == "error: job /nope not found", str(result)
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------- iris job kill


def test_job_kill_running_sleep_job_then_status_shows_killed(
    background_cluster: LocalClusterConfig, tmp_path: Path
) -> None:
    pid_file = tmp_path / "sleeper.pid"
    submitted = iris_on(
        background_cluster,
        "run",
        "--no-wait",
        "--name",
        "cli-sleeper",
        "--",
        "sh",
        "-c",
        f"echo $$ > {pid_file}; exec sleep 600",
    )
    assert submitted.returncode == 0, str(submitted)
    assert submitted.stdout.strip() == "/cli-sleeper", str(submitted)
    job_pid = int(wait_for_file_text(pid_file, timeout=60))
    wait_until(
        lambda: job_state(background_cluster, "/cli-sleeper") == "JOB_STATE_RUNNING", 30, 0.1, "running"
    )

    killed = iris_on(background_cluster, "job", "kill", "/cli-sleeper")

    assert killed.returncode == 0, str(killed)
    assert killed.stdout.strip() == "killed /cli-sleeper", str(killed)
    status = iris_on(background_cluster, "job", "status", "/cli-sleeper")
    assert status.returncode == 0, str(status)
    assert status.stdout.splitlines()[0].split() == ["/cli-sleeper", "killed"], str(status)
    task_rows = [
        line.split() for line in status.stdout.splitlines() if line.split()[:1] == ["/cli-sleeper/0"]
    ]
    assert task_rows and task_rows[0][1] == "killed", str(status)
    wait_until(lambda: not pid_alive(job_pid), 30, 0.05, f"the job's sleep (pid {job_pid}) to exit")


def test_job_kill_finished_job_says_already_finished(
    background_cluster: LocalClusterConfig, hello_run: IrisResult
) -> None:
    result = iris_on(background_cluster, "job", "kill", HELLO_JOB)

    assert result.returncode == 0, str(result)
    assert result.stdout.strip() == f"{HELLO_JOB} had already finished (succeeded)", str(result)


def test_job_kill_unknown_id_one_line_error_exit_1(background_cluster: LocalClusterConfig) -> None:
    result = iris_on(background_cluster, "job", "kill", "/nope")

    assert result.returncode == 1, str(result)
    assert result.stderr.splitlines()[0] == "error: job /nope not found", str(result)
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------- restart (last: it replaces the processes)


def test_cluster_restart_new_controller_keeps_finished_jobs(
    background_cluster: LocalClusterConfig, hello_run: IrisResult
) -> None:
    old_pid = background_cluster.pid()

    result = background_cluster.runner("cluster", "--config", str(background_cluster.path), "restart")

    assert result.returncode == 0, str(result)
    new_url = background_cluster.url()
    assert f"cluster 'cli-shared' running: controller {new_url}, 1 worker(s)" in result.stdout, str(result)
    assert background_cluster.pid() != old_pid
    assert not pid_alive(old_pid)
    listed = iris_on(background_cluster, "job", "list", "--json")
    assert listed.returncode == 0, str(listed)
    assert HELLO_JOB in {job["jobId"] for job in json.loads(listed.stdout)}, str(listed)


# ---------------------------------------------------------------- dashboard


def test_cluster_dashboard_local_prints_url_that_serves_the_dashboard(background_cluster: LocalClusterConfig) -> None:
    result = background_cluster.runner("cluster", "--config", str(background_cluster.path), "dashboard")

    assert result.returncode == 0, str(result)
    expected = background_cluster.url() + "/"
    assert f"dashboard of 'cli-shared': {expected}" in result.stdout, str(result)
    page = httpx.get(expected, timeout=10)
    assert page.status_code == 200
    assert '<script type="module" src="static/js/app.js">' in page.text
    script = httpx.get(expected + "static/js/app.js", timeout=10)
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]


def test_cluster_dashboard_open_hands_the_url_to_the_browser(
    background_cluster: LocalClusterConfig, tmp_path: Path
) -> None:
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\necho "$1" > {opened}\n')
    browser.chmod(0o755)

    result = background_cluster.runner(
        "cluster", "--config", str(background_cluster.path), "dashboard", "--open", env={"BROWSER": f"{browser} %s"}
    )

    assert result.returncode == 0, str(result)
    assert opened.read_text().strip() == background_cluster.url() + "/"


# ---------------------------------------------------------------- iris rpc


def test_rpc_controller_method_with_json_body_prints_the_answer(
    background_cluster: LocalClusterConfig, hello_run: IrisResult
) -> None:
    result = iris_on(background_cluster, "rpc", "ControllerService", "ListJobs", '{"namePrefix": "/cli-hello"}')

    assert result.returncode == 0, str(result)
    [listed] = json.loads(result.stdout)["jobs"]
    assert listed["jobId"] == HELLO_JOB and listed["state"] == "JOB_STATE_SUCCEEDED"


def test_rpc_worker_method_by_url_reaches_the_worker(background_cluster: LocalClusterConfig) -> None:
    workers = iris_on(background_cluster, "rpc", "iris.cluster.ControllerService", "ListWorkers")
    [worker] = json.loads(workers.stdout)["workers"]

    result = background_cluster.runner("rpc", "WorkerService", "HealthCheck", "--url", worker["address"])

    assert result.returncode == 0, str(result)
    assert json.loads(result.stdout)["healthy"] is True


def test_rpc_error_answer_shows_code_and_message(background_cluster: LocalClusterConfig) -> None:
    result = iris_on(background_cluster, "rpc", "ControllerService", "GetJobStatus", '{"jobId": "/no-such-job"}')

    assert result.returncode == 1
    assert "GetJobStatus failed: not_found:" in result.stderr and "/no-such-job" in result.stderr


def test_rpc_body_with_unknown_field_refused_before_sending(background_cluster: LocalClusterConfig) -> None:
    result = background_cluster.runner("rpc", "ControllerService", "ListJobs", '{"limt": 5}', "--controller-url", "http://127.0.0.1:9")

    assert result.returncode == 2
    assert 'no field named "limt"' in result.stderr and "pageSize" in result.stderr


def test_rpc_list_names_every_method_of_every_service(background_cluster: LocalClusterConfig) -> None:
    from iris.cli.rpc import SERVICES

    result = background_cluster.runner("rpc", "--list")

    assert result.returncode == 0, str(result)
    for service in SERVICES.values():
        for method in service.methods:
            assert f"  {method.name}({method.input_type.name}) -> {method.output_type.name}" in result.stdout
