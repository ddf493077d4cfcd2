"""What a new user trips on (issue 10), each reproduced against a background local cluster."""

from __future__ import annotations

import json

import pytest
from cli_support import IrisResult, LocalClusterConfig

from iris.client import InvalidRequestError, IrisClient
from iris.cluster.types import Entrypoint
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
