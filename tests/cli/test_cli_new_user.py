"""What a new user trips on (issue 10), each reproduced against a background local cluster."""

from __future__ import annotations

import json

import pytest
from cli_support import IrisResult, LocalClusterConfig

from iris.client import InvalidRequestError, IrisClient
from iris.cluster.types import TERMINAL_JOB_STATES, Entrypoint
from iris.rpc import cluster_pb2 as pb


def iris_on(cluster: LocalClusterConfig, *args: str, **kwargs) -> IrisResult:
    """iris ARGS --config F, with --config placed before any `--` that starts a job command."""
    split = args.index("--") if "--" in args else len(args)
    return cluster.runner(*args[:split], "--config", str(cluster.path), *args[split:], **kwargs)


# ---------------------------------------------------------------- 1. environment variables


def test_run_env_key_equals_value_reaches_job(background_cluster: LocalClusterConfig) -> None:
    result = iris_on(
        background_cluster, "run", "-e", "FOO=bar=baz", "--", "python", "-c", "import os; print(os.environ['FOO'])"
    )

    assert result.returncode == 0, str(result)
    assert result.stdout.splitlines() == ["bar=baz"], str(result)


def test_client_env_name_with_equals_rejected_at_submit(background_cluster: LocalClusterConfig) -> None:
    with IrisClient.remote(background_cluster.url()) as client:
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
        jobs = [job.job_id for job in client.list_jobs()]
    assert "/bad-env" not in jobs


# ---------------------------------------------------------------- 2. job names used again


def test_run_same_name_twice_replaces_finished_job(background_cluster: LocalClusterConfig) -> None:
    first = iris_on(background_cluster, "run", "--name", "again", "--", "python", "-c", "print('first')")
    second = iris_on(background_cluster, "run", "--name", "again", "--", "python", "-c", "print('second')")

    assert first.returncode == 0, str(first)
    assert second.returncode == 0, str(second)
    assert second.stdout.splitlines() == ["second"], str(second)
    logs = iris_on(background_cluster, "job", "logs", "/again")
    assert logs.stdout.splitlines() == ["second"], str(logs)


def test_client_submit_running_name_policies(background_cluster: LocalClusterConfig, tmp_path) -> None:
    with IrisClient.remote(background_cluster.url(), workspace=tmp_path) as client:
        running = client.submit(Entrypoint.from_command("sleep", "600"), name="busy")
        with pytest.raises(InvalidRequestError, match="still"):
            client.submit(Entrypoint.from_command("true"), name="busy")
        kept = client.submit(Entrypoint.from_command("true"), name="busy", existing_job_policy="keep")
        assert kept.job_id == running.job_id
        assert kept.status().state not in TERMINAL_JOB_STATES
        replaced = client.submit(
            Entrypoint.from_command("python", "-c", "print('replacement')"), name="busy", existing_job_policy="recreate"
        )
        status = replaced.wait(timeout=60)
        assert status.state == pb.JOB_STATE_SUCCEEDED
        assert [line.data for line in replaced.logs()] == ["replacement"]
        with pytest.raises(InvalidRequestError, match="already exists"):
            client.submit(Entrypoint.from_command("true"), name="busy", existing_job_policy="error")


def test_job_delete_frees_name_and_refuses_running_job(background_cluster: LocalClusterConfig) -> None:
    submitted = iris_on(background_cluster, "run", "--no-wait", "--name", "to-delete", "--", "sleep", "600")
    assert submitted.returncode == 0, str(submitted)

    refused = iris_on(background_cluster, "job", "delete", "/to-delete")
    killed = iris_on(background_cluster, "job", "delete", "--kill", "/to-delete")
    listing = iris_on(background_cluster, "job", "list", "--json")

    assert refused.returncode == 1 and "kill it before deleting it" in refused.stderr, str(refused)
    assert killed.returncode == 0 and "deleted /to-delete" in killed.stdout, str(killed)
    assert "/to-delete" not in [job["jobId"] for job in json.loads(listing.stdout)]
